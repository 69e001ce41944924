"""Where a decoding step's time goes in nmtk's own engine: the `make demo` model on test_2016_flickr (1,000
lines, beam 4, as benchmarks/translate.py runs it but as one search of ``--threads`` threads, not
one-thread searches side by side), under torch's profiler.

Each ATen op's own CPU time (``self_cpu_time_total``, so that nested ops are not counted twice) is put
in one of a few kinds: matrix products, attention's softmax, cache reorders and the beam's selections
(top-k, maxima), copies and layout, the other element-wise ops; what is left of the wall time is
Python and the dispatcher (the interpreter between ops and each op's way to its kernel). Per decoding
step (one `decode_step` call) and as shares. The profiler itself adds a few microseconds per op, so
the wall time is also measured without it (``plain_s``) and the shares are of the profiled run.

Usage: python benchmarks/decode_profile.py [--run DIR] [--row nmtk:fp32] [--threads 2] [--beam 4]
Prints one JSON line.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

from _util import ROOT

KINDS = {
    "products": ("aten::addmm", "aten::mm", "aten::bmm", "aten::baddbmm", "aten::_int_mm",
                 "quantized::linear_dynamic", "aten::_weight_int8pack_mm", "mkldnn::_linear_pointwise"),
    "softmax": ("aten::_softmax", "aten::_log_softmax", "aten::softmax", "aten::log_softmax"),
    "reorder": ("aten::index_select", "aten::index", "aten::gather", "aten::index_copy_"),
    "selection": ("aten::topk", "aten::amax", "aten::max", "aten::sort", "aten::argmax", "aten::nonzero",
                  "aten::repeat_interleave"),
    "copies": ("aten::copy_", "aten::clone", "aten::contiguous", "aten::cat", "aten::empty", "aten::empty_like",
               "aten::to", "aten::_to_copy", "aten::full", "aten::fill_", "aten::zeros", "aten::ones",
               "aten::resize_", "aten::empty_strided", "aten::select", "aten::slice", "aten::view",
               "aten::reshape", "aten::permute", "aten::transpose", "aten::t", "aten::unbind", "aten::expand",
               "aten::as_strided", "aten::_reshape_alias", "aten::unsqueeze", "aten::squeeze", "aten::detach",
               "aten::alias", "aten::lift_fresh", "aten::_unsafe_view", "aten::split", "aten::narrow"),
}


def kind_of(name: str) -> str:
    for kind, names in KINDS.items():
        if name in names:
            return kind
    return "elementwise and other ops"


def profile(args: argparse.Namespace) -> dict[str, object]:
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile
    from translate import load, test_lines

    translator, search = load(args.row, args.run, args.threads, args.beam, "cpu")
    translator.searches = 1  # one search of --threads threads: a step's profile, not side-by-side searches'
    if args.beam_tokens:
        search = dataclasses.replace(search, beam_tokens=args.beam_tokens)
    sources = test_lines("en")
    translator.hypotheses(sources[:50], search)  # warm-up
    plain = []
    for _ in range(args.repeat):
        start = time.perf_counter()
        translator.hypotheses(sources, search)
        plain.append(time.perf_counter() - start)
    steps = 0
    model, original = translator.model, translator.model.decode_step

    def counted(*a, **k):
        nonlocal steps
        steps += 1
        return original(*a, **k)

    model.decode_step = counted
    with torch_profile(activities=[ProfilerActivity.CPU]) as prof:
        start = time.perf_counter()
        translator.hypotheses(sources, search)
        wall = time.perf_counter() - start
    model.decode_step = original
    per_kind: dict[str, float] = {}
    ops = 0
    for event in prof.key_averages():
        per_kind[kind_of(event.key)] = per_kind.get(kind_of(event.key), 0.0) + event.self_cpu_time_total / 1e6
        ops += event.count
    per_kind["python and dispatch"] = max(0.0, wall - sum(per_kind.values()))
    top = sorted(prof.key_averages(), key=lambda e: -e.self_cpu_time_total)[:12]
    return {"benchmark": "decode-profile", "row": args.row, "threads": args.threads, "beam": args.beam,
            "beam_tokens": search.budget("cpu"),
            "plain_s": round(sorted(plain)[len(plain) // 2], 3), "profiled_s": round(wall, 3),
            "decode_steps": steps, "ops_per_step": round(ops / steps, 1),
            "ms_per_step": {k: round(1e3 * v / steps, 3) for k, v in sorted(per_kind.items(), key=lambda kv: -kv[1])},
            "share_percent": {k: round(100 * v / wall, 1) for k, v in sorted(per_kind.items(), key=lambda kv: -kv[1])},
            "top_ops_ms_per_step": {e.key: round(e.self_cpu_time_total / 1e3 / steps, 3) for e in top}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run", type=Path, default=ROOT / "runs" / "multi30k-en-de")
    parser.add_argument("--row", default="nmtk:fp32", help="ENGINE:PRECISION as in benchmarks/translate.py (nmtk only)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--beam", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=3, help="unprofiled runs; their median is plain_s")
    parser.add_argument("--beam-tokens", type=int, default=None, help="the batch budget (default: the recipe's)")
    print(json.dumps(profile(parser.parse_args())))


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main()
