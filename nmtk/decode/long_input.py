"""Lines of several sentences, and sources too long for the model: translated in pieces, the pieces'
translations joined.

A line holding several sentences is translated sentence by sentence. A model trained on sentences
(Multi30k's captions, WMT's segments) translates the first of them and drops the rest: test_2016_flickr
joined three lines to one gave 9.89 BLEU against 38.25 sentence by sentence, its output 45 % shorter.
A sentence ends after a piece of ``. ! ?`` that stands alone (Moses splits it off its word: ``street
.``, but keeps ``Mr.``, ``e.g.`` and ``3.5`` whole), closing quotes and brackets after it, where the next
word begins with a capital or a digit (`sentence_kinds`); never inside a terminology hint. Where
the source side has no Moses (the piece is glued to its word) or no capitals, lines are not cut so.

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
from nmtk.text.brackets import bracket_step, closed_later
from nmtk.vocab import unhinted_length

SENTENCE_END, CLAUSE_END = ".!?", ";:,"
_MARKERS = ("▁", "##")
#: Closing quotes and brackets, which stay with the sentence they close.
CLOSERS = "\"'”’»)]"
#: `sentence_kinds`: a word of sentence-final punctuation alone, a word of closers alone, a word that
#: begins with a capital, the rest of such punctuation (``...`` as ``▁.`` ``.`` ``.``), any other word,
#: a word that begins with a digit.
ENDS, CLOSES, OPENS, TRAILS, WORDS, NUMBERS = 1, 2, 3, 4, 5, 6


def boundary_strengths(pieces: Sequence[str]) -> np.ndarray:
    """Per vocabulary id: 2 after a piece ending a sentence, 1 after one ending a clause, else 0."""
    strength = np.zeros(len(pieces), dtype=np.int8)
    for i, piece in enumerate(pieces):
        text = _bare(piece).rstrip()
        if text and text[-1] in SENTENCE_END:
            strength[i] = 2
        elif text and text[-1] in CLAUSE_END:
            strength[i] = 1
    return strength


def _bare(piece: str) -> str:
    """A piece's text without the subword model's word markers."""
    for marker in _MARKERS:
        piece = piece.replace(marker, "")
    return piece


def sentence_kinds(pieces: Sequence[str], starts: np.ndarray) -> np.ndarray:
    """Per vocabulary id, what it says of a sentence boundary (`ENDS`, `CLOSES`, `OPENS`; 0: nothing),
    from the pieces that begin a word (``starts``: `nmtk.text.subword.word_starts`)."""
    kinds = np.zeros(len(pieces), dtype=np.int8)
    for i, piece in enumerate(pieces):
        text = _bare(piece)
        if not text:
            continue
        if not starts[i]:
            kinds[i] = TRAILS if all(c in SENTENCE_END + CLOSERS for c in text) else 0
        elif all(c in SENTENCE_END for c in text):
            kinds[i] = ENDS
        elif all(c in CLOSERS for c in text):
            kinds[i] = CLOSES
        else:
            kinds[i] = OPENS if text[0].isupper() else NUMBERS if text[0].isdigit() else WORDS
    return kinds


def bracket_steps(pieces: Sequence[str]) -> np.ndarray:
    """Per vocabulary id: the brackets its piece opens less those it closes (`bracket_step`)."""
    return np.array([bracket_step(_bare(p)) for p in pieces], dtype=np.int8)


def sentences_of(ids: Sequence[int], kinds: np.ndarray, markers: tuple[int, int, int] | None = None,
                 brackets: np.ndarray | None = None) -> list[list[int]]:
    """``ids`` cut into its sentences (see the module docstring; ``kinds``: `sentence_kinds`). A sentence
    of one word is none (``1. Buy milk``: a list's number); none ends before a number inside brackets
    that close later (``brackets``: `bracket_steps`; why: `nmtk.text.brackets`). Sentences in brackets
    are still cut ("(A cat sleeps. A bird sings.)"): a model trained on sentences drops all but the first."""
    ids = list(ids)
    at = np.asarray(ids, dtype=np.int64)
    kind = kinds[at]
    ends = np.flatnonzero(kind[:-1] == ENDS)
    if not len(ends):  # most lines: one sentence, its end (if any) last
        return [ids]
    inside = _in_hints(ids, markers)
    bracketed = closed_later(brackets[at]) if brackets is not None else np.zeros(len(ids), dtype=bool)
    opens = (kind == OPENS) | (kind == NUMBERS)
    words = np.cumsum(opens | (kind == WORDS))
    bounds = [0]
    for end in ends:
        start = bounds[-1]
        if end < start:  # punctuation the last cut stepped over ("?!", "...")
            continue
        after = int(end) + 1
        while after < len(ids) and kind[after] in (ENDS, CLOSES, TRAILS):
            after += 1
        own = words[end] - (words[start - 1] if start else 0)
        numbered = after < len(ids) and kind[after] == NUMBERS and bracketed[after - 1]
        if after < len(ids) and opens[after] and not inside[after - 1] and not numbered and own > 1:
            bounds.append(after)
    bounds.append(len(ids))
    return [ids[a:b] for a, b in zip(bounds, bounds[1:], strict=False) if b > a]


def cut_strengths(ids: Sequence[int], strength: np.ndarray, markers: tuple[int, int, int] | None = None
                  ) -> np.ndarray:
    """Per position of ``ids``: how good a cut after it is (`boundary_strengths`), -1 where none may
    be: inside a terminology hint (``markers``: `TextPipeline.hint_markers`), which a piece must hold
    whole, from ``__source__`` to ``__done__``."""
    at = strength[np.asarray(ids, dtype=np.int64)].astype(np.int8)
    at[_in_hints(ids, markers)] = -1
    return at


def _in_hints(ids: Sequence[int], markers: tuple[int, int, int] | None) -> np.ndarray:
    """Per position of ``ids``, whether a cut after it would fall inside a hint (from ``__source__`` to
    ``__done__``)."""
    if markers is None or not len(ids):
        return np.zeros(len(ids), dtype=bool)
    source, _, done = markers
    tokens = np.asarray(ids)
    return (np.cumsum(tokens == source) - np.cumsum(tokens == done)) > 0


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
    """Sources cut into pieces (their sentences; the long ones further): ``pieces`` to decode, ``count[i]``
    of them for source i, ``lengthy[i]`` whether source i was cut for its length."""

    pieces: list[list[int]]
    count: list[int]
    lengthy: list[bool]

    @classmethod
    def of(cls, sources: Sequence[Sequence[int]], limit: int, strength: np.ndarray,
           longest: int | None = None, head: Sequence[int] = (), markers: tuple[int, int, int] | None = None,
           kinds: np.ndarray | None = None, first: Sequence[int] | None = None,
           brackets: np.ndarray | None = None) -> Segments:
        """``head``: ids a source begins with that every piece must begin with too (a multilingual
        model's target tag, M2M-100's source code): the rest is cut, and each piece gets the head.
        ``markers``: the vocabulary's hint symbols (a hint is never cut, nor counted as words).
        ``kinds`` (`sentence_kinds`): sources are cut into their sentences first, ``first[i]`` of source
        i's leading sentences kept together (1 where not given; 0: the source whole, cut for length alone);
        ``brackets`` (`bracket_steps`): no sentence ends before a number inside brackets closed later."""
        segments, head = cls([], [], []), list(head)
        for i, ids in enumerate(sources):
            ids = list(ids)
            start = len(head) if head and ids[: len(head)] == head else 0
            body, together = ids[start:], 1 if first is None else first[i]
            own = sentences_of(body, kinds, markers, brackets) if kinds is not None and together else [body]
            if together > 1:
                own = [[t for sentence in own[:together] for t in sentence], *own[together:]]
            cut = [split_line(sentence, limit - start, strength, longest, markers) for sentence in own]
            segments.pieces.extend(ids[:start] + p for parts in cut for p in parts)
            segments.count.append(sum(len(parts) for parts in cut))
            segments.lengthy.append(any(len(parts) > 1 for parts in cut))
        return segments

    def decode(self, decode: Callable[[list[list[int]]], list[list[Hypothesis]]]) -> list[list[Hypothesis]]:
        """Per source, its hypotheses: ``decode`` (any engine's search) over the pieces, then `join`."""
        return self.join(decode(self.pieces))

    def join(self, hyps: list[list[Hypothesis]]) -> list[list[Hypothesis]]:
        """Per source, its pieces' hypotheses; a source in several pieces gets as many as its pieces have
        at most, the k-th joining each piece's k-th (its last, where it has fewer) in order, scored
        with the mean of their scores: the first, every piece's best (an n-best list's alternatives
        each differ where the pieces' do, as CTranslate2's users join sentences' alternatives)."""
        joined, k = [], 0
        for n in self.count:
            group = hyps[k : k + n]
            k += n
            if n == 1:
                joined.append(group[0])
                continue
            found = [h for h in group if h]
            width = max((len(h) for h in found), default=0)
            joined.append([_joined([h[min(j, len(h) - 1)] for h in found]) for j in range(width)] or
                          [_joined([])])
        return joined


def _joined(parts: list[Hypothesis]) -> Hypothesis:
    """One hypothesis of ``parts`` in order: their tokens, the mean of their scores, their alignments
    (word indices continuing across parts)."""
    tokens = [t for h in parts for t in h.tokens]
    hyp = Hypothesis(tokens, sum(h.score for h in parts) / max(len(parts), 1), cut=any(h.cut for h in parts),
                     retried=any(h.retried for h in parts))
    if parts and all(h.alignment is not None for h in parts):
        from nmtk.decode.search.word_alignment import Alignment

        pairs, src, tgt = [], 0, 0
        for h in parts:
            pairs += h.alignment.shifted(src, tgt).pairs
            src, tgt = src + h.alignment.source_words, tgt + h.alignment.target_words
        hyp.alignment = Alignment(pairs, src, tgt)
    return hyp


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
