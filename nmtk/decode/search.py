"""Decoding many sentences: length-sorted batches of at most ``max_tokens``, results in input order."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import torch
from torch import Tensor

from nmtk.data.batching import length_batches
from nmtk.data.dataset import pad_multiple, pad_sequences
from nmtk.decode.beam import beam_search
from nmtk.decode.config import Hypothesis, LineControls, SearchConfig
from nmtk.decode.contract import Decoder
from nmtk.device import autocast_for
from nmtk.precision import Precision
from nmtk.vocab import BOS_ID, EOS_ID, SPECIAL_SYMBOLS

__all__ = ["SearchFn", "decode_ids", "length_batches"]

#: A search over one padded batch of sources and their line controls (None: none): beam search, or
#: sampling with its settings bound.
SearchFn = Callable[[Decoder, Tensor, SearchConfig, "Sequence[LineControls | None] | None"], list[list[Hypothesis]]]


def decode_ids(model: Decoder, sources: Sequence[Sequence[int]], cfg: SearchConfig, *,
               device: torch.device | None = None, precision: Precision = Precision.fp32,
               search_fn: SearchFn | None = None, pad_to: int | None = None,
               controls: Sequence[LineControls | None] | None = None) -> list[list[Hypothesis]]:
    """Hypotheses for each source (ids without EOS), in input order.

    ``pad_to``: pad source lengths to a multiple of it (default `pad_multiple`: 8 on a GPU). ``search_fn``
    defaults to beam search; batches hold at most ``cfg.budget(device)`` source tokens
    times the beam (times 1 for any other search). ``controls``: per source, its prefix, constraints
    and banned phrases (`LineControls`), or None.
    """
    search_fn = search_fn or beam_search
    rows_per_source = cfg.beam if search_fn is beam_search else 1
    device = device or next(model.parameters()).device
    multiple = pad_multiple(device) if pad_to is None else pad_to
    lengths = np.fromiter((len(s) + 1 for s in sources), dtype=np.int64, count=len(sources))
    results: list[list[Hypothesis]] = [[] for _ in sources]
    was_training = model.training
    model.eval()
    try:
        for batch in length_batches(lengths, cfg.budget(device.type), rows_per_source):
            src = pad_sequences([np.asarray(sources[i], dtype=np.int64) for i in batch], suffix=EOS_ID,
                                multiple=multiple).to(device)
            steer = None if controls is None else [controls[i] for i in batch]
            with autocast_for(device, precision):
                hyps = search_fn(model, src, cfg, steer)
            for i, h in zip(batch, hyps, strict=True):
                results[i] = h
    finally:
        model.train(was_training)
    return results


PROBE_SOURCES, PROBE_BEAM, PROBE_STEPS = 16, 4, 8


def step_probe(model: Decoder, device: torch.device) -> Callable[[bool], None]:
    """A fixed amount of this model's decoding, for `auto` precision to time (`nmtk.bf16_probe`): 16
    random sources of 20 tokens encoded, expanded to beam 4, then 8 steps of ``decode_step``,
    log-softmax, the beam's top-k and a cache reorder, in bf16 autocast or fp32 as the search runs.
    Fixed: unlike a real search, no sentence ends early in one precision and not the other."""
    generator = torch.Generator().manual_seed(0)
    src = torch.randint(len(SPECIAL_SYMBOLS), model.cfg.src_vocab, (PROBE_SOURCES, 20), generator=generator)
    src[:, -1] = EOS_ID
    src = src.to(device)
    rows = PROBE_SOURCES * PROBE_BEAM
    within = (torch.arange(rows, device=device).view(PROBE_SOURCES, PROBE_BEAM).flip(1)).flatten()

    @torch.inference_mode()
    def run(bf16: bool) -> None:
        was_training = model.training
        model.eval()
        try:
            with autocast_for(device, Precision.bf16 if bf16 else Precision.fp32):
                cache = model.start_cache(model.encode(src))
                cache.expand(PROBE_BEAM)
                tokens = torch.full((rows,), BOS_ID, dtype=torch.long, device=device)
                for _ in range(PROBE_STEPS):
                    lprobs = torch.log_softmax(model.decode_step(tokens, cache).float(), dim=-1)
                    lprobs.view(PROBE_SOURCES, -1).topk(2 * PROBE_BEAM, dim=-1)
                    tokens = lprobs.argmax(dim=-1)
                    cache.reorder(within, memory=False)
        finally:
            model.train(was_training)

    return run
