"""Lexical shortlists of several sizes against the full vocabulary, in both engines (Multi30k
test_2016_flickr, 1,000 sentences, beam 4, 2 CPU threads).

Why: a shortlist trades two things against each other. The fewer pieces a batch's candidates hold, the
less of the output projection, softmax and top-k a step computes; but the softmax is normalised over
the candidates, so the more probability mass is left outside them, the more each step's scores rise
and the more beam search ranks differently (and the more reference pieces are missing). This sweeps
``nmtk shortlist --per-source P --frequent F`` for each ``P:F`` of ``--sizes``, each made in a
temporary copy of the run (links to its files) with its own CTranslate2 float32 export, and reports
per size and engine sentences/s, the speed against the same engine without a shortlist, the share of
lines identical to it and BLEU. The rows without a shortlist run first, in the same sitting; each row
is `benchmarks/translate.py`'s (a fresh process, median of ``--repeat``). One JSON line.

Needs a trained run (default: runs/multi30k-en-de, the `make demo` run).
Usage: python benchmarks/shortlist.py [--run DIR] [--sizes 50:100,20:100,10:50] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

from _util import ROOT

ENGINES = ("nmtk:fp32", "ct2:float32")


def copy_run(run: Path, into: Path) -> Path:
    """A run folder of links to ``run``'s files, without its shortlist and exports (each size makes its own)."""
    into.mkdir(parents=True)
    for item in run.iterdir():
        if item.name != "shortlist.npz" and not item.name.startswith("export-"):
            (into / item.name).symlink_to(item.resolve())
    return into


def median_row(row: str, run: Path, args: argparse.Namespace) -> dict:
    """`translate.repeated` on ``run``: the median of ``--repeat`` fresh processes."""
    import translate

    return translate.repeated(row, argparse.Namespace(**{**vars(args), "run": run}))


def size_rows(run: Path, size: str, plain: dict[str, dict], args: argparse.Namespace) -> dict:
    """One shortlist size: made in a copy of ``run``, each engine's row against its ``plain`` row."""
    import translate

    from nmtk.decode.shortlists import make_shortlist

    per_source, frequent = (int(x) for x in size.split(":"))
    with tempfile.TemporaryDirectory() as tmp:
        copy = copy_run(run, Path(tmp) / run.name)
        made = make_shortlist(copy, per_source=per_source, frequent=frequent)
        report: dict = {"per_source": per_source, "frequent": frequent, "sentence_candidates": made.mean_candidates}
        for engine in ENGINES:
            if engine.startswith("ct2:"):
                translate.export_for(copy, engine.split(":", 1)[1], shortlist=True)
            row = median_row(engine + "+shortlist", copy, args)
            base = plain[engine]
            report[engine] = {"sentences_per_s": row["sentences_per_s"], "runs": row["runs_sentences_per_s"],
                              "speed": round(row["sentences_per_s"] / base["sentences_per_s"], 3),
                              "identical": translate.identical(base["lines"], row["lines"]), "bleu": row["bleu"]}
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run", type=Path, default=ROOT / "runs" / "multi30k-en-de")
    parser.add_argument("--sizes", default="50:100,30:100,20:100,10:50,5:20",
                        help="PER_SOURCE:FREQUENT shortlist sizes, comma-separated")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--beam", type=int, default=4)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--repeat", type=int, default=3, help="fresh processes per row; the median row is reported")
    args = parser.parse_args()
    import translate

    os.chdir(ROOT)  # the run's recipe names its prepared data relative to the repository

    run = args.run.resolve()
    translate.export_for(run, "float32")
    plain = {engine: median_row(engine, run, args) for engine in ENGINES}
    report: dict = {"benchmark": "shortlist", "run": str(args.run), "sentences": 1000, "beam": args.beam,
                    "threads": args.threads}
    report.update({engine: {"sentences_per_s": row["sentences_per_s"], "runs": row["runs_sentences_per_s"],
                            "bleu": row["bleu"]} for engine, row in plain.items()})
    report["sizes"] = [size_rows(run, size, plain, args) for size in args.sizes.split(",")]
    print(json.dumps(report))


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main()
