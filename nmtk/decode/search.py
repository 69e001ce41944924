"""Decoding many sentences: length-sorted batches of at most ``max_tokens``, results in input order."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import torch
from torch import Tensor

from nmtk.data.dataset import pad_sequences
from nmtk.decode.beam import beam_search
from nmtk.decode.config import Hypothesis, SearchConfig, length_batches
from nmtk.decode.contract import Decoder
from nmtk.device import autocast_for
from nmtk.precision import Precision
from nmtk.vocab import EOS_ID

__all__ = ["SearchFn", "decode_ids", "length_batches"]

#: A search over one padded batch of sources: beam search, or sampling with its settings bound.
SearchFn = Callable[[Decoder, Tensor, SearchConfig], list[list[Hypothesis]]]


def decode_ids(model: Decoder, sources: Sequence[Sequence[int]], cfg: SearchConfig, *,
               device: torch.device | None = None, precision: Precision = Precision.fp32,
               search_fn: SearchFn | None = None) -> list[list[Hypothesis]]:
    """Hypotheses for each source (ids without EOS), in input order.

    ``search_fn`` defaults to beam search; batches hold at most ``cfg.budget(device)`` source tokens
    times the beam (times 1 for any other search).
    """
    search_fn = search_fn or beam_search
    rows_per_source = cfg.beam if search_fn is beam_search else 1
    device = device or next(model.parameters()).device
    lengths = np.fromiter((len(s) + 1 for s in sources), dtype=np.int64, count=len(sources))
    results: list[list[Hypothesis]] = [[] for _ in sources]
    was_training = model.training
    model.eval()
    try:
        for batch in length_batches(lengths, cfg.budget(device.type), rows_per_source):
            src = pad_sequences([np.asarray(sources[i], dtype=np.int64) for i in batch], suffix=EOS_ID).to(device)
            with autocast_for(device, precision):
                hyps = search_fn(model, src, cfg)
            for i, h in zip(batch, hyps, strict=True):
                results[i] = h
    finally:
        model.train(was_training)
    return results
