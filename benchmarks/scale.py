"""Scale rehearsal on this machine: the paper's base and big recipes, at WMT14 size, for a few updates.

Trains recipes/wmt14-en-de-{base,big}.toml with their real batches (batch_tokens 3,125 × update_freq 8
= 25,000 tokens per side per update) on 4.5M prepared synthetic pairs (benchmarks/prepare.py --keep),
on the CPU, with no corpora under the data root (the prepared folder is used as it is; the recipes
are the paper's with their corpora replaced by the synthetic ones). For each
model it prints the start-up time (process start to the first update: data, batching plan, model,
memory pre-flight), seconds per update, peak RSS, the model FLOPs of an update (the formula of
benchmarks/train.py with the measured token counts) and the FLOP/s achieved. Also: the bytes per
training pair the data occupies in memory (offsets, lengths, batching plan), the disk a checkpoint
of each model takes and 20 of them (keep_last = 20), and the peak RSS of averaging 20 big-shaped
checkpoints (benchmarks/average.py's checkpoints). One JSON line.

Usage: python benchmarks/scale.py --data DIR [--updates 3,2] [--average-checkpoints 20] [--workdir DIR]
"""

from __future__ import annotations

import argparse
import gc
import json
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from _util import ROOT, run_measured
from average import write_checkpoints
from prepare import recipe_text
from train import flops_per_update

BYTES_PER_PAIR = """
import gc, json, sys
from pathlib import Path
from nmtk.data.batching import BatchingPlan
from nmtk.data.binarized import BinarizedSplit
from nmtk.manifest import PreparedData
from nmtk.pair import Pair
from nmtk.data.dataset import split_lengths
def rss():
    return int(open("/proc/self/status").read().split("VmRSS:")[1].split()[0]) * 1024
data = Path(sys.argv[1])
before = rss()
split = BinarizedSplit(PreparedData(data), "train", Pair("en", "de"))
src, tgt = split_lengths(split)
plan = BatchingPlan(src, tgt, 3125, 1, None, 1)
batches = plan.epoch_batches(0, 0, 1, 8)
gc.collect()
print(json.dumps({"pairs": len(split), "bytes": rss() - before}))
"""


def train_run(model: str, data: Path, work: Path, updates: int) -> dict[str, float]:
    run = work / f"run-{model}"
    empty = work / "no-corpora"
    empty.mkdir(exist_ok=True)
    recipe = work / f"wmt14-en-de-{model}.toml"  # the paper recipe, its corpora the synthetic ones
    recipe.write_text(recipe_text(model))
    cmd = [sys.executable, "-m", "nmtk", "train", str(recipe),
           "--data", str(data), "--data-root", str(empty), "--run-dir", str(run), "--threads", "2",
           "--set", f"train.max_updates={updates}", "--set", "train.log_every_updates=1",
           "--set", "train.precision=auto",  # bf16 only where the CPU has it in hardware
           "--set", "train.validate_every_updates=100000", "--set", "train.validate_at_end=false",
           "--set", f"train.save_every_updates={updates}"]
    log = run / "train.jsonl"
    first_record: list[float] = []
    start = time.time()

    def watch() -> None:
        while not first_record and time.time() - start < 24 * 3600:
            if log.is_file() and log.stat().st_size:
                first_record.append(time.time())
            time.sleep(0.05)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    wall, peak_mib, result = run_measured(cmd, cwd=ROOT)
    if result.returncode:
        sys.exit(f"train {model} failed: {result.stderr.strip()[-2000:]}")
    watcher.join(timeout=1)
    records = [json.loads(line) for line in log.read_text().splitlines() if '"validation"' not in line]
    seconds = [60 * r["minutes"] for r in records]
    per_update = [b - a for a, b in zip([0.0, *seconds], seconds, strict=False)]
    steady = sorted(per_update[1:] or per_update)
    s_per_update = steady[len(steady) // 2]
    tokens = [r["tgt_tokens_per_s"] * u for r, u in zip(records, per_update, strict=True)]
    checkpoint = run / f"checkpoint_{updates}.pt"
    startup = round(first_record[0] - start - per_update[0], 1) if first_record else None
    return {"updates": updates, "startup_s": startup, "first_update_s": round(per_update[0], 1),
            "s_per_update": round(s_per_update, 1),
            "tgt_tokens_per_update": round(sum(tokens) / len(tokens)), "peak_rss_mib": round(peak_mib),
            "wall_s": round(wall, 1), "checkpoint_mib": round(checkpoint.stat().st_size / 2**20)}


def flops(model: str, tgt_tokens: int, s_per_update: float) -> dict[str, float]:
    from nmtk.recipe import load_recipe, model_config

    cfg = model_config(load_recipe(ROOT / "recipes" / f"wmt14-en-de-{model}.toml"))
    length = 28  # mean sentence length of the synthetic corpus (tokens per side / pairs), as in train.py
    total = flops_per_update(cfg, tgt_tokens, tgt_tokens, length)
    return {"tflop_per_update": round(total / 1e12, 2), "achieved_gflops": round(total / s_per_update / 1e9)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, required=True, help="prepared 4.5M-pair folder (prepare.py --keep)")
    parser.add_argument("--updates", default="3,2", help="updates of base, big")
    parser.add_argument("--average-checkpoints", type=int, default=20, help="0 to skip")
    parser.add_argument("--workdir", type=Path, default=None)
    args = parser.parse_args()
    base_updates, big_updates = (int(n) for n in args.updates.split(","))
    report: dict[str, object] = {"benchmark": "scale", "threads": 2}
    probe = subprocess.run([sys.executable, "-c", BYTES_PER_PAIR, str(args.data)], capture_output=True, text=True,
                           check=True, cwd=ROOT)
    measured = json.loads(probe.stdout)
    report["pairs"] = measured["pairs"]
    report["bytes_per_pair"] = round(measured["bytes"] / measured["pairs"], 1)
    with tempfile.TemporaryDirectory(dir=args.workdir) as tmp:
        for model, updates in (("base", base_updates), ("big", big_updates)):
            row = train_run(model, args.data, Path(tmp), updates)
            row.update(flops(model, row["tgt_tokens_per_update"], row["s_per_update"]))
            row["keep_last_20_gib"] = round(20 * row["checkpoint_mib"] / 1024, 1)
            report[model] = row
            gc.collect()
        if args.average_checkpoints:
            run = Path(tmp) / "average-big"
            param_bytes, ckpt_bytes = write_checkpoints(run, "big", args.average_checkpoints)
            wall, peak_mib, result = run_measured([sys.executable, "-m", "nmtk", "average", str(run), "--last",
                                                   str(args.average_checkpoints), "-o", str(run / "avg.pt")], cwd=ROOT)
            if result.returncode:
                sys.exit(f"average failed: {result.stderr.strip()}")
            report["average_big"] = {"checkpoints": args.average_checkpoints,
                                     "checkpoint_mib": round(ckpt_bytes / 2**20),
                                     "parameter_mib": round(param_bytes / 2**20), "peak_rss_mib": round(peak_mib),
                                     "peak_rss_per_param_bytes": round(peak_mib * 2**20 / param_bytes, 2),
                                     "wall_s": round(wall, 1)}
    print(json.dumps(report))


if __name__ == "__main__":
    main()
