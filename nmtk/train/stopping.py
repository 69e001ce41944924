"""When training stops: the run's limits, patience and signals, as pure decisions on the training state.

Nothing here trains, reads a clock of its own or talks to other ranks: the trainer passes the time
and, on several ranks, makes the rank-local flags (`StopPolicy.flags`) agree before `StopPolicy.reason`
turns them into a reason. So every rule is tested without a model, and a stop is the same on every rank.
"""

from __future__ import annotations

import signal
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

if TYPE_CHECKING:
    from nmtk.recipe import TrainSection
    from nmtk.train.state import TrainState


class StopSignal:
    """SIGINT/SIGTERM set a flag; the loop finishes the update, saves, and exits cleanly."""

    def __init__(self) -> None:
        self.received: str | None = None
        self._old: dict[int, Any] = {}

    def __enter__(self) -> StopSignal:
        for sig in (signal.SIGINT, signal.SIGTERM):
            self._old[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum: int, frame: Any) -> None:
        self.received = signal.Signals(signum).name

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._old.items():
            signal.signal(sig, handler)


class StopReason(str):
    """Why training stops, as the run's summary and state say it (plain text), and of which ``kind``:
    ``limit`` (updates, epochs), ``stage`` (the curriculum's last stage ended), ``time`` (max_minutes),
    ``patience`` or ``signal``. Decisions test the
    kind, never the text."""

    kind: str

    def __new__(cls, text: str, kind: Literal["limit", "stage", "time", "patience", "signal"]) -> StopReason:
        made = super().__new__(cls, text)
        made.kind = kind
        return made


class Agreement(NamedTuple):
    """What every rank must decide alike, as numbers summed over the ranks in one all-reduce: a signal
    received, the time limit passed, a timed save due (on one rank, its own flags)."""

    signal: float = 0.0
    out_of_time: float = 0.0
    save_due: float = 0.0


class StopPolicy:
    """The recipe's ``[train]`` stopping rules: ``max_updates``, ``max_epochs``, ``max_minutes`` (training
    time of every session, resumes included), ``patience`` (validations without a better BLEU), signals."""

    def __init__(self, train: TrainSection, ended: Callable[[TrainState], StopReason | None] | None = None) -> None:
        self.train = train
        self.ended = ended  # the curriculum's end (`Curriculum.ended`: a last stage that has one), counted too

    def limit(self, state: TrainState, seconds: float | None = None) -> StopReason | None:
        """The limit ``state`` has reached, or None; ``seconds``: the training time now (default: the
        state's). What a finished run is told when trained again."""
        if self.out_of_time(state.seconds if seconds is None else seconds):
            return self._counted(state) or self._time()
        return self._counted(state)

    def _counted(self, state: TrainState) -> StopReason | None:
        """The limits counted in updates and epochs: the same on every rank without agreeing."""
        t = self.train
        if t.max_updates is not None and state.update >= t.max_updates:
            return StopReason(f"reached max_updates = {t.max_updates}", "limit")
        if t.max_epochs is not None and state.epoch >= t.max_epochs:
            return StopReason(f"reached max_epochs = {t.max_epochs}", "limit")
        return self.ended(state) if self.ended is not None else None

    def _time(self) -> StopReason:
        return StopReason(f"reached max_minutes = {self.train.max_minutes:g}", "time")

    def out_of_time(self, seconds: float) -> bool:
        return self.train.max_minutes is not None and seconds / 60 >= self.train.max_minutes

    def lost_patience(self, state: TrainState) -> StopReason | None:
        patience = self.train.patience
        if patience is not None and state.bad_validations >= patience:
            return StopReason(f"no BLEU improvement in {patience} validations (patience)", "patience")
        return None

    def flags(self, received: str | None, seconds: float, save_due: bool = False) -> Agreement:
        """What this rank alone knows, to agree on across ranks: a signal, the clock, a timed save."""
        return Agreement(float(received is not None), float(self.out_of_time(seconds)), float(save_due))

    def reason(self, state: TrainState, agreed: Agreement, received: str | None) -> StopReason | None:
        """Why to stop now, or None: the counted limits first, then the ``agreed`` flags (`flags`,
        summed over the ranks)."""
        if reason := self._counted(state):
            return reason
        if agreed.signal:
            return StopReason(f"received {received or 'a signal on another rank'}", "signal")
        if agreed.out_of_time:
            return self._time()
        return None

    def validate_before_stopping(self, reason: StopReason, state: TrainState) -> bool:
        """Whether to validate once more as training stops (``validate_at_end``): when the last
        validation is older than the last update, so that a run stopped by a limit before its first
        validation still gets its BLEU, best checkpoint and curves. Not after a signal: a preempted
        job must be quick."""
        return self.train.validate_at_end and reason.kind != "signal" and state.validated_update < state.update
