"""The trainer's stopping and saving rules, without a model: `StopPolicy` and `CheckpointKeeper`."""

from __future__ import annotations

from pathlib import Path

from nmtk.recipe import TrainSection
from nmtk.rundir import RunDir
from nmtk.train.keeper import CheckpointKeeper
from nmtk.train.state import TrainState
from nmtk.train.stopping import Agreement, StopPolicy, StopReason

NO_FLAGS = Agreement()


def test_limits_in_updates_epochs_and_minutes_across_sessions() -> None:
    policy = StopPolicy(TrainSection(max_updates=100, max_epochs=3, max_minutes=10))
    assert policy.limit(TrainState(update=99, epoch=2, seconds=599)) is None
    assert policy.limit(TrainState(update=100)) == "reached max_updates = 100"
    assert policy.limit(TrainState(epoch=3)) == "reached max_epochs = 3"
    assert policy.limit(TrainState(seconds=600)) == "reached max_minutes = 10"  # resumes included
    assert policy.limit(TrainState(seconds=500), seconds=601) == "reached max_minutes = 10"  # the clock now


def test_the_loop_stops_on_counted_limits_then_on_agreed_flags() -> None:
    policy = StopPolicy(TrainSection(max_updates=100, max_minutes=10))
    state = TrainState(update=50, seconds=100)
    assert policy.flags(None, 100) == NO_FLAGS
    assert policy.flags("SIGTERM", 601, save_due=True) == Agreement(signal=1.0, out_of_time=1.0, save_due=1.0)
    assert policy.reason(state, NO_FLAGS, None) is None
    assert policy.reason(state, Agreement(signal=1.0), "SIGTERM") == "received SIGTERM"
    assert policy.reason(state, Agreement(signal=2.0), None) == "received a signal on another rank"  # all ranks
    assert policy.reason(state, Agreement(out_of_time=1.0), None).kind == "time"
    stopped = policy.reason(TrainState(update=100), Agreement(1.0, 1.0), "SIGINT")
    assert stopped == "reached max_updates = 100" and stopped.kind == "limit"


def test_patience_and_the_validation_before_stopping() -> None:
    policy = StopPolicy(TrainSection(patience=3))
    assert policy.lost_patience(TrainState(bad_validations=2)) is None
    assert "patience" in policy.lost_patience(TrainState(bad_validations=3))
    assert StopPolicy(TrainSection(patience=None)).lost_patience(TrainState(bad_validations=99)) is None
    stale = TrainState(update=120, validated_update=100)
    limit = StopReason("reached max_updates = 120", "limit")
    assert policy.validate_before_stopping(limit, stale)
    assert not policy.validate_before_stopping(StopReason("received SIGTERM", "signal"), stale)  # must be quick
    fresh = TrainState(update=100, validated_update=100)
    assert not policy.validate_before_stopping(limit, fresh)
    assert not StopPolicy(TrainSection(validate_at_end=False)).validate_before_stopping(limit, stale)


def test_which_saves_are_full_and_when_one_is_due(tmp_path: Path) -> None:
    keeper = CheckpointKeeper(RunDir(tmp_path), TrainSection(save_full_every_updates=1000, save_every_updates=500,
                                                             save_every_minutes=10), now=0.0)
    assert keeper.full(2000, final=False) and not keeper.full(2500, final=False) and keeper.full(2500, final=True)
    assert keeper.due_by_updates(1500) and not keeper.due_by_updates(1501)
    assert not keeper.due_by_time(599.0) and keeper.due_by_time(600.0)
    keeper.saved(600.0)
    assert not keeper.due_by_time(700.0)
    assert not CheckpointKeeper(RunDir(tmp_path), TrainSection(save_every_minutes=0), now=0.0).due_by_time(1e9)


def test_keep_last_never_removes_the_newest_full_state(tmp_path: Path) -> None:
    keeper = CheckpointKeeper(RunDir(tmp_path), TrainSection(keep_last=2), now=0.0)
    numbered = [(1000, tmp_path / "checkpoint_1000.pt"), (1100, tmp_path / "checkpoint_1100.params.pt"),
                (1200, tmp_path / "checkpoint_1200.params.pt"), (1300, tmp_path / "checkpoint_1300.params.pt")]
    assert keeper.removable(numbered) == [tmp_path / "checkpoint_1100.params.pt"]  # 1000: what a resume needs
    full = [(n, tmp_path / f"checkpoint_{n}.pt") for n in (1, 2, 3)]
    assert keeper.removable(full) == [tmp_path / "checkpoint_1.pt"]


def test_the_update_size_is_the_recipes_under_any_world_size() -> None:
    """train.update_freq is the whole update's batches: each of N processes takes update_freq / N."""
    import pytest

    from nmtk.errors import NmtkError
    from nmtk.train.distributed import per_process_update_freq, update_size

    assert [per_process_update_freq(8, n) for n in (1, 2, 4, 8)] == [8, 4, 2, 1]
    line = "update: 8 batches of ≤ 3,125 tokens = ≤ 25,000 tokens per side"
    assert update_size(8, 3125, 1) == f"{line} (1 process)"
    assert update_size(8, 3125, 8) == f"{line} (8 processes × 1)"
    assert update_size(1, 1024, 1) == "update: 1 batch of ≤ 1,024 tokens = ≤ 1,024 tokens per side (1 process)"
    with pytest.raises(NmtkError, match="cannot be shared by 16 processes: set a multiple of 16"):
        per_process_update_freq(8, 16)  # fairseq would silently make the update 16 batches per GPU
    with pytest.raises(NmtkError, match=r"update_freq=6\b"):
        per_process_update_freq(7, 3)
