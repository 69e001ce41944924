"""nmtk's CPU decoding with and without TorchScript, in one process (Multi30k test_2016_flickr, beam 4).

Why one process: the scripted decoder step (`nmtk.model.script`) and the scripted beam bookkeeping
(`nmtk.decode.search.beam._advance`) each change a run by a few to thirty per cent, and on a shared
2-core host two fresh processes a minute apart differ by as much (docs/decoding.md). Here one loaded
translator decodes the test set under each layout in turn, ``--rounds`` times, the order reversed every
other round, so that each round's layouts meet the same stretch of the host; the ratios are per round.

Layouts: ``eager`` (neither), ``decoder`` (the decoder's step scripted), ``both`` (and the bookkeeping).
Also whether every layout gives the same hypotheses as ``eager`` (they must: the same ops).
Needs a trained run (default: runs/multi30k-en-de, the `make demo` run). One JSON line.
Usage: python benchmarks/torchscript.py [--row nmtk:int8] [--threads 2] [--rounds 6]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

from _util import ROOT

LAYOUTS = ("eager", "decoder", "both")


def switch(model: object, layout: str) -> None:
    """Put ``model`` (a `Transformer`) and the beam search in ``layout``, the decoder's script built now
    (not inside a timed pass)."""
    import torch

    from nmtk.decode.search import beam
    from nmtk.model.script import SWITCH_ENV

    os.environ[SWITCH_ENV] = "0" if layout == "eager" else "1"
    model._scripted.reset()
    with torch.inference_mode():
        model._scripted.module(model)
    scripted = beam._scripted() if layout == "both" else None
    beam._advance_on = (lambda device: scripted) if scripted is not None else (lambda device: beam._advance)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run", type=Path, default=ROOT / "runs" / "multi30k-en-de")
    parser.add_argument("--row", default="nmtk:int8", help="nmtk:fp32, nmtk:int8 or nmtk:fp32+shortlist")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--beam", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=6)
    args = parser.parse_args()
    if not args.row.startswith("nmtk:"):
        sys.exit("error: --row is one of nmtk's (nmtk:fp32, nmtk:int8, nmtk:fp32+shortlist)")
    import translate

    translator, search = translate.load(args.row, args.run, args.threads, args.beam, "cpu")
    lines = translate.test_lines("en")
    decode: Callable[[], list] = lambda: [h[0].tokens if h else [] for h in translator.hypotheses(lines, search)]  # noqa: E731
    switch(translator.first_model, "eager")
    decode()  # warm-up
    seconds: dict[str, list[float]] = {layout: [] for layout in LAYOUTS}
    outputs: dict[str, list] = {}
    for round_ in range(args.rounds):
        for layout in LAYOUTS if round_ % 2 == 0 else reversed(LAYOUTS):
            switch(translator.first_model, layout)
            start = time.perf_counter()
            outputs[layout] = decode()
            seconds[layout].append(round(time.perf_counter() - start, 3))
    ratio = {layout: [round(e / s, 3) for e, s in zip(seconds["eager"], seconds[layout], strict=True)]
             for layout in LAYOUTS[1:]}
    print(json.dumps({"benchmark": "torchscript", "row": args.row, "threads": args.threads, "beam": args.beam,
                      "sentences": len(lines), "seconds": seconds,
                      "median_s": {k: statistics.median(v) for k, v in seconds.items()},
                      "speedup_vs_eager": ratio,
                      "median_speedup": {k: statistics.median(v) for k, v in ratio.items()},
                      "identical_to_eager": {k: outputs[k] == outputs["eager"] for k in LAYOUTS[1:]}}))


if __name__ == "__main__":
    main()
