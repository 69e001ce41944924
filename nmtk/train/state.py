"""Where training is: the state saved in every checkpoint and read back on resume."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class TrainState:
    """Where training is; saved in every checkpoint."""

    update: int = 0
    epoch: int = 0  # current epoch, from 0 (shown from 1)
    batch: int = 0  # next batch of this rank within the epoch
    seconds: float = 0.0  # training time of all sessions so far
    best_bleu: float | None = None
    bad_validations: int = 0
    skipped_updates: int = 0  # fp16 overflows
    stop_reason: str | None = None
    validated_update: int = 0  # the update of the last validation (0: none yet)
    stage: int = 0  # the curriculum's stage (train.stages), from 0
    stage_update: int = 0  # the update it began after
    stage_epochs: int = 0  # its epochs trained to the end
