"""Lines typed in capitals or in title case: translated as ordinary sentence-cased text, the translation
given back in the same case.

A model learns from text as it is written, and sentence case is almost all of it: an ALL-CAPS line
is a string of pieces it has rarely or never seen (Multi30k's demo model answers "A MAN IS SLEEPING"
with ``Ein MEEEEEE…`` to its length limit), and a line With Every Word Capitalised reads to it like a
list of names. Training on such lines (the ``uppercase``/``titlecase`` modifiers, docs/training.md)
costs the model clean-text quality; folding the line to sentence case before it is encoded costs
nothing and holds for every model and engine. What folding loses is the case a word had for its own
sake (a name inside a line in capitals comes out as a common word would); a line is folded only where
its form is unmistakable (`case_of`).
"""

from __future__ import annotations

import re
from typing import Literal

Case = Literal["upper", "title"]

#: The first letter of a line, and of every sentence in it (after ., ! or ? and a space).
_SENTENCE_START = re.compile(r"(^|[.!?]\s+)([^\W\d_])", re.UNICODE)
#: The space after a sentence's end (., ! or ?): `re.split` keeps it between the sentences.
_SENTENCE_END = re.compile(r"(?<=[.!?])(\s+)")
#: A word as a line splits into them (at white space).
_WORD = re.compile(r"\S+")
#: English's "I" (and "I'm", "I've", …), which sentence case writes in capitals wherever it stands.
_ENGLISH_I = re.compile(r"\bi\b(?=$|[\s'’,.!?;:])")


def case_of(text: str) -> Case | None:
    """``upper`` for a line in capitals (no lower-case letter, and two or more words of two or more
    capitals: a lone acronym is not shouting), ``title`` for a line of three or more words that all
    begin with a capital and not all in capitals; None for anything else (a line as people write)."""
    words = text.split()
    if not any(c.islower() for c in text):
        return "upper" if sum(sum(c.isupper() for c in w) >= 2 for w in words) >= 2 else None
    lettered = [w for w in words if w[0].isalpha()]
    if len(lettered) >= 3 and all(w[0].isupper() for w in lettered):
        return "title"
    return None


def folded(text: str, case: Case | None, lang: str = "") -> str:
    """``text`` in sentence case where ``case`` says it is in another (None: as it is): lower case, the
    first letter of each sentence in capitals (and English's "I")."""
    if case is None:
        return text
    out = _SENTENCE_START.sub(lambda m: m.group(1) + m.group(2).upper(), text.lower())
    return _ENGLISH_I.sub("I", out) if lang == "en" else out


def folded_sentences(text: str, lang: str = "") -> str:
    """A line that is not in capitals as a whole (`case_of` None) with each run of words in capitals
    in sentence case: a sentence ("THE KIDS ARE PLAYING. They laugh." → "The kids are playing. They
    laugh.") or words inside one ("A MAN IN A RED SHIRT is climbing." → "A man in a red shirt is
    climbing."). Read as typed, shouted words are the string of unseen pieces a line in capitals is
    (the demo model wrote ``Ein TCCCEEEE…`` and ``Ein MAAAAAAEEEEEEEEEEES.``). A run is folded where
    two of its words have two capitals or more, as `case_of` tells a line: one word in capitals (NASA,
    OK., a DOG) may be an acronym and stays. The translation is given back as it comes: which of its
    words the shouted ones became is not known."""
    if sum(c.isupper() for c in text) < 2:
        return text
    parts = _SENTENCE_END.split(text)
    return "".join(_folded_runs(part, lang) if i % 2 == 0 else part for i, part in enumerate(parts))


def _folded_runs(sentence: str, lang: str) -> str:
    """``sentence`` with each run of words in capitals folded (`folded_sentences`); a run that begins
    the sentence keeps its first letter a capital."""
    out, last, words = [], 0, list(_WORD.finditer(sentence))
    i = 0
    while i < len(words):
        j = i
        while j < len(words) and _shouted(words[j].group()):
            j += 1
        if sum(sum(c.isupper() for c in w.group()) >= 2 for w in words[i:j]) >= 2:
            a, b = words[i].start(), words[j - 1].end()
            run = folded(sentence[a:b], "upper", lang) if a == words[0].start() else sentence[a:b].lower()
            out += [sentence[last:a], _ENGLISH_I.sub("I", run) if lang == "en" else run]
            last = b
        i = max(j, i + 1)
    return "".join(out) + sentence[last:] if out else sentence


def _shouted(word: str) -> bool:
    """A word in capitals: a letter, and none in lower case."""
    return any(c.isalpha() for c in word) and not any(c.islower() for c in word)


def recased(text: str, case: Case | None) -> str:
    """A translation written in the case its source line was typed in (`case_of`)."""
    if case == "upper":
        return text.upper()
    if case == "title":
        return " ".join(w[:1].upper() + w[1:] for w in text.split(" "))
    return text

