"""Token-bucket batching: limits including padding, exact coverage, sharding, mid-epoch resume."""

from __future__ import annotations

import numpy as np
import pytest

from nmtk.data.batching import BatchingPlan, CorpusDraws, padding_fraction
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


def weighted_plan(weights: tuple[float, ...], pair_ids: np.ndarray | None = None, **kw) -> BatchingPlan:
    """5,000 sentences in three corpora of 2,000, 2,000 and 1,000, in that order."""
    src, tgt = lengths()
    ids = np.repeat(np.arange(3, dtype=np.int32), [2000, 2000, 1000])
    return BatchingPlan(src, tgt, batch_tokens=1000, seed=3, pair_ids=pair_ids,
                        draws=CorpusDraws(ids, weights), **kw)


def test_a_corpus_of_weight_2_is_drawn_twice_per_epoch_and_of_half_once_in_two() -> None:
    plan = weighted_plan((2.0, 1.0, 0.5))
    for epoch in (0, 1):
        drawn = np.bincount(np.concatenate(plan.epoch_batches(epoch)), minlength=5000)
        assert (drawn[:2000] == 2).all() and (drawn[2000:4000] == 1).all()  # every pair, exactly so often
        assert drawn[4000:].sum() == 500 and drawn[4000:].max() == 1  # half of the third, none twice
    halves = [set(np.flatnonzero(np.bincount(np.concatenate(plan.epoch_batches(e)), minlength=5000)[4000:]))
              for e in (0, 1)]
    assert halves[0] != halves[1]  # another half each epoch


def test_weighted_plan_is_the_same_rebuilt_resumed_and_under_two_ranks() -> None:
    plan, again = weighted_plan((2.0, 1.0, 0.5)), weighted_plan((2.0, 1.0, 0.5))
    assert [b.tolist() for b in plan.epoch_batches(3)] == [b.tolist() for b in again.epoch_batches(3)]
    full = list(plan.iterate(3, rank=1, world_size=2))
    rest = list(again.iterate(3, start=5, rank=1, world_size=2))
    assert [b.tolist() for _, g in full[5:] for b in g] == [b.tolist() for _, g in rest for b in g]
    shards = [np.concatenate(plan.epoch_batches(3, rank, 2)) for rank in range(2)]
    one = np.concatenate(plan.epoch_batches(3))
    assert np.array_equal(np.sort(np.concatenate(shards)), np.sort(one))  # two ranks share out one epoch


def test_weights_of_one_are_the_unweighted_plan_and_pairs_keep_their_temperature() -> None:
    src, tgt = lengths()
    plain = BatchingPlan(src, tgt, batch_tokens=1000, seed=3)
    ones = weighted_plan((1.0, 1.0, 1.0))
    assert [b.tolist() for b in plain.epoch_batches(2)] == [b.tolist() for b in ones.epoch_batches(2)]
    pairs = np.repeat(np.array([0, 0, 1]), [2000, 2000, 1000])  # corpora 1-2 are one pair, corpus 3 another
    hot = weighted_plan((1.0, 3.0, 1.0), pair_ids=pairs, temperature=1e6)  # T -> inf: pairs drawn equally
    drawn = np.bincount(np.concatenate(hot.epoch_batches(0)), minlength=5000)
    first, second = drawn[:4000].sum(), drawn[4000:].sum()
    assert abs(first - second) <= 2 and abs(drawn[2000:4000].sum() - 3 * drawn[:2000].sum()) <= 4


def test_weights_that_draw_nothing_are_a_clear_error() -> None:
    with pytest.raises(NmtkError, match="weights draw no pair"):
        weighted_plan((1e-9, 1e-9, 1e-9)).epoch_batches(0)
