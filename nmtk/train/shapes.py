"""A bounded set of micro-batch shapes, chosen from the data's lengths: what a captured CUDA graph needs.

A CUDA graph replays the kernels it recorded, on the tensors it recorded them with: one graph per
shape. Token-bucket batches come in as many shapes as there are lengths (and row counts), so each
micro-batch is padded to one of a few shapes ``(rows, length)``, both sides padded to ``length``,
its rows to ``rows`` (MLPerf's RNN-T captures ~50 such graphs; nmtk a handful).

Which lengths: a batch of sentences up to ``L`` tokens long holds at most ``tokens // L`` of them
(`nmtk.data.batching`: n × longest ≤ batch_tokens), so the shape of a group of lengths (lo, hi] must
hold ``tokens // lo`` rows of ``hi`` positions: ``tokens × hi / lo`` in all. `choose_bounds` picks the
groups that minimise the data's tokens times that ratio (a dynamic programme over the histogram of
pair lengths), each ratio at most ``max_ratio`` (a shape's memory at most that many micro-batches').

Padding changes no loss: padded source positions are masked; padded target positions come after
every real one (the decoder is causal) and their targets are ``<pad>``, which the loss skips; padded
rows repeat the batch's first sentence with ``<pad>`` targets, so every attention row sees a real
key (a row of padding alone would be a softmax over nothing: NaN) and adds exactly zero to the loss
and to every gradient.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from nmtk.data.dataset import Batch, rounded_up
from nmtk.errors import NmtkError
from nmtk.vocab import PAD_ID


@dataclass(frozen=True)
class Shape:
    """A micro-batch's padded shape: ``rows`` sentences of ``length`` positions a side."""

    rows: int
    length: int

    @property
    def tokens(self) -> int:
        return self.rows * self.length


def length_histogram(src_lengths: np.ndarray, tgt_lengths: np.ndarray, multiple: int = 1) -> np.ndarray:
    """Pairs per length, ``counts[L]`` = pairs whose longer side (as batches hold it, rounded up to
    ``multiple``) is ``L`` tokens."""
    longest = rounded_up(np.maximum(src_lengths, tgt_lengths).astype(np.int64), multiple)
    return np.bincount(longest) if len(longest) else np.zeros(1, dtype=np.int64)


def choose_bounds(counts: np.ndarray, groups: int, max_ratio: float = 2.0) -> list[tuple[int, int]]:
    """At most ``groups`` length groups ``(lo, hi)`` covering every length with pairs (``counts``, from
    `length_histogram`): ``lo`` the shortest such length in the group, ``hi`` the longest. Minimises
    Σ tokens(group) × hi / lo, the tokens the shapes hold for the data's (see the module), with
    hi / lo ≤ ``max_ratio`` (as few more groups as that needs, if ``groups`` cannot)."""
    lengths = np.flatnonzero(counts)
    if not len(lengths):
        raise NmtkError("no training pairs to choose micro-batch shapes for")
    weight = np.cumsum(np.concatenate([[0.0], counts[lengths] * lengths.astype(np.float64)]))
    n = len(lengths)
    # cost[i, j]: lengths[i..j] as one group (inf where its ratio exceeds max_ratio)
    i, j = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
    ratio = lengths[j] / lengths[i]
    cost = np.where((j >= i) & (ratio <= max_ratio), (weight[j + 1] - weight[i]) * ratio, np.inf)
    needed = _fewest_groups(lengths, max_ratio)
    best, cut = _partition(cost, max(groups, needed))
    return [(int(lengths[a]), int(lengths[b])) for a, b in _groups(cut, n, best)]


def _fewest_groups(lengths: np.ndarray, max_ratio: float) -> int:
    """Groups that greedy covering needs when each may span at most ``max_ratio``: a lower bound."""
    count, start = 0, 0
    while start < len(lengths):
        start = int(np.searchsorted(lengths, lengths[start] * max_ratio, side="right"))
        count += 1
    return count


def _partition(cost: np.ndarray, groups: int) -> tuple[np.ndarray, np.ndarray]:
    """best[k, j]: least cost of lengths 0..j in k+1 groups; cut[k, j]: where its last group starts."""
    n = cost.shape[0]
    best = np.full((groups, n), np.inf)
    cut = np.zeros((groups, n), dtype=np.int64)
    best[0] = cost[0]
    for k in range(1, groups):
        # the last group lengths[i..j] after k groups ending at i-1: best[k-1, i-1] + cost[i, j]
        total = np.concatenate([[np.inf], best[k - 1, :-1]])[:, None] + cost
        cut[k] = np.argmin(total, axis=0)
        best[k] = total[cut[k], np.arange(n)]
    return best, cut


def _groups(cut: np.ndarray, n: int, best: np.ndarray) -> list[tuple[int, int]]:
    """The optimal groups as (first, last) indices, from `_partition`'s tables."""
    k = int(np.argmin(best[:, n - 1]))
    spans, end = [], n - 1
    while k >= 0:
        start = int(cut[k, end]) if k > 0 else 0
        spans.append((start, end))
        end, k = start - 1, k - 1
    return spans[::-1]


class ShapeSet:
    """The shapes of micro-batches of ``tokens`` tokens over length groups ``bounds`` (`choose_bounds`):
    ``Shape(tokens // lo, hi)`` each; `shape_for` names the smallest that holds a batch, `pad_into` fills it."""

    def __init__(self, bounds: list[tuple[int, int]], tokens: int, shortest: list[int] | None = None) -> None:
        lows = shortest or [lo for lo, _ in bounds]  # the shortest length a batch of each group can hold
        self.shapes = [Shape(max(1, tokens // low), hi) for low, (_, hi) in zip(lows, bounds, strict=True)]

    @classmethod
    def chosen(cls, src_lengths: np.ndarray, tgt_lengths: np.ndarray, tokens: int, groups: int,
               multiple: int = 1, max_ratio: float = 2.0, rounded_batches: bool = True) -> ShapeSet:
        """The shapes for training pairs of these lengths in micro-batches of ``tokens`` tokens.

        ``rounded_batches``: whether the batcher counts a pair's length rounded up to ``multiple`` (nmtk's
        micro-batches) or as it is (the plan's token buckets, n × longest ≤ tokens): then a batch of a group
        may hold ``tokens //`` its shortest unrounded length rows, more than ``tokens // lo``, and the
        shape's rows are that (on a GPU, where ``multiple`` is 8, most such batches fitted no shape)."""
        counts = length_histogram(src_lengths, tgt_lengths, multiple)
        bounds = choose_bounds(counts, groups, max_ratio)
        if rounded_batches or multiple == 1:
            return cls(bounds, tokens)
        longest = np.maximum(src_lengths, tgt_lengths).astype(np.int64)
        held = rounded_up(longest, multiple)
        return cls(bounds, tokens, [int(longest[(held >= lo) & (held <= hi)].min()) for lo, hi in bounds])

    def shape_for(self, rows: int, length: int) -> Shape | None:
        """The smallest shape holding ``rows`` sentences of ``length`` positions (None: none does)."""
        fitting = [s for s in self.shapes if s.rows >= rows and s.length >= length]
        return min(fitting, key=lambda s: s.tokens) if fitting else None

    def padding(self, batches: list[tuple[int, int, int, int]]) -> float:
        """Share of the shapes' tokens that is padding, for micro-batches given as (rows, src length,
        tgt length, real tokens of both sides) (a batch no shape holds counts as it is)."""
        real = held = 0
        for rows, src, tgt, tokens in batches:
            shape = self.shape_for(rows, max(src, tgt))
            real += tokens
            held += 2 * shape.tokens if shape else rows * (src + tgt)
        return 1.0 - real / held if held else 0.0

    def line(self, padding: float) -> str:
        """For the ``update:`` line."""
        return f"{len(self.shapes)} shape{'s' if len(self.shapes) > 1 else ''}, padding {100 * padding:.1f} % of tokens"


def pad_into(batch: Batch, src: torch.Tensor, tgt_in: torch.Tensor, tgt_out: torch.Tensor) -> None:
    """Write ``batch`` (on the host, pinned on a GPU's way, or already on the device) into a shape's
    buffers (rows, length), in place, on their device, without waiting:
    the real sentences at the top left, ``<pad>`` after them, the rows below them copies of the first
    sentence whose targets are all ``<pad>`` (see the module: they add nothing to loss or gradients)."""
    rows, s, t = batch.src.size(0), batch.src.size(1), batch.tgt_in.size(1)
    if rows > src.size(0) or max(s, t) > src.size(1):
        raise ValueError(f"a batch of {rows} × {max(s, t)} does not fit a shape of {src.size(0)} × {src.size(1)}")
    for buffer, part in ((src, batch.src), (tgt_in, batch.tgt_in)):
        buffer.fill_(PAD_ID)
        buffer[:rows, : part.size(1)].copy_(part, non_blocking=True)
        buffer[rows:] = buffer[0]
    tgt_out.fill_(PAD_ID)
    tgt_out[:rows, : batch.tgt_out.size(1)].copy_(batch.tgt_out, non_blocking=True)
