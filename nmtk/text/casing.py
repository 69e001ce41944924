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
from collections.abc import Callable, Iterator
from typing import Literal

from nmtk.text.langid import base_language

Case = Literal["upper", "title"]

#: The first letter of a line, and of every sentence in it (after ., ! or ? and a space).
_SENTENCE_START = re.compile(r"(^|[.!?]\s+)([^\W\d_])", re.UNICODE)
#: The space after a sentence's end (., ! or ?): `re.split` keeps it between the sentences.
_SENTENCE_END = re.compile(r"(?<=[.!?])(\s+)")
#: What may stand around a word: it is the same word (`kept`).
_PUNCTUATION = "\"'“”‘’«»„‚()[]{}.,;:!?-–—/"
#: A word as a line splits into them (at white space).
_WORD = re.compile(r"\S+")
#: Two letters in a row of which neither is a small ASCII letter: every two capitals, and a few more
#: (``éà``), which `acronym_spans` then reads word by word.
_TWO_LETTERS_NOT_SMALL = re.compile(r"[^\W\d_a-z]{2}")
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
    return _SENTENCE_START.sub(lambda m: m.group(1) + m.group(2).upper(), _lowered(text, lang))


def _lowered(text: str, lang: str) -> str:
    """``text`` in lower case, English's "I" aside."""
    return _ENGLISH_I.sub("I", text.lower()) if lang == "en" else text.lower()


def folded_sentences(text: str, lang: str = "", pieces: Callable[[str], int] | None = None) -> str:
    """A line that is not in capitals as a whole (`case_of` None) with each run of words in capitals
    in sentence case: a sentence ("THE KIDS ARE PLAYING. They laugh." → "The kids are playing. They
    laugh.") or words inside one ("A MAN IN A RED SHIRT is climbing." → "A man in a red shirt is
    climbing."). Read as typed, shouted words are the string of unseen pieces a line in capitals is
    (the demo model wrote ``Ein TCCCEEEE…`` and ``Ein MAAAAAAEEEEEEEEEEES.``). A run is folded where
    two of its words have two capitals or more, as `case_of` tells a line. One word in capitals may be
    an acronym (NASA, BMX): it is folded only where ``pieces`` (the number of subword pieces the model
    spells a word in) says the model spells it letter by letter, in 3 pieces or more, and in lower case
    in at most half as many ("DOG": ``▁D O G``, "dog": ``▁dog``; "BMX" is one piece and stays). The
    translation is given back as it comes: which of its words the shouted ones became is not known."""
    if sum(c.isupper() for c in text) < 2:
        return text
    parts = _SENTENCE_END.split(text)
    return "".join(_folded_runs(part, lang, pieces) if i % 2 == 0 else part for i, part in enumerate(parts))


def _folded_runs(sentence: str, lang: str, pieces: Callable[[str], int] | None) -> str:
    """``sentence`` with its shouted spans folded (`folded_sentences`); a span that begins the sentence
    keeps its first letter a capital."""
    out, last = [], 0
    for a, b in _shouted_spans(sentence, pieces):
        span = folded(sentence[a:b], "upper", lang) if not sentence[:a].strip() else _lowered(sentence[a:b], lang)
        out += [sentence[last:a], span]
        last = b
    return "".join(out) + sentence[last:] if out else sentence


def _shouted_spans(sentence: str, pieces: Callable[[str], int] | None) -> Iterator[tuple[int, int]]:
    """The [start, end) of each run of words in capitals with two words of two capitals or more, and of
    each other word in capitals that ``pieces`` spells in at most half the pieces in lower case."""
    words, i = list(_WORD.finditer(sentence)), 0
    while i < len(words):
        j = i
        while j < len(words) and shouted(words[j].group()):
            j += 1
        if sum(sum(c.isupper() for c in w.group()) >= 2 for w in words[i:j]) >= 2:
            yield words[i].start(), words[j - 1].end()
        elif pieces is not None:
            yield from (w.span() for w in words[i:j] if _spelt_better_lower(w.group(), pieces))
        i = max(j, i + 1)


def _spelt_better_lower(word: str, pieces: Callable[[str], int]) -> bool:
    """Whether the model spells ``word``'s letters in capitals in 3 pieces or more, and in lower case in
    at most half as many: spelt letter by letter, as a model that rarely saw capitals does (a model that
    did, spelling "DOG" in 2 pieces or 1, reads it as typed and may write its translation in capitals)."""
    letters = "".join(c for c in word if c.isalpha())
    if len(letters) < 3:
        return False
    typed = pieces(letters)
    return typed >= 3 and 2 * pieces(letters.lower()) <= typed


def acronym_spans(line: str, pieces: Callable[[str], int]) -> list[list[int]]:
    """The [start, end) of each acronym of ``line``: a word of two or more capitals among words in small
    letters (a run of words in capitals is shouting, read in sentence case, and so is a line in capitals),
    which ``pieces`` spells letter by letter (the model never saw it as a word) and not better in small
    letters (``DOG`` is read "dog": `_spelt_better_lower`). Carried as it is, as codes are
    (`nmtk.decode.unknown`): the demo model wrote "A man from NASA" as "Ein Mann aus NAAAS" and "IKEA" as
    "NAAAEEEAAK"; "Texas AM" and "PM Construction" lost their capitals to words."""
    if not _TWO_LETTERS_NOT_SMALL.search(line) or case_of(line) == "upper":  # most lines: no two capitals
        return []
    words, spans = list(_WORD.finditer(line)), []
    for i, word in enumerate(words):
        core = word.group().strip(_PUNCTUATION)
        if len(core) < 2 or not core.isalpha() or not core.isupper():
            continue
        beside = (words[j].group() for j in (i - 1, i + 1) if 0 <= j < len(words))
        if any(shouted(w) and sum(c.isupper() for c in w) >= 2 for w in beside):
            continue  # shouting, read in sentence case (`_shouted_spans`)
        if pieces(core) < len(core) or _spelt_better_lower(core, pieces):
            continue
        start = word.start() + word.group().index(core)
        spans.append([start, start + len(core)])
    return spans


def shouted(word: str) -> bool:
    """A word in capitals: a letter, and none in lower case."""
    return any(c.isalpha() for c in word) and not any(c.islower() for c in word)


def kept(typed: str, read: str, keep: frozenset[str]) -> str:
    """``read`` (``typed`` as folded) with the words of ``keep`` as typed (a glossary's terms in
    capitals: "WHO" is an organisation's name, not "who"), word for word; punctuation around a word
    does not count."""
    words, folded_words = re.split(r"(\s+)", typed), re.split(r"(\s+)", read)
    if len(words) != len(folded_words):
        return read
    return "".join(w if w in keep or w.strip(_PUNCTUATION) in keep else f
                   for w, f in zip(words, folded_words, strict=True))


#: Languages whose headlines are written in title case. German, French, Czech, Spanish… write titles in
#: sentence case (German's capitals are its nouns'): "Two Dogs Play In The Snow" is "Zwei Hunde spielen
#: im Schnee", and title case given back there was wrong ("Zwei Hunde Spielen Im Schnee").
TITLE_CASE_LANGS = frozenset({"en"})


def recased(text: str, case: Case | None, lang: str = "en") -> str:
    """A translation written in the case its source line was typed in (`case_of`): capitals in every
    language, title case only where the target language (``lang``) writes it (`TITLE_CASE_LANGS`); in
    the others the translation stays as the model wrote it, in sentence case."""
    if case == "upper":
        return text.upper()
    if case == "title" and base_language(lang) in TITLE_CASE_LANGS:  # en_GB, NLLB's eng_Latn: en
        return " ".join(w[:1].upper() + w[1:] for w in text.split(" "))
    return text

