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
    spells: Callable[[str], bool] | None = None  # the source vocabulary's: a character read in a form it has

    def case_of(self, text: str) -> Case | None:
        return case_of(text) if self.fold_case else None

    def read(self, text: str) -> str:
        """``text`` as the model reads it: `normalized` (accents composed, invisible break hints
        dropped), a character the vocabulary lacks in a compatibility form it has (`compatible`), in
        sentence case where typed in capitals or title case (the line, or a sentence of it), its typos
        corrected."""
        text = self._spelt(normalized(text))
        if self.fold_case:
            case = case_of(text)
            read = folded(text, case, self.lang) if case else folded_sentences(text, self.lang, self.pieces)
            text = kept(text, read, self.keep) if self.keep and read != text else read
        return self.typos.corrected(text) if self.typos is not None else text

    def _spelt(self, text: str) -> str:
        """``text`` with each character the vocabulary lacks in the compatibility form it has (`compatible`)."""
        if self.spells is None or all(self.spells(c) for c in set(text)):
            return text
        forms = {c: compatible(c, self.spells) for c in set(text)}
        return "".join(forms[c] or c for c in text)

    def marked(self, sentences: list[str], results: list[list[Any]]) -> list[list[Any]]:
        """Each line's hypotheses (dataclasses with a ``case`` field) marked with the case its source was
        typed in, which the translator's ``detokenize`` gives back (`nmtk.text.casing.recased`)."""
        cases = [self.case_of(s) for s in sentences]
        return [[replace(h, case=c) for h in hyps] if c else hyps for c, hyps in zip(cases, results, strict=True)]


#: Invisible characters that only say where a line may break: the soft hyphen (html's ``&shy;``, common
#: in web text), the zero-width space and the word joiner. A vocabulary has none of them, and a word
#: holding one was cut in two around it ("ben\u00adch" read as "ben" and "ch": "Hütte").
INVISIBLE = "\u00ad\u200b\u2060"
_DROPPED = dict.fromkeys(map(ord, INVISIBLE))


def normalized(text: str) -> str:
    """``text`` as every line, glossary term, constraint, prefix and banned phrase is read, in training
    data too (`nmtk.text.moses`): accents composed with their letters (Unicode's NFC: "é" typed as ``e``
    + U+0301, as macOS and some keyboards write it, is the "é" of a corpus) and `INVISIBLE` characters
    dropped. Either way typed, one finds the other."""
    return unicodedata.normalize("NFC", text.translate(_DROPPED))


def compatible(char: str, spells: Callable[[str], bool]) -> str | None:
    """``char``'s compatibility form (NFKC: the ligature "ﬁ" is "fi", a full-width "Ａ" an "A"), where
    ``spells`` refuses ``char`` and spells that form; else None. A subword model with the identity
    normaliser (nmtk's) spells neither ligatures nor full-width letters: "A ﬁsh swims." was read "A sh
    swims." and came back "Ein glänzenden schwimmt.\""""
    if spells(char):
        return None
    form = unicodedata.normalize("NFKC", char)
    return form if form != char and spells(form) else None


def terms_pattern(terms: Sequence[str], ignore_case: bool = False) -> re.Pattern[str] | None:
    """``terms`` as whole words of a line, the longest first where several start at one place (None: no
    term)."""
    if not terms:
        return None
    alternatives = "|".join(re.escape(t.strip()) for t in sorted(set(terms), key=len, reverse=True) if t.strip())
    return re.compile(rf"(?<!\w)(?:{alternatives})(?!\w)", re.IGNORECASE if ignore_case else 0)
