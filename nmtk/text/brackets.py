"""Brackets around sentence ends: where a line's sentences may not be cut; brackets and quotation marks a
translation lost or left unpaired.

Moses splits the period off an abbreviation it does not know (``Fig .``, ``p .``, ``Vol .``, ``ca .``),
and a sentence splitter that ends a sentence before a capital or a digit then cuts "A dog runs (see
Fig. 3) in the park." after "Fig.": the demo model wrote "Ein Hund rennt. Drei Musiker befinden sich im
Park.". Inside brackets that close later in the line, a number does not begin a sentence. Both
splitters use this: pieces of a line (`nmtk.decode.long_input`) and words of markup (`nmtk.text.markup`).
"""

from __future__ import annotations

import html
import re
from collections.abc import Sequence

import numpy as np

OPENING, CLOSING = "([{", ")]}"


def bracket_step(text: str) -> int:
    """The brackets ``text`` opens less those it closes (``(`` 1, ``)`` -1, ``(a)`` 0)."""
    return sum(c in OPENING for c in text) - sum(c in CLOSING for c in text)


def closed_later(steps: Sequence[int] | np.ndarray) -> np.ndarray:
    """Per position (its `bracket_step` in ``steps``): whether a cut after it falls inside brackets that
    close later in the line. A bracket never closed (``:(``) holds nothing together."""
    if not len(steps):
        return np.zeros(0, dtype=bool)
    depth = np.cumsum(np.asarray(steps, dtype=np.int32))
    later = np.minimum.accumulate(depth[::-1])[::-1]  # the lowest depth from each position on
    return np.append(later[1:], depth[-1]) < depth


#: A part of a sentence in round or square brackets with a letter in it, no bracket of its kind inside.
_BRACKETED = re.compile(r"\(([^()]*[^\W\d_][^()]*)\)|\[([^\[\]]*[^\W\d_][^\[\]]*)\]")
#: The inline elements a bracketed part becomes for markup to place (`as_marked`, `unmarked`).
_ELEMENT = {"(": "nmtk-round", "[": "nmtk-square"}
_MARKED = re.compile(r"<(nmtk-round|nmtk-square)>(.*?)</\1>", re.DOTALL)
#: A tag (a subtitle cue's ``<i>``), and what may stand before a line's first word (a speaker's dash, quotes).
_TAG = re.compile(r"<[^<>]*>")
_BEFORE_ALL = " \t-–—\"'“”„«»"


def _parts(source: str) -> list[re.Match[str]]:
    """``source``'s bracketed parts inside its sentence: not one that begins it (``(laughs) A dog runs.``,
    ``(Photo: Reuters) A man…``: a note beside the sentence, whose words a model may drop, and markup then
    put the brackets around another word: "Ein (Hund) rennt."); none inside a tag (``<a title="a (b)">``)."""
    return [m for m in _BRACKETED.finditer(_masked(source)) if _TAG.sub("", source[: m.start()]).strip(_BEFORE_ALL)]


def _pairs(text: str, opening: str) -> tuple[list[tuple[int, int]], list[int]]:
    """``text``'s pairs of brackets of ``opening``'s kind, as (opening's, closing's) positions, and the
    positions of those left unpaired (a closing one before any opening, an opening one never closed)."""
    closing = CLOSING[OPENING.index(opening)]
    pairs: list[tuple[int, int]] = []
    stack: list[int] = []
    unpaired: list[int] = []
    for at, c in enumerate(text):
        if c == opening:
            stack.append(at)
        elif c == closing:
            (pairs.append((stack.pop(), at)) if stack else unpaired.append(at))
    return pairs, sorted(unpaired + stack)


def _lettered(text: str, pairs: list[tuple[int, int]]) -> int:
    """How many of ``pairs`` hold a letter."""
    return sum(any(c.isalpha() for c in text[a + 1 : b]) for a, b in pairs)


def _kinds(source: str) -> list[str]:
    """The opening brackets of ``source``'s bracketed parts (`_parts`) whose kind ``source`` pairs
    throughout: a line's own stray bracket (``:(``, "A boy ) runs") is its writer's, not a model's."""
    return [kind for kind in sorted({m.group(0)[0] for m in _parts(source)}) if not _pairs(_masked(source), kind)[1]]


def _masked(text: str) -> str:
    """``text`` with each tag's characters blanked (a subtitle cue's, a document's): a bracket inside
    one (``<a href="x(1)">``) is none of the text's, and positions stay those of ``text``."""
    return _TAG.sub(lambda m: "\x01" * len(m.group()), text)


def lost_brackets(source: str, translation: str) -> bool:
    """Whether ``translation`` lost brackets of ``source``'s bracketed parts: it holds fewer pairs of their
    kind around a letter than ``source`` does, or one of their kind unpaired. A model that seldom saw
    brackets drops them (the demo model, 5 of 6 such lines: "A woman (in a red dress) dances." → "Eine
    Frau in einem roten Kleid tanzt."), or leaves them around nothing or the wrong way round ("A man [in
    blue] sits." → "Ein blau gekleideter Mann] [sitzt.")."""
    plain, own = _masked(translation), _masked(source)
    for kind in _kinds(source):
        pairs, unpaired = _pairs(plain, kind)
        if unpaired or _lettered(plain, pairs) < _lettered(own, _pairs(own, kind)[0]):
            return True
    return False


#: A line wholly in one pair of brackets ("(A woman sings.)", "[Music]"), and the run of a removed
#: bracket (a NUL where it stood) with the spaces beside it (`tidied`).
_WHOLE = re.compile(r"\s*([(\[])([^()\[\]]*[^\W\d_][^()\[\]]*)([)\]])\s*")
_REMOVED = re.compile(r"[\s\x00]*\x00[\s\x00]*")


def tidied(source: str, translation: str) -> str:
    """``translation`` (text, or markup: its tags are left alone) with no bracket of ``source``'s parts'
    kinds left unpaired or around nothing (the model's, where a second try placed none better: "Ein blau
    gekleideter Mann] [sitzt." → "Ein blau gekleideter Mann sitzt."), and in the brackets of a line wholly
    in them where the model dropped them: "(A woman sings.)" → "(Eine Frau singt.)"."""
    plain = _masked(translation)
    whole = _WHOLE.fullmatch(_masked(source))
    if whole and OPENING.index(whole.group(1)) == CLOSING.index(whole.group(3)):
        if plain.strip() and whole.group(1) not in plain and whole.group(3) not in plain:
            lead, end = len(translation) - len(translation.lstrip()), len(translation.rstrip())
            return f"{translation[:lead]}{whole.group(1)}{translation[lead:end]}{whole.group(3)}{translation[end:]}"
    gone: set[int] = set()
    for kind in _kinds(source):
        pairs, unpaired = _pairs(plain, kind)
        gone.update(unpaired)
        gone.update(at for a, b in pairs if not plain[a + 1 : b].strip(" .,;:-\x01") for at in (a, b))
    if gone:
        marked = "".join("\x00" if at in gone else c for at, c in enumerate(translation))
        translation = _REMOVED.sub(_space_or_not, marked)
    return quotes_tidied(source, translation) if any(c in QUOTES for c in source) else translation


def _space_or_not(m: re.Match[str]) -> str:
    """A removed bracket's run (`tidied`): a space where spaces stood beside it between words, nothing
    at either end of the text or before a mark that ends what went before."""
    after = m.string[m.end() : m.end() + 1]
    spaced = any(c.isspace() for c in m.group())
    return " " if spaced and m.start() and after and after not in ".,;:!?" else ""


def as_marked(source: str, markup: bool = False) -> str:
    """``source`` as an html fragment (its text escaped) in which each bracketed part is an inline element
    without its brackets, which markup places in the translation by alignment, as it places ``<i>``.
    ``markup``: ``source`` is markup already (a subtitle cue's text): nothing escaped, and a part holding a
    tag's character left as it is."""
    escape = (lambda text: text) if markup else (lambda text: html.escape(text, quote=False))
    out, at = [], 0
    for m in _parts(source):
        group = 1 if m.group(1) is not None else 2  # (the match is of the text with its tags blanked)
        name, inner = _ELEMENT[m.group(0)[0]], source[m.start(group) : m.end(group)]
        if markup and ("<" in inner or ">" in inner):
            continue
        out += [escape(source[at : m.start()]), f"<{name}>", escape(inner), f"</{name}>"]
        at = m.end()
    return "".join(out) + escape(source[at:])


def unmarked(text: str) -> str | None:
    """A translation of `as_marked`'s fragment (entities decoded) with its elements brackets again; None
    where markup placed one around no letter (``rennt<i>.</i>``) or left one unpaired: no better than
    the translation without brackets."""
    def bracket(m: re.Match[str]) -> str:
        opening = "(" if m.group(1) == "nmtk-round" else "["
        return f"{opening}{m.group(2).strip()}{')' if opening == '(' else ']'}"

    if any(not any(c.isalpha() for c in m.group(2)) for m in _MARKED.finditer(text)):
        return None
    out = _MARKED.sub(bracket, text)
    return None if "<nmtk-" in out or "</nmtk-" in out else out


def to_rebracket(segments: list[str], done: list[str]) -> dict[int, str]:
    """The ``segments`` (markup: subtitle cues, html lines) whose translations (``done``) lost brackets of
    theirs (`lost_brackets`), by index, each as `as_marked`'s fragment (``markup=True``) to translate
    again; none whose parts `as_marked` leaves as they are (a part holding a tag)."""
    found = {k: as_marked(segment, markup=True) for k, segment in enumerate(segments)
             if lost_brackets(segment, done[k])}
    return {k: fragment for k, fragment in found.items() if fragment != segments[k]}


def rebracketed(segments: list[str], done: list[str], found: dict[int, str], again: list[str]) -> list[str]:
    """``done`` with each of `to_rebracket`'s ``found`` whose translation (``again``, in its order, entities
    decoded) placed every part and keeps the segment's brackets whole in its place, brackets again
    (`unmarked`); and every one tidied (`tidied`)."""
    out = list(done)
    for k, text in zip(found, again, strict=True):
        if (bracketed := unmarked(text)) is not None and not lost_brackets(segments[k], bracketed):
            out[k] = bracketed
    return [tidied(segment, text) for segment, text in zip(segments, out, strict=True)]


#: Double quotation marks, as languages open and close them ("…", „…“, “…”, «…», »…«); what each
#: opening one is closed by in the translation's own style (`quotes_tidied`).
QUOTES = '"„“”«»'
_CLOSED_BY = {'"': '"', "„": "“", "“": "”", "”": "”", "«": "»", "»": "«"}
#: A quotation mark written as a character reference in markup (``&quot;``, ``&#34;``, ``&ldquo;``…).
_QUOTE_ENTITY = re.compile(r"&(?:quot|[lrb]dquo|[lr]aquo|#34|#x22|#822[0-2]|#x201[cde]);", re.IGNORECASE)
#: A closing quotation mark that ends a line, with the stop after it if any ('."', '".', '"').
_QUOTE_ENDS = re.compile(r'["“”»«]([.!?…]*)\s*$')
#: A line wholly in one pair of quotes ('"A dog runs in the park."').
_WHOLE_QUOTED = re.compile(r'\s*(["„“«»])([^"„“”«»]*[^\W\d_][^"„“”«»]*)(["“”»«])\s*')


def _quote_roles(text: str) -> tuple[list[tuple[int, int]], list[int]] | None:
    """``text``'s quotation marks paired by where they stand: one before a word (not after one) opens,
    one after a word or its mark closes, one spaced on both sides closes an open quote or opens one
    (``„Pop 2007 “``, ``« Stopp »``); "„" always opens. Returns the pairs (opening's, closing's
    position) and the positions left unpaired; None where a mark stands inside a word (``5"3``: an
    inch, not a quote)."""
    pairs: list[tuple[int, int]] = []
    stack: list[int] = []
    unpaired: list[int] = []
    for at, c in enumerate(text):
        if c not in QUOTES:
            continue
        before = text[at - 1] if at else " "
        after = text[at + 1] if at + 1 < len(text) else " "
        if before.isalnum() and after.isalnum():
            return None
        words_after, words_before = after.isalnum() or after in "([{¿¡'", before.isalnum() or before in ".,;:!?…)]}'"
        opens = c == "„" or not words_before and words_after or not words_before and not words_after and not stack
        if opens:
            stack.append(at)
        elif stack:
            pairs.append((stack.pop(), at))
        else:
            unpaired.append(at)
    return pairs, sorted(unpaired + stack)


def quotes_tidied(source: str, translation: str) -> str:
    """``translation`` with the quotation marks of ``source``'s quotes whole again, where the source's
    are paired and a model's are not: a line wholly in quotes keeps them ('"A dog runs in the park."' →
    '"Ein Hund rennt im Park."', the demo model dropped them); a quote left open is closed at the end
    where the source's closes at its end ('says: "Two dogs play in the snow."' → 'Aufschrift „Hunde
    spielen im Schnee.“', was left open; not where it opens the translation and the source's quote
    opens later: it would hold the whole line), else removed with any stray closing mark ("„Cow“ -S “.")."""
    own, plain = _masked(source), _masked(translation)
    if _QUOTE_ENTITY.search(plain):
        return translation  # markup that writes its quotes as entities: not ours to count
    found = _quote_roles(own)
    if found is None or found[1] or not found[0]:
        return translation  # the source's own marks do not pair: its writer's, not a model's to mend
    whole = _WHOLE_QUOTED.fullmatch(own)
    if whole and not any(c in QUOTES for c in plain) and plain.strip():
        lead, end = len(translation) - len(translation.lstrip()), len(translation.rstrip())
        return f"{translation[:lead]}{whole.group(1)}{translation[lead:end]}{whole.group(3)}{translation[end:]}"
    roles = _quote_roles(plain)
    if roles is None or not roles[1]:
        return translation
    unpaired, last = roles[1], roles[1][-1]
    ending = _QUOTE_ENDS.search(own)  # the source's last quote ends its line, before or after its stop
    first = max(found[0], key=lambda pair: pair[1])[0]  # where it opens: a quote of the whole line or not
    if ending and _opens_before_letters(plain, last) and (plain[:last].strip() or not own[:first].strip()):
        unpaired = unpaired[:-1]
        end = len(translation.rstrip())
        if ending.group(1):  # '"Stop".': the quote closes before the translation's stop too
            end = len(translation[:end].rstrip(".!?…"))
        translation = translation[:end] + _CLOSED_BY[translation[last]] + translation[end:]
    if not unpaired:
        return translation
    marked = "".join("\x00" if at in unpaired else c for at, c in enumerate(translation))
    return _REMOVED.sub(_space_or_not, marked)


def _opens_before_letters(text: str, at: int) -> bool:
    """Whether the mark at ``at`` is an opening one with a letter after it."""
    return any(c.isalpha() for c in text[at + 1 :]) and not text[at + 1 : at + 2].isspace()
