"""Every way a subword vocabulary can spell a phrase: what a banned phrase must block.

A search bans *piece sequences*, and a subword model writes one word in many: "Bank" is ``▁Bank``, but
also ``▁B ank``, ``▁Ban k``, and glued to the word before it, ``bank`` after ``▁einer`` gives
"einerbank". Banning only the sequence the subword model's own encoder chooses (``▁Bank``) left a
model free to write the word with other pieces (issue 62: "Ein Mann schläft auf einerbank."). So a
banned phrase becomes the sequences that spell it, in both engines alike (CTranslate2 takes them as
``suppress_sequences``):

- in the case forms a word takes in running text: as written, lower case, capitalised, upper case;
- starting a word (``▁`` / no ``##``) or glued to the previous one (the continuation pieces);
- every split of those strings into vocabulary pieces, fewest pieces first, up to `MAX_SPELLINGS`
  (a phrase of n characters has at most 2^(n-1) splits per form; the cap is reached only by long
  phrases over vocabularies of single characters, and then the spellings left out are the longest).

Torch-free: `TranslatorBase.controls` computes them for either engine.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Sequence

#: The most spellings one phrase is banned as (the fewest-piece ones are kept).
MAX_SPELLINGS = 4096

WORD_START, WORDPIECE_PREFIX = "▁", "##"


class Speller:
    """A vocabulary's pieces by the text they write, to find the sequences that spell a phrase."""

    def __init__(self, pieces: Sequence[str], first_id: int = 0) -> None:
        """``pieces``: the piece of every id (`SubwordModel.pieces`); ids below ``first_id`` (the special
        symbols) and byte pieces (``<0xAB>``) spell nothing."""
        wordpiece = any(p.startswith(WORDPIECE_PREFIX) for p in pieces) and not any(
            p.startswith(WORD_START) for p in pieces)
        self.by_text: dict[str, list[int]] = {}
        for i, piece in enumerate(pieces):
            if i < first_id or not piece or (piece.startswith("<0x") and piece.endswith(">")):
                continue
            if wordpiece:
                text = piece[2:] if piece.startswith(WORDPIECE_PREFIX) else " " + piece
            else:
                text = piece.replace(WORD_START, " ")
            if text:
                self.by_text.setdefault(text, []).append(i)
        self.longest = max((len(t) for t in self.by_text), default=0)

    def spellings(self, phrase: str, limit: int = MAX_SPELLINGS) -> list[tuple[int, ...]]:
        """The piece sequences that write ``phrase`` (words separated by single spaces; Moses-tokenised
        where the target side is) in its case forms, word-initial or glued, fewest pieces first."""
        words = phrase.split()
        if not words:
            return []
        text = " ".join(words)
        forms = dict.fromkeys([text, text.lower(), text[:1].upper() + text[1:], text.upper()])
        targets = [t for form in forms for t in (" " + form, form)]
        found: dict[tuple[int, ...], None] = {}
        for count in range(1, max(len(t) for t in targets) + 1):
            for target in targets:
                for seq in self._splits(target, 0, count):
                    found[seq] = None
                    if len(found) >= limit:
                        return list(found)
        return list(found)

    def _splits(self, text: str, start: int, count: int) -> Iterator[tuple[int, ...]]:
        """The sequences of exactly ``count`` pieces that write ``text[start:]``."""
        if count == 1:
            for i in self.by_text.get(text[start:], ()):
                yield (i,)
            return
        if self._fewest(text, start) > count:
            return
        for end in range(start + 1, min(len(text), start + self.longest) + 1):
            for i in self.by_text.get(text[start:end], ()):
                for rest in self._splits(text, end, count - 1):
                    yield (i, *rest)

    def _fewest(self, text: str, start: int) -> float:
        return _fewest_pieces(self, text)[start]


@functools.lru_cache(maxsize=64)
def _fewest_pieces(speller: Speller, text: str) -> tuple[float, ...]:
    """Per start position, the fewest pieces that write ``text[start:]`` (inf: none can)."""
    best = [float("inf")] * len(text) + [0.0]
    for start in range(len(text) - 1, -1, -1):
        for end in range(start + 1, min(len(text), start + speller.longest) + 1):
            if text[start:end] in speller.by_text:
                best[start] = min(best[start], 1 + best[end])
    return tuple(best)
