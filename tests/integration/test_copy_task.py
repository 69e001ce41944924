"""A tiny Transformer must actually learn: copying random sequences on CPU, in seconds."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from nmtk.decode.greedy import greedy_search
from nmtk.model import ModelConfig, Transformer

PAD, BOS, EOS = 0, 2, 3
VOCAB = 32


def copy_batch(gen: torch.Generator, batch: int = 64, min_len: int = 3, max_len: int = 10):
    """Random sequences over ids 4..VOCAB-1 of random lengths, padded; target = source."""
    lengths = torch.randint(min_len, max_len + 1, (batch,), generator=gen)
    src = torch.full((batch, max_len + 1), PAD)
    tgt = torch.full((batch, max_len + 2), PAD)
    for i, n in enumerate(lengths.tolist()):
        seq = torch.randint(4, VOCAB, (n,), generator=gen)
        src[i, :n], src[i, n] = seq, EOS
        tgt[i, 0], tgt[i, 1 : n + 1], tgt[i, n + 1] = BOS, seq, EOS
    return src, tgt


def test_tiny_model_learns_to_copy() -> None:
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    cfg = ModelConfig(src_vocab=VOCAB, tgt_vocab=VOCAB, d_model=64, heads=4, d_ff=128,
                      encoder_layers=2, decoder_layers=2, dropout=0.0)
    model = Transformer(cfg)
    optimizer = torch.optim.Adam(model.parameters(), lr=1.0, betas=(0.9, 0.98), eps=1e-9)
    warmup = 100
    peak = 3e-3  # the paper's schedule shape (§5.3), with a peak suited to a tiny model
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: peak * warmup**0.5 * min((step + 1) ** -0.5, (step + 1) * warmup**-1.5))
    for _ in range(800):
        src, tgt = copy_batch(gen)
        logits = model(src, tgt[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, VOCAB), tgt[:, 1:].reshape(-1), ignore_index=PAD)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        schedule.step()

    model.eval()
    src, tgt = copy_batch(torch.Generator().manual_seed(123), batch=100)
    with torch.no_grad():
        logits = model(src, tgt[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, VOCAB), tgt[:, 1:].reshape(-1), ignore_index=PAD)
    assert loss.item() < 0.05, f"held-out copy loss {loss.item():.4f}"
    hyps = greedy_search(model, src, max_len=src.size(1) + 5, bos=BOS, eos=EOS)
    refs = [[t for t in row.tolist() if t not in (PAD, EOS)] for row in src]
    correct = sum(h == r for h, r in zip(hyps, refs, strict=True))
    assert correct == len(refs), f"{correct}/{len(refs)} copied exactly"
