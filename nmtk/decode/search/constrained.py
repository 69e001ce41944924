"""Lexically constrained beam search: dynamic beam allocation (DBA, Post & Vilar 2018), vectorised.

Each line may carry target phrases (constraints) its translation must contain. A hypothesis' *bank*
is how many constraint tokens it has produced: those of the constraints it has met, plus its
progress into one it is producing. At every step, for the whole batch at once:

1. candidates are gathered per sentence: the 2K best extensions over all its beams (as plain beam
   search), each beam's own best token, and for each beam the next token of every unmet
   constraint and the first token of each (to start one afresh);
2. each candidate's new constraint state is computed by comparing the end of its history with
   every constraint (a phrase of several subwords counts as met only when all of them are
   produced in a row; a hypothesis that leaves a phrase half-way loses that progress);
3. the K beams are chosen round-robin across banks, fullest bank first: the best candidate of every
   bank, then the second best of each, and so on. Without this, hypotheses that spend tokens on
   constraints (which the model finds unlikely) would all be pushed out of the beam by those
   that do not, and the constraints would never be met;
4. EOS is blocked for a hypothesis with an unmet constraint, unless it is at its length limit: there
   it ends with the constraints it has met, and finished hypotheses rank by constraint tokens met
   first, score second, so a line whose constraints cannot fit gets as many of them as fit.

Everything is a tensor operation over (sentences, candidates): there is no Python loop over
sentences or hypotheses per step (the one loop, in `advance`, runs over a constraint's length).
fairseq's version keeps a Python object per hypothesis and updates each at every step; Sockeye's
took decoding from 5.3 to 0.35 sentences/s (sockeye#732). ``ordered_constraints``: a constraint
counts only once the ones before it are met (fairseq's ``--constraints ordered``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from nmtk.decode.search.config import Hypothesis, LineControls, SearchConfig
from nmtk.decode.search.contract import Decoder
from nmtk.decode.search.steering import Steering, last_tokens, padded
from nmtk.decode.search.step import (
    NEG_INF,
    Results,
    length_penalty,
    max_lengths,
    only_eos_where,
    start_beams,
    steer_at,
    step_log_probs,
)
from nmtk.vocab import EOS_ID, PAD_ID


def earlier_twins(cons: Tensor, cons_len: Tensor) -> Tensor:
    """(n, C, C): ``[s, i, j]`` whether constraint j of sentence s is the same phrase as constraint i and
    comes before it. A term asked for twice must appear twice: one occurrence meets one of them."""
    same = cons[:, :, None, :].eq(cons[:, None, :, :]).all(dim=-1) & cons_len[:, :, None].eq(cons_len[:, None, :])
    count = cons.size(1)
    return same & cons_len.gt(0)[:, :, None] & _earlier(count, cons.device)


def advance(window: Tensor, cons: Tensor, cons_len: Tensor, met: Tensor, ordered: bool,
            twins: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor]:
    """The constraint state after a token: ``window`` (R, L) holds each candidate's last L tokens, the
    new one last; ``cons`` (R, C, L) and ``cons_len`` (R, C) its line's constraints; ``met`` (R, C)
    those met before; ``twins`` (R, C, C) its `earlier_twins`. Returns the constraints met now, each
    one's progress (the longest start of it that the history ends with) and the bank (constraint
    tokens produced)."""
    width = cons.size(2)
    progress = torch.zeros_like(cons_len)
    for j in range(1, width + 1):
        ends_with = window[:, None, width - j :].eq(cons[:, :, :j]).all(dim=-1) & cons_len.ge(j)
        progress = torch.where(ends_with, j, progress)
    complete = progress.eq(cons_len) & cons_len.gt(0)
    if twins is not None:  # of identical terms, an occurrence meets the first one still unmet
        complete &= ~(twins & ~met[:, None, :]).any(dim=-1)
    if ordered:  # only the first unmet constraint may be completed
        complete &= _first_open(met)
    met = met | complete
    open_ = _first_open(met) if ordered else ~met
    bank = (cons_len * met).sum(dim=1) + (progress * open_).amax(dim=1)
    return met, progress, bank


def _first_open(met: Tensor) -> Tensor:
    """Per row, the first constraint not met."""
    return ~met & (~met).long().cumsum(dim=1).eq(1)


def _candidates(cand: Tensor, lprobs: Tensor, cons: Tensor, cons_len: Tensor, met: Tensor, progress: Tensor,
                k: int, ordered: bool) -> Tensor:
    """Step 1 of the module docstring: per sentence, flat indices ``beam · V + token`` into ``cand``
    (b, K·V) of its candidates; invalid ones point at an entry whose score is -∞ or repeat another."""
    b, vocab = cand.size(0), lprobs.size(-1)
    top = cand.topk(2 * k, dim=1).indices
    beam = torch.arange(k, device=cand.device)
    own = (beam * vocab + lprobs.argmax(dim=-1).view(b, k)).view(b, k)
    allowed = ~met & cons_len.gt(0)
    if ordered:
        allowed &= _first_open(met)
    following = cons.gather(2, progress.clamp(max=cons.size(2) - 1)[..., None]).squeeze(2)
    following = torch.where(progress.lt(cons_len), following, cons[:, :, 0])
    tokens = torch.cat([following, cons[:, :, 0]], dim=1).clamp(min=0)  # (b·K, 2C)
    allowed = torch.cat([allowed, allowed], dim=1)
    index = (beam.repeat(b)[:, None] * vocab + tokens)
    index = torch.where(allowed, index, top[:, :1].repeat_interleave(k, dim=0))  # a repeat: dropped as one
    return torch.cat([top, own, index.view(b, -1)], dim=1)


def _earlier(m: int, device: torch.device) -> Tensor:
    """(m, m): ``[i, j]`` whether candidate j comes before candidate i."""
    return torch.ones((m, m), dtype=torch.bool, device=device).tril(-1)


def _rank_in_bank(scores: Tensor, bank: Tensor, live: Tensor) -> Tensor:
    """Per candidate, how many live candidates of its sentence and bank come before it (higher score,
    or equal score and earlier)."""
    earlier = _earlier(scores.size(1), scores.device)
    a, o = scores[:, :, None], scores[:, None, :]
    before = (o > a) | (o.eq(a) & earlier)
    return (before & bank[:, :, None].eq(bank[:, None, :]) & live[:, None, :]).sum(dim=-1)


def _first_by(scores: Tensor, banks: Tensor, k: int) -> Tensor:
    """Indices of the ``k`` best per row, by bank (more constraint tokens met) first, score second; an
    entry of score -∞ (a candidate that did not end there) last whatever its bank: ranked by its bank,
    candidates that met more terms but never finished took every place of a line whose terms do not all
    fit its length limit, and the line came back with no translation (issue 62: 53 one-piece terms)."""
    banks = banks.masked_fill(scores.isneginf(), -1)
    by_score = scores.argsort(dim=1, descending=True, stable=True)
    by_bank = banks.gather(1, by_score).argsort(dim=1, descending=True, stable=True)
    return by_score.gather(1, by_bank)[:, :k]


@dataclass
class Finished:
    """Each running sentence's K best finished hypotheses, ranked by constraint tokens met, then score."""

    scores: Tensor  # (b, K) length-normalised
    banks: Tensor  # (b, K) constraint tokens met
    tokens: Tensor  # (b, K, max_steps) PAD-filled

    @classmethod
    def empty(cls, n: int, k: int, max_steps: int, device: torch.device) -> Finished:
        return cls(torch.full((n, k), NEG_INF, device=device), torch.zeros((n, k), dtype=torch.long, device=device),
                   torch.full((n, k, max_steps), PAD_ID, dtype=torch.long, device=device))

    def merge(self, scores: Tensor, banks: Tensor, history: Tensor) -> None:
        """Candidates (b, M) that end here (score -∞: not ending), their histories (b, M, step)."""
        b, m, step = history.shape
        seqs = torch.full((b, m, self.tokens.size(2)), PAD_ID, dtype=torch.long, device=history.device)
        seqs[:, :, :step] = history
        all_scores, all_banks = torch.cat([self.scores, scores], dim=1), torch.cat([self.banks, banks], dim=1)
        pick = _first_by(all_scores, all_banks, self.scores.size(1))
        self.tokens = torch.cat([self.tokens, seqs], dim=1).gather(1, pick[..., None].expand(-1, -1, seqs.size(2)))
        self.scores, self.banks = all_scores.gather(1, pick), all_banks.gather(1, pick)

    def keep(self, keep: Tensor) -> None:
        self.scores, self.banks, self.tokens = self.scores[keep], self.banks[keep], self.tokens[keep]


@dataclass
class Terms:
    """A batch's constraints (per sentence) and each live row's state toward them."""

    cons: Tensor  # (n, C, L) constraint tokens, NOTHING-padded
    lengths: Tensor  # (n, C); 0 where a sentence has fewer constraints
    ordered: bool
    no_glue: Tensor | None  # (V,) tokens that continue a word: barred right after a constraint's last token
    met: Tensor  # (rows, C) constraints met (absent ones count as met)
    progress: Tensor  # (rows, C) the longest start of each constraint the row's history ends with
    ended: Tensor  # (rows,) the row's last token completed a constraint
    twins: Tensor | None = None  # (n, C, C) `earlier_twins` (None: no line asks for a term twice)

    @classmethod
    def of(cls, controls: Sequence[LineControls | None], k: int, vocab: int, ordered: bool,
           device: torch.device) -> Terms:
        cons, lengths = padded([list(c.constraints) if c else [] for c in controls], device)
        glue = next((c.glue for c in controls if c and c.glue), frozenset())
        no_glue = None
        if glue:
            no_glue = torch.zeros(vocab, dtype=torch.bool)
            no_glue[list(glue)] = True
            no_glue = no_glue.to(device)
        met = lengths.eq(0).repeat_interleave(k, dim=0)
        twins = earlier_twins(cons, lengths)
        return cls(cons, lengths, ordered, no_glue, met, torch.zeros_like(met, dtype=torch.long),
                   torch.zeros(met.size(0), dtype=torch.bool, device=device),
                   twins if any(len(set(c.constraints)) < len(c.constraints) for c in controls if c) else None)

    def bar(self, lprobs: Tensor, reached: Tensor) -> Tensor:
        """EOS barred while a row has an unmet constraint (unless at its limit: step 4), and a word
        continued right after a constraint."""
        lprobs[:, EOS_ID] = lprobs[:, EOS_ID].masked_fill(~self.met.all(dim=1) & ~reached, NEG_INF)
        if self.no_glue is not None:
            lprobs = lprobs.masked_fill(self.ended[:, None] & self.no_glue, NEG_INF)
        return lprobs

    def after(self, history: Tensor, flat: Tensor, tokens: Tensor, row_sent: Tensor, row_cons: Tensor,
              row_len: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """Per candidate (its row ``flat``, its token): constraints met, progress, bank (with progress)
        and constraint tokens met (without); ``row_sent``, ``row_cons``, ``row_len``: each live row's
        sentence and constraints."""
        cons, lengths = row_cons.index_select(0, flat), row_len.index_select(0, flat)
        twins = None if self.twins is None else self.twins[row_sent.index_select(0, flat)]
        window = torch.cat([last_tokens(history, cons.size(2) - 1).index_select(0, flat), tokens[:, None]], dim=1)
        met, progress, bank = advance(window, cons, lengths, self.met.index_select(0, flat), self.ordered, twins)
        return met, progress, bank, (lengths * met).sum(dim=1)

    def choose(self, rows: Tensor, met: Tensor, progress: Tensor) -> None:
        """The new live rows came from ``rows`` with these states."""
        before = self.met.index_select(0, rows)
        self.met, self.progress, self.ended = met, progress, (met & ~before).any(dim=1)

    def keep(self, rows: Tensor) -> None:
        self.met, self.progress, self.ended = self.met[rows], self.progress[rows], self.ended[rows]


def _unique(index: Tensor) -> Tensor:
    """Per row of candidate indices, those equal to an earlier one."""
    return (index[:, :, None].eq(index[:, None, :]) & _earlier(index.size(1), index.device)).any(dim=-1)


def _round_robin(scores: Tensor, bank: Tensor, live: Tensor, top_bank: int, k: int) -> Tensor:
    """Step 3: the K candidates per sentence, each bank's best first (fullest bank first), then each
    bank's second best, and so on."""
    key = _rank_in_bank(scores, bank, live) * (top_bank + 1) + (top_bank - bank)
    key = key.masked_fill(~live, (scores.size(1) + 1) * (top_bank + 1))
    return key.topk(k, dim=1, largest=False).indices


@torch.inference_mode()
def constrained_beam_search(model: Decoder, src: Tensor, cfg: SearchConfig,
                            controls: Sequence[LineControls | None]) -> list[list[Hypothesis]]:
    """The ``cfg.nbest`` best hypotheses of each source row that contain its constraints, best first
    (with as many constraint tokens as fit where the length limit cuts them)."""
    k, device, n = cfg.beam, src.device, src.size(0)
    cache = model.start_cache(model.encode(src))
    cache.expand(k)
    steering = Steering.of(controls, cfg, n, device)
    limit = max_lengths(src, cfg, model, steering)
    terms = Terms.of(controls, k, model.cfg.tgt_vocab, cfg.ordered_constraints, device)
    total = terms.lengths.sum(dim=1)
    top_bank, max_steps, first_limit = int(total.max()), int(limit.max()) + 1, int(limit.min())
    sent, scores, tokens, history = start_beams(n, k, device)
    finished = Finished.empty(n, k, max_steps, device)
    out = Results(n, k)
    for step in range(max_steps):
        b, row_sent = sent.numel(), sent.repeat_interleave(k)
        steer = steer_at(steering, history, row_sent, step)
        lprobs = step_log_probs(model, tokens, cache, first=step == 0, steer=steer)
        reached = limit[row_sent] <= step
        lprobs = terms.bar(only_eos_where(reached, lprobs) if step >= first_limit else lprobs, reached)
        vocab = lprobs.size(-1)
        cand = (scores.view(-1, 1) + lprobs).view(b, k * vocab)
        row_cons, row_len = terms.cons[row_sent], terms.lengths[row_sent]
        index = _candidates(cand, lprobs, row_cons, row_len, terms.met, terms.progress, k, terms.ordered)
        m = index.size(1)
        cand_scores = cand.gather(1, index).masked_fill(_unique(index), NEG_INF)
        origin = index // vocab + torch.arange(b, device=device)[:, None] * k  # row of each candidate
        cand_tokens, flat = index % vocab, origin.view(-1)
        met, progress, bank, met_tokens = terms.after(history, flat, cand_tokens.view(-1), row_sent, row_cons, row_len)
        valid, is_eos = cand_scores.gt(NEG_INF), cand_tokens.eq(EOS_ID)
        # Finished: EOS candidates, merged into each sentence's K best by (constraint tokens, score).
        ending = torch.where(is_eos & valid, cand_scores / length_penalty(float(step + 1), cfg.length_penalty,
                                                                                cfg.length_penalty_form),
                             NEG_INF)
        finished.merge(ending, met_tokens.view(b, m), history.index_select(0, flat).view(b, m, step))
        # Live: K candidates round-robin across banks, fullest first.
        live = valid & ~is_eos
        chosen = _round_robin(cand_scores, bank.view(b, m), live, top_bank, k)
        scores = torch.where(live.gather(1, chosen), cand_scores.gather(1, chosen), NEG_INF)
        rows, tokens = origin.gather(1, chosen).view(-1), cand_tokens.gather(1, chosen).view(-1)
        picked = (chosen + torch.arange(b, device=device)[:, None] * m).view(-1)
        terms.choose(rows, met.index_select(0, picked), progress.index_select(0, picked))
        history = torch.cat([history.index_select(0, rows), tokens[:, None]], dim=1)
        cache.reorder(rows, memory=False)
        # Done: its n best finished meet every constraint and no live beam can beat them; or the limit.
        best_live = scores.max(dim=1).values
        bound = best_live / length_penalty(limit[sent].float() + 1, cfg.length_penalty, cfg.length_penalty_form)
        full = finished.banks[:, : cfg.nbest].eq(total[sent][:, None]).all(dim=1)
        done = (full & (finished.scores[:, cfg.nbest - 1] >= bound)) | (limit[sent] <= step) | best_live.isneginf()
        if bool(done.any()):  # the step's one host read
            keep = out.collect(done, sent, finished.tokens, finished.scores)
            if keep.numel() == 0:
                break
            keep_rows = (keep[:, None] * k + torch.arange(k, device=device)).view(-1)
            sent, scores, tokens, history = sent[keep], scores[keep], tokens[keep_rows], history[keep_rows]
            finished.keep(keep)
            terms.keep(keep_rows)
            cache.reorder(keep_rows)
    return out.hypotheses(cfg)
