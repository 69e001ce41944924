"""The micro-batch: how one process runs its share of an update, chosen for the device it runs on.

The recipe's update is its contract: ``train.update_freq`` batches of at most ``batching.batch_tokens``
tokens a side (the paper's 25,000 in all), the same sentences in the same updates whatever runs them
(`BatchingPlan`). How a process runs its share is not: a GPU runs a 3,125-token micro-batch waiting
on the host's kernel launches (one H200, base model: 55,627 target tokens/s as 8 × 3,125 against
469,386 as 1 × 25,000, issue 63). So on a GPU nmtk runs each update's sentences as the fewest
micro-batches that fit in its memory (`MicroBatches.choose`, by a probe of the longest pairs at each
size), re-cut from the update's sentences sorted by length (`MicroBatches.split`): the same sentences,
the same loss and gradients (sums over tokens, divided by the update's tokens), only the order of the
additions differs. ``train.micro_batch_tokens`` pins the size; on a CPU the plan's batches run as they
are (nothing was measured faster there). A run resumed on a GPU of another size trains the same
sentences in the same updates: the plan, not the micro-batch, is the data position.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

import numpy as np
import torch

from nmtk.console import console
from nmtk.data.dataset import collate, rounded_up
from nmtk.errors import NmtkError
from nmtk.train.distributed import DistInfo, all_gather_object
from nmtk.train.graphs import GraphedMicroBatches, graphs_pay
from nmtk.train.shapes import ShapeSet

if TYPE_CHECKING:
    from nmtk.data.batching import BatchingPlan
    from nmtk.data.binarized import BinarizedSplit
    from nmtk.data.dataset import Batch
    from nmtk.train.step import UpdateStep

PLANNED = "the recipe's batches"


class MicroBatches:
    """One process's micro-batches: at most ``tokens`` tokens a side each (padding included, lengths
    rounded up to ``multiple`` as the batch tensors are), for its ``batches`` plan batches of at most
    ``batch_tokens`` per update. While ``tokens == batch_tokens`` the plan's batches run as they are."""

    def __init__(self, src_lengths: np.ndarray, tgt_lengths: np.ndarray, batch_tokens: int, batches: int,
                 multiple: int = 1) -> None:
        self.src_lengths, self.tgt_lengths, self.multiple = src_lengths, tgt_lengths, multiple
        self.batch_tokens, self.batches = batch_tokens, batches
        self.tokens, self.why = batch_tokens, PLANNED
        self.longest = int(rounded_up(np.maximum(src_lengths, tgt_lengths), multiple).max()) if len(src_lengths) else 1

    @property
    def as_planned(self) -> bool:
        return self.tokens == self.batch_tokens

    @property
    def per_update(self) -> int:
        """Micro-batches per update (an update whose lengths pack badly may take one more)."""
        return self.batches if self.as_planned else max(1, -(-self.batch_tokens * self.batches // self.tokens))

    def set(self, tokens: int, why: str) -> None:
        self.tokens, self.why = (self.batch_tokens, PLANNED) if tokens == self.batch_tokens else (tokens, why)

    def split(self, group: list[np.ndarray]) -> list[np.ndarray]:
        """One update's plan batches ``group`` re-cut into micro-batches: its sentences sorted by target,
        then source length, filled greedily while sentences × longest stays within ``tokens``."""
        if self.as_planned:
            return group
        indices = np.concatenate(group)
        src = rounded_up(self.src_lengths[indices], self.multiple)
        tgt = rounded_up(self.tgt_lengths[indices], self.multiple)
        order = np.lexsort((src, tgt))
        indices, longest = indices[order], np.maximum(src, tgt)[order]
        return [indices[start:end] for start, end in _fill(longest, self.tokens)]

    def longest_pairs(self, tokens: int) -> np.ndarray:
        """The longest pairs, as many as a micro-batch of ``tokens`` holds: the most memory one can take."""
        longest = np.maximum(self.src_lengths, self.tgt_lengths)
        count = max(1, min(len(longest), tokens // self.longest))
        return np.argpartition(-longest, count - 1)[:count] if count < len(longest) else np.arange(len(longest))

    def choose(self, pinned: int | None, device: str, fits: Callable[[int], bool] | None) -> None:
        """``pinned`` (``train.micro_batch_tokens``, at most the process's share of an update); else on a
        GPU the largest of `candidates` that ``fits(tokens)`` says its memory holds; else the plan's."""
        share = self.batch_tokens * self.batches
        if pinned is not None:
            if pinned < self.longest:
                raise NmtkError(f"train.micro_batch_tokens = {pinned} is smaller than the longest training pair "
                                f"({self.longest} tokens): raise it (or leave it unset)")
            self.set(min(pinned, share), "train.micro_batch_tokens")
            return
        if device == "cuda" and fits is not None:
            for size in candidates(share, self.longest):
                if size <= self.batch_tokens:
                    break
                if fits(size):
                    self.set(size, "the largest its memory holds, probed")
                    return
        self.set(self.batch_tokens, PLANNED)

    def halve(self) -> None:
        """Half the size (an update ran out of memory), never below the longest pair."""
        tokens = max(self.tokens // 2, self.longest)
        if tokens >= self.tokens:
            raise NmtkError(f"out of memory on micro-batches of {self.tokens:,} tokens, which no smaller size can "
                            "hold (the longest pair): lower data.max_len, or use a larger GPU")
        self.set(tokens, "halved after running out of memory")

    def line(self, device: str) -> str:
        """How an update runs here, for the ``update:`` line."""
        count = self.per_update
        many = "es" if count > 1 else ""
        if self.as_planned:
            return f"run as {count} micro-batch{many} on this {device} ({self.why})"
        return f"run as {count} micro-batch{many} of ≤ {self.tokens:,} tokens on this {device} ({self.why})"


def _fill(longest: np.ndarray, tokens: int) -> list[tuple[int, int]]:
    """(start, end) of consecutive runs of ``longest`` (ascending) whose count × maximum ≤ ``tokens``."""
    spans, start, n = [], 0, len(longest)
    while start < n:
        window = min(n - start, max(1, tokens // int(longest[start])))
        running = np.maximum.accumulate(longest[start : start + window])
        fits = np.arange(1, window + 1) * running <= tokens
        if not fits[0]:
            raise NmtkError(f"a micro-batch of {tokens:,} tokens cannot hold a pair of {int(longest[start])} tokens")
        end = start + (window if fits.all() else int(np.argmin(fits)))
        spans.append((start, end))
        start = end
    return spans


def candidates(share: int, longest: int) -> list[int]:
    """Sizes to try, largest first: a process's whole share of an update, then halves of it, down to
    the longest pair."""
    sizes, size = [], share
    while size >= longest:
        sizes.append(size)
        size //= 2
    return sizes or [longest]


def plan(micro: MicroBatches, step: UpdateStep, split: BinarizedSplit, pinned: int | None, info: DistInfo,
         graphed: Iterable[tuple[int, list[np.ndarray]]] | None = None) -> str:
    """Choose how this process runs its share of an update (`MicroBatches.choose`: on a GPU, a probe of
    the longest pairs at each size), the same on every rank (the smallest chosen). Before DDP wraps the
    model: a probe's backward then waits for no other rank. ``graphed``: the first epoch's updates on this
    process, where ``train.cuda_graphs`` is on (`plan_graphs`). Returns how an update runs, for the
    ``update:`` line."""
    device = step.device.type

    def fits(tokens: int) -> bool:
        return step.fits(collate(split, micro.longest_pairs(tokens), micro.multiple))

    micro.choose(pinned, device, fits)
    micro.set(min(all_gather_object(micro.tokens, info)), micro.why)
    line = micro.line("GPU" if device == "cuda" else device.upper())
    if graphed is None or not graphs_pay(step.recipe.train.cuda_graphs, micro.as_planned, micro.tokens):
        return line
    return f"{line}; {plan_graphs(step, micro, (group for _, group in graphed))}"


def plan_graphs(step: UpdateStep, micro: MicroBatches, groups: Iterable[list[np.ndarray]]) -> str:
    """Choose the shapes of ``micro``'s micro-batches (`ShapeSet.chosen`, from the training lengths) and
    hand ``step``'s updates to a `GraphedMicroBatches` over them; the line that says how many shapes
    and how much padding they cost over ``groups`` (an epoch's updates on this process)."""
    shapes = ShapeSet.chosen(micro.src_lengths, micro.tgt_lengths, micro.tokens, step.recipe.train.graph_shapes,
                             micro.multiple, rounded_batches=not micro.as_planned)
    dims = []
    for group in groups:
        for indices in micro.split(group):
            src, tgt = micro.src_lengths[indices], micro.tgt_lengths[indices]
            longest = (int(rounded_up(side.max(), micro.multiple)) for side in (src, tgt))
            dims.append((len(indices), *longest, int(src.sum() + tgt.sum())))
    step.graphs = GraphedMicroBatches(step, shapes)
    return shapes.line(shapes.padding(dims))


def largest(micro: MicroBatches, batching: BatchingPlan) -> np.ndarray:
    """The largest micro-batch an update runs: the plan's largest batch, or the longest pairs at the size."""
    if micro.as_planned:
        return max(batching.epoch_batches(0), key=lambda b: len(b) * int(micro.tgt_lengths[b].max()))
    return micro.longest_pairs(micro.tokens)


def run_update(micro: MicroBatches, step: UpdateStep, split: BinarizedSplit, group: list[np.ndarray],
               total_tokens: float, batches: list[Batch] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """`UpdateStep.run` on the micro-batches of ``group`` (``batches``: already collated). One process
    on a GPU that runs out of memory halves its micro-batches (`MicroBatches.halve`, one warning) and
    runs the update again from zero gradients; several processes cannot (the others would wait)."""
    while True:
        batches = batches or [collate(split, indices, micro.multiple) for indices in micro.split(group)]
        try:
            return step.run(batches, total_tokens)
        except torch.OutOfMemoryError:
            if step.graphs is not None:
                raise NmtkError(f"out of memory in update {step.state.update + 1} with train.cuda_graphs: set "
                                "train.micro_batch_tokens lower (or cuda_graphs = false)") from None
            if step.info.enabled or step.device.type != "cuda":
                raise
            step.optimizer.zero_grad(set_to_none=True)
            torch.cuda.empty_cache()
            micro.halve()
            console.print(f"warning: update {step.state.update + 1} ran out of memory: {micro.line('GPU')}")
            batches = None
