"""Decoding many sentences: length-sorted batches of at most ``max_tokens``, results in input order."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from nmtk.data.dataset import pad_sequences
from nmtk.decode.beam import Hypothesis, SearchConfig, beam_search
from nmtk.device import autocast_for
from nmtk.model import Transformer
from nmtk.vocab import EOS_ID


def length_batches(lengths: np.ndarray, max_tokens: int, beam: int) -> list[np.ndarray]:
    """Indices sorted by length, cut so that sentences · longest · beam ≤ max_tokens (at least one each)."""
    order = np.argsort(lengths, kind="stable")
    batches, start = [], 0
    for i in range(1, len(order) + 1):
        if i == len(order) or (i - start + 1) * int(lengths[order[i]]) * beam > max_tokens:
            batches.append(order[start:i])
            start = i
    return [b for b in batches if len(b)]


def decode_ids(model: Transformer, sources: Sequence[Sequence[int]], cfg: SearchConfig, *,
               max_tokens: int = 8192, device: torch.device | None = None,
               precision: str = "fp32") -> list[list[Hypothesis]]:
    """Hypotheses for each source (ids without EOS), in input order."""
    device = device or next(model.parameters()).device
    lengths = np.fromiter((len(s) + 1 for s in sources), dtype=np.int64, count=len(sources))
    results: list[list[Hypothesis]] = [[] for _ in sources]
    was_training = model.training
    model.eval()
    try:
        for batch in length_batches(lengths, max_tokens, cfg.beam):
            src = pad_sequences([np.asarray(sources[i], dtype=np.int64) for i in batch], suffix=EOS_ID).to(device)
            with autocast_for(device, precision):
                hyps = beam_search(model, src, cfg)
            for i, h in zip(batch, hyps, strict=True):
                results[i] = h
    finally:
        model.train(was_training)
    return results
