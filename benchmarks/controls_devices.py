"""Every decoding control on a GPU against the CPU: the same run, fp32, the first ``--lines`` lines of
test_2016_flickr. Per search (greedy, beam 4, n-best 4, repetition limits, ordered and unordered
constraints from the references, prefixes, a banned word, prefix with constraints, alignment): the
share of lines whose best hypothesis (and whole n-best list) is the same token for token on both
devices, the second device's seconds, and what the control must hold there (term recall, outputs
starting with their prefix, banned words produced). One JSON line.

Usage: python benchmarks/controls_devices.py [--run runs/multi30k-en-de] [--lines 300] [--devices cpu,cuda]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from _util import ROOT
from constraints import has, reference_terms
from translate import test_lines


def searches(base, refs: list[str], plain: list[str]) -> dict[str, tuple]:
    """Name -> (search, per-line guidance) for every control."""
    from nmtk.decode.guide import Guidance

    terms = reference_terms(refs, plain)
    firsts = [p.split()[0] if p.split() else "" for p in plain]
    prefixes = [Guidance(prefix=" ".join(r.split()[:2])) for r in refs]
    return {
        "greedy": (base.choose(beam=1), None), "beam4": (base, None), "nbest4": (base.choose(nbest=4), None),
        "no_repeat_ngram_size_3": (base.choose(no_repeat_ngram_size=3), None),
        "repetition_penalty_1.2": (base.choose(repetition_penalty=1.2), None),
        "constraints": (base, [Guidance(constraints=t) for t in terms]),
        "ordered_constraints": (base.choose(ordered_constraints=True), [Guidance(constraints=t) for t in terms]),
        "prefix": (base, prefixes), "prefix_greedy": (base.choose(beam=1), prefixes),
        "ban_first_word": (base, [Guidance(bans=(f,)) if f else None for f in firsts]),
        "prefix_and_constraints": (base, [Guidance(prefix=r.split()[0] if r.split() else "", constraints=t)
                                          for r, t in zip(refs, terms, strict=True)]),
        "align": (base.choose(align=True), None)}


def held(name: str, texts: list[str], guides: list | None) -> dict[str, object]:
    """What the control promises, checked on the outputs."""
    row: dict[str, object] = {}
    asked = [(o, g) for o, g in zip(texts, guides or [], strict=False) if g is not None]
    if any(g.constraints for _, g in asked):
        row["term_recall_pct"] = round(100 * sum(has(o, p) for o, g in asked for p in g.constraints)
                                       / sum(len(g.constraints) for _, g in asked), 1)
    if any(g.prefix for _, g in asked):
        row["starts_with_prefix_pct"] = round(100 * sum(o.startswith(g.prefix) for o, g in asked) / len(asked), 1)
    if any(g.bans for _, g in asked):
        row["banned_produced"] = sum(has(o, b) for o, g in asked for b in g.bans)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", type=Path, default=ROOT / "runs" / "multi30k-en-de")
    parser.add_argument("--lines", type=int, default=300)
    parser.add_argument("--devices", default="cpu,cuda", help="reference device, then the device compared")
    args = parser.parse_args()

    from nmtk.decode.load import LoadOptions, load_translator
    from nmtk.decode.search.config import SearchConfig
    from nmtk.model_source import resolve_model
    from nmtk.precision import Precision

    run = resolve_model(args.run)
    first, second = args.devices.split(",")
    engines = [load_translator(run, LoadOptions(precision=Precision.fp32, device=d)) for d in (first, second)]
    sources, refs = test_lines("en")[: args.lines], test_lines("de")[: args.lines]
    base = SearchConfig.from_recipe(run.recipe.decode, beam=4)
    plain = [engines[0].detokenize(h[0]) for h in engines[0].hypotheses(sources, base)]
    report: dict[str, object] = {"benchmark": "controls_devices", "run": str(args.run), "lines": len(sources),
                                 "devices": [first, second], "precision": "fp32"}
    for name, (search, guides) in searches(base, refs, plain).items():
        ours = engines[0].hypotheses(sources, search, guides=guides)
        start = time.perf_counter()
        theirs = engines[1].hypotheses(sources, search, guides=guides)
        seconds = time.perf_counter() - start
        same = sum(a[0].tokens == b[0].tokens for a, b in zip(ours, theirs, strict=True))
        same_lists = sum([h.tokens for h in a] == [h.tokens for h in b] for a, b in zip(ours, theirs, strict=True))
        row = {"same_pct": round(100 * same / len(sources), 1),
               "same_nbest_pct": round(100 * same_lists / len(sources), 1), f"{second}_s": round(seconds, 2),
               **held(name, [engines[1].detokenize(h[0]) for h in theirs], guides)}
        if search.align:
            row["same_alignment_pct"] = round(100 * sum(a[0].alignment == b[0].alignment
                                                        for a, b in zip(ours, theirs, strict=True)) / len(sources), 1)
        report[name] = row
    print(json.dumps(report))


if __name__ == "__main__":
    main()
