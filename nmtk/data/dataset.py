"""Turning batches of pair indices into padded tensors the model consumes."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from nmtk.data.binarized import BinarizedSplit
from nmtk.vocab import BOS_ID, EOS_ID, PAD_ID


@dataclass
class Batch:
    """Source ``x </s>``, decoder input ``<s> y``, decoder target ``y </s>``; all padded with 0."""

    src: Tensor
    tgt_in: Tensor
    tgt_out: Tensor

    @property
    def target_tokens(self) -> int:
        return int(self.tgt_out.ne(PAD_ID).sum())

    def to(self, device: torch.device) -> Batch:
        nb = device.type == "cuda"
        return Batch(self.src.to(device, non_blocking=nb), self.tgt_in.to(device, non_blocking=nb),
                     self.tgt_out.to(device, non_blocking=nb))


def pad_sequences(seqs: list[np.ndarray], prefix: int | None = None, suffix: int | None = None) -> Tensor:
    """Right-padded (len(seqs), longest + extras) int64 tensor, optional token before and after each."""
    extra = (prefix is not None) + (suffix is not None)
    width = max(len(s) for s in seqs) + extra
    out = np.full((len(seqs), width), PAD_ID, dtype=np.int64)
    start = 1 if prefix is not None else 0
    for i, seq in enumerate(seqs):
        if prefix is not None:
            out[i, 0] = prefix
        out[i, start : start + len(seq)] = seq
        if suffix is not None:
            out[i, start + len(seq)] = suffix
    return torch.from_numpy(out)


def collate(split: BinarizedSplit, indices: np.ndarray) -> Batch:
    src = [split.src[i] for i in indices]
    tgt = [split.tgt[i] for i in indices]
    return Batch(pad_sequences(src, suffix=EOS_ID), pad_sequences(tgt, prefix=BOS_ID),
                 pad_sequences(tgt, suffix=EOS_ID))


def split_lengths(split: BinarizedSplit) -> tuple[np.ndarray, np.ndarray]:
    """Tokens per side as batches hold them (int32): source + EOS, target + BOS (or + EOS)."""
    return split.src.lengths + 1, split.tgt.lengths + 1
