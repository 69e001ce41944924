"""What training reports: the metrics window between log lines, `train.jsonl`, TensorBoard, the live line.

Epochs are counted from 1 in everything a person or a script reads (`train.jsonl`, the console);
`TrainState.epoch` counts from 0 internally.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nmtk.console import JsonlWriter, console
from nmtk.files import write_text_atomic


@dataclass
class MetricsWindow:
    """Sums of one rank's training metrics since the last log line. The loss sums are device tensors
    during training (read once, at the log line: reading them each update would wait for the GPU)."""

    loss: Any = 0.0
    nll: Any = 0.0
    tokens: int = 0
    updates: int = 0
    started: float = field(default_factory=time.monotonic)

    def add(self, loss: Any, nll: Any, tokens: int) -> None:
        self.loss += loss
        self.nll += nll
        self.tokens += tokens
        self.updates += 1

    def reset(self) -> None:
        self.loss = self.nll = 0.0
        self.tokens = self.updates = 0
        self.started = time.monotonic()


def training_record(update: int, epoch: int, sums: tuple[float, float, float], seconds: float, lr: float,
                    minutes: float, skipped: int, micro_batch_tokens: int | None = None) -> dict[str, Any]:
    """One `train.jsonl` line from the window's sums over all ranks (loss, nll, target tokens), and the
    micro-batch size the updates ran at (`nmtk.train.micro`)."""
    loss, nll, tokens = sums
    return {
        "update": update, "epoch": epoch, "loss": round(loss / tokens, 4), "nll": round(nll / tokens, 4),
        "ppl": round(math.exp(min(nll / tokens, 50)), 2), "lr": lr,
        "tgt_tokens_per_s": round(tokens / max(seconds, 1e-9)), "minutes": round(minutes, 3),
        "skipped_updates": skipped, "micro_batch_tokens": micro_batch_tokens,
    }


def truncate_log(path: Path, update: int) -> None:
    """Drop the lines of ``train.jsonl`` written after ``update`` (a run resumed from an earlier
    checkpoint repeats those updates), atomically; a torn last line goes too."""
    if not path.is_file():
        return
    kept = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        if record.get("update", 0) <= update:
            kept.append(line)
    write_text_atomic(path, "".join(f"{line}\n" for line in kept))


class MetricsLog:
    """`train.jsonl` and, when the `tensorboard` package is installed, TensorBoard events (rank 0 only)."""

    def __init__(self, path: Path, tensorboard_dir: Path, enabled: bool) -> None:
        self.jsonl = JsonlWriter(path) if enabled else None
        self.tensorboard = _tensorboard(tensorboard_dir) if enabled else None

    def write(self, record: dict[str, Any], prefix: str, keys: tuple[str, ...]) -> None:
        if self.jsonl:
            self.jsonl.write(record)
        if self.tensorboard:
            for key in keys:
                self.tensorboard.add_scalar(f"{prefix}/{key}", record[key], record["update"])

    def close(self) -> None:
        if self.jsonl:
            self.jsonl.close()
        if self.tensorboard:
            self.tensorboard.close()


def _tensorboard(log_dir: Path) -> Any:
    """A TensorBoard ``SummaryWriter``, or None when the tensorboard package is not installed."""
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:
        return None
    return SummaryWriter(log_dir=str(log_dir))


class Progress:
    """Live display on rank 0: a rich progress bar in a terminal, one line per log interval otherwise."""

    def __init__(self, enabled: bool, total: int | None, completed: int) -> None:
        from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeRemainingColumn
        from rich.progress import Progress as RichProgress

        self.enabled = enabled
        self.live = enabled and console.is_terminal
        self.progress = RichProgress(
            TextColumn("[bold]train"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[stats]}"),
            TimeRemainingColumn(), console=console, disable=not self.live,
        )
        self.task = self.progress.add_task("train", total=total, completed=completed, stats="")

    def __enter__(self) -> Progress:
        self.progress.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.__exit__(*exc)

    def advance(self, update: int) -> None:
        if self.live:
            self.progress.update(self.task, completed=update)

    def show(self, r: dict[str, Any]) -> None:
        text = (f"epoch {r['epoch']} | loss {r['loss']:.3f} | nll {r['nll']:.3f} | ppl {r['ppl']:.2f} | "
                f"lr {r['lr']:.2e} | {r['tgt_tokens_per_s']:,} tok/s")
        if self.live:
            self.progress.update(self.task, stats=text)
        elif self.enabled:
            console.print(f"update {r['update']} | {text} | {r['minutes']:.1f} min")


class CurvesDrawer:
    """RUN/curves.png, redrawn at each validation so that it can be looked at during the run (unless
    ``train.curves`` is off). A picture that cannot be drawn is a warning, once: it never stops training."""

    def __init__(self, run_dir: Path, name: str, enabled: bool = True) -> None:
        self.run_dir, self.name, self.enabled = run_dir, name, enabled
        self.failed = False

    def draw(self) -> None:
        if not self.enabled:
            return
        try:
            from nmtk.pictures import training_curves

            training_curves([self.run_dir], self.run_dir / "curves.png", names=[self.name])
        except Exception as exc:  # noqa: BLE001 - matplotlib missing or broken, a full disk...
            if not self.failed:
                console.print(f"warning: could not draw {self.run_dir / 'curves.png'}: {exc}")
                self.failed = True
