"""Benchmark `nmtk translate` on Multi30k test_2016_flickr (1,000 sentences), beam 4, 2 CPU threads.

Needs a trained run of the d256 setup (default runs/multi30k-en-de-d256, else pass --run). Prints one
JSON line: sentences/s, target tokens/s, model-load seconds (reported apart), peak RSS, per precision.
Usage: python benchmarks/translate.py [--run DIR] [--precisions fp32,bf16]
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
import time
from pathlib import Path

from _util import ROOT, data_root


def measure(run: Path, precision: str, lines: list[str], threads: int, device: str) -> dict[str, float]:
    import resource

    import torch

    from nmtk.decode.beam import SearchConfig
    from nmtk.decode.translator import Translator, load_model
    from nmtk.rundir import RunDir

    torch.set_num_threads(threads)
    rundir = RunDir(run).require()
    start = time.perf_counter()
    model = load_model(rundir.default_checkpoint(), torch.device(device), rundir.vocab_hash())
    recipe = rundir.recipe()
    d = recipe.decode
    translator = Translator(rundir.pipelines(recipe), model, SearchConfig(beam=4, length_penalty=d.length_penalty,
                            max_len_a=d.max_len_a, max_len_b=d.max_len_b), torch.device(device), precision)
    load_s = time.perf_counter() - start
    translator.translate(lines[:50])  # warm-up
    start = time.perf_counter()
    hyps = translator.hypotheses(lines)
    seconds = time.perf_counter() - start
    tokens = sum(len(h[0].tokens) + 1 for h in hyps if h)
    return {"sentences_per_s": round(len(lines) / seconds, 1), "tgt_tokens_per_s": round(tokens / seconds),
            "seconds": round(seconds, 2), "model_load_s": round(load_s, 2),
            "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--run", type=Path, default=ROOT / "runs" / "multi30k-en-de-d256")
    parser.add_argument("--precisions", default="fp32,bf16")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    with gzip.open(data_root() / "multi30k" / "test_2016_flickr.en.gz", "rt", encoding="utf-8") as handle:
        lines = [line.rstrip("\n") for line in handle]
    report: dict[str, object] = {"benchmark": "translate", "sentences": len(lines), "beam": 4,
                                 "threads": args.threads, "device": args.device}
    for precision in args.precisions.split(","):
        report[precision] = measure(args.run, precision, lines, args.threads, args.device)
    print(json.dumps(report))


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main()
