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

import functools
from collections.abc import Callable, Sequence
from typing import Optional

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
from nmtk.model.script import script
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


def _merge_finished(fin_scores: Tensor, fin_tokens: Tensor, cand_scores: Tensor, cand_tokens: Tensor,
                    parents: Tensor, step: int, penalty: float, eos: int = EOS_ID, pad: int = PAD_ID,
                    neg_inf: float = NEG_INF) -> tuple[Tensor, Tensor, Tensor]:
    """Each sentence's best finished hypotheses after this step, as many as ``fin_scores`` holds: the
    EOS among its first K candidates (``parents``: their histories, (B·K, step)), length-normalised
    (``penalty``: this step's length penalty), merged with the earlier finished; and which of the
    earlier (first ``width`` columns) and new ones were picked (`_merged_attention` follows them). The
    ids as defaults: TorchScript reads no global (`_advance`)."""
    b, width, max_steps = fin_tokens.shape
    k = cand_scores.size(1)
    normalised = cand_scores / penalty
    new_fin = torch.where(cand_tokens.eq(eos), normalised, torch.full_like(normalised, neg_inf))
    new_seqs = torch.full((b, k, max_steps), pad, dtype=torch.long, device=fin_tokens.device)
    new_seqs[:, :, :step] = parents.view(b, k, step)
    merged_scores, pick = torch.cat([fin_scores, new_fin], dim=1).topk(width, dim=1)
    tokens = torch.cat([fin_tokens, new_seqs], dim=1).gather(1, pick[..., None].expand(-1, -1, max_steps))
    return merged_scores, tokens, pick


def _merged_attention(fin_attention: Tensor, parent_attention: Tensor, pick: Tensor, step: int) -> Tensor:
    """The watched attention (B, width, steps so far, S) of `_merge_finished`'s ``pick``: of the earlier
    finished and of the new ones' parents (``parent_attention``: (B·K, step, S)). Its time axis grows
    with the steps (the tokens' is the longest allowed): its merges copy the steps so far, not the limit's."""
    b, sources = pick.size(0), fin_attention.size(-1)
    earlier = F.pad(fin_attention, (0, 0, 0, step - fin_attention.size(2)))
    return torch.cat([earlier, parent_attention.view(b, parent_attention.size(0) // b, step, sources)], dim=1).gather(
        1, pick[..., None, None].expand(-1, -1, step, sources))


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

    def merge(self, parents: Tensor, pick: Tensor, step: int) -> None:
        """The finished hypotheses' attention after `_merge_finished` picked them (``parents``: the rows
        whose candidates it merged)."""
        if self.finished is not None:
            self.finished = _merged_attention(self.finished, self.of_rows(parents), pick, step)

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


def _ready(fin_scores: Tensor, scores: Tensor, limit_penalty: Tensor, stop_at: int, at_k_finished: bool) -> Tensor:
    """Per running sentence: whether its ``stop_at``-th (nbest-th) finished score beats any live beam's
    best reachable one (``scores``: the live beams', best first; ``limit_penalty``: the length penalty
    at its length limit); or, where a sentence stops once K have finished (``at_k_finished``,
    ``stop_at`` = K), whether K have."""
    if at_k_finished:
        return fin_scores[:, stop_at - 1].isfinite()
    return fin_scores[:, stop_at - 1] >= scores[:, 0] / limit_penalty


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


def _in_blocks(scores: Tensor, lprobs: Tensor, count: int, block: int = BLOCK, neg_inf: float = NEG_INF,
               ) -> tuple[Tensor, Tensor, Tensor]:
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
    full = width // block * block
    maxima = lprobs[:, :full].view(rows, -1, block).amax(dim=-1)
    if full < width:  # the last, shorter block
        maxima = torch.cat([maxima, lprobs[:, full:].amax(dim=-1, keepdim=True)], dim=1)
    blocks = maxima.size(1)
    best = (maxima.view(b, k, blocks) + scores[..., None]).view(b, k * blocks).topk(min(count, k * blocks), dim=1)[1]
    row = (best // blocks + torch.arange(b, device=scores.device)[:, None] * k).repeat_interleave(block, dim=1)
    column = ((best % blocks)[..., None] * block + torch.arange(block, device=scores.device)).view(b, -1)
    flat = row * width + column.clamp(max=width - 1)
    sums = lprobs.reshape(-1).take(flat).masked_fill(column >= width, neg_inf) + scores.view(-1).take(row)
    cand_scores, pick = sums.topk(count, dim=1)
    return cand_scores, row.gather(1, pick) % k, column.gather(1, pick)


def _advance(lprobs: Tensor, scores: Tensor, history: Tensor, fin_scores: Tensor, fin_tokens: Tensor,
             limit: Tensor, limit_penalty: Tensor, ids: Optional[Tensor], step: int, limited: bool,  # noqa: UP045
             penalty: float, stop_at: int, at_k_finished: bool, eos: int = EOS_ID, neg_inf: float = NEG_INF,
             ) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:
    """One step of the search after the model's ``lprobs`` (B·K, V): each running sentence's 2K best
    extensions, the EOS among the first K merged into its finished hypotheses (`_merge_finished`), the K
    best others its live beams, and whether it is done. ``limit`` / ``limit_penalty``: each sentence's
    length limit and the length penalty there; ``limited``: some row may be at its limit (EOS alone
    then); ``penalty``: this step's length penalty. Returns the live beams' scores (B, K), origin rows,
    tokens and histories, the finished scores and tokens, `_merge_finished`'s pick, the rows whose
    candidates it merged, and ``done`` (B,). Tensors in, tensors out: on a CPU one TorchScript call."""
    k = scores.size(1)
    if limited:
        lprobs = only_eos_where(limit.le(step).repeat_interleave(k), lprobs)
    cand_scores, origin, columns = _extensions(scores, lprobs, 2 * k)
    cand_tokens = as_tokens(ids, columns)
    flat_origin = origin + torch.arange(scores.size(0), device=scores.device)[:, None] * k
    parents = flat_origin[:, :k].reshape(-1)
    fin_scores, fin_tokens, pick = _merge_finished(fin_scores, fin_tokens, cand_scores[:, :k], cand_tokens[:, :k],
                                                   history.index_select(0, parents), step, penalty)
    # Live: the K best candidates that are not EOS.
    live_scores = torch.where(cand_tokens.eq(eos), torch.full_like(cand_scores, neg_inf), cand_scores)
    scores, live_pick = live_scores.topk(k, dim=1)
    rows = flat_origin.gather(1, live_pick).view(-1)
    tokens = cand_tokens.gather(1, live_pick).view(-1)
    history = torch.cat([history.index_select(0, rows), tokens[:, None]], dim=1)
    done = _ready(fin_scores, scores, limit_penalty, stop_at, at_k_finished) | limit.le(step) | scores[:, 0].isneginf()
    return scores, rows, tokens, history, fin_scores, fin_tokens, pick, parents, done


@functools.cache
def _scripted() -> Callable[..., tuple[Tensor, ...]] | None:
    """`_advance` as TorchScript (None where `nmtk.model.script.script` cannot make it)."""
    return script(_advance)


def _advance_on(device: torch.device) -> Callable[..., tuple[Tensor, ...]]:
    """`_advance` scripted on a CPU (the same ops, one call: `nmtk.model.script`), as it is elsewhere."""
    return (_scripted() or _advance) if device.type == "cpu" else _advance


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
    limit_penalty = length_penalty(limit.float() + 1, cfg.length_penalty, cfg.length_penalty_form)
    at_k_finished = stops_at_beam_finished(cfg)
    stop_at = k if at_k_finished else cfg.nbest

    sent, scores, tokens, history = start_beams(n, k, device)
    fin_scores, fin_tokens = _no_finished(n, cfg, max_steps, device)
    out = Results(n, k)
    kept = _KeptAttention(watch, n, k, fin_tokens.size(1), src.size(1), device)
    ids = output_ids(model, steering)  # a shortlist's candidates: columns, not the vocabulary
    advance = _advance_on(device)

    for step in range(max_steps):
        steer = None if steering is None else steer_at(steering, history, sent.repeat_interleave(k), step)
        lprobs = step_log_probs(model, tokens, cache, first=step == 0, steer=steer, compact=ids is not None)
        kept.observe()
        penalty = length_penalty(float(step + 1), cfg.length_penalty, cfg.length_penalty_form)
        scores, rows, tokens, history, fin_scores, fin_tokens, pick, parents, done = advance(
            lprobs, scores, history, fin_scores, fin_tokens, limit, limit_penalty, ids, step, step >= first_limit,
            penalty, stop_at, at_k_finished)
        kept.merge(parents, pick, step)
        kept.advance(rows)
        cache.reorder(rows, memory=False)
        if bool(done.any()):  # the step's one host read; then one batched copy of what finished
            keep = out.collect(done, sent, fin_tokens[:, :k], fin_scores[:, :k], kept.best_finished(k))
            if keep.numel() == 0:
                break
            keep_rows = (keep[:, None] * k + torch.arange(k, device=device)).view(-1)
            sent, scores, fin_scores, fin_tokens = sent[keep], scores[keep], fin_scores[keep], fin_tokens[keep]
            limit, limit_penalty = limit[keep], limit_penalty[keep]
            tokens, history = tokens[keep_rows], history[keep_rows]
            kept.keep(keep_rows, keep)
            cache.reorder(keep_rows)
    return out.hypotheses(cfg)
