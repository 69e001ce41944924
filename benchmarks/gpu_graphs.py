"""issue 78's GPU checks of graphed micro-batches (`train.cuda_graphs`), one JSON line.

``equal``: the base model on `gpu.py`'s synthetic WMT-shaped data, fp32 without TF32, dropout 0, the
paper's per-GPU shape (one micro-batch of ≤ 3,125 tokens an update): 10 updates eager and 10 graphed
on the same sentences; the largest relative difference of their losses (acceptance: ≤ 1e-4).
``curve``: the Multi30k recipe (``data-bin/multi30k-en-de``, `nmtk prepare` first; carry it to the GPU
machine) in bf16 with its dropout, 300 updates eager and 300 graphed; the loss means of each window of
50 updates and their largest relative difference (acceptance: ≤ 1 %). Each run also reports the
update line (shapes, padding) and the capture line (time, memory).

Speed rows are `benchmarks/gpu.py`'s (``base:compiled-cuda-graphs:1x3125`` and the others).

Usage: python benchmarks/gpu_graphs.py [--checks equal,curve] [--updates-equal 10] [--updates-curve 300]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _util import ROOT


def losses(trainer: Any, updates: int) -> tuple[list[float], str, str | None]:
    """Train ``updates`` updates; each update's loss per target token, the update line, the capture line."""
    line = trainer.plan_micro_batches()
    trainer.step.wrap()
    trainer.check_memory()
    captured = trainer.step.graphs.prepare() if trainer.step.graphs is not None else None
    seen, step = [], trainer.train_step

    def recorded(group: Any, *args: Any) -> Any:
        result = step(group, *args)
        seen.append(float(result[0]) / result[2])
        return result

    trainer.train_step = recorded
    trainer.recipe.train.max_updates = updates
    trainer.train()
    trainer.close()
    return seen, line, captured


def equal(work: Path, updates: int, device: str) -> dict[str, Any]:
    import torch
    from gpu import synthetic_data, trainer_for

    from nmtk.train.distributed import DistInfo

    synthetic_data(work / "data", 20_000)
    runs = {}
    for graphs in ("false", "true"):
        overrides = ["batching.batch_tokens=3125", "train.update_freq=1", "train.micro_batch_tokens=3125",
                     "train.precision=fp32", "train.compile=false", f"train.cuda_graphs={graphs}", "model.dropout=0.0",
                     "model.attention_dropout=0.0", "model.relu_dropout=0.0", f"train.max_updates={updates}"]
        trainer = trainer_for("base", work, overrides, torch.device(device), DistInfo())
        torch.backends.cuda.matmul.allow_tf32 = False  # fp32 products: TF32's rounding differs by shape
        torch.backends.cudnn.allow_tf32 = False
        torch.set_float32_matmul_precision("highest")
        runs[graphs] = losses(trainer, updates)
    eager, graphed = runs["false"][0], runs["true"][0]
    worst = max(abs(a - b) / abs(a) for a, b in zip(eager, graphed, strict=True))
    return {"eager": eager, "graphed": graphed, "max_relative_difference": worst, "passes_1e-4": worst <= 1e-4,
            "update_line": runs["true"][1], "capture": runs["true"][2]}


def curve(work: Path, updates: int, device: str) -> dict[str, Any]:
    import torch

    from nmtk.manifest import PreparedData
    from nmtk.recipe import load_recipe
    from nmtk.rundir import RunDir
    from nmtk.train.distributed import DistInfo
    from nmtk.train.trainer import Trainer

    data = ROOT / "data-bin" / "multi30k-en-de"
    if not (data / "manifest.json").is_file():
        return {"skipped": f"{data} is not prepared (nmtk prepare recipes/multi30k-en-de.toml, then carry it)"}
    runs = {}
    for graphs in ("false", "true"):
        recipe = load_recipe(ROOT / "recipes" / "multi30k-en-de.toml",
                             ["train.validate_every_updates=1000000", "train.validate_at_end=false",
                              "train.save_every_minutes=0", "train.log_every_updates=1000000", "train.precision=bf16",
                              "train.compile=false", f"train.cuda_graphs={graphs}", f"train.max_updates={updates}"])
        run = RunDir(work / f"m30k-{graphs}-{time.monotonic_ns()}")
        run.path.mkdir(parents=True)
        runs[graphs] = losses(Trainer(recipe, PreparedData(data), None, run, torch.device(device), DistInfo()), updates)
    window = max(1, min(50, updates // 2))
    means = {k: [sum(v[0][i : i + window]) / window for i in range(0, updates - window + 1, window)]
             for k, v in runs.items()}
    worst = max(abs(a - b) / abs(a) for a, b in zip(means["false"], means["true"], strict=True))
    return {"window_means_eager": means["false"], "window_means_graphed": means["true"],
            "max_relative_difference": worst, "passes_1_percent": worst <= 0.01,
            "update_line": runs["true"][1], "capture": runs["true"][2]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checks", default="equal,curve")
    parser.add_argument("--updates-equal", type=int, default=10)
    parser.add_argument("--updates-curve", type=int, default=300)
    parser.add_argument("--device", default="cuda", help="cpu: a dry run of the script (with NMTK_GRAPHS_EAGER=1)")
    args = parser.parse_args()
    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        print(json.dumps({"benchmark": "gpu-graphs", "cuda": False, "note": "needs CUDA"}))
        return
    report: dict[str, Any] = {"benchmark": "gpu-graphs",
                              "gpu": torch.cuda.get_device_name() if args.device == "cuda" else args.device,
                              "torch": torch.__version__, "date": time.strftime("%Y-%m-%d")}
    with tempfile.TemporaryDirectory() as tmp:
        for check in args.checks.split(","):
            try:
                if check == "equal":
                    report["equal"] = equal(Path(tmp), args.updates_equal, args.device)
                elif check == "curve":
                    report["curve"] = curve(Path(tmp), args.updates_curve, args.device)
            except Exception as exc:  # one check failing still reports the other
                report[check] = {"error": f"{type(exc).__name__}: {exc}"[:2000]}
            print(json.dumps({check: report.get(check)}), file=sys.stderr, flush=True)
    print(json.dumps(report))


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main()
