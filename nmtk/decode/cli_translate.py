"""The `nmtk translate` command's work: choose run and checkpoint, stream input, write output."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any, TextIO

import torch
from rich.progress import Progress, SpinnerColumn, TextColumn

from nmtk.console import console
from nmtk.decode.beam import SearchConfig
from nmtk.decode.ensemble import Ensemble
from nmtk.decode.sampling import SamplingConfig
from nmtk.decode.translator import Translator, buffered, load_model, read_lines
from nmtk.device import keep_freed_memory, pick_device
from nmtk.errors import NmtkError
from nmtk.rundir import RunDir, latest_run


def choose_run(model: Path | None) -> RunDir:
    if model is not None:
        return RunDir(model).require()
    if os.environ.get("NMTK_MODEL"):
        return RunDir(os.environ["NMTK_MODEL"]).require()
    run = latest_run()
    if run is None:
        raise NmtkError("no model: pass -m RUN_DIR, set NMTK_MODEL, or train one (nmtk train) so runs/ has a run")
    console.print(f"model: {run.path} (the most recently trained run under runs/)")
    return run.require()


def _format(index: int, hyps, translator: Translator, nbest: int, print_scores: bool) -> list[str]:  # noqa: ANN001
    if nbest > 1:  # an empty input line still gets one line, so every input is accounted for
        return [f"{index}\t{h.score:.4f}\t{translator.detokenize(h)}" for h in hyps[:nbest]] or [f"{index}\t\t"]
    if not hyps:
        return ["\t" if print_scores else ""]
    text = translator.detokenize(hyps[0])
    return [f"{hyps[0].score:.4f}\t{text}" if print_scores else text]


def run_translate(**o: Any) -> None:
    if o["errors"] not in ("error", "replace"):
        raise NmtkError(f"--errors {o['errors']!r}: choose error or replace")
    if o["precision"] not in ("fp32", "bf16", "fp16"):
        raise NmtkError(f"--precision {o['precision']!r}: choose fp32, bf16 or fp16")
    if o["output"] is not None and o["output"].exists() and not o["force"]:
        raise NmtkError(f"{o['output']}: exists; use --force to overwrite it")
    if o["threads"]:
        torch.set_num_threads(o["threads"])
    run = choose_run(o["model"])
    recipe = run.recipe()
    checkpoint = o["checkpoint"] or run.default_checkpoint()
    if o["checkpoint"] is None:
        console.print(f"checkpoint: {checkpoint}")
    device = pick_device(o["device"])
    if device.type == "cpu":
        keep_freed_memory()
    vocab = run.vocab_hash()
    model = load_model(checkpoint, device, vocab)
    if o["ensemble"]:
        model = Ensemble([model, *(load_model(p, device, vocab) for p in o["ensemble"])])
    d = recipe.decode
    nbest = max(1, o["nbest"])
    beam = max(o["beam"] or d.beam, nbest)
    search = SearchConfig(beam=beam, nbest=nbest,
                          length_penalty=d.length_penalty if o["lenpen"] is None else o["lenpen"],
                          max_len_a=d.max_len_a if o["max_len_a"] is None else o["max_len_a"],
                          max_len_b=d.max_len_b if o["max_len_b"] is None else o["max_len_b"])
    sampling = SamplingConfig(o["topk"], o["topp"], o["temperature"], o["seed"]) if o["sampling"] else None
    translator = Translator(run, model, search, device, o["precision"], o["max_tokens"], sampling)
    _stream(translator, o, nbest)


def _stream(translator: Translator, o: dict[str, Any], nbest: int) -> None:
    source = open(o["input_"], "rb") if o["input_"] else sys.stdin.buffer
    name = str(o["input_"] or "stdin")
    interactive = o["input_"] is None and sys.stdin.isatty()
    out_path: Path | None = o["output"]
    tmp = out_path.with_name(f".{out_path.name}.tmp") if out_path else None
    sink: TextIO = open(tmp, "w", encoding="utf-8") if tmp else sys.stdout
    show = (out_path is not None or not sys.stdout.isatty()) and console.is_terminal
    progress = Progress(SpinnerColumn(), TextColumn("{task.completed:,} sentences"),
                        TextColumn("{task.fields[rate]}"), console=console, disable=not show)
    index = 0
    try:
        with progress:
            task = progress.add_task("translate", total=None, rate="")
            start = time.perf_counter()
            for chunk in buffered(read_lines(source, o["errors"], name), 1 if interactive else o["buffer_size"]):
                hyps = translator.hypotheses(chunk)
                for h in hyps:
                    index += 1
                    for line in _format(index, h, translator, nbest, o["print_scores"]):
                        sink.write(line + "\n")
                sink.flush()
                rate = f"{index / max(time.perf_counter() - start, 1e-9):.1f} sentences/s"
                progress.update(task, advance=len(chunk), rate=rate)
        if tmp:
            sink.close()
            os.replace(tmp, out_path)
    finally:
        if tmp:
            sink.close()
            tmp.unlink(missing_ok=True)
        if o["input_"]:
            source.close()
