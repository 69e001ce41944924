"""Benchmark `nmtk translate` on Multi30k test_2016_flickr (1,000 sentences), beam 4, 2 CPU threads.

Each row runs in a fresh process, so its peak RSS is its own: the model is loaded (timed apart),
50 sentences warm up, then the 1,000 are translated as `nmtk translate` does (length-sorted batches,
its default --beam-tokens and --buffer-size; on a CPU both engines run ``--threads`` one-thread
searches taking batches side by side: each row's ``searches``). A row is ENGINE:PRECISION: ``nmtk:fp32``, ``nmtk:bf16``,
``nmtk:int8`` (int8 products, `nmtk/model/int8.py`), ``nmtk:auto`` (what `translate` picks by default),
``ct2:float32``, ``ct2:int8``... (ct2 rows use a
CTranslate2 export of the same checkpoint, made first with `nmtk export`, run as `nmtk translate` runs
it: ``--threads`` searches of one thread each, `nmtk.decode.ct2.thread_layout`); ``+shortlist`` after a row
(``nmtk:fp32+shortlist``, ``ct2:int8+shortlist``) decodes with the run's lexical shortlist (made first
with `nmtk shortlist RUN` if the run has none; its ct2 export carries it). Rows run in turns (each row once, then
each again, ``--repeat`` rounds), so that a host's drift slows them alike. Prints one JSON line:
per row sentences/s, target tokens/s, model load seconds, peak RSS and sacreBLEU; a shortlist row also
the share of its lines identical to the same row without it, where that row ran too.

``--lines 20000,200000`` instead streams that many Multi30k-derived lines through the `nmtk
translate` command (greedy, -i FILE -o FILE) and reports the peak RSS of each: memory must not grow
with the file.

Needs a trained run (default: runs/multi30k-en-de, the `make demo` run).
Usage: python benchmarks/translate.py [--run DIR] [--rows nmtk:fp32,ct2:int8] [--repeat 3] [--lines N,M]
       [--one-search] [--length-penalty-form gnmt|power] [--beam-tokens N]
``--one-search``: nmtk rows as one search of ``--threads`` threads (the layout before searches side by
side); ``--length-penalty-form power``: nmtk rows stop as CTranslate2's do (its rows always do);
``--beam-tokens``: every row's batch budget (memory against speed: docs/decoding.md).
"""

from __future__ import annotations

import argparse
import gzip
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

from _util import ROOT, data_root, run_measured

if TYPE_CHECKING:
    from nmtk.decode.base import TranslatorBase
    from nmtk.decode.search.config import SearchConfig

DEFAULT_ROWS = "nmtk:fp32,nmtk:int8,nmtk:auto,ct2:float32,ct2:int8"


def test_lines(lang: str) -> list[str]:
    with gzip.open(data_root() / "multi30k" / f"test_2016_flickr.{lang}.gz", "rt", encoding="utf-8") as handle:
        return [line.rstrip("\n") for line in handle]


def load(row: str, run_dir: Path, threads: int, beam: int, device: str, one_search: bool = False,
         form: str | None = None, beam_tokens: int | None = None) -> tuple[TranslatorBase, SearchConfig]:
    """The translator of one row: the run's model (nmtk:PRECISION) or its CTranslate2 export (ct2:TYPE),
    and the search: the recipe's with this beam. ``one_search``: an nmtk row as one search of ``threads``
    threads (the layout before searches side by side; `LoadOptions.searches` as a server sets it); ``form``:
    the length penalty's form (None: the recipe's; CTranslate2's is always ``power``); ``beam_tokens``: the
    batches' budget, source tokens × beam (None: the recipe's, or the device's default)."""
    from nmtk.decode.load import LoadOptions, load_translator
    from nmtk.decode.search.config import SearchConfig
    from nmtk.model_source import resolve_model
    from nmtk.precision import Precision

    row, listed = row.removesuffix("+shortlist"), row.endswith("+shortlist")
    engine, precision = row.split(":", 1)
    if engine == "nmtk":
        import torch

        torch.set_num_threads(threads)
        model, precision = run_dir, Precision(precision)
    else:
        model, precision = export_dir(run_dir, precision, listed), Precision.auto
    source = resolve_model(model)
    searches = threads if one_search and engine == "nmtk" else 1
    options = LoadOptions(precision=precision, device=device, threads=threads, shortlist=listed, searches=searches)
    return load_translator(source, options), SearchConfig.from_recipe(source.recipe.decode, beam=beam,
                                                                      length_penalty_form=form,
                                                                      beam_tokens=beam_tokens)


def worker(row: str, run_dir: Path, threads: int, beam: int, device: str, one_search: bool = False,
           form: str | None = None, beam_tokens: int | None = None) -> dict[str, float]:
    """One row, in this process: load, warm up, translate the test set, score."""
    start = time.perf_counter()
    translator, search = load(row, run_dir, threads, beam, device, one_search, form, beam_tokens)
    chosen = str(translator.precision) if row.startswith("nmtk:") else row.split(":", 1)[1].removesuffix("+shortlist")
    detok = translator.tgt_pipe.decode

    def hyps_fn(lines: list[str]) -> list[list[int]]:
        return [h[0].tokens if h else [] for h in translator.hypotheses(lines, search)]

    load_s = time.perf_counter() - start
    sources, refs = test_lines("en"), test_lines("de")
    hyps_fn(sources[:50])  # warm-up
    start = time.perf_counter()
    out = hyps_fn(sources)
    seconds = time.perf_counter() - start
    from sacrebleu.metrics import BLEU

    bleu = BLEU().corpus_score([detok(t) for t in out], [refs]).score
    searches = getattr(translator, "searches", None) or translator.ct2.num_translators  # the layout measured
    return {"precision": chosen, "searches": searches, "sentences_per_s": round(len(sources) / seconds, 1),
            "tgt_tokens_per_s": round(sum(len(t) + 1 for t in out) / seconds), "seconds": round(seconds, 2),
            "model_load_s": round(load_s, 2), "bleu": round(bleu, 2),
            "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
            "lines": [detok(t) for t in out]}


def export_dir(run_dir: Path, quantization: str, shortlist: bool = False) -> Path:
    """Where a ct2 row's export of the run is (made by `export_for`)."""
    return run_dir / f"export-{quantization}{'-shortlist' if shortlist else ''}"


def export_for(run_dir: Path, quantization: str, shortlist: bool = False) -> None:
    target = export_dir(run_dir, quantization, shortlist)
    if not (target / "model.bin").is_file():
        subprocess.run([sys.executable, "-m", "nmtk", "export", str(run_dir), "-o", str(target), "--quantization",
                        quantization, "--force"], check=True, cwd=ROOT, capture_output=True)


def rows(args: argparse.Namespace) -> dict[str, object]:
    report: dict[str, object] = {"benchmark": "translate", "run": str(args.run), "sentences": 1000,
                                 "beam": args.beam, "threads": args.threads, "device": args.device,
                                 "one_search": args.one_search, "length_penalty_form": args.length_penalty_form,
                                 "beam_tokens": args.beam_tokens}
    names = args.rows.split(",")
    for row in names:
        listed = row.endswith("+shortlist")
        if listed and not (args.run / "shortlist.npz").is_file():
            subprocess.run([sys.executable, "-m", "nmtk", "shortlist", str(args.run)], check=True, cwd=ROOT,
                           capture_output=True)
        if row.startswith("ct2:"):
            export_for(args.run, row.split(":", 1)[1].removesuffix("+shortlist"), listed)
    lines: dict[str, list[str]] = {}
    for row, median in in_turns(names, args).items():
        lines[row] = median.pop("lines")
        report[row] = median
        plain = row.removesuffix("+shortlist")
        if row.endswith("+shortlist") and plain in lines:
            report[row]["identical_to_" + plain] = identical(lines[plain], lines[row])
            speed = report[row]["sentences_per_s"] / report[plain]["sentences_per_s"]
            report[row]["speed_vs_" + plain] = round(speed, 3)
    return report


def in_turns(names: list[str], args: argparse.Namespace) -> dict[str, dict]:
    """Every row ``args.repeat`` times, each in a fresh process, in turns (row 1, row 2, ..., row 1,
    row 2, ...): a host whose speed drifts over minutes slows every row alike, so their ratios hold
    where back-to-back runs of one row, then of the next, measured the drift. Per row the median run
    by speed, with every run's speed and peak RSS."""
    runs: dict[str, list[dict]] = {row: [] for row in names}
    for _ in range(args.repeat):
        for row in names:
            runs[row].append(one_row(row, args))
    return {row: _median(found) for row, found in runs.items()}


def repeated(row: str, args: argparse.Namespace) -> dict:
    """`one_row` ``args.repeat`` times, each in a fresh process: the median run by speed, with every
    run's speed and peak RSS."""
    return in_turns([row], args)[row]


def _median(runs: list[dict]) -> dict:
    median = sorted(runs, key=lambda r: r["sentences_per_s"])[len(runs) // 2]
    return {**median, "runs_sentences_per_s": [r["sentences_per_s"] for r in runs],
            "runs_peak_rss_mib": [r["peak_rss_mib"] for r in runs]}


def identical(plain: list[str], other: list[str]) -> float:
    """The share of ``other``'s lines equal to ``plain``'s, line by line."""
    return round(sum(a == b for a, b in zip(plain, other, strict=True)) / len(other), 4)


def one_row(row: str, args: argparse.Namespace) -> dict[str, float]:
    cmd = [sys.executable, __file__, "--worker", row, "--run", str(args.run), "--threads", str(args.threads),
           "--beam", str(args.beam), "--device", args.device] + (["--one-search"] if args.one_search else []) + (
               ["--length-penalty-form", args.length_penalty_form] if args.length_penalty_form else []) + (
               ["--beam-tokens", str(args.beam_tokens)] if args.beam_tokens else [])
    result = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    if result.returncode:
        sys.exit(f"row {row} failed: {result.stderr.strip()[-2000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def streamed(args: argparse.Namespace) -> dict[str, object]:
    """Peak RSS of `nmtk translate -i FILE -o FILE` on files of growing length."""
    with gzip.open(data_root() / "multi30k" / "train.en.gz", "rt", encoding="utf-8") as handle:
        pool = [line.rstrip("\n") for line in handle]
    report: dict[str, object] = {"benchmark": "translate-stream", "run": str(args.run), "beam": 1,
                                 "threads": args.threads}
    with tempfile.TemporaryDirectory() as tmp:
        for n in (int(x) for x in args.lines.split(",")):
            source = Path(tmp) / f"in-{n}.en"
            source.write_text("".join(pool[i % len(pool)] + "\n" for i in range(n)), encoding="utf-8")
            out = Path(tmp) / f"out-{n}.de"
            cmd = [sys.executable, "-m", "nmtk", "translate", "-m", str(args.run), "-i", str(source), "-o", str(out),
                   "--beam", "1", "--threads", str(args.threads)]
            wall, peak_mib, result = run_measured(cmd, cwd=ROOT)
            if result.returncode:
                sys.exit(f"translate failed: {result.stderr.strip()[-2000:]}")
            lines = out.read_text(encoding="utf-8").count("\n")
            report[str(n)] = {"lines_out": lines, "wall_s": round(wall, 1), "sentences_per_s": round(n / wall, 1),
                              "peak_rss_mib": round(peak_mib)}
    sizes = [k for k in report if k.isdigit()]
    if len(sizes) >= 2:
        first, last = report[sizes[0]]["peak_rss_mib"], report[sizes[-1]]["peak_rss_mib"]
        report["peak_rss_growth_percent"] = round(100 * (last - first) / first, 1)
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run", type=Path, default=ROOT / "runs" / "multi30k-en-de")
    parser.add_argument("--rows", default=DEFAULT_ROWS)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--beam", type=int, default=4)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--repeat", type=int, default=3, help="fresh processes per row; the median row is reported")
    parser.add_argument("--lines", default=None, help="stream this many lines per run instead (e.g. 20000,200000)")
    parser.add_argument("--one-search", action="store_true",
                        help="nmtk rows as one search of --threads threads, not that many one-thread searches")
    parser.add_argument("--length-penalty-form", choices=["gnmt", "power"], default=None,
                        help="nmtk rows' length penalty (default: the recipe's; power stops as CTranslate2 does)")
    parser.add_argument("--beam-tokens", type=int, default=None,
                        help="every row's batch budget, source tokens × beam (default: the recipe's; 2,048 on a CPU)")
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(args.worker, args.run, args.threads, args.beam, args.device, args.one_search,
                                args.length_penalty_form, args.beam_tokens)))
    elif args.lines:
        print(json.dumps(streamed(args)))
    else:
        print(json.dumps(rows(args)))


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main()
