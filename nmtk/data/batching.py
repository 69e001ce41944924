"""Token-bucket batching (paper §5.1): batches sized by tokens, padding included, grouped by length.

Batches are formed once per epoch from lengths alone (no token data is touched), so they are cheap
to rebuild anywhere: a resumed run or another rank computes exactly the same list from
``(seed, epoch)``. Every rank receives the same number of batches, disjoint, together covering each
pair exactly once; resuming at batch ``k`` simply starts the list at ``k``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np

from nmtk.errors import NmtkError


@dataclass(frozen=True)
class BatchingPlan:
    """What decides the batches: lengths (tokens per side incl. EOS/BOS) and the recipe's limits."""

    src_lengths: np.ndarray
    tgt_lengths: np.ndarray
    batch_tokens: int
    bucket_width: int = 1
    max_sentences: int | None = None
    seed: int = 1
    pair_ids: np.ndarray | None = None  # a multilingual model's pair of every sentence: each epoch samples
    temperature: float = 1.0  # the pairs with this temperature (`pair_sample`)
    draws: CorpusDraws | None = None  # each sentence's corpus and the corpora's weights (`weighted_sample`)
    _epochs: dict[tuple[int, int], list[np.ndarray]] = field(default_factory=dict, init=False, repr=False,
                                                             compare=False)

    def __post_init__(self) -> None:
        longest = np.maximum(self.src_lengths, self.tgt_lengths)
        too_long = np.flatnonzero(longest > self.batch_tokens)
        if too_long.size:
            i = int(too_long[0])
            raise NmtkError(
                f"batching.batch_tokens ({self.batch_tokens}) is smaller than pair {i} "
                f"({int(longest[i])} tokens, {too_long.size:,} such pairs): raise batch_tokens or lower data.max_len"
            )

    def _order(self, epoch: int) -> np.ndarray:
        """Indices sorted by bucketed target length, then source length; ties broken randomly per epoch.

        The source order alternates direction from one target bucket to the next (a boustrophedon),
        so a batch straddling two buckets joins sentences of similar source length: on Multi30k this
        takes padding from 6.5% to 4.5% at 4,096 tokens.
        """
        if self.draws is not None and self.draws.weighted:
            chosen = weighted_sample(self.draws, self.pair_ids, self.temperature,
                                     np.random.default_rng([self.seed, epoch, 3]))
            if not len(chosen):
                raise NmtkError("data.train: the corpora's weights draw no pair in an epoch: raise them")
            return chosen[self._sorted(self.src_lengths[chosen], self.tgt_lengths[chosen], epoch)]
        if self.pair_ids is not None:
            chosen = pair_sample(self.pair_ids, self.temperature, np.random.default_rng([self.seed, epoch, 2]))
            return chosen[self._sorted(self.src_lengths[chosen], self.tgt_lengths[chosen], epoch)]
        return self._sorted(self.src_lengths, self.tgt_lengths, epoch)

    def _sorted(self, src_lengths: np.ndarray, tgt_lengths: np.ndarray, epoch: int) -> np.ndarray:
        rng = np.random.default_rng([self.seed, epoch, 0])
        noise = rng.random(len(src_lengths))
        w = self.bucket_width
        tgt_bucket, src_bucket = -(-tgt_lengths // w), -(-src_lengths // w)
        snake = np.where(tgt_bucket % 2 == 0, src_bucket, -src_bucket)
        snake = snake - snake.min()
        if max(int(snake.max()), int(tgt_bucket.max())) > np.iinfo(np.uint16).max:
            return np.lexsort((noise, snake, tgt_bucket))
        # lexsort's order, 3x faster at 4.5M pairs: by noise, then stable radix sorts by the 16-bit keys
        order = np.argsort(noise, kind="stable")
        if len(order) < 2**31:
            order = order.astype(np.int32)  # half the memory, same values
        for key in (snake, tgt_bucket):
            order = order[np.argsort(key.astype(np.uint16)[order], kind="stable")]
        return order

    def _fill(self, order: np.ndarray) -> list[np.ndarray]:
        """Greedy: add pairs while n · max_len ≤ batch_tokens holds on both sides.

        Vectorised per batch: a batch starting at pair i holds at most batch_tokens // len(i) pairs, and
        within that window the running maximum tells at once how many fit. 4.5M pairs take ~1 s.
        """
        longest = np.maximum(self.src_lengths[order], self.tgt_lengths[order])  # n·max(s) and n·max(t) ≤ T
        cap = self.max_sentences or len(order)
        ends, start, n = [], 0, len(order)
        while start < n:
            window = min(cap, self.batch_tokens // int(longest[start]), n - start)
            running = np.maximum.accumulate(longest[start : start + window])
            fits = np.arange(1, window + 1) * running <= self.batch_tokens
            start += window if fits.all() else int(np.argmin(fits))
            ends.append(start)
        return np.split(order, ends[:-1])

    @staticmethod
    def _split_to_multiple(batches: list[np.ndarray], world_size: int) -> list[np.ndarray]:
        """Halve the largest batches until the count divides by ``world_size`` (nothing dropped)."""
        while len(batches) % world_size or len(batches) < world_size:
            largest = int(np.argmax([len(b) for b in batches]))
            batch = batches[largest]
            if len(batch) < 2:
                raise NmtkError(f"too few training pairs ({sum(map(len, batches))}) for {world_size} ranks")
            half = len(batch) // 2
            batches[largest : largest + 1] = [batch[:half], batch[half:]]
        return batches

    def epoch_batches(self, epoch: int, rank: int = 0, world_size: int = 1, group: int = 1) -> list[np.ndarray]:
        """This rank's batches of ``epoch`` in training order (arrays of pair indices).

        The batch count is made a multiple of ``world_size · group`` (``group`` = batches accumulated
        per update), so every update of every rank has a full set of batches, and N ranks see
        exactly the batches one rank would see with ``group`` multiplied by N.
        """
        key = (epoch, world_size * group)
        if key not in self._epochs:  # the last epoch's batches are kept: the memory check and the loop share them
            self._epochs.clear()
            batches = self._split_to_multiple(self._fill(self._order(epoch)), world_size * group)
            rng = np.random.default_rng([self.seed, epoch, 1])
            self._epochs[key] = [batches[j] for j in rng.permutation(len(batches))]
        return self._epochs[key][rank::world_size]

    def update_batches(self, epoch: int, start: int, world_size: int = 1, group: int = 1) -> list[np.ndarray]:
        """Every rank's batches of the update that begins at batch ``start`` of each rank's list: what
        all ranks train on together. Each rank can count the update's tokens from it on the CPU, so no
        rank has to ask the others (no all-reduce per update)."""
        everyone = self.epoch_batches(epoch, 0, 1, world_size * group)  # all ranks' batches (the same cache entry)
        return [b for rank in range(world_size) for b in everyone[rank::world_size][start : start + group]]

    def iterate(self, epoch: int, start: int = 0, rank: int = 0, world_size: int = 1,
                group: int = 1) -> Iterator[tuple[int, list[np.ndarray]]]:
        """Yield ``(index_in_epoch, batches)``, ``group`` batches per update, from batch ``start`` on.

        Resuming mid-epoch at ``start`` replays nothing and skips nothing.
        """
        batches = self.epoch_batches(epoch, rank, world_size, group)
        for k in range(start, len(batches), group):
            yield k, batches[k : k + group]


def pair_sample(pair_ids: np.ndarray, temperature: float, rng: np.random.Generator) -> np.ndarray:
    """One epoch's sentences of a multilingual corpus: as many as it has, pair i's share in proportion to
    (n_i / n)^(1/T) (T = 1: each pair once, as one corpus; T = 5: M2M-100's, small pairs repeated and
    large ones cut). A pair's sentences are taken whole as often as its share allows, the rest without
    repetition; the order is the batching's business."""
    counts = np.bincount(pair_ids)
    weights = (counts / counts.sum()) ** (1.0 / temperature)
    wanted = np.round(weights / weights.sum() * counts.sum()).astype(np.int64)
    starts = np.concatenate([[0], np.cumsum(counts)])
    chosen = []
    for pair, (count, want) in enumerate(zip(counts, wanted, strict=True)):  # a loop over pairs, not sentences
        rounds, rest = divmod(int(want), int(count))
        members = np.arange(starts[pair], starts[pair + 1])
        chosen += [members] * rounds + [rng.choice(members, rest, replace=False)]
    return np.concatenate(chosen)


@dataclass(frozen=True)
class CorpusDraws:
    """Each training sentence's corpus, and how often each corpus is drawn per epoch (its recipe ``weight``).

    The sentences of a corpus are consecutive in the training split (`prepare` writes corpora in order;
    a multilingual split is its pairs' in turn), so ``ids`` is non-decreasing."""

    ids: np.ndarray  # (sentences,) int32: index into ``weights``
    weights: tuple[float, ...]

    @property
    def weighted(self) -> bool:
        """Whether any corpus is drawn other than once per epoch (else the plan is the unweighted one)."""
        return any(w != 1.0 for w in self.weights)


def weighted_sample(draws: CorpusDraws, pair_ids: np.ndarray | None, temperature: float,
                    rng: np.random.Generator) -> np.ndarray:
    """One epoch's sentences when corpora are weighted: corpus c's n_c sentences drawn n_c · w_c times,
    each taken whole as often as that allows, the rest without repetition (a new choice each epoch).
    A multilingual model's pairs are then sampled as `pair_sample` does, by their weighted sizes: pair
    p's share of the epoch is in proportion to (N_p / N)^(1/T), N_p = Σ n_c · w_c over its corpora, and
    within a pair its corpora keep their weighted proportions."""
    counts = np.bincount(draws.ids, minlength=len(draws.weights)).astype(np.float64)
    wanted = counts * np.asarray(draws.weights)
    if pair_ids is not None:
        corpus_pair = np.zeros(len(counts), dtype=np.int64)
        corpus_pair[draws.ids] = pair_ids  # every sentence of a corpus is of one pair
        sizes = np.bincount(corpus_pair, weights=wanted)
        shares = (sizes / sizes.sum()) ** (1.0 / temperature)
        pair_wanted = shares / shares.sum() * sizes.sum()
        wanted = wanted * (pair_wanted / np.maximum(sizes, 1e-12))[corpus_pair]
    starts = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    chosen = []
    for corpus, (count, want) in enumerate(zip(counts.astype(np.int64), np.round(wanted).astype(np.int64),
                                              strict=True)):  # a loop over corpora, not sentences
        if count == 0:
            continue
        rounds, rest = divmod(int(want), int(count))
        members = np.arange(starts[corpus], starts[corpus + 1])
        chosen += [members] * rounds + [rng.choice(members, rest, replace=False)]
    return np.concatenate(chosen) if chosen else np.zeros(0, dtype=np.int64)


def padding_fraction(batches: list[np.ndarray], src_lengths: np.ndarray, tgt_lengths: np.ndarray) -> float:
    """Pad tokens / all tokens (both sides) over a list of batches."""
    real = padded = 0
    for batch in batches:
        for lengths in (src_lengths[batch], tgt_lengths[batch]):
            real += int(lengths.sum())
            padded += int(lengths.max()) * len(batch)
    return 1.0 - real / padded if padded else 0.0


def length_batches(lengths: np.ndarray, beam_tokens: int, beam: int) -> list[np.ndarray]:
    """Decoding batches: indices sorted by length, cut so that sentences · longest · beam ≤
    ``beam_tokens`` (at least one each). Both engines' searches use it (no torch here)."""
    order = np.argsort(lengths, kind="stable")
    batches, start = [], 0
    for i in range(1, len(order) + 1):
        if i == len(order) or (i - start + 1) * int(lengths[order[i]]) * beam > beam_tokens:
            batches.append(order[start:i])
            start = i
    return [b for b in batches if len(b)]
