"""Steering a search: each line's prefix and banned phrases, and the repetition limits, as tensor
operations on one step's logits for every row of the batch at once.

The searches call `Steering.logits` on the raw scores before their log-softmax, as CTranslate2
applies its logits processors: a banned or repeated token's probability goes to the others, and the
two engines rank the same hypotheses. A prefix token is forced the same way (every other token -∞),
so it is produced with log-probability 0 and adds nothing to the score: as CTranslate2's
``target_prefix``, the hypotheses of one line are ranked by what follows the prefix.

A model with per-target output vocabularies gives a piece its target never produced -∞ (`nmtk.model.
languages`), forced or not: a prefix or term holding one is refused before the search, naming its line
(`TranslatorBase.controls`).

Each line's phrases are padded into one tensor per kind (lines × phrases × pieces). Banned phrases
are matched against the end of each row's history by one comparison, the equivalent of walking
Sockeye's AvoidTrie for every row, without a Python loop over rows or phrases.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from nmtk.decode.search.config import LineControls, SearchConfig

NEG_INF = float("-inf")
NOTHING = -1  # padding of the phrase tensors: never a token id
EARLY = -3  # history before its first token: matches nothing


def padded(phrases: Sequence[Sequence[Sequence[int]]], device: torch.device) -> tuple[Tensor, Tensor]:
    """Per line a list of phrases as one (lines, phrases, pieces) tensor padded with `NOTHING`, and the
    (lines, phrases) lengths (0 where a line has fewer phrases)."""
    most = max((len(p) for line in phrases for p in line), default=0)
    count = max((len(line) for line in phrases), default=0)
    table = torch.full((len(phrases), count, max(most, 1)), NOTHING, dtype=torch.long)
    lengths = torch.zeros((len(phrases), count), dtype=torch.long)
    for i, line in enumerate(phrases):
        for j, phrase in enumerate(line):
            table[i, j, : len(phrase)] = torch.tensor(phrase, dtype=torch.long)
            lengths[i, j] = len(phrase)
    return table.to(device), lengths.to(device)


def last_tokens(history: Tensor, width: int) -> Tensor:
    """The last ``width`` tokens of each row, left-filled with `EARLY` where a row has fewer."""
    have = history.size(1)
    if have >= width:
        return history[:, have - width :]
    return torch.cat([history.new_full((history.size(0), width - have), EARLY), history], dim=1)


def hit(tokens: Tensor, mask: Tensor, vocab: int) -> Tensor:
    """A (rows, vocab) boolean map with ``True`` at each ``tokens[r, j]`` where ``mask[r, j]``
    (duplicates allowed: summed, so no write order matters)."""
    counts = torch.zeros((tokens.size(0), vocab), device=tokens.device)
    return counts.scatter_add_(1, tokens.clamp(min=0), mask.float()).gt(0)


@dataclass
class Steering:
    """One batch's controls: per line (indexed by a row's sentence) a prefix and banned phrases, and
    the search's repetition limits for every line."""

    prefix: Tensor  # (lines, P) forced tokens, NOTHING-padded
    prefix_len: Tensor  # (lines,)
    bans: Tensor  # (lines, B, L) banned phrases, NOTHING-padded
    ban_len: Tensor  # (lines, B)
    no_repeat: int = 0
    penalty: float = 1.0

    @classmethod
    def of(cls, controls: Sequence[LineControls | None] | None, cfg: SearchConfig, lines: int,
           device: torch.device) -> Steering | None:
        """The steering of a batch of ``lines`` (None where nothing steers it: the search runs as before)."""
        controls = list(controls) if controls is not None else [None] * lines
        if not cfg.steers and not any(c for c in controls):
            return None
        prefix, prefix_len = padded([[c.prefix] if c and c.prefix else [] for c in controls], device)
        bans, ban_len = padded([list(c.barred) if c else [] for c in controls], device)
        return cls(prefix[:, 0] if prefix.size(1) else prefix.new_zeros((lines, 0)),
                   prefix_len[:, 0] if prefix_len.size(1) else prefix_len.new_zeros(lines),
                   bans, ban_len, cfg.no_repeat_ngram_size, cfg.repetition_penalty)

    def limits(self, limit: Tensor) -> Tensor:
        """Each line's length limit, raised where needed to hold its prefix and one token more."""
        return torch.maximum(limit, self.prefix_len + 1)

    def logits(self, logits: Tensor, history: Tensor, sent: Tensor, step: int) -> Tensor:
        """``logits`` (rows, V) of the next token after each row's ``history`` (rows, step), changed in
        place (the step's own); row r belongs to line ``sent[r]``."""
        if self.penalty != 1.0 and history.size(1):
            seen = logits.gather(1, history)
            logits = logits.scatter(1, history, torch.where(seen < 0, seen * self.penalty, seen / self.penalty))
        vocab = logits.size(1)
        blocked = self._repeats(history, vocab) if self.no_repeat else None
        forcing = (step < self.prefix_len[sent])[:, None] if step < self.prefix.size(1) else None
        if self.bans.size(1):  # a prefix token is forced even where a ban or a repeat would bar it
            last, match = self._banned(history, sent)
            match = match if forcing is None else match & ~forcing
            bar = torch.full_like(last, float("inf"), dtype=logits.dtype).masked_fill_(match, NEG_INF)
            logits.scatter_reduce_(1, last.clamp(min=0), bar, "amin")
        if forcing is not None:
            others = (torch.arange(vocab, device=logits.device) != self.prefix[sent, step][:, None]) & forcing
            blocked = others if blocked is None else torch.where(forcing, others, blocked)
        return logits if blocked is None else logits.masked_fill_(blocked, NEG_INF)

    def _repeats(self, history: Tensor, vocab: int) -> Tensor:
        """Tokens that would repeat an n-gram (n = ``no_repeat``) already in the row's history."""
        n, have = self.no_repeat, history.size(1)
        if have < max(n - 1, 1) or (n > 1 and have < n):
            return torch.zeros((history.size(0), vocab), dtype=torch.bool, device=history.device)
        if n == 1:
            return hit(history, torch.ones_like(history, dtype=torch.bool), vocab)
        grams = history.unfold(1, n, 1)  # (rows, have - n + 1, n)
        ending = history[:, have - n + 1 :]  # the n - 1 tokens a next token would extend
        match = grams[..., :-1].eq(ending[:, None, :]).all(dim=-1)
        return hit(grams[..., -1], match, vocab)

    def _banned(self, history: Tensor, sent: Tensor) -> tuple[Tensor, Tensor]:
        """Per row and banned phrase of its line, (rows, B): the phrase's last token, and whether that
        token would complete it here (the rest ends the row's history). Barred by a scatter over those
        (rows, B) tokens, not a (rows, V) mask: a step with bans costs what one without does."""
        bans, lengths = self.bans[sent], self.ban_len[sent]  # (rows, B, L), (rows, B)
        width = bans.size(2) - 1
        last = bans.gather(2, (lengths - 1).clamp(min=0)[..., None]).squeeze(2)  # (rows, B)
        if width == 0:
            return last, lengths.gt(0)
        # each phrase's tokens before its last, right-aligned against the end of the history
        position = torch.arange(width, device=bans.device)
        start = width - (lengths - 1)  # (rows, B): positions before it are free
        source = (position - start[..., None]).clamp(min=0)
        context = bans.gather(2, source)
        free = position < start[..., None]
        window = last_tokens(history, width)[:, None, :]
        return last, (context.eq(window) | free).all(dim=-1) & lengths.gt(0)
