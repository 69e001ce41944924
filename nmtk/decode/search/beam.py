"""Batched beam search (paper §6.1) over sentences *and* beams as tensors, with the key/value cache.

Rows of the decoder batch are ``sentence · beam``. At each step the 2K best extensions of each
sentence are taken with one ``topk`` (on a CPU, from its best blocks of columns: `_in_blocks`);
extensions ending in EOS among the first K become finished hypotheses (merged, tensor-wise, into
each sentence's K best finished), the K best others continue, and the cache is reordered by
``index_select``. A sentence stops as soon as no live beam can beat
its finished hypotheses, and the batch shrinks to the sentences still running. The one host sync per
step is the check whether any sentence finished; a step where some did copies their hypotheses to
the host in one transfer per tensor (never one read per sentence).

Scores are length-normalised: log P(Y|X) / lp(Y). By default lp(Y) = ((5 + |Y|) / 6)^α, |Y| counting
EOS (GNMT's, the paper's). With ``length_penalty_form = "power"``, lp(Y) = |Y|^α (|Y| counting EOS
too) and a sentence stops once K hypotheses have finished, its best then chosen among them:
CTranslate2's (and fairseq's) search, so that the two engines translate alike.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor

from nmtk.decode.search.config import Hypothesis, LineControls, SearchConfig
from nmtk.decode.search.contract import Decoder
from nmtk.decode.search.steering import Steering
from nmtk.decode.search.step import (
    NEG_INF,
    Results,
    as_tokens,
    length_penalty,
    max_lengths,
    only_eos_where,
    output_ids,
    start_beams,
    steer_at,
    step_log_probs,
    stops_at_beam_finished,
)
from nmtk.vocab import BOS_ID, EOS_ID, PAD_ID

__all__ = ["Hypothesis", "SearchConfig", "beam_search", "greedy_search", "length_penalty", "max_lengths"]

@torch.inference_mode()
def greedy_search(model: Decoder, src: Tensor, cfg: SearchConfig,
                  controls: Sequence[LineControls | None] | None = None) -> list[list[Hypothesis]]:
    """Arg-max decoding; ``beam = 1`` means this. Finished rows leave the batch."""
    cache = model.start_cache(model.encode(src))
    n = src.size(0)
    steering = Steering.of(controls, cfg, n, src.device)
    limit = max_lengths(src, cfg, model, steering)
    first_limit = int(limit.min())
    rows = torch.arange(n, device=src.device)
    tokens = torch.full((n,), BOS_ID, dtype=torch.long, device=src.device)
    history = torch.empty((n, 0), dtype=torch.long, device=src.device)
    raw = torch.zeros(n, device=src.device)
    results: list[list[Hypothesis]] = [[] for _ in range(n)]
    ids, step = output_ids(model, steering), 0
    while rows.numel():
        lprobs = step_log_probs(model, tokens, cache, first=step == 0, steer=steer_at(steering, history, rows, step),
                                compact=ids is not None)
        if step >= first_limit:
            lprobs = only_eos_where(limit[rows] <= step, lprobs)
        best, index = lprobs.max(dim=-1)
        tokens = as_tokens(ids, index)
        raw = raw + best
        history = torch.cat([history, tokens[:, None]], dim=1)
        done = tokens.eq(EOS_ID)
        step += 1
        if bool(done.any()):  # the step's one host read; then one batched copy of what finished
            scores = raw / length_penalty(float(step), cfg.length_penalty, cfg.length_penalty_form)
            finished = done.nonzero().flatten()
            for row, seq, score in zip(rows[finished].tolist(), history[finished, :-1].tolist(),
                                       scores[finished].tolist(), strict=True):
                results[row] = [Hypothesis(seq, score)]
            keep = (~done).nonzero().flatten()
            rows, tokens, raw, history = rows[keep], tokens[keep], raw[keep], history[keep]
            cache.reorder(keep)
    return results


@torch.inference_mode()
def _merge_finished(fin_scores: Tensor, fin_tokens: Tensor, cand_scores: Tensor, cand_tokens: Tensor,
                    parents: Tensor, step: int, cfg: SearchConfig, fin_attention: Tensor | None = None,
                    parent_attention: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor | None]:
    """Each sentence's best finished hypotheses after this step, as many as ``fin_scores`` holds: the
    EOS among its first K candidates (``parents``: their histories, (B·K, step)), length-normalised,
    merged with the earlier finished; with ``fin_attention`` (B, width, steps so far, S), the watched
    attention of their steps too (``parent_attention``: (B·K, step, S))."""
    b, width, max_steps = fin_tokens.shape
    k = cand_scores.size(1)
    normalised = cand_scores / length_penalty(float(step + 1), cfg.length_penalty, cfg.length_penalty_form)
    new_fin = torch.where(cand_tokens.eq(EOS_ID), normalised, torch.full_like(normalised, NEG_INF))
    new_seqs = torch.full((b, k, max_steps), PAD_ID, dtype=torch.long, device=fin_tokens.device)
    new_seqs[:, :, :step] = parents.view(b, k, step)
    merged_scores, pick = torch.cat([fin_scores, new_fin], dim=1).topk(width, dim=1)
    tokens = torch.cat([fin_tokens, new_seqs], dim=1).gather(1, pick[..., None].expand(-1, -1, max_steps))
    if fin_attention is None:
        return merged_scores, tokens, None
    # The attention's time axis grows with the steps (the tokens' is the longest allowed): its merges
    # copy the steps so far, not the limit's.
    sources = fin_attention.size(-1)
    earlier = F.pad(fin_attention, (0, 0, 0, step - fin_attention.size(2)))
    attention = torch.cat([earlier, parent_attention.view(b, k, step, sources)], dim=1).gather(
        1, pick[..., None, None].expand(-1, -1, step, sources))
    return merged_scores, tokens, attention


class _KeptAttention:
    """A beam search's watched cross-attention (`beam_search`'s ``watch``): each live row's per step, and
    each finished hypothesis's, reordered, merged and shrunk with the tokens; nothing without a watch."""

    def __init__(self, watch: Callable[[], Tensor | None] | None, n: int, k: int, width: int, sources: int,
                 device: torch.device) -> None:
        self.watch, self.seen = watch, None
        self.live = None if watch is None else torch.zeros((n * k, 0, sources), device=device)
        self.finished = None if watch is None else torch.zeros((n, width, 0, sources), device=device)

    def observe(self) -> None:
        """This step's, per row (b·K, S): the K beams of a sentence may be its attention's query positions."""
        if self.watch is not None:
            self.seen = self.watch().float().reshape(self.live.size(0), -1)

    def of_rows(self, rows: Tensor) -> Tensor | None:
        return None if self.live is None else self.live.index_select(0, rows)

    def advance(self, rows: Tensor) -> None:
        """The live rows' histories after a step: each chosen token predicted with its origin row's attention."""
        if self.live is not None:
            self.live = torch.cat([self.live.index_select(0, rows), self.seen.index_select(0, rows)[:, None]], dim=1)

    def best_finished(self, k: int) -> Tensor | None:
        return None if self.finished is None else self.finished[:, :k]

    def keep(self, rows: Tensor, sentences: Tensor) -> None:
        if self.live is not None:
            self.live, self.finished = self.live[rows], self.finished[sentences]


def _no_finished(n: int, cfg: SearchConfig, max_steps: int, device: torch.device) -> tuple[Tensor, Tensor]:
    """Empty (n, width) scores and (n, width, max_steps) tokens of the finished hypotheses kept: the K
    best; or, where a sentence stops once K have finished, all of them (fewer than K before a step, at
    most K more in it)."""
    width = 2 * cfg.beam if stops_at_beam_finished(cfg) else cfg.beam
    return (torch.full((n, width), NEG_INF, device=device),
            torch.full((n, width, max_steps), PAD_ID, dtype=torch.long, device=device))


def _ready(fin_scores: Tensor, scores: Tensor, limit: Tensor, cfg: SearchConfig) -> Tensor:
    """Per running sentence: whether its nbest-th finished score beats any live beam's best reachable
    one (``scores``: the live beams', best first; ``limit``: its length limit); or, where a sentence
    stops once K have finished, whether K have."""
    if stops_at_beam_finished(cfg):
        return fin_scores[:, cfg.beam - 1].isfinite()
    bound = scores[:, 0] / length_penalty(limit.float() + 1, cfg.length_penalty, cfg.length_penalty_form)
    return fin_scores[:, cfg.nbest - 1] >= bound


#: Columns per block in `_in_blocks`: a block's maximum is one cheap reduction, and the 2K best
#: blocks of a sentence hold its 2K best extensions.
BLOCK = 64


def _extensions(scores: Tensor, lprobs: Tensor, count: int) -> tuple[Tensor, Tensor, Tensor]:
    """Each sentence's ``count`` (2K) best extensions, best first: their scores, origin beams and
    columns, from the live ``scores`` (B, K) and the step's ``lprobs`` (B·K, V): `_in_blocks` on a
    CPU, else one `topk` over all K·V sums (a GPU sorts them in one kernel, where the blocks' dozen
    small ops would each be a launch)."""
    return _in_blocks(scores, lprobs, count) if lprobs.device.type == "cpu" else _by_topk(scores, lprobs, count)


def _by_topk(scores: Tensor, lprobs: Tensor, count: int) -> tuple[Tensor, Tensor, Tensor]:
    """`_extensions` by one `topk` over every beam's score plus every column's log-probability."""
    b, k = scores.shape
    width = lprobs.size(-1)
    cand_scores, index = (scores[..., None] + lprobs.view(b, k, width)).view(b, k * width).topk(count, dim=1)
    return cand_scores, index // width, index % width


def _in_blocks(scores: Tensor, lprobs: Tensor, count: int) -> tuple[Tensor, Tensor, Tensor]:
    """`_extensions` reading each row's columns once instead of sorting them all.

    Why: on a CPU `topk` over every row's V columns cost a tenth of a small model's step (~3.5 µs a
    row of 4,700), more than the rest of the search together. Each row's columns are cut into
    blocks of `BLOCK`; a block's best score is its maximum plus its row's score. Any of the sentence's
    ``count`` best extensions lies in one of its ``count`` best blocks (a block holding one is beaten
    only by blocks holding a better extension, at most ``count`` - 1 of them), so one `topk` over the
    block maxima and one over those blocks' columns find them, reading V once (its maxima) instead of
    sorting it. Ties between equal scores aside, the result is `topk`'s over all K·V sums."""
    b, k = scores.shape
    rows, width = lprobs.shape
    full = width // BLOCK * BLOCK
    maxima = lprobs[:, :full].view(rows, -1, BLOCK).amax(dim=-1)
    if full < width:  # the last, shorter block
        maxima = torch.cat([maxima, lprobs[:, full:].amax(dim=-1, keepdim=True)], dim=1)
    blocks = maxima.size(1)
    best = (maxima.view(b, k, blocks) + scores[..., None]).view(b, k * blocks).topk(min(count, k * blocks), dim=1)[1]
    row = (best // blocks + torch.arange(b, device=scores.device)[:, None] * k).repeat_interleave(BLOCK, dim=1)
    column = ((best % blocks)[..., None] * BLOCK + torch.arange(BLOCK, device=scores.device)).view(b, -1)
    flat = row * width + column.clamp(max=width - 1)
    sums = lprobs.reshape(-1).take(flat).masked_fill(column >= width, NEG_INF) + scores.view(-1).take(row)
    cand_scores, pick = sums.topk(count, dim=1)
    return cand_scores, row.gather(1, pick) % k, column.gather(1, pick)


def beam_search(model: Decoder, src: Tensor, cfg: SearchConfig,
                controls: Sequence[LineControls | None] | None = None,
                watch: Callable[[], Tensor | None] | None = None) -> list[list[Hypothesis]]:
    """The ``cfg.nbest`` best hypotheses of each source row, best first; ``controls``: per row, its prefix
    and banned phrases (terms are `constrained_beam_search`'s: `nmtk.decode.search.choose` chooses).
    ``watch``: a step's watched cross-attention (rows, 1, S), kept through the beam's reorders for every
    token of the hypotheses (`Hypothesis.attention`): word alignments without a second pass."""
    k, device = cfg.beam, src.device
    n = src.size(0)
    cache = model.start_cache(model.encode(src))  # encoder keys/values projected once per sentence...
    cache.expand(k)  # ...then shared by its K beams
    steering = Steering.of(controls, cfg, n, device)
    limit = max_lengths(src, cfg, model, steering)
    max_steps, first_limit = int(limit.max()) + 1, int(limit.min())

    sent, scores, tokens, history = start_beams(n, k, device)
    fin_scores, fin_tokens = _no_finished(n, cfg, max_steps, device)
    out = Results(n, k)
    kept = _KeptAttention(watch, n, k, fin_tokens.size(1), src.size(1), device)
    ids = output_ids(model, steering)  # a shortlist's candidates: columns, not the vocabulary

    for step in range(max_steps):
        b = sent.numel()
        steer = None if steering is None else steer_at(steering, history, sent.repeat_interleave(k), step)
        lprobs = step_log_probs(model, tokens, cache, first=step == 0, steer=steer, compact=ids is not None)
        kept.observe()
        if step >= first_limit:  # no row is at its limit before (and no host sync is needed to know it)
            lprobs = only_eos_where((limit[sent] <= step).repeat_interleave(k), lprobs)
        cand_scores, origin, columns = _extensions(scores, lprobs, 2 * k)
        cand_tokens = as_tokens(ids, columns)
        flat_origin = origin + torch.arange(b, device=device)[:, None] * k

        parents = flat_origin[:, :k].reshape(-1)
        fin_scores, fin_tokens, kept.finished = _merge_finished(
            fin_scores, fin_tokens, cand_scores[:, :k], cand_tokens[:, :k], history.index_select(0, parents), step,
            cfg, kept.finished, kept.of_rows(parents))

        # Live: the K best candidates that are not EOS.
        live_scores = torch.where(cand_tokens.eq(EOS_ID), torch.full_like(cand_scores, NEG_INF), cand_scores)
        scores, live_pick = live_scores.topk(k, dim=1)
        rows = flat_origin.gather(1, live_pick).view(-1)
        tokens = cand_tokens.gather(1, live_pick).view(-1)
        history = torch.cat([history.index_select(0, rows), tokens[:, None]], dim=1)
        kept.advance(rows)
        cache.reorder(rows, memory=False)

        done = _ready(fin_scores, scores, limit[sent], cfg) | (limit[sent] <= step) | scores[:, 0].isneginf()
        if bool(done.any()):  # the step's one host read; then one batched copy of what finished
            keep = out.collect(done, sent, fin_tokens[:, :k], fin_scores[:, :k], kept.best_finished(k))
            if keep.numel() == 0:
                break
            keep_rows = (keep[:, None] * k + torch.arange(k, device=device)).view(-1)
            sent, scores, fin_scores, fin_tokens = sent[keep], scores[keep], fin_scores[keep], fin_tokens[keep]
            tokens, history = tokens[keep_rows], history[keep_rows]
            kept.keep(keep_rows, keep)
            cache.reorder(keep_rows)
    return out.hypotheses(cfg)
