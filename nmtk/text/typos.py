"""Typos in the input, corrected against the words of the training data (``tokenizer.correct_typos``).

A typo turns a word the model knows into pieces it has never seen together ("hill" typed "hlil"), and
the translation of the whole sentence suffers (the demo model loses 5.0 BLEU on test_2016_flickr with
OpusTrainer's typo classes at 10 % of words). Training on typos (the ``typos`` modifier) spends updates
on them and costs clean text; a corrector costs nothing on text without typos. `prepare` counts the
source words of the training data (`count_words`, a file beside the subword model that the run and its
export keep); before translation, a word that the training data never had and that is one edit (two
for words of 8 or more letters) from words it had becomes the most frequent of them. The search for
near words is SymSpell's (symspellpy): precomputed deletions, so a lookup costs microseconds.

A word the training data lacked is not always a typo: for English sources, the words of symspellpy's
own English dictionary (82,765 words, from Google's n-grams and SCOWL) count as known too, so that
"brought" is not made "bought" nor "polite" "police" (on clean test_2016_flickr 74 of the 82 words the
training words alone "corrected" were such words). What it cannot do: tell a typo from a name the data
lacked (corrected when a near word exists), or from a word of another language without such a
dictionary, or mend a word split by a space.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from itertools import islice
from pathlib import Path

from nmtk.errors import NmtkError
from nmtk.files import read_lines, write_text_atomic

#: A word of letters alone, not part of a longer token (digits, underscores, an apostrophe's "don't",
#: a hyphenated word or a hint symbol ``__source__`` are left alone): what `count_words` counts.
WORD = re.compile(r"(?<![\w'’-])[^\W\d_]+(?![\w'’-])")
#: What `TypoCorrector.corrected` may change: a whole token between spaces that is letters alone, with
#: only punctuation before or after it ("(hlil," or "hlil." at a sentence's end). A word inside a longer
#: token is left alone, as `WORD`'s are, and so are the words of web addresses, e-mail addresses and
#: file names ("www.exmaple.com", "jon@gmial.com", "cta.txt"): a "correction" there breaks them.
TOKEN_WORD = re.compile(r"(?<!\S)([^\w\s]*)([^\W\d_]+)(?=[^\w\s]*(?!\S))")
#: Words shorter than this are never corrected: too many real words are one edit apart.
MIN_LETTERS = 3
#: Words of this many letters or more may be two edits from their correction, shorter ones one.
LONG_WORD = 8
#: Corrections are the most frequent words up to this many (a big corpus's millions of rare words would
#: take gigabytes of SymSpell's deletions); every word of the training data counts as known.
MAX_CORRECTIONS = 200_000


def count_words(lines: Iterable[str]) -> Counter[str]:
    """The lower-cased words (`WORD`) of ``lines`` and how often each occurs."""
    counts: Counter[str] = Counter()
    for line in lines:
        counts.update(m.group().lower() for m in WORD.finditer(line))
    return counts


def write_words(path: Path, counts: Counter[str]) -> None:
    """``word<TAB>count`` lines, the most frequent first (ties by word: the same data gives the same file)."""
    rows = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    write_text_atomic(path, "".join(f"{word}\t{count}\n" for word, count in rows))


#: Dictionaries symspellpy ships, per language: words that are never corrected, though the training
#: data lacked them (a correct word is one edit from another more often than a typo is).
DICTIONARIES = {"en": "frequency_dictionary_en_82_765.txt"}


def dictionary_words(lang: str) -> frozenset[str]:
    """The words of symspellpy's dictionary for ``lang`` (none where it ships none)."""
    from importlib import resources

    if lang not in DICTIONARIES:
        return frozenset()
    text = resources.files("symspellpy").joinpath(DICTIONARIES[lang]).read_text(encoding="utf-8")
    return frozenset(line.split(" ", 1)[0] for line in text.splitlines() if line)


class TypoCorrector:
    """The training data's words, and the correction of a line's unknown ones (`corrected`)."""

    def __init__(self, counts: dict[str, int], known: frozenset[str] = frozenset()) -> None:
        """``counts``: the most frequent first, as `write_words` writes them (not sorted again here: a
        big corpus's word list is read at every start of `translate` and `serve`); ``known``: more words
        that are never corrected (`dictionary_words`)."""
        from symspellpy import SymSpell

        self.counts, self.known = counts, known
        self.index = SymSpell(max_dictionary_edit_distance=2, prefix_length=7)
        for word, count in islice(counts.items(), MAX_CORRECTIONS):
            self.index.create_dictionary_entry(word, count)

    @classmethod
    def read(cls, path: Path, lang: str = "") -> TypoCorrector:
        """The words `write_words` wrote; one line naming the file and line of anything else. ``lang``:
        the source language, whose dictionary's words are known too (`dictionary_words`)."""
        counts: dict[str, int] = {}
        for number, line in enumerate(read_lines(path, "word counts"), start=1):
            word, _, count = line.rstrip("\n").partition("\t")
            if not word or not count.isdigit():
                raise NmtkError(f"{path}:{number}: expected 'word<TAB>count', as nmtk prepare writes it")
            counts[word] = int(count)
        return cls(counts, dictionary_words(lang))

    def corrected(self, text: str) -> str:
        """``text`` with each unknown word replaced by its correction, where it has one."""
        return TOKEN_WORD.sub(lambda m: m.group(1) + self.word(m.group(2)), text)

    def word(self, word: str) -> str:
        """The most frequent known word closest to ``word`` (its first letter's case kept), or ``word``."""
        from symspellpy import Verbosity

        lower = word.lower()
        if len(lower) < MIN_LETTERS or lower in self.counts or lower in self.known:
            return word
        near = self.index.lookup(lower, Verbosity.CLOSEST, max_edit_distance=1 if len(lower) < LONG_WORD else 2)
        if not near:
            return word
        best = max(near, key=lambda s: (s.count, s.term)).term
        if word.isupper() and len(word) > 1:
            return best.upper()
        return best[0].upper() + best[1:] if word[0].isupper() else best
