"""Token-bucket batching: limits including padding, exact coverage, sharding, mid-epoch resume."""

from __future__ import annotations

import numpy as np
import pytest

from nmtk.data.batching import BatchingPlan, padding_fraction
from nmtk.errors import NmtkError


def lengths(n: int = 5000, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    src = rng.integers(2, 80, n)
    tgt = np.clip(src + rng.integers(-5, 6, n), 2, 90)
    return src, tgt


@pytest.fixture
def plan() -> BatchingPlan:
    src, tgt = lengths()
    return BatchingPlan(src, tgt, batch_tokens=1000, seed=3)


def test_no_batch_exceeds_batch_tokens_including_padding(plan: BatchingPlan) -> None:
    for batch in plan.epoch_batches(0):
        assert len(batch) * plan.src_lengths[batch].max() <= 1000
        assert len(batch) * plan.tgt_lengths[batch].max() <= 1000


def test_every_pair_exactly_once_per_epoch(plan: BatchingPlan) -> None:
    for epoch in (0, 1):
        seen = np.concatenate(plan.epoch_batches(epoch))
        assert np.array_equal(np.sort(seen), np.arange(5000))


def test_order_changes_with_epoch_and_is_reproducible(plan: BatchingPlan) -> None:
    first = [b.tolist() for b in plan.epoch_batches(0)]
    assert first == [b.tolist() for b in plan.epoch_batches(0)]
    assert first != [b.tolist() for b in plan.epoch_batches(1)]


@pytest.mark.parametrize("world", [2, 3, 7])
def test_ranks_are_disjoint_complete_and_equal(plan: BatchingPlan, world: int) -> None:
    shards = [plan.epoch_batches(4, rank, world) for rank in range(world)]
    assert len({len(s) for s in shards}) == 1
    seen = np.concatenate([np.concatenate(s) for s in shards])
    assert len(seen) == 5000 and np.array_equal(np.sort(seen), np.arange(5000))


@pytest.mark.parametrize("group", [1, 3])
def test_resume_mid_epoch_yields_exactly_the_rest(plan: BatchingPlan, group: int) -> None:
    full = list(plan.iterate(2, rank=1, world_size=2, group=group))
    assert all(len(g) == group for _, g in full)  # every update gets a full set of batches
    k = 6 * group
    rest = list(plan.iterate(2, start=k, rank=1, world_size=2, group=group))
    assert [i for i, _ in rest] == list(range(k, len(full) * group, group))
    flat = [b for _, g in full for b in g]
    assert all(np.array_equal(a, b) for a, b in zip(flat[k:], [b for _, g in rest for b in g], strict=True))


def test_max_sentences_and_padding_is_small(plan: BatchingPlan) -> None:
    capped = BatchingPlan(plan.src_lengths, plan.tgt_lengths, batch_tokens=1000, max_sentences=8)
    assert max(len(b) for b in capped.epoch_batches(0)) <= 8
    assert padding_fraction(plan.epoch_batches(0), plan.src_lengths, plan.tgt_lengths) < 0.10


def test_pair_longer_than_batch_tokens_is_a_clear_error() -> None:
    with pytest.raises(NmtkError, match=r"batching.batch_tokens \(50\) is smaller than pair 1 \(60 tokens"):
        BatchingPlan(np.array([5, 60, 7]), np.array([5, 6, 7]), batch_tokens=50)
