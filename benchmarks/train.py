"""Benchmark `nmtk train` throughput on the fairseq-comparable Multi30k setup (recipes/multi30k-en-de-d256.toml).

Trains a fixed number of updates in each precision on 2 threads and prints one JSON line: target
tokens/s (from train.jsonl, after the first log interval as warm-up) and peak RSS per precision.
GPU training is measured by benchmarks/gpu.py (the real Trainer on WMT-shaped batches).
``--estimate`` prints, without training anything, the FLOPs of one
update of the paper's base and big models (25,000 source + 25,000 target tokens, §5.1), the utilisation
of 8 × P100 implied by the paper's step times (§5.2), and the step time that utilisation range gives
on one of today's GPUs.
Usage: python benchmarks/train.py [--updates N] [--precisions fp32,bf16,auto] [--repeat 3] [--recipe FILE] [--estimate]
(each run reports the precision it trained in and why: with ``auto``, what this CPU's probe chose)
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
from pathlib import Path

from _util import P100_FP32_FLOPS, PAPER_STEP_S, ROOT, data_root, dense_peak, flops_per_update, run_measured

RECIPE = ROOT / "recipes" / "multi30k-en-de-d256.toml"


def cpu_throughput(recipe: Path, precision: str, updates: int, work: Path, repeat: int) -> dict[str, object]:
    """Median over ``repeat`` fresh training processes (timings on a shared machine vary by 10-20%)."""
    runs = [one_cpu_run(recipe, precision, updates, work / f"run-{precision}-{i}") for i in range(repeat)]
    median = sorted(runs, key=lambda r: r["tgt_tokens_per_s"])[len(runs) // 2]
    return {**median, "peak_rss_mib": sorted(r["peak_rss_mib"] for r in runs)[len(runs) // 2],
            "runs_tgt_tokens_per_s": [r["tgt_tokens_per_s"] for r in runs],
            "runs_peak_rss_mib": [r["peak_rss_mib"] for r in runs]}


def one_cpu_run(recipe: Path, precision: str, updates: int, run_dir: Path) -> dict[str, float]:
    """Steady state: no validation and no checkpoint until the end (a real run's are measured by
    `nmtk train` itself, which prints its average speed over the whole session)."""
    cmd = [sys.executable, "-m", "nmtk", "train", str(recipe), "--data-root", str(data_root()),
           "--data", str(run_dir.parent / "data"), "--run-dir", str(run_dir), "--threads", "2",
           "--set", f"train.precision={precision}", "--set", f"train.max_updates={updates}",
           "--set", "train.log_every_updates=10", "--set", "train.validate_every_updates=100000",
           "--set", "train.validate_at_end=false",
           "--set", "train.max_minutes=100", "--set", "train.save_every_minutes=0",
           "--set", f"train.save_every_updates={updates}"]
    wall, peak, result = run_measured(cmd, cwd=ROOT)
    if result.returncode:
        sys.exit(f"train failed: {result.stderr.strip()[-2000:]}")
    records = [json.loads(line) for line in (run_dir / "train.jsonl").read_text().splitlines()]
    rates = [r["tgt_tokens_per_s"] for r in records if "tgt_tokens_per_s" in r][1:]
    chosen = re.search(r"precision (\w+) \(([^)]*)\)", " ".join(result.stderr.split()))  # what `auto` became, and why
    return {"tgt_tokens_per_s": round(sum(rates) / len(rates)), "peak_rss_mib": round(peak), "wall_s": round(wall, 1),
            **({"resolved": chosen.group(1), "why": chosen.group(2)} if chosen else {})}


def estimate() -> dict[str, object]:
    from nmtk.recipe import load_recipe, model_config

    out: dict[str, object] = {}
    for name in ("base", "big"):
        cfg = model_config(load_recipe(ROOT / "recipes" / f"wmt14-en-de-{name}.toml"))
        flops = flops_per_update(cfg, 25_000, 25_000, 28)
        p100 = flops / (PAPER_STEP_S[name] * 8 * P100_FP32_FLOPS)
        h100 = {f"{int(m * 100)}%": round(flops / (m * dense_peak("H100 SXM")), 3) for m in (0.3, 0.5)}
        out[name] = {"tflop_per_update": round(flops / 1e12, 2), "paper_step_s_8xP100": PAPER_STEP_S[name],
                     "paper_p100_utilisation_percent": round(100 * p100, 1), "h100_bf16_step_s_at_mfu": h100}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--updates", type=int, default=60)
    parser.add_argument("--precisions", default="fp32,bf16")
    parser.add_argument("--recipe", type=Path, default=RECIPE, help="recipe to train (default: the d256 setup)")
    parser.add_argument("--repeat", type=int, default=3, help="fresh runs per precision; medians are reported")
    parser.add_argument("--estimate", action="store_true", help="only the FLOPs-based GPU estimate")
    args = parser.parse_args()
    if args.estimate:
        print(json.dumps({"benchmark": "train", "estimate": estimate()}))
        return
    report: dict[str, object] = {"benchmark": "train", "recipe": args.recipe.name, "threads": 2}
    with tempfile.TemporaryDirectory() as tmp:
        for precision in args.precisions.split(","):
            report[precision] = cpu_throughput(args.recipe, precision, args.updates, Path(tmp), args.repeat)
    print(json.dumps(report))


if __name__ == "__main__":
    main()
