"""Sampling (for back-translation): top-k / nucleus (top-p) sampling with a temperature, seeded."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from nmtk.decode.search.config import Hypothesis, LineControls, SamplingConfig, SearchConfig
from nmtk.decode.search.contract import Decoder
from nmtk.decode.search.steering import Steering
from nmtk.decode.search.step import (
    NEG_INF,
    as_tokens,
    length_penalty,
    max_lengths,
    only_eos_where,
    output_ids,
    steer_at,
    step_log_probs,
)

__all__ = ["SamplingConfig", "sample_search"]
from nmtk.vocab import BOS_ID, EOS_ID, PAD_ID


def _filter(logits: Tensor, topk: int, topp: float) -> Tensor:
    if topk > 0:
        kth = logits.topk(min(topk, logits.size(-1)), dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, NEG_INF)
    if topp < 1.0:
        sorted_logits, order = logits.sort(dim=-1, descending=True)
        cumulative = sorted_logits.softmax(dim=-1).cumsum(dim=-1)
        remove = cumulative - sorted_logits.softmax(dim=-1) >= topp  # keep the smallest set reaching topp
        logits = logits.scatter(1, order, sorted_logits.masked_fill(remove, NEG_INF))
    return logits


@torch.inference_mode()
def sample_search(model: Decoder, src: Tensor, cfg: SearchConfig, controls: Sequence[LineControls | None] | None = None,
                  *, sampling: SamplingConfig, generator: torch.Generator | None = None) -> list[list[Hypothesis]]:
    """``cfg.nbest`` sampled translations per source row (each drawn alone, as fairseq's and
    CTranslate2's n-best samples: several back-translations of a line), best score first, scored like beam
    search's hypotheses; ``controls``: each row's prefix and banned phrases (constraints need beam search).

    ``generator`` carries the random stream across batches; without one, a new one seeded with
    ``sampling.seed`` is used.
    """
    if generator is None:
        generator = torch.Generator(device=src.device).manual_seed(sampling.seed)
    if cfg.nbest > 1:  # each source's rows side by side, one draw each
        src = src.repeat_interleave(cfg.nbest, dim=0)
        controls = None if controls is None else [c for c in controls for _ in range(cfg.nbest)]
    cache = model.start_cache(model.encode(src))
    n = src.size(0)
    steering = Steering.of(controls, cfg, n, src.device)
    limit = max_lengths(src, cfg, model, steering)
    every = torch.arange(n, device=src.device)
    history = torch.empty((n, 0), dtype=torch.long, device=src.device)
    tokens = torch.full((n,), BOS_ID, dtype=torch.long, device=src.device)
    finished = torch.zeros(n, dtype=torch.bool, device=src.device)
    raw = torch.zeros(n, device=src.device)
    length = torch.zeros(n, device=src.device)
    steps = []
    first_limit, ids = int(limit.min()), output_ids(model, steering)
    for step in range(int(limit.max()) + 1):
        lprobs = step_log_probs(model, tokens, cache, first=step == 0, steer=steer_at(steering, history, every, step),
                                compact=ids is not None)
        if step >= first_limit:
            lprobs = only_eos_where(limit <= step, lprobs)
        logits = _filter(lprobs / max(sampling.temperature, 1e-6), sampling.topk, sampling.topp)
        picked = torch.multinomial(logits.softmax(dim=-1), 1, generator=generator).squeeze(1)
        picked = picked.masked_fill(finished, PAD_ID)
        raw += torch.where(finished, 0.0, lprobs.gather(1, picked.clamp(min=0)[:, None]).squeeze(1))
        choice = as_tokens(ids, picked)
        length += (~finished).float()
        steps.append(choice)
        if steering is not None:
            history = torch.cat([history, choice[:, None]], dim=1)
        finished |= choice.eq(EOS_ID)
        tokens = choice.masked_fill(finished, EOS_ID)
        if bool(finished.all()):
            break
    rows = torch.stack(steps, dim=1).tolist()
    scores = (raw / length_penalty(length, cfg.length_penalty, cfg.length_penalty_form)).tolist()
    drawn = [Hypothesis(row[: row.index(EOS_ID)] if EOS_ID in row else row, score)
             for row, score in zip(rows, scores, strict=True)]
    return [sorted(drawn[i : i + cfg.nbest], key=lambda h: -h.score) for i in range(0, len(drawn), cfg.nbest)]
