"""Benchmark `nmtk average`: memory when averaging checkpoints of the paper's base (or big) model.

Writes N synthetic checkpoints of the model of recipes/wmt14-en-de-<model>.toml into a run
directory, each with the model's parameters and Adam's two moments (as `nmtk train` writes them),
then runs `nmtk average RUN --last N` and measures the peak RSS of that process. Prints one JSON line:
parameter bytes, checkpoint bytes on disk, peak RSS, the RSS of the process once torch is imported
(`import_rss_mib`, the floor of any nmtk process), and peak RSS over parameter bytes, whole and above
that floor (goal: at most 2.5, i.e. the running sum plus the one checkpoint being read).

Usage: python benchmarks/average.py [--model base|big] [--checkpoints N] [--workdir DIR]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from _util import ROOT, run_measured

IMPORTS = "import torch, nmtk.cli, nmtk.train.average; torch.ones(1)"


def write_checkpoints(run: Path, model_name: str, count: int) -> tuple[int, int]:
    """N checkpoints in ``run`` (+ its recipe.toml); returns (parameter bytes, bytes of one checkpoint)."""
    import torch

    from nmtk.checkpoint import save_atomic
    from nmtk.model import Transformer
    from nmtk.recipe import load_recipe, model_config, recipe_to_toml

    recipe = load_recipe(ROOT / "recipes" / f"wmt14-en-de-{model_name}.toml")
    run.mkdir(parents=True, exist_ok=True)
    (run / "recipe.toml").write_text(recipe_to_toml(recipe))
    torch.manual_seed(0)
    model = Transformer(model_config(recipe))
    params = list(model.parameters())
    moments = {i: {"step": torch.tensor(1.0), "exp_avg": torch.randn_like(p), "exp_avg_sq": torch.rand_like(p)}
               for i, p in enumerate(params)}
    param_bytes = sum(p.numel() * p.element_size() for p in params)
    for k in range(count):
        with torch.no_grad():
            for p in params:
                p.add_(0.001)
        state = {"model": model.state_dict(), "optimizer": {"state": moments, "param_groups": [
            {"params": list(range(len(params))), "lr": 1e-4}]}, "model_config": model.cfg.to_dict(),
            "vocab": {"spm.model": "synthetic"}, "recipe": recipe.model_dump(mode="json"), "state": {"update": k}}
        save_atomic(state, run / f"checkpoint_{(k + 1) * 100}.pt")
    return param_bytes, (run / "checkpoint_100.pt").stat().st_size


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", choices=("base", "big"), default="base")
    parser.add_argument("--checkpoints", type=int, default=5)
    parser.add_argument("--workdir", type=Path, default=None, help="where the checkpoints go (default: a temp dir)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.workdir) as tmp:
        run = Path(tmp) / "run"
        start = time.perf_counter()
        param_bytes, ckpt_bytes = write_checkpoints(run, args.model, args.checkpoints)
        write_s = time.perf_counter() - start
        _, import_mib, _ = run_measured([sys.executable, "-c", IMPORTS + "; import time; time.sleep(1)"])
        cmd = [sys.executable, "-m", "nmtk", "average", str(run), "--last", str(args.checkpoints),
               "-o", str(run / "avg.pt")]
        wall, peak_mib, result = run_measured(cmd, cwd=ROOT)
        if result.returncode:
            sys.exit(f"average failed: {result.stderr.strip()}")
        disk = sum(p.stat().st_size for p in run.glob("checkpoint_*.pt"))
    mib = 2**20
    print(json.dumps({
        "benchmark": "average", "model": args.model, "checkpoints": args.checkpoints,
        "parameter_mib": round(param_bytes / mib), "checkpoint_mib": round(ckpt_bytes / mib),
        "checkpoints_disk_gib": round(disk / 2**30, 2), "write_s": round(write_s, 1), "average_s": round(wall, 1),
        "peak_rss_mib": round(peak_mib), "import_rss_mib": round(import_mib),
        "peak_rss_per_param_bytes": round(peak_mib * mib / param_bytes, 2),
        "peak_above_imports_per_param_bytes": round((peak_mib - import_mib) * mib / param_bytes, 2),
    }))


if __name__ == "__main__":
    main()
