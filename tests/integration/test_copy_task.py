"""A tiny Transformer must actually learn: copying random sequences on CPU, in seconds."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from helpers import copy_batch

from nmtk.decode.beam import SearchConfig, greedy_search
from nmtk.vocab import EOS_ID as EOS
from nmtk.vocab import PAD_ID as PAD

VOCAB = 32


def test_tiny_model_learns_to_copy(copy_models) -> None:
    model = copy_models[800]  # vocabulary VOCAB
    src, tgt = copy_batch(torch.Generator().manual_seed(123), batch=100, vocab=VOCAB)
    with torch.no_grad():
        logits = model(src, tgt[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, VOCAB), tgt[:, 1:].reshape(-1), ignore_index=PAD)
    assert loss.item() < 0.05, f"held-out copy loss {loss.item():.4f}"
    hyps = [h[0].tokens for h in greedy_search(model, src, SearchConfig(beam=1))]
    refs = [[t for t in row.tolist() if t not in (PAD, EOS)] for row in src]
    correct = sum(h == r for h, r in zip(hyps, refs, strict=True))
    # Whole sequences copied without a single wrong token. After 800 updates the odd sequence with a
    # repeated token still slips (98-100 of 100 depending on the host's float summation order).
    assert correct >= 97, f"{correct}/{len(refs)} copied exactly"
