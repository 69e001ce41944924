"""Which checkpoints a run writes and keeps: a table of rules beside the loop, like fairseq's
``checkpoint_conds``, each testable without training.

Written at every save: ``checkpoint_<N>.pt`` (the full state) or, between ``save_full_every_updates``,
``checkpoint_<N>.params.pt`` (the parameters, for averaging); ``checkpoint_last.pt`` links the newest
full state, ``checkpoint_best.pt`` the best validation. Kept: the last ``keep_last`` numbered files,
and always the newest full state (a resume starts from it, however many snapshots came after).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nmtk.checkpoint import link_atomic, save_atomic

if TYPE_CHECKING:
    from nmtk.recipe import TrainSection
    from nmtk.rundir import RunDir


class CheckpointKeeper:
    """The saving rules of ``[train]`` for one run directory; ``now`` is the caller's clock (minutes
    since a save are measured on it)."""

    def __init__(self, run: RunDir, train: TrainSection, now: float) -> None:
        self.run, self.train = run, train
        self.last_save = now

    def full(self, update: int, final: bool) -> bool:
        """Whether the save at ``update`` holds the whole training state (the last one always does)."""
        every = self.train.save_full_every_updates
        return final or every is None or update % every == 0

    def due_by_updates(self, update: int) -> bool:
        every = self.train.save_every_updates
        return every is not None and update % every == 0

    def due_by_time(self, now: float) -> bool:
        """``save_every_minutes`` since the last save (rank-local: the caller makes the ranks agree)."""
        minutes = self.train.save_every_minutes
        return minutes > 0 and (now - self.last_save) / 60 >= minutes

    def saved(self, now: float) -> None:
        self.last_save = now

    def write(self, state: dict[str, Any], update: int, best: bool, full: bool,
              ready: Callable[[], None] = lambda: None) -> Path:
        """Write one checkpoint (atomically), link ``last``/``best`` to it, and remove what is no longer
        kept; returns its path. Runs on the background writer's thread, after ``ready`` returns (the
        state's copy to the host is complete: `SnapshotBuffers.snapshot`)."""
        ready()
        path = self.run.checkpoint(update, full)
        save_atomic(state, path)
        if full:  # checkpoint_last.pt is what a resume starts from: always a full state
            link_atomic(path, self.run.last)
        if best:
            link_atomic(path, self.run.best)
        for old in self.removable(self.run.numbered()):  # one listing of the folder per save
            old.unlink(missing_ok=True)
        return path

    def removable(self, numbered: list[tuple[int, Path]]) -> list[Path]:
        """Of the run's numbered checkpoints (oldest first), those beyond ``keep_last``, but never the
        newest full state (the one a resume starts from)."""
        full = [path for _, path in numbered if not path.name.endswith(".params.pt")]
        resume = full[-1] if full else None
        return [path for _, path in numbered[: -self.train.keep_last] if path != resume]
