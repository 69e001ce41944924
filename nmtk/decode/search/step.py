"""One step of every search, shared by greedy, beam, constrained beam search and sampling: the next
token's log-probabilities with the rules every search obeys (no <pad>, <s> or empty translation; EOS
at a line's length limit; the line controls' steering), the GNMT length penalty, and the unpacking of
finished hypotheses."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import torch
from torch import Tensor

from nmtk.decode.search.config import Hypothesis, SearchConfig
from nmtk.decode.search.contract import Cache, Decoder
from nmtk.decode.search.steering import Steering
from nmtk.vocab import BOS_ID, EOS_ID, PAD_ID

NEG_INF = float("-inf")


def length_penalty(length: Tensor | float, alpha: float, form: str = "gnmt") -> Tensor | float:
    """What a hypothesis' log-probability is divided by; |Y| = ``length`` counts its EOS. ``gnmt``:
    ((5 + |Y|) / 6)^α. ``power``: |Y|^α (CTranslate2's and fairseq's)."""
    if form == "power":
        return length**alpha
    return ((5.0 + length) / 6.0) ** alpha


def stops_at_beam_finished(cfg: SearchConfig) -> bool:
    """Whether a beam search ends once ``beam`` hypotheses have finished (the ``power`` form's rule, as
    CTranslate2 and fairseq; with α = 0 both rules are one: the best finished beats every live beam)."""
    return cfg.length_penalty_form == "power" and cfg.length_penalty != 0


def max_lengths(src: Tensor, cfg: SearchConfig, model: Decoder, steering: Steering | None = None) -> Tensor:
    """Per sentence: a·|x| + b output tokens (|x| without EOS and hints' markup), never past the model's
    positions; a line with a prefix may always go one token past it."""
    src_len = src.ne(PAD_ID).sum(dim=1) - 1
    if cfg.hint_markers is not None:
        source, target, done = cfg.hint_markers  # ``__target__ Wort __done__`` whole, and ``__source__``
        inside = src.eq(target).cumsum(dim=1) - src.eq(done).cumsum(dim=1)
        src_len = src_len - (inside.gt(0) | src.eq(done) | src.eq(source)).sum(dim=1)
    limit = (cfg.max_len_a * src_len.float() + cfg.max_len_b).long()
    if steering is not None:
        limit = steering.limits(limit)
    return limit.clamp(min=1, max=model.cfg.max_positions - 1)


def steer_at(steering: Steering | None, history: Tensor, sent: Tensor, step: int) -> Callable[[Tensor], Tensor] | None:
    """`step_log_probs`'s ``steer`` for this step (None: nothing steers the batch)."""
    return None if steering is None else partial(steering.logits, history=history, sent=sent, step=step)


def output_ids(model: Decoder, steering: object | None = None) -> Tensor | None:
    """The target ids of `step_log_probs`' columns when the model projects onto a lexical shortlist's
    candidates (`Transformer.restrict_output`) and nothing steers the batch: the search then takes its
    softmax, top-k and samples over those few columns and maps what it picks back with ``ids[index]``.
    None: the columns are the vocabulary (no shortlist, or steering, which works on vocabulary ids).
    The candidates are sorted and hold the special ids, so that columns 0-3 are ``<pad>, <s>, </s>,
    <unk>`` in both."""
    return None if steering is not None else getattr(model, "output_ids", None)


def as_tokens(ids: Tensor | None, index: Tensor) -> Tensor:
    """The vocabulary ids of columns ``index`` (`output_ids`)."""
    return index if ids is None else ids[index]


def in_vocabulary(model: Decoder, logits: Tensor) -> Tensor:
    """A shortlisted model's logits over its candidates (`output_ids`) placed in the vocabulary's
    columns, -inf elsewhere; the vocabulary's logits as they are."""
    ids = getattr(model, "output_ids", None)
    if ids is None or logits.size(-1) == model.cfg.tgt_vocab:
        return logits
    return logits.new_full((logits.size(0), model.cfg.tgt_vocab), NEG_INF).index_copy_(1, ids, logits)


def step_log_probs(model: Decoder, tokens: Tensor, cache: Cache, first: bool = False,
                   steer: Callable[[Tensor], Tensor] | None = None, compact: bool = False) -> Tensor:
    """Log-probabilities of the next token; <pad> and <s> can never be produced, nor EOS as the
    ``first`` token: a sentence never translates to nothing. Without that rule a weakly trained model
    under the GNMT length penalty can prefer the empty hypothesis (one EOS, penalty 1) to every real
    one; fairseq (``min_len`` 1) and CTranslate2 (``min_decoding_length`` 1) forbid it the same way.
    ``steer``: the line controls' change to the raw scores (`Steering.logits`), before normalising.
    ``compact``: over a shortlisted model's candidates (`output_ids`), else over the vocabulary."""
    logits = model.decode_step(tokens, cache).float()
    if not compact:
        logits = in_vocabulary(model, logits)
    logits = logits if steer is None else steer(logits)
    lprobs = torch.log_softmax(logits, dim=-1, out=logits)  # in place: the step's own (rows, V), the largest
    lprobs[:, PAD_ID] = NEG_INF
    lprobs[:, BOS_ID] = NEG_INF
    if first:
        lprobs[:, EOS_ID] = NEG_INF
    return lprobs


def only_eos_where(reached: Tensor, lprobs: Tensor, eos: int = EOS_ID, neg_inf: float = NEG_INF) -> Tensor:
    """Rows of ``lprobs`` (..., V) where ``reached`` (a hypothesis at its length limit) may only end:
    every token but EOS gets -∞, and EOS keeps the model's own log-probability. (Scoring the forced
    EOS 0 would reward exactly the hypotheses that run to the limit, often degenerate repetitions.)
    Searches call it only from the first step at which some row can reach its limit, on the step's own
    ``lprobs``, which it changes in place (no second (rows, V) tensor: the largest of a step)."""
    not_eos = torch.ones(lprobs.size(-1), dtype=torch.bool, device=lprobs.device)
    not_eos[eos] = False  # (the ids as defaults: TorchScript reads no global, `beam._advance`)
    return lprobs.masked_fill_(reached[..., None] & not_eos, neg_inf)


def unpack(seqs: Tensor | None, scores: Tensor, cfg: SearchConfig, attention: Tensor | None = None
           ) -> list[Hypothesis]:
    hyps = []
    if seqs is None:
        return hyps
    for j in range(min(cfg.returned, scores.numel())):
        if scores[j].isneginf():
            break
        row = seqs[j].tolist()
        tokens = row[: row.index(PAD_ID)] if PAD_ID in row else row
        kept = None if attention is None else attention[j, : len(tokens)].numpy()
        hyps.append(Hypothesis(tokens, float(scores[j]), attention=kept))
    return hyps


class Results:
    """The hypotheses of sentences as they finish: the one host copy of a step where some did."""

    def __init__(self, n: int, k: int) -> None:
        self.tokens: list[Tensor | None] = [None] * n
        self.scores = torch.full((n, k), NEG_INF)
        self.attention: list[Tensor | None] = [None] * n

    def collect(self, done: Tensor, sent: Tensor, tokens: Tensor, scores: Tensor,
                attention: Tensor | None = None) -> Tensor:
        """Keep the finished hypotheses (``tokens`` (b, K, T), ``scores`` (b, K), ``attention`` (b, K, T, S)
        where the search watched it) of the running sentences ``sent`` where ``done``; the indices of those
        still running."""
        finished = done.nonzero().flatten()
        kept = attention[finished].float().cpu() if attention is not None else [None] * len(finished)
        for i, seqs, fin, att in zip(sent[finished].tolist(), tokens[finished].cpu(), scores[finished].cpu(), kept,
                                     strict=True):
            self.tokens[i], self.scores[i], self.attention[i] = seqs, fin, att
        return (~done).nonzero().flatten()

    def hypotheses(self, cfg: SearchConfig) -> list[list[Hypothesis]]:
        return [unpack(self.tokens[i], self.scores[i], cfg, self.attention[i]) for i in range(len(self.tokens))]


def start_beams(n: int, k: int, device: torch.device) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """A beam search's state before its first step: each running row's sentence index, the (n, K) beam
    scores (only beam 0 live, so the first step has no duplicates), the last tokens (BOS) and the
    (n·K, 0) histories."""
    sent = torch.arange(n, device=device)
    scores = torch.full((n, k), NEG_INF, device=device)
    scores[:, 0] = 0.0
    tokens = torch.full((n * k,), BOS_ID, dtype=torch.long, device=device)
    return sent, scores, tokens, torch.empty((n * k, 0), dtype=torch.long, device=device)
