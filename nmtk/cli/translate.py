"""`nmtk translate`: typed options, the choice of run and checkpoint, streaming input to output.

The typer command in `app.py` only parses; everything it parsed arrives here as one
`TranslateOptions`, checked once, then turned into the library's objects (`SearchConfig`,
`SamplingConfig`, `Translator`).
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO, TextIO

from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeRemainingColumn

from nmtk.cli.options import InvalidUtf8, Precision
from nmtk.console import console
from nmtk.decode.config import Hypothesis, SamplingConfig, SearchConfig
from nmtk.decode.export import ExportedTranslator, is_export
from nmtk.errors import NmtkError
from nmtk.files import atomic_write, buffered, decode_lines
from nmtk.recipe import DecodeSection
from nmtk.rundir import RunDir, latest_run

if TYPE_CHECKING:
    from nmtk.decode.translator import Translator


@dataclass(frozen=True)
class TranslateOptions:
    """Everything `nmtk translate` was asked to do; ``None`` means "the run's recipe decides"."""

    model: Path | None = None
    checkpoint: Path | None = None
    input: Path | None = None
    output: Path | None = None
    force: bool = False
    beam: int | None = None
    nbest: int = 1
    lenpen: float | None = None
    max_len_a: float | None = None
    max_len_b: int | None = None
    max_tokens: int = 8192
    buffer_size: int = 10000
    errors: InvalidUtf8 = InvalidUtf8.error
    print_scores: bool = False
    device: str | None = None
    threads: int | None = None
    precision: Precision = Precision.auto
    sampling: bool = False
    topk: int = 0
    topp: float = 1.0
    temperature: float = 1.0
    seed: int = 1
    ensemble: tuple[Path, ...] = ()
    print_alignment: bool = False
    alignment_layer: int | None = None  # 1-based decoder layer; None: the last

    def search_config(self, defaults: DecodeSection) -> SearchConfig:
        """The search the options ask for, the recipe's ``[decode]`` filling what they leave open.

        Rule for ``--nbest K``: without ``--beam`` the beam is at least K (the recipe's beam, raised
        to K); an explicit ``--beam`` smaller than K is an error, since a beam of B holds B hypotheses.
        """
        if self.beam is not None and self.nbest > self.beam:
            raise NmtkError(f"--nbest {self.nbest} exceeds --beam {self.beam}: a beam of {self.beam} keeps "
                            f"{self.beam} hypotheses; raise --beam or leave it out (it then follows --nbest)")
        beam = self.beam if self.beam is not None else max(defaults.beam, self.nbest)
        return SearchConfig(
            beam=beam, nbest=self.nbest,
            length_penalty=defaults.length_penalty if self.lenpen is None else self.lenpen,
            max_len_a=defaults.max_len_a if self.max_len_a is None else self.max_len_a,
            max_len_b=defaults.max_len_b if self.max_len_b is None else self.max_len_b,
        )

    def sampling_config(self) -> SamplingConfig | None:
        if not self.sampling:
            return None
        return SamplingConfig(self.topk, self.topp, self.temperature, self.seed)


def choose_run(model: Path | None) -> RunDir:
    """``-m``, else ``$NMTK_MODEL``, else the most recently trained run under ``runs/`` (named on stderr)."""
    if model is not None:
        return RunDir(model).require()
    if os.environ.get("NMTK_MODEL"):
        return RunDir(os.environ["NMTK_MODEL"]).require()
    run = latest_run()
    if run is None:
        raise NmtkError("no model: pass -m RUN_DIR, set NMTK_MODEL, or train one (nmtk train) so runs/ has a run")
    console.print(f"model: {run.path} (the most recently trained run under runs/)")
    return run.require()


def build_translator(o: TranslateOptions) -> Translator | ExportedTranslator:
    """Load the run's model(s) and pipeline as the options say (or an exported CTranslate2 model).

    torch is imported only for a run's own model: an exported one is run by CTranslate2 alone, so
    a deployment pays neither torch's memory (~200 MB) nor its import time.
    """
    exported = o.model or (Path(os.environ["NMTK_MODEL"]) if os.environ.get("NMTK_MODEL") else None)
    if exported is not None and is_export(exported):
        return build_exported(o, exported)
    import torch

    from nmtk.decode.ensemble import Ensemble
    from nmtk.decode.translator import Translator, load_model
    from nmtk.device import keep_freed_memory, pick_device, resolve_precision

    if o.threads:
        torch.set_num_threads(o.threads)
    run = choose_run(o.model)
    recipe = run.recipe()
    checkpoint = o.checkpoint or run.default_checkpoint()
    if o.checkpoint is None:
        console.print(f"checkpoint: {checkpoint}")
    device = pick_device(o.device)
    precision, why = resolve_precision(o.precision.value, device)
    console.print(f"precision: {precision} ({why})")
    if device.type == "cpu":
        keep_freed_memory()
    vocab = run.vocab_hash()
    model = load_model(checkpoint, device, vocab)
    if o.ensemble:
        model = Ensemble([model, *(load_model(p, device, vocab) for p in o.ensemble)])
    layers = model.cfg.decoder_layers
    if o.alignment_layer is not None and not 1 <= o.alignment_layer <= layers:
        raise NmtkError(f"--alignment-layer {o.alignment_layer}: the model has decoder layers 1 to {layers}")
    align_layer = (o.alignment_layer or layers) - 1 if o.print_alignment else None
    return Translator(run.pipelines(recipe), model, o.search_config(recipe.decode), device, precision,
                      o.max_tokens, o.sampling_config(), align_layer)


def build_exported(o: TranslateOptions, directory: Path) -> ExportedTranslator:
    """CTranslate2 behind the same options; the ones it cannot honour are errors naming them."""
    for option, used in (("--ensemble", bool(o.ensemble)), ("--checkpoint", o.checkpoint is not None),
                         ("--precision", o.precision is not Precision.auto), ("--print-alignment", o.print_alignment)):
        if used:
            raise NmtkError(f"{option}: not available with an exported CTranslate2 model ({directory}): it holds one "
                            "checkpoint in the type it was exported with; export again (nmtk export) to change it")
    translator = ExportedTranslator.load(directory, o.device or "auto", threads=o.threads or 0)
    translator.search = o.search_config(translator.recipe.decode)
    translator.sampling, translator.max_tokens = o.sampling_config(), o.max_tokens
    if translator.sampling is not None:
        import ctranslate2

        ctranslate2.set_random_seed(o.seed)
    console.print(f"model: {directory} (CTranslate2, {translator.quantization}, {translator.device})")
    return translator


def output_lines(index: int, hyps: list[Hypothesis], translator: Translator | ExportedTranslator,
                 o: TranslateOptions) -> list[str]:
    """The line(s) one input line gives: the translation, ``SCORE<TAB>TEXT``, or n-best rows; with
    ``--print-alignment`` a tab and the ``i-j`` pairs follow the text."""
    def text(h: Hypothesis) -> str:
        return translator.detokenize(h) + (f"\t{h.alignment or ''}" if o.print_alignment else "")

    empty = "\t" if o.print_alignment else ""
    if o.nbest > 1:  # an empty input line still gets one line, so every input is accounted for
        return [f"{index}\t{h.score:.4f}\t{text(h)}" for h in hyps[: o.nbest]] or [f"{index}\t\t{empty}"]
    if not hyps:
        return ["\t" + empty if o.print_scores else empty]
    return [f"{hyps[0].score:.4f}\t{text(hyps[0])}" if o.print_scores else text(hyps[0])]


def translate(o: TranslateOptions) -> None:
    """Run `nmtk translate`: refuse to overwrite, load, then stream input to output."""
    if o.output is not None and o.output.exists() and not o.force:
        raise NmtkError(f"{o.output}: exists; use --force to overwrite it")
    translator = build_translator(o)
    source: BinaryIO = open(o.input, "rb") if o.input else sys.stdin.buffer
    try:
        if o.output is None:
            _stream(translator, o, source, sys.stdout)
        else:
            with atomic_write(o.output, "w") as sink:
                _stream(translator, o, source, sink)
    finally:
        if o.input:
            source.close()


def _input_lines(o: TranslateOptions, source: BinaryIO) -> Iterator[str]:
    name = str(o.input or "stdin")
    return decode_lines(source, name, o.errors.value, hint="use --errors replace to substitute U+FFFD")


def count_lines(path: Path) -> int:
    """Lines of a file (a last line without a newline counts), read in blocks: ~0.1 s per 100 MB."""
    count, last = 0, b"\n"
    with open(path, "rb") as handle:
        while block := handle.read(1 << 20):
            count += block.count(b"\n")
            last = block[-1:]
    return count + (last != b"\n")


def _progress(o: TranslateOptions) -> tuple[Progress, int | None]:
    """A progress display on stderr when it is a terminal (and stdout is not the translations' terminal):
    sentences, sentences/s and, for ``-i FILE``, a bar and the time left."""
    show = (o.output is not None or not sys.stdout.isatty()) and console.is_terminal
    total = count_lines(o.input) if o.input is not None and show else None
    columns = [SpinnerColumn(), TextColumn("{task.completed:,}" + (f" of {total:,}" if total else "") + " sentences"),
               TextColumn("{task.fields[rate]}")]
    if total:
        columns += [BarColumn(), TimeRemainingColumn()]
    return Progress(*columns, console=console, disable=not show), total


def _stream(translator: Translator | ExportedTranslator, o: TranslateOptions, source: BinaryIO, sink: TextIO) -> None:
    """Translate ``--buffer-size`` lines at a time (one at a time from a terminal), flushing each chunk.

    Memory is bounded by the buffer, not the input: lines are read, translated and written a buffer
    at a time (benchmarks/translate.py --lines measures 20,000 against 200,000 lines).
    """
    interactive = o.input is None and sys.stdin.isatty()
    progress, total = _progress(o)
    index = 0
    with progress:
        task = progress.add_task("translate", total=total, rate="")
        start = time.perf_counter()
        for chunk in buffered(_input_lines(o, source), 1 if interactive else o.buffer_size):
            for hyps in translator.hypotheses(chunk, first_line=index + 1):
                index += 1
                for line in output_lines(index, hyps, translator, o):
                    sink.write(line + "\n")
            sink.flush()
            rate = f"{index / max(time.perf_counter() - start, 1e-9):.1f} sentences/s"
            progress.update(task, advance=len(chunk), rate=rate)
