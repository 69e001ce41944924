"""The same update, run as the recipe's batches or as one micro-batch: the losses of both, update by update.

An update is ``train.update_freq`` batches of ≤ ``batching.batch_tokens`` tokens whatever runs them
(`nmtk.train.micro`); running them as fewer, larger micro-batches changes the order of the additions
only. This trains a model on `benchmarks/gpu.py`'s synthetic WMT-shaped data twice from the same
initialisation, with dropout 0: once as N batches of ≤ T tokens, once as micro-batches of ≤ N·T, and
reports each update's loss and the largest relative difference. One JSON line.

Usage: python benchmarks/micro_batches.py [--model base] [--batches 8] [--tokens 3125] [--updates 10]
       [--precision bf16] [--device cuda]   (on a CPU: --model base --tokens 256 --batches 4 --precision fp32)
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from gpu import synthetic_data, trainer_for


def losses(model: str, work: Path, overrides: list[str], device: str) -> tuple[list[float], str]:
    """Each update's loss per target token, and how the updates ran (the ``update:`` line's end)."""
    import torch

    from nmtk.train.distributed import DistInfo

    trainer = trainer_for(model, work, overrides, torch.device(device), DistInfo())
    line = trainer.plan_micro_batches()
    trainer.step.wrap()
    out: list[float] = []
    step = trainer.train_step

    def recorded(group, *args):  # noqa: ANN001, ANN202 - the Trainer's own signature
        loss, nll, tokens = step(group, *args)
        out.append(float(loss) / tokens)
        return loss, nll, tokens

    trainer.train_step = recorded
    trainer.train()
    trainer.close()
    return out, line


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="base", choices=["base", "big"])
    parser.add_argument("--batches", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=3125)
    parser.add_argument("--updates", type=int, default=10)
    parser.add_argument("--precision", default="bf16")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--pairs", type=int, default=20_000)
    args = parser.parse_args()
    import torch

    common = [f"batching.batch_tokens={args.tokens}", f"train.update_freq={args.batches}", "model.dropout=0.0",
              f"train.precision={args.precision}", "train.compile=false", f"train.max_updates={args.updates}"]
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        synthetic_data(work / "data", args.pairs)
        planned, planned_line = losses(args.model, work, [*common, f"train.micro_batch_tokens={args.tokens}"],
                                       args.device)
        whole_size = f"train.micro_batch_tokens={args.tokens * args.batches}"
        whole, whole_line = losses(args.model, work, [*common, whole_size], args.device)
    worst = max(abs(a - b) / abs(a) for a, b in zip(planned, whole, strict=True))
    print(json.dumps({"benchmark": "micro_batches", "date": time.strftime("%Y-%m-%d"), "model": args.model,
                      "device": torch.cuda.get_device_name() if args.device == "cuda" else args.device,
                      "torch": torch.__version__, "precision": args.precision,
                      "as_batches": {"run": planned_line, "losses": [round(x, 6) for x in planned]},
                      "as_one_micro_batch": {"run": whole_line, "losses": [round(x, 6) for x in whole]},
                      "max_relative_difference": worst}))


if __name__ == "__main__":
    main()
