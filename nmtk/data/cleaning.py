"""What `prepare` removes from training corpora, and the record of it.

Rules on the raw text of a pair (`Cleaner.verdict`, run in `prepare`'s worker processes beside Moses):
an empty side, a copy (source and target the same letters and digits), numbers in digits on both
sides that disagree or a URL one side lacks, a side mostly outside its language's scripts, a side that
language identification finds to be another language. After them, duplicates: every pair's 64-bit
hash is kept (8 bytes a pair, not the text), and all but the first of equal pairs are dropped
(`first_occurrences`). Over-long and bad-ratio pairs are judged later, on subwords
(`nmtk.data.preparer`).

Every dropped pair is listed in the prepared data's ``dropped.tsv`` (`DropLog`: corpus, 1-based line
in that corpus, rule), so that what was removed, and why, can be looked at.
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import TextIO

import numpy as np
import regex

from nmtk.recipe import CleanSection
from nmtk.text import langid

#: Every rule, in the order a pair is judged (the first that drops it names it).
RULES = ("empty", "copy", "numbers", "script", "language", "duplicate", "too_long", "ratio")

#: The scripts each language is written in (Unicode script names). A letter of another script counts
#: against the side; digits, punctuation and marks belong to no script and count for nothing.
_SCRIPTS = {
    "Latin": "af az bs ca cs cy da de en eo es et eu fi fil fr fy ga gd gl ha hr hu id ig is it jv ku la lb lt lv "
             "mg ms mt nl nn no oc pl pt ro rm sk sl so sq sv sw tl tr tk uz vi wo xh yo zu",
    "Cyrillic": "be bg kk ky mk mn ru tg tt uk",
    "Greek": "el", "Arabic": "ar fa ps ug ur", "Hebrew": "he yi", "Armenian": "hy", "Georgian": "ka",
    "Devanagari": "hi mr ne sa", "Bengali": "as bn", "Gurmukhi": "pa", "Gujarati": "gu", "Oriya": "or",
    "Tamil": "ta", "Telugu": "te", "Kannada": "kn", "Malayalam": "ml", "Sinhala": "si", "Thai": "th",
    "Lao": "lo", "Khmer": "km", "Myanmar": "my", "Ethiopic": "am ti", "Hangul": "ko", "Han": "zh ja",
    "Hiragana": "ja", "Katakana": "ja",
}
_BOTH = {"sr": ("Latin", "Cyrillic")}  # languages written in two scripts
LANGUAGE_SCRIPTS: dict[str, tuple[str, ...]] = dict(_BOTH)
for _script, _langs in _SCRIPTS.items():
    for _lang in _langs.split():
        LANGUAGE_SCRIPTS[_lang] = (*LANGUAGE_SCRIPTS.get(_lang, ()), _script)

# The standard library's `re` where it can do the job: 2-3x faster than `regex` on these.
_LETTER = regex.compile(r"\p{L}")
_NUMBER = re.compile(r"'?\d+(?:[.,]\d+)*(?:'?s\b|er\b)?")  # 3, 2.00, 1,000, 1950s, '50s, 50er
_URL = re.compile(r"(?:https?://|www\.)\S+", re.IGNORECASE)
_NOT_WORD = re.compile(r"[\W_]+")  # not a letter, digit or combining mark


def _latin1(text: str) -> bool:
    """Whether every character is one of Latin-1's (whose letters are all of the Latin script, or of
    none: µ): English, German and French lines are, and need no scan (10x faster than one)."""
    if text.isascii():
        return True
    try:
        text.encode("latin-1")
    except UnicodeEncodeError:
        return False
    return True


def _words(text: str) -> str:
    """What a copy is judged on: letters and digits, case folded (``Paris.`` copies ``paris!``)."""
    return _NOT_WORD.sub("", text).casefold()


def _is_copy(a: str, b: str) -> bool:
    """Whether the sides are the same letters and digits. Most pairs differ in their first or last
    letter: the whole comparison only where both agree (or cannot be seen near the ends)."""
    if a[0].isalnum() and b[0].isalnum() and a[0].casefold() != b[0].casefold():  # most pairs: at once
        return False
    ends_a, ends_b = _words(a[:8] + " " + a[-8:]), _words(b[:8] + " " + b[-8:])
    if ends_a and ends_b and (ends_a[0] != ends_b[0] or ends_a[-1] != ends_b[-1]):
        return False
    return _words(a) == _words(b)


def _number_values(token: str) -> frozenset[Fraction]:
    """What a number written in digits may mean: ``2.00`` and ``2,5`` as decimals (and as thousands,
    ``1,000`` / ``1.000``), a decade (``1950s``, ``50er``, ``'50s``) as itself and its last two digits
    (``années 50``)."""
    decade = token.endswith(("s", "er"))
    digits = token.lstrip("'").removesuffix("s").removesuffix("er").rstrip("'")
    values = {Fraction(digits.replace(",", "").replace(".", ""))}
    if "," in digits or "." in digits:
        whole, _, fraction = digits.replace(",", ".").rpartition(".")
        values.add(Fraction(whole.replace(".", "") + "." + fraction))
    if decade:
        values |= {v % 100 for v in values if v >= 100 and v.denominator == 1}
    return frozenset(values)


def _numbers_disagree(a: str, b: str) -> bool:
    """Each side has a number in digits that the other lacks (``in 3 parks`` / ``in 4 Parks``). Numbers
    are compared as numbers (`_number_values`: ``2.00 Euros`` / ``2 euros`` agree, and so do ``1950s`` /
    ``années 50``). A number in digits on one side only is usually spelled out on the other (``2 girls``
    / ``Zwei Mädchen``: 152 of Multi30k's 29,000 pairs), and is kept."""
    if _NUMBER.search(a) is None or _NUMBER.search(b) is None:  # the usual case: a number on neither side
        return False
    left = [_number_values(t) for t in _NUMBER.findall(a)]
    right = [_number_values(t) for t in _NUMBER.findall(b)]
    return (any(all(x.isdisjoint(y) for y in right) for x in left)
            and any(all(y.isdisjoint(x) for x in left) for y in right))


def _urls_disagree(a: str, b: str) -> bool:
    """A URL (``http://``, ``www.``) on one side that the other lacks."""
    if not ("://" in a or "://" in b or "www." in a or "www." in b or "WWW." in a or "WWW." in b):
        return False  # the usual case: no URL
    return set(_URL.findall(a)) != set(_URL.findall(b))


@dataclass(frozen=True)
class SideCheck:
    """What one side of a pair is checked against: its language's scripts and identifier code."""

    lang: str
    other_scripts: regex.Pattern | None  # letters of other scripts (None: the language's scripts unknown)
    code: str | None  # the language identifier's code (None: not judged)
    latin: bool = False  # written in the Latin script: a side all in Latin-1 is all its own

    @classmethod
    def of(cls, lang: str, settings: CleanSection) -> SideCheck:
        scripts = LANGUAGE_SCRIPTS.get(langid.base_language(lang)) if settings.scripts < 1.0 else None
        own = "".join(rf"\p{{Script={s}}}" for s in scripts or ())
        pattern = regex.compile(rf"[^\P{{L}}{own}]") if scripts else None  # a letter, not of its own scripts
        return cls(lang, pattern, langid.code_for(lang) if settings.language else None, "Latin" in (scripts or ()))

    def outside_scripts(self, text: str, share: float) -> bool:
        """More than ``share`` of the side's letters are of other scripts."""
        if self.other_scripts is None or self.latin and _latin1(text):
            return False
        if self.other_scripts.search(text) is None:  # the usual case: one scan
            return False
        return len(self.other_scripts.findall(text)) > share * len(_LETTER.findall(text))

    def other_language(self, text: str) -> bool:
        return self.code is not None and langid.is_other_language(text, self.code)


@dataclass(frozen=True)
class Cleaner:
    """The raw-text rules of one pair of languages, as the recipe's ``[data.clean]`` sets them."""

    settings: CleanSection
    source: SideCheck
    target: SideCheck

    @classmethod
    def of(cls, src_lang: str, tgt_lang: str, settings: CleanSection) -> Cleaner:
        return cls(settings, SideCheck.of(src_lang, settings), SideCheck.of(tgt_lang, settings))

    def verdict(self, a: str, b: str) -> str | None:
        """The first rule that drops the pair (source ``a``, target ``b``), or None to keep it."""
        s = self.settings
        if not a.strip() or not b.strip():
            return "empty"
        if s.copies and _is_copy(a, b):
            return "copy"
        if s.numbers and (_numbers_disagree(a, b) or _urls_disagree(a, b)):
            return "numbers"
        if s.scripts < 1.0 and (self.source.outside_scripts(a, s.scripts) or self.target.outside_scripts(b, s.scripts)):
            return "script"
        if s.language and (self.source.other_language(a) or self.target.other_language(b)):
            return "language"
        return None


def pair_hash(a: str, b: str) -> int:
    """A pair's 64-bit hash (the same in every process, unlike `hash`), for finding duplicates."""
    digest = hashlib.blake2b(a.encode("utf-8") + b"\0" + b.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "little", signed=True)


def first_occurrences(hashes: np.ndarray) -> np.ndarray:
    """A mask of ``hashes`` (one per pair, in corpus order): True where a pair is the first of its kind."""
    keep = np.zeros(len(hashes), dtype=bool)
    if len(hashes):
        _, first = np.unique(hashes, return_index=True)
        keep[first] = True
    return keep


def dropped_text(dropped: Mapping[str, int]) -> str:
    """What cleaning dropped, by rule in `RULES` order (``copy 20, duplicate 100``; "" for nothing): the
    stage lines of `prepare`, its warning for a corpus left empty, `train`'s refusal of a stage on one."""
    return ", ".join(f"{rule} {dropped[rule]:,}" for rule in RULES if dropped.get(rule))


@dataclass
class CorpusCounts:
    """What cleaning did to one training corpus."""

    name: str
    pairs_in: int = 0
    kept: int = 0
    dropped: Counter = field(default_factory=Counter)

    def to_dict(self) -> dict:
        return {"name": self.name, "pairs_in": self.pairs_in, "kept": self.kept,
                "dropped": {rule: self.dropped[rule] for rule in RULES if self.dropped[rule]}}


class DropLog:
    """``dropped.tsv``: one line per dropped training pair (corpus, 1-based line, rule), with a header."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.handle: TextIO = open(path, "a", encoding="utf-8", newline="\n")
        if path.stat().st_size == 0:
            self.handle.write("corpus\tline\trule\n")

    def add(self, corpus: str, line: int, rule: str) -> None:
        self.handle.write(f"{corpus}\t{line}\t{rule}\n")

    def close(self) -> None:
        self.handle.close()
