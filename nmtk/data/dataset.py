"""Turning batches of pair indices into padded tensors the model consumes."""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch
from torch import Tensor

from nmtk import interrupts
from nmtk.data.batching import CorpusDraws
from nmtk.data.binarized import BinarizedSplit, PairSplits
from nmtk.errors import NmtkError
from nmtk.manifest import PreparedData
from nmtk.recipe import Recipe
from nmtk.vocab import BOS_ID, EOS_ID, PAD_ID


@dataclass
class Batch:
    """Source ``x </s>``, decoder input ``<s> y``, decoder target ``y </s>``; all padded with 0.

    What the training step needs to know about the batch is known here, on the CPU, from the
    lengths: whether any source is padded (the encoder then needs a mask), how many target tokens
    it holds, and (kept by `to`) each source's first token: a multilingual model's target-language tag,
    by which the loss head groups the batch. Asking the device tensors instead would make the host wait
    for the GPU every step.
    """

    src: Tensor
    tgt_in: Tensor
    tgt_out: Tensor
    src_padded: bool | None = None  # None: not known (ask the tensor)
    target_count: int | None = None
    src_first: np.ndarray | None = None  # (B,) each source's first token (a target-language tag), on the host

    @property
    def target_tokens(self) -> int:
        return self.target_count if self.target_count is not None else int(self.tgt_out.ne(PAD_ID).sum())

    def pin_memory(self) -> Batch:
        """The same batch in page-locked host memory, so that a copy to the GPU can overlap compute."""
        return replace(self, src=self.src.pin_memory(), tgt_in=self.tgt_in.pin_memory(),
                       tgt_out=self.tgt_out.pin_memory())

    def to(self, device: torch.device) -> Batch:
        nb = device.type == "cuda"  # asynchronous from pinned memory; a plain copy otherwise
        first = self.src.numpy()[:, 0] if self.src_first is None and self.src.device.type == "cpu" else self.src_first
        return replace(self, src=self.src.to(device, non_blocking=nb), tgt_in=self.tgt_in.to(device, non_blocking=nb),
                       tgt_out=self.tgt_out.to(device, non_blocking=nb), src_first=first)


def pad_multiple(device: torch.device) -> int:
    """Lengths a batch is padded to a multiple of: 8 on a GPU (tensor-core tiles, and the fewer distinct
    shapes a compiled model sees, the fewer recompilations), 1 on a CPU, where every padded position
    is computed for nothing (Multi30k's sentences are ~13 tokens: 8 would add a quarter)."""
    return 8 if device.type == "cuda" else 1


def rounded_up(lengths: np.ndarray, multiple: int) -> np.ndarray:
    """``lengths`` as batches hold them: rounded up to a multiple of ``multiple`` (`pad_multiple`)."""
    return -(-lengths // multiple) * multiple if multiple > 1 else lengths


def pad_sequences(seqs: list[np.ndarray], prefix: int | None = None, suffix: int | None = None,
                  multiple: int = 1) -> Tensor:
    """Right-padded (len(seqs), longest + extras, rounded up to ``multiple``) int64 tensor, optional
    token before and after each. Padding is masked everywhere, so ``multiple`` changes no output."""
    extra = (prefix is not None) + (suffix is not None)
    width = -(-(max(len(s) for s in seqs) + extra) // multiple) * multiple
    out = np.full((len(seqs), width), PAD_ID, dtype=np.int64)
    start = 1 if prefix is not None else 0
    for i, seq in enumerate(seqs):
        if prefix is not None:
            out[i, 0] = prefix
        out[i, start : start + len(seq)] = seq
        if suffix is not None:
            out[i, start + len(seq)] = suffix
    return torch.from_numpy(out)


def collate(split: BinarizedSplit, indices: np.ndarray, multiple: int = 1) -> Batch:
    """The pairs ``indices`` as a batch, each side's length padded up to a multiple of ``multiple``."""
    src = [split.src[i] for i in indices]
    tgt = [split.tgt[i] for i in indices]
    src_lengths = [len(s) for s in src]
    src_ids = pad_sequences(src, suffix=EOS_ID, multiple=multiple)
    return Batch(src_ids, pad_sequences(tgt, prefix=BOS_ID, multiple=multiple),
                 pad_sequences(tgt, suffix=EOS_ID, multiple=multiple),
                 src_padded=min(src_lengths) != max(src_lengths) or src_ids.shape[1] > max(src_lengths) + 1,
                 target_count=sum(len(t) + 1 for t in tgt))


def training_split(data: PreparedData) -> tuple[BinarizedSplit | PairSplits, np.ndarray | None]:
    """The prepared training data, and a multilingual model's pair of every sentence (None for one pair)."""
    manifest = data.manifest()
    if manifest.pairs:
        split = PairSplits(data, "train", manifest.language_pairs())
        return split, split.pair_ids
    return BinarizedSplit(data, "train", manifest.language_pairs()[0]), None


def corpus_draws(data: PreparedData, recipe: Recipe, sentences: int) -> CorpusDraws | None:
    """Each training sentence's corpus and the recipe's corpus weights (None: every weight 1, the
    unweighted plan). The prepared data records each corpus's kept pairs in order; the recipe's
    corpora must be those, by name."""
    corpora = [c for pair in recipe.data.language_pairs() for c in pair.train]
    if all(c.weight == 1.0 for c in corpora):
        return None
    return CorpusDraws(corpus_ids(data, [c.name for c in corpora], sentences, "weight corpora"),
                       tuple(c.weight for c in corpora))


def corpus_ids(data: PreparedData, names: list[str], sentences: int, purpose: str) -> np.ndarray:
    """Each training sentence's corpus (int32 index into ``names``, the recipe's training corpora), from
    what `prepare` recorded; one line naming the data where its record is not those corpora (``purpose``:
    what the recipe needs them for)."""
    manifest = data.manifest()
    recorded = [c for pair in manifest.language_pairs() for c in manifest.training_corpora(pair)]
    found, kept = [c["name"].rpartition("/")[2] for c in recorded], [c["kept"] for c in recorded]
    if found != names or sum(kept) != sentences:
        raise NmtkError(f"{data}: its record of each training corpus's pairs ({', '.join(found) or 'none'}) is not "
                        f"the recipe's corpora; prepare it again (nmtk prepare --force) to {purpose}")
    return np.repeat(np.arange(len(recorded), dtype=np.int32), kept)


def target_pieces(data: PreparedData, targets: list[str]) -> tuple[list[int], list[np.ndarray]]:
    """Per target language: its tag's id and the ids its training targets hold (what a model with
    per-language output vocabularies may produce, `nmtk.model.languages`)."""
    manifest = data.manifest()
    if manifest.tag_style != "opus-mt" or not all(t in manifest.tags for t in targets):
        raise NmtkError('model.output_vocab = "per-target" needs the target\'s tag before each source '
                        f"(this data: {manifest.tag_style} tags for {sorted(manifest.tags)})")
    produced = []
    for target in targets:
        splits = [BinarizedSplit(data, manifest.training_split(p), p)
                  for p in manifest.language_pairs() if p.target == target]
        produced.append(np.unique(np.concatenate([np.unique(s.tgt.ids) for s in splits])))
    return [manifest.tags[t] for t in targets], produced


def split_lengths(split: BinarizedSplit) -> tuple[np.ndarray, np.ndarray]:
    """Tokens per side as batches hold them (int32): source + EOS, target + BOS (or + EOS)."""
    return split.src.lengths + 1, split.tgt.lengths + 1


class Prefetcher:
    """Collates the next updates' batches on a background thread, ``ahead`` updates in advance, in
    pinned memory when a GPU will read them (so ``Batch.to`` copies asynchronously).

    Wraps the batching plan's ``(index, group)`` iterator and yields ``(index, group, batches)`` in the
    same order: what is trained, and so the resume position, does not change. The thread stops when
    the iterator is exhausted or `close` is called (an early stop mid-epoch).
    """

    def __init__(self, split: BinarizedSplit, groups: Iterator[tuple[int, list[np.ndarray]]], ahead: int = 2,
                 pin: bool = False, multiple: int = 1,
                 cut: Callable[[list[np.ndarray]], list[np.ndarray]] | None = None) -> None:
        """``cut``: an update's plan batches as the micro-batches to collate (`MicroBatches.split`;
        None: as they are). The group yielded is the plan's, for the data position."""
        self.split, self.groups, self.pin, self.ahead, self.multiple = split, groups, pin, ahead, multiple
        self.cut = cut or (lambda group: group)
        self.queue: queue.Queue = queue.Queue(maxsize=max(ahead, 1))
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._fill, name="nmtk-prefetch", daemon=True)
        if ahead > 0:  # 0: collated in the training loop itself, when asked (no thread)
            self.thread.start()

    @classmethod
    def on(cls, device: torch.device, split: BinarizedSplit, groups: Iterator[tuple[int, list[np.ndarray]]],
           ahead: int | None, cut: Callable[[list[np.ndarray]], list[np.ndarray]] | None = None) -> Prefetcher:
        """The prefetcher training on ``device`` uses: ``ahead`` updates collated in advance (None: 2 on a
        GPU, in pinned memory; 0 on a CPU, where a thread would take a core from the computation)."""
        cuda = device.type == "cuda"
        return cls(split, groups, (2 if cuda else 0) if ahead is None else ahead, pin=cuda,
                   multiple=pad_multiple(device), cut=cut)

    def _fill(self) -> None:
        try:
            for k, group in self.groups:
                batches = [collate(self.split, indices, self.multiple) for indices in self.cut(group)]
                if self.pin:
                    batches = [b.pin_memory() for b in batches]
                if not self._put((k, group, batches)):
                    return
            self._put(None)
        except BaseException as exc:  # handed to the training loop, raised there
            self._put(exc)

    def _put(self, item: Any) -> bool:
        while not self.stopped.is_set():
            try:
                self.queue.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def __iter__(self) -> Iterator[tuple[int, list[np.ndarray], list[Batch]]]:
        if self.ahead == 0:
            for k, group in self.groups:
                yield k, group, [collate(self.split, indices, self.multiple) for indices in self.cut(group)]
            return
        while (item := interrupts.get(self.queue)) is not None:  # a signal's handler runs while it waits
            if isinstance(item, BaseException):
                raise item
            yield item

    def close(self) -> None:
        self.stopped.set()
        if self.thread.is_alive():
            interrupts.join(self.thread)
