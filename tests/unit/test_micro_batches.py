"""How a process runs its share of an update (`nmtk.train.micro`): the chooser from a memory model, the
line it prints, the re-cut micro-batches (the update's sentences exactly, within the size), halving."""

from __future__ import annotations

import numpy as np
import pytest

from nmtk.data.batching import BatchingPlan
from nmtk.errors import NmtkError
from nmtk.train.micro import MicroBatches, candidates


def lengths(n: int = 4000, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    src = np.clip(rng.lognormal(3.0, 0.5, n), 1, 120).astype(np.int32)
    return src, np.clip((src * rng.normal(1.05, 0.1, n)).round(), 1, 120).astype(np.int32)


def micro_of(batch_tokens: int = 1000, batches: int = 8, multiple: int = 1) -> MicroBatches:
    src, tgt = lengths()
    return MicroBatches(src, tgt, batch_tokens, batches, multiple)


def memory_model(per_token: float, fixed: float, memory: float):
    """A GPU whose peak grows linearly with the micro-batch's tokens: what `choose`'s probe measures."""
    asked: list[int] = []

    def fits(tokens: int) -> bool:
        asked.append(tokens)
        return fixed + per_token * tokens <= memory

    return fits, asked


def test_the_chooser_takes_the_largest_size_the_memory_holds() -> None:
    micro = micro_of()  # an update: 8 × 1,000 = 8,000 tokens
    fits, asked = memory_model(per_token=1.0, fixed=500, memory=5000)
    micro.choose(None, "cuda", fits)
    assert asked == [8000, 4000] and micro.tokens == 4000 and micro.per_update == 2
    assert micro.line("GPU") == ("run as 2 micro-batches of ≤ 4,000 tokens on this GPU (the largest its memory "
                                 "holds, probed)")
    everything, _ = memory_model(per_token=1.0, fixed=0, memory=1e9)
    micro.choose(None, "cuda", everything)
    assert micro.tokens == 8000 and micro.per_update == 1
    assert micro.line("GPU").startswith("run as 1 micro-batch of ≤ 8,000 tokens")
    nothing, asked = memory_model(per_token=1.0, fixed=1e9, memory=1.0)
    micro.choose(None, "cuda", nothing)  # not even 2,000 fits: the recipe's batches (the memory check says more)
    assert asked == [8000, 4000, 2000] and micro.as_planned


def test_a_cpu_runs_the_plan_and_a_pinned_size_is_taken_as_it_is() -> None:
    micro = micro_of()
    fits, asked = memory_model(per_token=1.0, fixed=0, memory=1e9)
    micro.choose(None, "cpu", fits)
    assert micro.as_planned and not asked
    assert micro.line("CPU") == "run as 8 micro-batches on this CPU (the recipe's batches)"
    micro.choose(3000, "cuda", fits)
    assert micro.tokens == 3000 and not asked and "train.micro_batch_tokens" in micro.line("GPU")
    micro.choose(10**6, "cpu", fits)  # at most the process's share of an update
    assert micro.tokens == 8000
    with pytest.raises(NmtkError, match="smaller than the longest training pair"):
        micro.choose(50, "cuda", fits)


@pytest.mark.parametrize(("tokens", "multiple"), [(8000, 1), (2500, 1), (4000, 8)])
def test_micro_batches_hold_the_updates_sentences_within_their_size(tokens: int, multiple: int) -> None:
    src, tgt = lengths()
    plan = BatchingPlan(src + 1, tgt + 1, 1000, seed=3)
    micro = MicroBatches(src + 1, tgt + 1, 1000, 8, multiple)
    micro.set(tokens, "test")
    for _, group in plan.iterate(0, 0, 0, 1, 8):
        cut = micro.split(group)
        assert sorted(np.concatenate(cut).tolist()) == sorted(np.concatenate(group).tolist())
        for batch in cut:
            padded = [-(-int(x[batch].max()) // multiple) * multiple for x in (src + 1, tgt + 1)]
            assert len(batch) * max(padded) <= tokens
        assert len(cut) <= -(-sum(len(b) for b in group) * max(padded) // tokens) + 8  # packed, not one a sentence


def test_candidates_and_halving_never_go_below_the_longest_pair() -> None:
    assert candidates(25000, 256) == [25000, 12500, 6250, 3125, 1562, 781, 390]
    micro = micro_of(batch_tokens=400, batches=1)
    micro.set(400, "test")
    assert micro.as_planned
    micro.halve()
    assert micro.tokens == max(200, micro.longest) and not micro.as_planned
    while micro.tokens > micro.longest:
        micro.halve()
    with pytest.raises(NmtkError, match="no smaller size can hold"):
        micro.halve()


def test_the_longest_pairs_fill_a_micro_batch() -> None:
    micro = micro_of()
    chosen = micro.longest_pairs(2000)
    longest = np.maximum(micro.src_lengths, micro.tgt_lengths)
    assert len(chosen) == 2000 // micro.longest
    assert longest[chosen].min() >= np.sort(longest)[-len(chosen)]
