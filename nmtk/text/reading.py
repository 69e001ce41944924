"""How a translator reads a line before encoding it: its case folded (`nmtk.text.casing`), its typos
corrected (`nmtk.text.typos`), its links left out for the model (`nmtk.decode.unknown`), its
sentences translated one by one (`nmtk.decode.long_input`), and how the translation is given the line's
case back. ``translate``/
``serve --as-typed`` reads every line as it came."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from nmtk.text.casing import Case, case_of, folded, folded_sentences, kept
from nmtk.text.typos import TypoCorrector


@dataclass(frozen=True)
class Reading:
    """``fold_case``: lines in capitals or title case read in sentence case; ``lang``: the source
    language (English's "I"); ``typos``: the run's corrector (a recipe with ``tokenizer.correct_typos``);
    ``pieces``: how many subword pieces the model spells a word in (a lone word in capitals is read in
    lower case where that takes at most half as many: `nmtk.text.casing.folded_sentences`); ``carry``:
    URLs and e-mail addresses carried through, not read, and the numbers a translation lost carried in
    a second one (`nmtk.decode.unknown`); ``split``: a line of several sentences translated
    sentence by sentence (`nmtk.decode.long_input`)."""

    fold_case: bool = True
    carry: bool = True
    split: bool = True
    lang: str = ""
    typos: TypoCorrector | None = None
    pieces: Callable[[str], int] | None = None
    keep: frozenset[str] = frozenset()  # words read as typed: a glossary's terms in capitals (`Glossary.cased`)
    terms: re.Pattern[str] | None = None  # a hinted glossary's untranslated terms, carried (`Glossary.untranslated`)

    def case_of(self, text: str) -> Case | None:
        return case_of(text) if self.fold_case else None

    def read(self, text: str) -> str:
        """``text`` as the model reads it: its accents composed with their letters (Unicode's NFC: "é"
        typed as e + U+0301, as macOS and some keyboards write it, was split off by Moses and read
        apart), in sentence case where typed in capitals or title case (the line, or a sentence of it),
        its typos corrected."""
        text = composed(text)
        if self.fold_case:
            case = case_of(text)
            read = folded(text, case, self.lang) if case else folded_sentences(text, self.lang, self.pieces)
            text = kept(text, read, self.keep) if self.keep and read != text else read
        return self.typos.corrected(text) if self.typos is not None else text

    def marked(self, sentences: list[str], results: list[list[Any]]) -> list[list[Any]]:
        """Each line's hypotheses (dataclasses with a ``case`` field) marked with the case its source was
        typed in, which the translator's ``detokenize`` gives back (`nmtk.text.casing.recased`)."""
        cases = [self.case_of(s) for s in sentences]
        return [[replace(h, case=c) for h in hyps] if c else hyps for c, hyps in zip(cases, results, strict=True)]


def composed(text: str) -> str:
    """``text`` with its accents composed with their letters (Unicode's NFC): "é" typed as ``e`` + U+0301
    (macOS, some keyboards) is the "é" a corpus has; lines, glossary terms, prefixes and banned phrases
    are read so, or one would not find the other."""
    return unicodedata.normalize("NFC", text)


def terms_pattern(terms: Sequence[str], ignore_case: bool = False) -> re.Pattern[str] | None:
    """``terms`` as whole words of a line, the longest first where several start at one place (None: no
    term)."""
    if not terms:
        return None
    alternatives = "|".join(re.escape(t.strip()) for t in sorted(set(terms), key=len, reverse=True) if t.strip())
    return re.compile(rf"(?<!\w)(?:{alternatives})(?!\w)", re.IGNORECASE if ignore_case else 0)
