"""Sources longer than the model accepts: translated in pieces, the pieces' translations joined.

A model encodes at most ``max_positions`` source tokens (its sinusoidal table, and attention's cost,
end there). WMT test sets are not length-filtered and user input never is, so a longer line is cut
into pieces of at most ``max_positions - 1`` subwords plus EOS: after the last sentence-final
punctuation (``. ! ?``) that fits, else after the last ``; : ,``, else at the limit. Each piece is
translated like any sentence, and the pieces' best translations are concatenated in order.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from nmtk.decode.config import Hypothesis

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


def split_ids(ids: Sequence[int], limit: int, strength: np.ndarray) -> list[list[int]]:
    """``ids`` cut into pieces of at most ``limit``, each ending at the strongest boundary that fits."""
    pieces, start = [], 0
    ids = list(ids)
    while len(ids) - start > limit:
        window = strength[np.asarray(ids[start : start + limit])]
        best = int(window.max())
        cut = start + limit if best == 0 else start + int(np.flatnonzero(window == best)[-1]) + 1
        pieces.append(ids[start:cut])
        start = cut
    pieces.append(ids[start:])
    return pieces


@dataclass
class Segments:
    """Sources with the long ones cut into pieces: ``pieces`` to decode, ``count[i]`` of them for source i."""

    pieces: list[list[int]]
    count: list[int]

    @classmethod
    def of(cls, sources: Sequence[Sequence[int]], limit: int, strength: np.ndarray) -> Segments:
        pieces, count = [], []
        for ids in sources:
            parts = split_ids(ids, limit, strength) if len(ids) > limit else [list(ids)]
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
            hyp = Hypothesis(tokens, sum(h.score for h in best) / max(len(best), 1))
            if best and all(h.alignment is not None for h in best):  # word indices continue across pieces
                from nmtk.decode.alignment import Alignment

                pairs, src, tgt = [], 0, 0
                for h in best:
                    pairs += h.alignment.shifted(src, tgt).pairs
                    src, tgt = src + h.alignment.source_words, tgt + h.alignment.target_words
                hyp.alignment = Alignment(pairs, src, tgt)
            joined.append([hyp])
        return joined


def warn_split(line: int, subwords: int, max_positions: int, pieces: int) -> None:
    """The one warning a line translated in pieces gets."""
    from nmtk.console import console

    console.print(f"warning: line {line}: {subwords:,} subwords, more than the model's {max_positions - 1:,}: "
                  f"translated in {pieces} pieces, joined")
