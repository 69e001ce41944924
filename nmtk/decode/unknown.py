"""Spans a model should not translate, carried through a translation: characters the source vocabulary
cannot spell, and links.

A subword model without byte fallback turns a character its training data lacked (an emoji, a script
it never saw: ``A dog 🐶 runs.``, ``寿司``) into ``<unk>``, and a model that never read ``<unk>`` makes
something up around it ("Ein Hund läuft durch eine Reitung."). A URL or an e-mail address it can spell
fares no better on a model that never learned to copy them ("Ein Crorororo…" for
``https://www.example.com``), and no model should translate one. What nmtk does instead: such spans are
taken out of the line, the model reads the line clean, and each span is put back beside the target
words aligned to the source words it stood beside ("Ein Hund 🐶 rennt.") — fairseq's ``--replace-unk``
idea, with the placement of an inline ``<img>`` in markup (`nmtk.decode.markup`), which this reuses:
the line becomes an html fragment whose spans markup's parser takes out of the words (`keeper`), as it
does in html a user sends. So it needs word alignments (nmtk's engine, or a CTranslate2 export that
carries them), and one best translation per line.
"""

from __future__ import annotations

import functools
import html
import re
import unicodedata
from collections import Counter
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from nmtk.decode.guide import Glossary, occurrences
from nmtk.text.brackets import as_marked, lost_brackets, unmarked
from nmtk.text.casing import acronym_spans
from nmtk.text.langid import base_language
from nmtk.text.line_breaks import list_marker
from nmtk.text.reading import INVISIBLE, compatible

if TYPE_CHECKING:
    from nmtk.decode.base import TranslatorBase
    from nmtk.decode.search.config import SearchConfig

def kept_spans(line: str, spells: Callable[[str], bool], links: bool = True, numbers: bool = False,
               terms: re.Pattern[str] | None = None, glossed: Sequence[re.Pattern[str]] = (),
               pieces: Callable[[str], int] | None = None, lang: str = "") -> list[tuple[int, int]]:
    """The [start, end) of each span of ``line`` to carry through: its runs of characters ``spells``
    refuses and, with ``links``, its URLs, e-mail addresses, handles, codes (`code_spans`) and the list
    item marker it begins with (markup's ``<p>1. A dog…``; a line's own is written back apart), and with
    ``pieces`` (the model's spelling) its acronyms (`acronym_spans`: ``NASA``); with
    ``numbers``, its numbers too, and its names (`quoted_names` in ``lang``, `mixed_case_names`); with
    ``terms``, a glossary's terms that translate to themselves: `Glossary.untranslated`), each with the
    brackets or quotes that enclose it, in order; none that overlaps a term of ``glossed`` (a glossary's
    terms that translate to another: `Glossary.translated_patterns`), which the glossary translates
    ("MP3" → "Musikdatei" came back "MP3")."""
    found = _unspelt(line, spells) + (link_spans(line) + code_spans(line) + _item_marker(line) if links else [])
    if links and pieces is not None:
        found += acronym_spans(line, pieces)
    if numbers:  # a measure's number with its unit (`lost_unit`), and quoted names (`quoted_names`)
        found += [list(m.span()) for m in NUMBER.finditer(line)] + [list(m.span()) for m in MEASURE.finditer(line)]
        found += quoted_names(line, lang) + mixed_case_names(line) + speaker_label(line)
    if terms is not None:
        found += [list(m.span()) for m in terms.finditer(line)]
    if glossed and found:
        asked = [m.span() for pattern in glossed for m in pattern.finditer(line)]
        found = [run for run in found if not any(lo < run[1] and run[0] < hi for lo, hi in asked)]
    return [_enclosed(line, run) for run in _merged(found)]


def keeper(translator: TranslatorBase, numbers: bool = False, glossary: Glossary | None = None
           ) -> Callable[[str], list[tuple[int, int]]]:
    """`kept_spans` as ``translator`` reads its lines: what markup's parser takes out of a block's text
    (`nmtk.text.markup.parse`'s ``keep``), so that html carries them as text does. ``numbers``: a line
    translated again (`renumbered_lines`), which carries its numbers and its glossary's untranslated
    terms too (`Reading.terms`); ``glossary``: the terms it translates are not carried."""
    reading = translator.reading
    spells, links, terms = read_as_spelt(translator), reading.carry, reading.terms
    glossed = () if glossary is None else glossary.translated_patterns()
    return lambda text: kept_spans(text, spells, links, numbers and links, terms if numbers and links else None,
                                   glossed, reading.pieces, reading.lang)


#: The minus signs a number may begin with: hyphen-minus, Unicode's minus, an en dash.
_MINUS = "-−–"
#: A number as written (``3``, ``3,500``, ``12/05/2023``, ``$12.99``, ``10%``, ``-5``), not one inside a
#: word (``mp3``, ``10th``: those are the model's to translate). A minus sign (`_MINUS`) right before the
#: digits, after a space, a bracket, a quote or the line's start, is the number's: "-5 °C" came back
#: "5 °C", its digits all there.
NUMBER = re.compile(rf"(?:(?<![^\s(\[\"'])[{_MINUS}](?=[$€£¥]?\d)|(?<!\w))[#$€£¥]?\d(?:[\d.,:/-]*\d)?%?(?![\w])")
#: A negative number written with the word (a translation's "minus 5 Grad" keeps "-5").
_MINUS_WORD = re.compile(r"(?<!\w)(?:minus|moins|mínus)\s+(\d[\d.,]*)", re.IGNORECASE)
#: Unit symbols written alike in the languages nmtk's models speak (not ``in``, ``s`` or ``h``, which are
#: words or abbreviations too).
_UNITS = "km/h|m/s|kWh|km|cm|mm|m|kg|mg|g|ml|°C|°F|mph|MB|GB|TB|KB|kB|kHz|MHz|GHz|Hz|kW|lbs|lb|oz|ft"
#: A measure: a number and the unit symbol after it (``5 km``, ``20°C``, ``64 GB``, ``100 km/h``).
MEASURE = re.compile(r"(?<!\w)\d(?:[\d.,]*\d)?[ \u00a0\u202f]?(?P<unit>" + _UNITS + r")(?![\w/°])")


def garbled_numbers(source: str, translation: str, source_lang: str = "") -> bool:
    """Whether ``translation`` writes a number in digits that ``source``, which has numbers of its own,
    neither writes nor (up to 100) spells out in ``source_lang``: the demo model turned "12 cats" into
    "1 1 1 1 12 Viert" — the 12 is there, the cats are not. Made again with the source's numbers
    carried, it gave "12 Katzen". So does one that writes a number of the source more often than the
    source does ("A man pays $5 for a coffee." → "Ein Mann, der eine Töße 5 5 5-Kaffeet ist."). A line
    without numbers has nothing to carry, and is left as it is."""
    ours = _numbers_in(source)
    if not ours:
        return False
    given = Counter(_digits(m.group()) for m in NUMBER.finditer(source))
    if any(n > max(given[number], 1) for number, n in Counter(
            _digits(m.group()) for m in NUMBER.finditer(translation)).items() if number in ours):
        return True
    return any(not _written_out(number, source, source_lang, lowest=1, whole=True)
               for number in _numbers_in(translation) - ours)


def lost_numbers(source: str, translation: str, lang: str = "") -> bool:
    """Whether ``translation`` lost a number of ``source``: the digits of each (separators aside, so
    ``3,500`` is kept as ``3.500``) are not among the translation's, nor (from 2 to 100) is it written
    out in ``lang`` ("3 dogs" → "drei Hunde", num2words' spelling, inflected endings allowed; 1 is
    "ein", "eine", "einen"…: never taken for lost). The demo model drops or mangles such numbers in 9
    of test_2016_flickr's 15 lines with one (``2 thumbs`` → nothing, ``1102`` → "Nummer Nummer…"); a
    model that writes them keeps its own translation. Numbers are compared whole: the ``2`` of "on 2
    chairs" is lost from "… 12 Katzen … auf Stühlen", though "12" holds its digit. So is a
    measure whose unit the translation lacks (`lost_unit`)."""
    written = _numbers_in(translation)
    for match in NUMBER.finditer(source):
        number = _digits(match.group())
        if number in written or number == "1" or _written_out(number, translation, lang):
            continue
        return True
    return lost_unit(source, translation)


#: A quoted part inside a sentence (after a space), in straight or typographic double quotes.
_QUOTED = re.compile(r'(?<=\s)(["“„«])([^"“”„«»\n]*[^\W_][^"“”„«»\n]*)(["“”»])')


#: Languages whose nouns begin with a capital: a quoted „Kaffee“ is a word, not a name.
NOUN_CAPITALS = frozenset({"de", "lb"})


def quoted_names(line: str, lang: str = "") -> list[list[int]]:
    """The [start, end) of each name or sign's text that ``line`` quotes inside a sentence: every word
    of it begun by a capital or a digit (a boat named "El Corazon", a shirt that says "Asian Pacific
    2007", a "VAIO" notebook, the number "93"), not quoted speech or a word used loosely (sentence case
    or lower case: "Come on now", "street clothes"), and not a quote that begins the line (speech). In a
    language that capitalises its nouns (``lang``, `NOUN_CAPITALS`) only text in capitals or with a
    digit is a name. Multi30k's references keep such names as written; the demo model garbled or
    dropped them ("„Ei“", "auf einem Fahrzeug" for a "Pullman" vehicle)."""
    nouns = base_language(lang) in NOUN_CAPITALS
    spans = []
    for m in _QUOTED.finditer(line):
        opening, inside, closing = m.groups()
        if ENCLOSING.get(opening) != closing and not (opening == "„" and closing == "”"):
            continue
        if nouns and not (inside.isupper() or any(c.isdigit() for c in inside)):
            continue
        words = [w.lstrip("\"'‘(").lstrip() for w in inside.split() if any(c.isalnum() for c in w)]
        if words and all(w[:1].isupper() or w[:1].isdigit() for w in words):
            spans.append([m.start(2), m.end(2)])
    return spans


#: A word with a capital after a small letter: a brand or a name (``iPhone``, ``eBay``, ``McDonald's``,
#: ``YouTube``), with its ``'s``.
_MIXED_CASE = re.compile(r"(?<![\w'’-])[^\W\d_]*[a-z][A-Z][^\W\d_]*(?:['’]s)?(?![\w-])")


def mixed_case_names(line: str) -> list[list[int]]:
    """The [start, end) of each word of ``line`` with a capital after a small letter (`_MIXED_CASE`): the
    demo model wrote "uses his iPhone" as "verwendet sein Trikot", "on eBay" as "Lich auf"."""
    return [list(m.span()) for m in _MIXED_CASE.finditer(line)]


#: A speaker's label in capitals that begins a line, after a dialogue dash if any (``JOHN:``, ``DR. SMITH:``,
#: ``MAN #2:``): subtitles for the deaf name their speakers so.
_LABEL = re.compile(r"\s*(?:[-–—]\s*)?([A-Z][A-Z0-9.'’#&-]+(?:\s[A-Z0-9#][A-Z0-9.'’#&-]*){0,3}:)(?=\s)")
#: What a translation that kept a label begins with: a few words and a colon.
_LABELLED = re.compile(r"\s*(?:[-–—]\s*)?[^\s:][^:]{0,40}:(?:\s|$)")


def speaker_label(line: str) -> list[list[int]]:
    """The [start, end) of the speaker's label ``line`` begins with (`_LABEL`), if any: the demo model
    dropped it ("JOHN: A man sits on a bench." → "Ein Mann sitzt auf einer Bank.")."""
    m = _LABEL.match(line)
    return [list(m.span(1))] if m else []


def lost_label(source: str, translation: str) -> bool:
    """Whether ``source`` begins with a speaker's label and ``translation`` with none (a label it translated,
    "ERZÄHLER:", is one): such a line is made again with the label carried (`renumbered_lines`)."""
    return bool(speaker_label(source)) and not _LABELLED.match(translation)


def lost_names(source: str, translation: str, source_lang: str = "") -> bool:
    """Whether ``translation`` lacks one of ``source``'s quoted names (`quoted_names`, in ``source_lang``)
    or words in mixed case (`mixed_case_names`) as written: such a line is made again with them carried
    through (`renumbered_lines`), quotes and all."""
    return any(not re.search(rf"(?<!\w){re.escape(source[a:b].strip())}(?!\w)", translation)
               for a, b in quoted_names(source, source_lang) + mixed_case_names(source))  # "V" is not „Vation“


def lost_unit(source: str, translation: str) -> bool:
    """Whether ``translation`` lost the unit of one of ``source``'s measures (`MEASURE`): the demo model
    kept the number and dropped the rest ("runs 5 km in the park" → "rennt 5 im Park", "20°C" → "20°")."""
    for match in MEASURE.finditer(source):
        unit = re.escape(match.group("unit"))
        if not re.search(rf"(?<![\w°]){unit}(?![\w/°])|\d{unit}(?![\w/°])", translation):
            return True
    return False


#: A number written with its thousands apart (``3 500``, French and German typesetting's thin spaces).
_SPACED = re.compile(r"(?<![\d.,])\d{1,3}(?:[ \u00a0\u202f]\d{3})+(?![\d.,]*\d)")


def _digits(number: str) -> str:
    """A number as its languages may write it: its digits, each as an ASCII digit (٣ and ३ are 3), where
    it is whole or its groups are thousands (``3,500``, ``3.500``, ``3 500`` and ``3500`` alike); else
    its groups of digits apart, whatever stands between them (``3.5`` and ``3,5``, ``12:30`` and
    ``12.30``, ``12/05/2023`` and ``12.05.2023`` alike), so that a decimal is not its digits run
    together: "3.5" came back "Nummer 35", taken for kept."""
    groups = ["".join(str(unicodedata.digit(ch)) for ch in group) for group in re.findall(r"\d+", number)]
    sign = "-" if number[:1] in _MINUS else ""  # "-5" is not "5"
    return sign + ("".join(groups) if all(len(group) == 3 for group in groups[1:]) else "·".join(groups))


def _numbers_in(text: str) -> set[str]:
    """The digits of each number ``text`` writes (`NUMBER`, and thousands set apart by spaces), and of
    each run of digits inside a word or a script without spaces (``三只狗``'s neighbours: ``3只``)."""
    found = {_digits(m.group()) for m in NUMBER.finditer(text)} | {_digits(m.group()) for m in _SPACED.finditer(text)}
    found |= {"-" + _digits(m.group(1)) for m in _MINUS_WORD.finditer(text)}
    return found | {_digits(m.group()) for m in re.finditer(r"\d+", text)}


def _written_out(number: str, text: str, lang: str, lowest: int = 2, whole: bool = False) -> bool:
    """Whether ``text`` writes ``number`` (from ``lowest`` to 100) out in ``lang`` (num2words), beginning a
    word, and with ``whole`` ending one too (else inflected endings count: "drei" in "dreien"); a script
    without spaces (三) at any place."""
    word = _spelling(int(number), lang) if number.isdigit() and lowest <= int(number) <= 100 else None
    if word is None:
        return False
    at_a_word = rf"(?<!\w){re.escape(word)}" + (r"(?!\w)" if whole else "") if word[:1].isascii() else re.escape(word)
    return re.search(at_a_word, text.lower()) is not None


@functools.lru_cache(maxsize=4096)
def _spelling(number: int, lang: str) -> str | None:
    """``number`` written out in ``lang`` (num2words; None where it has no such language)."""
    from num2words import num2words

    try:
        return num2words(number, lang=lang).lower()
    except (NotImplementedError, OverflowError, ValueError):
        return None


def _unspelt(line: str, spells: Callable[[str], bool]) -> list[list[int]]:
    """The runs of ``line``'s characters ``spells`` refuses, as [start, end) (white space ends a run)."""
    if all(char.isspace() or spells(char) for char in set(line)):  # most lines: each distinct character once
        return []
    runs: list[list[int]] = []
    for i, char in enumerate(line):
        if char.isspace() or spells(char):
            continue
        letter = _letter_of(line, i)  # an accent typed apart from its letter: spelt with it, composed
        if letter is not None and spells(unicodedata.normalize("NFC", line[letter : i + 1])):
            continue
        start = letter if letter is not None and char in _EMOJI_MARKS else i  # a keycap 1️⃣: the digit too
        if runs and runs[-1][1] >= start:
            runs[-1][1] = i + 1
        else:
            runs.append([start, i + 1])
    return runs


#: The marks that make the character before them an emoji: the emoji presentation selector (❤️) and the
#: keycap (1️⃣, ``1`` U+FE0F U+20E3). Carried, they take that character with them: the keycap's digit
#: left in the words and its marks carried apart gave "Eine Nadaaa️⃣." for ``Press 1️⃣ now.``
_EMOJI_MARKS = "\ufe0f\u20e3"


def _letter_of(line: str, i: int) -> int | None:
    """Where the letter of ``line[i]`` is, where ``line[i]`` is an accent typed apart from it (``e`` +
    U+0301 for "é", as macOS and some keyboards write it: Unicode's decomposed form); None for any other
    character. Alone an accent is no character a vocabulary has: it was carried through after the
    sentence ("Ein Mann in einem Café.\u0301"), where the two composed are spelt (`Reading.read`
    composes them). One the vocabulary lacks even so is carried alone: the word keeps its letters."""
    if unicodedata.category(line[i]) not in ("Mn", "Me"):
        return None
    start = i
    while start > 0 and unicodedata.category(line[start - 1]) in ("Mn", "Me"):
        start -= 1
    return start - 1 if start > 0 and not line[start - 1].isspace() else None


#: A URL (a scheme's ``://`` or ``www.`` and what follows up to white space, quotes or angle brackets),
#: an e-mail address, a social network's handle (``@alice``, Mastodon's ``@alice@example.social``: a
#: name, which the demo model dropped) or a hashtag (``#soccer``: a link on the platform, which the demo
#: model translated without its ``#`` or dropped; not ``#5``, ``C#`` or ``&#39;``). A pattern of our own
#: rather than a URL library's: what is wanted is not a parser's verdict but the span a reader sees as
#: one link, ending where the sentence resumes.
LINK = re.compile(r"\b(?:[a-z][a-z0-9+.-]*://|www\.)[^\s<>\"“”„«»]+|(?<![\w@.])@\w+(?:@[\w-]+(?:\.[\w-]+)+)?"
                  r"|[\w.+-]+@[\w-]+(?:\.[\w-]+)+|(?<![\w#&/])#[^\W\d_]\w*", re.IGNORECASE)
#: What ends a sentence or a clause after a link belongs to the sentence (``see example.com/a).``).
_AFTER_LINK = ".,;:!?'’)]}"


def link_spans(line: str) -> list[list[int]]:
    """The [start, end) of each URL, e-mail address, handle and hashtag in ``line``, the punctuation that
    follows it left to the sentence (a closing bracket stays where the link opened one: ``…/Bonn_(Stadt)``)."""
    if "@" not in line and "://" not in line and "#" not in line and "www." not in line.lower():  # most, cheaply
        return []
    spans = []
    for match in LINK.finditer(line):
        lo, hi = match.span()
        while hi > lo and line[hi - 1] in _AFTER_LINK:
            closing = line[hi - 1]
            opening = {")": "(", "]": "[", "}": "{"}.get(closing)
            if opening and line.count(opening, lo, hi) >= line.count(closing, lo, hi):
                break
            hi -= 1
        if hi > lo:
            spans.append([lo, hi])
    return spans


#: A code of capitals and digits, its parts perhaps joined by hyphens (``B-52``, ``COVID-19``, ``MP3``,
#: ``A4``, ``H2O``, ``LH123``): a name every language writes alike, which the demo model garbled ("A B-52
#: …" → "Ein52 …", "COVID-19" → "„VO“.19"). A word with a small letter (``10th``, ``mp3``, ``Mid-1990s``)
#: is the model's to translate, as are an ordinal or a decade in capitals (``10TH``, ``50S``: a line in
#: capitals is read in sentence case). So is a size (``77x147``, ``1920×1080``, ``2.5x4``): "77x147 cm"
#: came back without it.
CODE = re.compile(r"(?<![\w-])(?!\d+(?:S|ST|ND|RD|TH)(?![\w-]))(?=[A-Z0-9-]*[0-9])(?=[A-Z0-9-]*[A-Z])"
                  r"[A-Z0-9]+(?:-[A-Z0-9]+)*(?![\w-])"
                  r"|(?<![\w.,])\d+(?:[.,]\d+)?(?:[x×]\d+(?:[.,]\d+)?)+(?![\w.,]*\d)")  # sizes: 77x147, 1920×1080


def code_spans(line: str) -> list[list[int]]:
    """The [start, end) of each code (`CODE`) in ``line``."""
    return [list(m.span()) for m in CODE.finditer(line)] if any(c.isdigit() for c in line) else []


#: A sentence's end glued to the next sentence's start (``snow.A cat``, ``park!The``): a word's last three
#: letters in small letters, the end, a capital and a small letter or a space.
_GLUED = re.compile(r"(?<=[^\W\d_]{3})[.!?]+(?=[^\W\d_](?:[^\W\d_]|\s|$))")


def sentences_apart(line: str) -> str:
    """``line`` with a space after each sentence end glued to the next sentence (pasted or OCR'd text:
    "Two dogs play in the snow.A cat watches." was one word "snow.A" to the model, which dropped the
    second sentence), outside links; "e.g.The", "Ph.D", "U.S.A", "3.5" and "java.util.List" are left as
    they are."""
    if "." not in line and "!" not in line and "?" not in line:
        return line
    links = link_spans(line)
    out, at = [], 0
    for match in _GLUED.finditer(line):
        end = match.end()
        before, after = line[match.start() - 3 : match.start()], line[end]
        word = line[max(line.rfind(" ", 0, match.start()), line.rfind("\t", 0, match.start())) + 1 : match.start()]
        if before.islower() and after.isupper() and "." not in word and not any(lo <= end <= hi for lo, hi in links):
            out += [line[at:end], " "]
            at = end
    return "".join(out) + line[at:] if out else line


def _item_marker(text: str) -> list[list[int]]:
    """The [start, end) of the list item marker ``text`` begins with (`list_marker`: ``1.``, ``2)``, ``-``),
    if any: the demo model dropped it."""
    start = len(text) - len(text.lstrip())
    marker = list_marker(text[start:]).rstrip()
    return [[start, start + len(marker)]] if marker else []


def _merged(runs: list[list[int]]) -> list[list[int]]:
    """``runs`` in order, those that overlap or touch as one."""
    out: list[list[int]] = []
    for lo, hi in sorted(runs):
        if out and lo <= out[-1][1]:
            out[-1][1] = max(out[-1][1], hi)
        else:
            out.append([lo, hi])
    return out


#: Brackets and quotes that go with what they enclose: ``(寿司)`` is carried whole (the model, given
#: ``()`` around nothing, drops them).
ENCLOSING = {"(": ")", "[": "]", "{": "}", '"': '"', "'": "'", "“": "”", "„": "“", "«": "»", "‹": "›", "‘": "’",
             "「": "」", "『": "』", "（": "）"}


def _enclosed(line: str, run: list[int]) -> tuple[int, int]:
    """``run`` widened over the brackets or quotes that enclose it, pair by pair."""
    lo, hi = run
    while lo > 0 and hi < len(line) and ENCLOSING.get(line[lo - 1]) == line[hi]:
        lo, hi = lo - 1, hi + 1
    return lo, hi


def can_carry(translator: TranslatorBase, search: SearchConfig) -> bool:
    """Whether lines are translated carrying their unknown spans: an engine that aligns, a search of one
    best translation per line (n-best lists, scores per line, sampling and printed alignments take the
    line as it is, ``<unk>`` and all)."""
    return translator.can_align and search.nbest == 1 and search.sampling is None and not search.align


def carried_lines(translator: TranslatorBase, lines: list[str], glossary: Glossary | None = None) -> dict[int, str]:
    """The lines of ``lines`` holding spans to carry (`kept_spans`, as the translator reads them), by
    index, each as an html fragment (its text escaped), in which markup keeps those spans out of the
    words (`keeper`) and places them as it places an ``<img>``."""
    keep = keeper(translator, glossary=glossary)
    return {k: html.escape(line, quote=False) for k, line in enumerate(lines) if keep(line) or unread(line)}


def unread(line: str) -> bool:
    """Whether ``line`` holds something but no letter (``...``, ``* * *``, ``—``, and numbers alone:
    ``3``, ``12:30``, ``$5``, ``2024``): markup keeps such a sentence, and so such a line, as it is
    (`nmtk.decode.markup.MarkedUp`), where a model writes one of its own (the demo model: "..." →
    "Ein Taucher.", a table cell's "3" → "Drei", "12:30" → "1 1 19999994.")."""
    return bool(line.strip()) and not any(c.isalpha() for c in line)


def renumbered_lines(translator: TranslatorBase, lines: list[str], texts: list[str]) -> dict[int, str]:
    """The lines of ``lines`` whose translation (``texts``) lost a number of the line (`lost_numbers`, in
    the translator's target language), garbled them (`garbled_numbers`, in its source's), lost a name or
    a speaker's label (all four: `lost_carried`) or a glossary's untranslated term (`lost_terms`), by
    index, each as an html fragment as `carried_lines` makes them, to be translated again with its numbers
    and those terms kept (``numbers=True``); none where lines are read as typed."""
    if not translator.reading.carry:
        return {}
    lang, source_lang = translator.tgt_pipe.moses.lang, translator.src_pipe.moses.lang
    terms = translator.reading.terms
    return {k: html.escape(line, quote=False) for k, (line, text) in enumerate(zip(lines, texts, strict=True))
            if lost_carried(line, text, lang, source_lang) or (terms is not None and lost_terms(line, text, terms))}


def lost_carried(source: str, translation: str, lang: str, source_lang: str) -> bool:
    """Whether ``translation`` (in ``lang``) lost what a second translation carries through from
    ``source`` (in ``source_lang``): a number (`lost_numbers`, `garbled_numbers`), a quoted name or a word
    in mixed case (`lost_names`), a speaker's label (`lost_label`). Lines of text (`renumbered_lines`)
    and markup's documents (`nmtk.decode.markup.renumbered_documents`) ask it alike."""
    return (lost_numbers(source, translation, lang) or garbled_numbers(source, translation, source_lang)
            or lost_names(source, translation, source_lang) or lost_label(source, translation))


def renumbered_better(translator: TranslatorBase, source: str, before: str, after: str) -> bool:
    """Whether ``after``, the translation of ``source`` made again with its numbers carried
    (`renumbered_lines`), replaces ``before``: yes, unless it garbles numbers itself where ``before``
    lost none. The numbers carried are the line's; one the model adds is not: "a number 3 on it" gave
    "Nummer 3 3 darauf", made again "Nummer 3 Nummer 9", a number the line never had."""
    if not garbled_numbers(source, after, translator.src_pipe.moses.lang):
        return True
    return lost_numbers(source, before, translator.tgt_pipe.moses.lang)


def renumbered_taken(translator: TranslatorBase, source: str, before: str, after: str) -> str | None:
    """`renumbered_better`'s verdict as a second try's callers take it (`rebracketed_better`'s form):
    ``after`` where it replaces ``before``, else None; a quoted name that ends the source with its
    sentence's stop inside the quotes (``called "32 De Neude."``) carried after the translation's own
    stop ends it alone ("vorbei "32 De Neude."", not "vorbei. "32 De Neude."")."""
    if not renumbered_better(translator, source, before, after):
        return None
    end = _STOPPED_QUOTE.search(source.rstrip())
    if end and after.rstrip().endswith(end.group(1)):
        return re.sub(rf"(?<=\w)\s*[.!?]+(\s+{re.escape(end.group(1))})\s*$", r"\1", after.rstrip())
    return after


#: A line's last quoted part, with its sentence's stop inside the quotes.
_STOPPED_QUOTE = re.compile(r'\s(["“„«][^"“”„«»]*[.!?]["“”»])$')


def rebracketed_lines(translator: TranslatorBase, lines: list[str], texts: list[str]) -> dict[int, str]:
    """`renumbered_lines`' twin for brackets: the lines of ``lines`` whose translation (``texts``) lost
    brackets of their bracketed parts (`lost_brackets`), by index, each as `as_marked`'s html fragment,
    its parts inline elements for markup to place; none where lines are read as typed."""
    if not translator.reading.carry:
        return {}
    return {k: as_marked(line) for k, (line, text) in enumerate(zip(lines, texts, strict=True))
            if lost_brackets(line, text)}


def rebracketed_better(translator: TranslatorBase, source: str, before: str, after: str) -> str | None:
    """``after`` (the translation of `rebracketed_lines`' fragment, entities decoded) with brackets again,
    where it replaces ``before``: markup placed no part around no letter and left none unpaired (`unmarked`),
    the model's own brackets are whole (`lost_brackets`: "A girl ((in pink)) jumps." keeps its outer pair
    for the model to write), and it garbles no number ``before`` kept (`renumbered_better`); else None."""
    bracketed = unmarked(after)
    if bracketed is None or lost_brackets(source, bracketed):
        return None
    return bracketed if renumbered_better(translator, source, before, bracketed) else None


def lost_terms(source: str, translation: str, terms: re.Pattern[str]) -> bool:
    """Whether ``translation`` writes one of ``source``'s untranslated glossary terms (``terms``: names,
    brands, acronyms that translate to themselves) other than as often as ``source`` does, as whole words
    and inside others: a model trained with hints copies some of them poorly ("Ein NASASASASA…",
    "McDonald s s s", "Googleise für Google"), and such a line is translated again with them carried
    through, as links are."""
    found = [m.group() for m in terms.finditer(source)]
    return any(occurrences(translation, t) != found.count(t) or translation.count(t) != found.count(t)
               for t in set(found))


def restored(found: dict[int, str], translated: list[str]) -> dict[int, str]:
    """``found``'s lines as text, from their fragments' translations in order (entities decoded)."""
    return {k: html.unescape(text) for k, text in zip(found, translated, strict=True)}


def left_out(lines: list[str], guides: list | None, translated: dict[int, str]) -> tuple[list[str], list | None]:
    """``lines`` and their guides with the lines ``translated`` apart made empty (and unguided): the
    caller's search, which keeps every line's place, spends nothing on them."""
    if not translated:
        return lines, guides
    lines = ["" if k in translated else line for k, line in enumerate(lines)]
    return lines, None if guides is None else [None if k in translated else g for k, g in enumerate(guides)]


def read_as_spelt(translator: TranslatorBase) -> Callable[[str], bool]:
    """Whether the translator's source vocabulary spells a character as its lines are read: a capital
    the vocabulary lacks is spelt where its small letter is, since lines in capitals are read in
    sentence case, a ligature or full-width letter where its compatibility form is, and the invisible
    break hints are dropped (`nmtk.text.reading`)."""
    spells = translator.src_pipe.spells
    return lambda char: (spells(char) or char in INVISIBLE or (char != char.lower() and spells(char.lower()))
                         or compatible(char, spells) is not None)
