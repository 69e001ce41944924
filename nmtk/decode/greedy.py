"""Greedy search: the arg-max token at every step, batched, with the key/value cache."""

from __future__ import annotations

import torch
from torch import Tensor

from nmtk.model import Transformer


@torch.inference_mode()
def greedy_search(model: Transformer, src: Tensor, max_len: int, bos: int, eos: int) -> list[list[int]]:
    """Token ids (without BOS/EOS) of the greedy output for each source row of ``src`` (B, S).

    Finished rows keep running (emitting padding) until all are done; the loop exits as soon as
    every row has produced EOS, so a batch costs only as many steps as its longest output.
    """
    memory, mask = model.encode(src)
    cache = model.start_cache(memory, mask)
    batch = src.size(0)
    tokens = torch.full((batch,), bos, dtype=torch.long, device=src.device)
    finished = torch.zeros(batch, dtype=torch.bool, device=src.device)
    steps = []
    for _ in range(max_len):
        logits = model.decode_step(tokens, cache)
        tokens = logits.argmax(dim=-1).masked_fill(finished, model.cfg.pad_id)
        steps.append(tokens)
        finished |= tokens.eq(eos)
        if bool(finished.all()):
            break
    out = torch.stack(steps, dim=1).tolist() if steps else [[] for _ in range(batch)]
    return [row[: row.index(eos)] if eos in row else row for row in out]
