"""Sources too long for the model: translated in pieces, the pieces' translations joined.

Two limits. A model encodes at most ``max_positions`` source tokens (its sinusoidal table, and
attention's cost, end there): a longer line is cut into pieces of at most ``max_positions - 1``
subwords plus EOS, after the last sentence-final punctuation (``. ! ?``) that fits, else after the
last ``; : ,``, else at the limit. And a model has only learned lines as long as its training data's:
one trained on Multi30k (sources of at most 46 subwords) given 40 sentences on one line (~600) wrote
20 words and stopped. So a line more than twice the longest training source (`Manifest.longest_training_source`)
is cut after every sentence end, and a sentence still that long is cut, clause ends first, into pieces
no longer than the longest training source. Lines within those limits are never touched. Each piece
is translated like any sentence, and the pieces' best translations are concatenated in order.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from nmtk.decode.search.config import Hypothesis
from nmtk.vocab import unhinted_length

SENTENCE_END, CLAUSE_END = ".!?", ";:,"
_MARKERS = ("▁", "##")


def boundary_strengths(pieces: Sequence[str]) -> np.ndarray:
    """Per vocabulary id: 2 after a piece ending a sentence, 1 after one ending a clause, else 0."""
    strength = np.zeros(len(pieces), dtype=np.int8)
    for i, piece in enumerate(pieces):
        text = piece
        for marker in _MARKERS:
            text = text.replace(marker, "")
        text = text.rstrip()
        if text and text[-1] in SENTENCE_END:
            strength[i] = 2
        elif text and text[-1] in CLAUSE_END:
            strength[i] = 1
    return strength


def cut_strengths(ids: Sequence[int], strength: np.ndarray, markers: tuple[int, int, int] | None = None
                  ) -> np.ndarray:
    """Per position of ``ids``: how good a cut after it is (`boundary_strengths`), -1 where none may
    be: inside a terminology hint (``markers``: `TextPipeline.hint_markers`), which a piece must hold
    whole, from ``__source__`` to ``__done__``."""
    at = strength[np.asarray(ids, dtype=np.int64)].astype(np.int8)
    if markers is not None and len(at):
        source, _, done = markers
        tokens = np.asarray(ids)
        at[(np.cumsum(tokens == source) - np.cumsum(tokens == done)) > 0] = -1
    return at


def split_ids(ids: Sequence[int], limit: int, strength: np.ndarray,
              markers: tuple[int, int, int] | None = None) -> list[list[int]]:
    """``ids`` cut into pieces of at most ``limit``, each ending at the strongest boundary that fits
    (at the limit where none does), never inside a hint."""
    pieces, start = [], 0
    ids = list(ids)
    at = cut_strengths(ids, strength, markers)
    while len(ids) - start > limit:
        window = at[start : start + limit]
        best = int(window.max())
        ends = np.flatnonzero(window == best) if best >= 0 else []
        cut = start + (int(ends[-1]) + 1 if len(ends) else limit)
        pieces.append(ids[start:cut])
        start = cut
    pieces.append(ids[start:])
    return pieces


def sentences(ids: Sequence[int], strength: np.ndarray, markers: tuple[int, int, int] | None = None
              ) -> list[list[int]]:
    """``ids`` cut after every sentence end."""
    ids = list(ids)
    ends = np.flatnonzero(cut_strengths(ids, strength, markers) == 2) + 1
    bounds = [0, *(int(e) for e in ends if e < len(ids)), len(ids)]
    return [ids[a:b] for a, b in zip(bounds, bounds[1:], strict=False) if b > a]


def split_line(ids: Sequence[int], limit: int, strength: np.ndarray, longest: int | None,
               markers: tuple[int, int, int] | None = None) -> list[list[int]]:
    """The pieces one source line is translated in (see the module docstring); ``[ids]`` when it fits.
    Against the training data's lengths a line counts its own words, not its hints' markup (as batches
    and the length limit count it: `nmtk.vocab.unhinted_length`)."""
    if longest is not None and (unhinted_length(ids, markers) > 2 * longest or len(ids) > limit):
        cut = min(longest, limit)
        return [p for s in sentences(ids, strength, markers)
                for p in (split_ids(s, cut, strength, markers) if _too_long(s, cut, limit, markers) else [s]) if p]
    return split_ids(ids, limit, strength, markers) if len(ids) > limit else [list(ids)]


def _too_long(sentence: Sequence[int], cut: int, limit: int, markers: tuple[int, int, int] | None) -> bool:
    """Whether a sentence of a long line is cut too: twice the pieces' size in words, or past the model."""
    return unhinted_length(sentence, markers) > 2 * cut or len(sentence) > limit


@dataclass
class Segments:
    """Sources with the long ones cut into pieces: ``pieces`` to decode, ``count[i]`` of them for source i."""

    pieces: list[list[int]]
    count: list[int]

    @classmethod
    def of(cls, sources: Sequence[Sequence[int]], limit: int, strength: np.ndarray,
           longest: int | None = None, head: Sequence[int] = (), markers: tuple[int, int, int] | None = None
           ) -> Segments:
        """``head``: ids a source begins with that every piece must begin with too (a multilingual
        model's target tag, M2M-100's source code): the rest is cut, and each piece gets the head.
        ``markers``: the vocabulary's hint symbols (a hint is never cut, nor counted as words)."""
        pieces, count, head = [], [], list(head)
        for ids in sources:
            ids = list(ids)
            start = len(head) if head and ids[: len(head)] == head else 0
            parts = [ids[:start] + p for p in split_line(ids[start:], limit - start, strength, longest, markers)]
            pieces.extend(parts)
            count.append(len(parts))
        return cls(pieces, count)

    def decode(self, decode: Callable[[list[list[int]]], list[list[Hypothesis]]]) -> list[list[Hypothesis]]:
        """Per source, its hypotheses: ``decode`` (any engine's search) over the pieces, then `join`."""
        return self.join(decode(self.pieces))

    def join(self, hyps: list[list[Hypothesis]]) -> list[list[Hypothesis]]:
        """Per source, its pieces' hypotheses; a source in several pieces gets one hypothesis: the
        pieces' best translations in order, scored with the mean of their scores."""
        joined, k = [], 0
        for n in self.count:
            group = hyps[k : k + n]
            k += n
            if n == 1:
                joined.append(group[0])
                continue
            best = [h[0] for h in group if h]
            tokens = [t for h in best for t in h.tokens]
            hyp = Hypothesis(tokens, sum(h.score for h in best) / max(len(best), 1), cut=any(h.cut for h in best))
            if best and all(h.alignment is not None for h in best):  # word indices continue across pieces
                from nmtk.decode.search.word_alignment import Alignment

                pairs, src, tgt = [], 0, 0
                for h in best:
                    pairs += h.alignment.shifted(src, tgt).pairs
                    src, tgt = src + h.alignment.source_words, tgt + h.alignment.target_words
                hyp.alignment = Alignment(pairs, src, tgt)
            joined.append([hyp])
        return joined


def warn_split(line: int, ids: Sequence[int], max_positions: int, pieces: int, longest: int | None = None,
               markers: tuple[int, int, int] | None = None) -> None:
    """The one warning a line translated in pieces gets."""
    from nmtk.console import console

    if len(ids) > max_positions - 1:
        subwords, why = len(ids), f"more than the model's {max_positions - 1:,}"
    else:
        subwords = unhinted_length(ids, markers)
        why = f"more than twice the longest training source ({longest:,})"
    console.print(f"warning: line {line}: {subwords:,} subwords, {why}: translated in {pieces} pieces, joined")
