"""HTML and inline-tagged text through translation: what is translated, and where the tags go back.

A document is cut into *segments* (`parse`): the text of each block (a paragraph, a list item, a
table cell; in ``xml``, a line), with its inline tags (``<b>``, ``<a href=...>``, ``<span>``) taken out
and remembered by the words they covered. Everything else — block tags, comments, and elements not to
translate (``<code>``, ``<pre>``, ``<script>``, ``<style>``, ``translate="no"``, ``class="notranslate"``;
in ``xml``, XLIFF's and TMX's inline codes ``<bpt>``, ``<ept>``, ``<ph>``, ``<it>``, ``<ut>``) — is kept
verbatim between the segments. Each segment's sentences are translated whole, so ``<b>red</b>
car`` is translated as one sentence, not as two fragments; the tags are then put back around the target
words aligned to the source words they covered (`place`), nested as they were, each exactly once.

Attributes are never translated, except those the caller names (``alt``, ``title``): their values
become segments of their own. Entities come back as they were written (``&copy;`` stays ``&copy;``).
Malformed input (an end tag that closes nothing, an inline tag still open at the end of its block) is
one error naming the line and column.
"""

from __future__ import annotations

import difflib
import html
import re
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from html.parser import HTMLParser

from nmtk.errors import NmtkError
from nmtk.text.brackets import bracket_step, closed_later

FORMATS = ("text", "html", "xml")

#: Elements that end one block of text and begin another (their tags are kept verbatim between blocks).
BLOCKS = frozenset(
    "address article aside blockquote body br caption dd details dialog div dl dt fieldset figcaption figure "
    "footer form h1 h2 h3 h4 h5 h6 head header hgroup hr html li main menu nav ol option p section summary "
    "table tbody td tfoot th thead title tr ul".split())
#: Elements whose content is never translated (kept verbatim, the element with it).
VERBATIM = frozenset("code pre script style textarea kbd samp var math svg template noscript".split())
#: In xml, XLIFF's and TMX's inline codes: their content is the original document's markup (``<bpt
#: id="1">&lt;b&gt;</bpt>``), kept verbatim as these elements are in html (it was translated: "Nahaufnahme
#: &lt;&gt;"). ``<sub>``, their translatable part, and XLIFF 2's ``<pc>`` are translated.
NATIVE_CODE = frozenset("bpt ept ph it ut".split())
#: HTML's void elements: a start tag and no end tag.
VOID = frozenset("area base br col embed hr img input link meta param source track wbr".split())
#: Where a translated attribute's value goes in the markup until its translation is known.
_SLOT = re.compile("\x00(\\d+)\x00")


#: Spans of a block's text to keep out of its words (`parse`'s ``keep``): [start, end) in order.
Keep = Callable[[str], list[tuple[int, int]]]

#: Text that starts like a tag (``<b class="x>red``): a tag whose attribute quote never closes.
_BROKEN_TAG = re.compile(r"</?[A-Za-z]")


#: What surely is a markup tag in a line of text: a closing tag (subtitles' ``<i>…</i>``), a self-closing one
#: (XLIFF's ``<x id="1"/>``, ``<br/>``), ``<br>``, or a tag with an attribute (``<a href="…">``); not a
#: corpus's or a language's tag (``<BT>``, ``<2de>``) nor ``a < b > c``.
_TAG_IN_TEXT = re.compile(r"</[A-Za-z][\w:.-]*\s*>|<[A-Za-z][\w:.-]*(?:\s[^<>]*)?/>|<br\s*>|"
                          r"<[A-Za-z][\w:.-]*\s+[\w:.-]+\s*=\s*[\"'][^<>]*>", re.IGNORECASE)


def holds_tags(line: str) -> bool:
    """Whether a line of text holds markup tags, which a model trained on plain text reads as words
    (``<b>A</b> cat.`` gave the demo model "<Ein Bahnen> < dreht sich."): `translate` names such lines
    and says that ``--format html`` keeps tags out of the sentences."""
    return "<" in line and _TAG_IN_TEXT.search(line) is not None


class MarkupError(NmtkError):
    """Input that is not well-formed where it must be; ``document``: which of several (`MarkedUp.of`'s
    list: a file's lines, a request's items) it is in, where there were several."""

    document: int | None = None


@dataclass
class Tag:
    """An inline element of a segment: its start and end tags as written, and the source words
    ``[first, last)`` it covers (``first == last``: none, a point before word ``first``: an empty
    element, a void one like ``<img>``, a comment, or an element kept verbatim)."""

    start: str
    end: str
    first: int
    last: int
    parent: int | None  # the enclosing tag (its index in the segment's tags), None at the top
    trim_start: bool = False  # it began after its first word's leading punctuation (``"<b>Hi``)
    trim_end: bool = False  # it ended before its last word's trailing punctuation (``link</a>.``)
    glued: bool = False  # a point written right after a word (``word<br>``): it follows that word
    after_word: bool = False  # a point written right after a word's letter or digit (``dog<img>``): glued to it
    word_after: bool = False  # a point written right before a word's letter or digit (``<img>dog``): glued to it
    after_opening: bool = False  # a point written right after an opening bracket or quote (``(3``): glued to
    # that, not to the word it is placed after where the translation lost the bracket ("Hund3" for ``dog (3``)

    @property
    def point(self) -> bool:
        return self.first == self.last


@dataclass
class Segment:
    """One block's text to translate: its words (entities decoded, whitespace collapsed), its inline
    tags, and what surrounds it (whitespace kept as it was)."""

    words: list[str]
    tags: list[Tag] = field(default_factory=list)
    entities: dict[str, str] = field(default_factory=dict)  # a character -> the entity it was written as
    before: str = ""
    after: str = ""
    glued: frozenset[int] = frozenset()  # words written with no space before the next (``runs.</b><i>A``)

    def written(self) -> str:
        """The segment's words with its points between them (an ``<img>``, a character carried through as
        one: a bracket the vocabulary cannot spell, ``[``), spaced: its text as the translation's checks
        read it (`nmtk.text.brackets.tidied`)."""
        points: dict[int, list[str]] = {}
        for tag in self.tags:
            if tag.point:
                points.setdefault(tag.first, []).append(tag.start)
        return " ".join("".join(points.get(i, ())) + word for i, word in enumerate(self.words)) + "".join(
            points.get(len(self.words), ()))

    def sentences(self) -> list[tuple[int, int]]:
        """The segment's sentences as word ranges: a sentence ends after a word ending in ``.``, ``!`` or
        ``?`` (closing quotes and brackets aside) when the next word begins with a capital or a digit,
        or an element with nothing to translate stands before it (``it. <code>nmtk</code> is``), unless
        the word is an abbreviation (``Dr.``, ``e.g.``, ``J.``); a separator (`SEPARATORS`) is one alone."""
        cuts, start = [], 0
        kept = {tag.first for tag in self.tags if tag.point}  # an element kept verbatim starts a sentence too
        apart = {tag.first for tag in self.tags if tag.point and not tag.end and _separator(tag.start.strip())}
        bracketed = closed_later([bracket_step(w) for w in self.words])  # "(see Fig. 3)": `nmtk.text.brackets`
        for i in range(len(self.words) - 1):
            starts = _starts_sentence(self.words[i + 1], numbers=not bracketed[i]) or (
                i + 1 in kept and not bracketed[i])  # a number carried through is an element kept
            ends = _ends_sentence(self.words[i]) and starts
            if ends or i + 1 in apart or _separator(self.words[i]) or _separator(self.words[i + 1]):
                cuts.append((start, i + 1))
                start = i + 1
        return [*cuts, (start, len(self.words))] if self.words else []


_SENTENCE_END = re.compile(r"[.!?][\"'”’»)\]]*$")
_TITLES = frozenset("mr mrs ms dr prof st nr no vs jr sr hr fr frau herr mme mlle m".split())


#: Characters that set a menu's or a footer's items apart (``Home | About us``, ``A · B · C``): a word of
#: them alone is a sentence of its own, kept as it is, and the items on either side are translated apart
#: (read as one sentence, "Home | About us" moved the bar into the second link).
SEPARATORS = frozenset("|¦‖·•∙‧")


def _separator(word: str) -> bool:
    return bool(word) and all(c in SEPARATORS for c in word)


def _ends_sentence(word: str) -> bool:
    if not _SENTENCE_END.search(word):
        return False
    bare = word.rstrip("\"'”’»)]")
    stem = bare.rstrip(".!?")
    if bare.endswith(".") and (len(stem) <= 1 or "." in stem or stem.lower() in _TITLES):
        return False  # an abbreviation, an initial
    return True


def _starts_sentence(word: str, numbers: bool = True) -> bool:
    first = word.lstrip("\"'“‘«([¿¡")[:1]
    return first.isupper() or (numbers and first.isdigit())


@dataclass
class Document:
    """Markup cut into `Segment`s and what lies between them: ``parts`` is the document in order,
    verbatim strings and segment indices."""

    parts: list[str | int]
    segments: list[Segment]

    def render(self, placed: Sequence[str]) -> str:
        """The document with each segment replaced by ``placed[i]`` (its translation with its tags);
        translated attribute values (the segments after those of the text) fill their slots."""
        out = "".join(placed[p] if isinstance(p, int) else p for p in self.parts)
        # an attribute's value had no tags: its placed text, entities decoded, escaped for a quoted value
        return _SLOT.sub(lambda m: html.escape(html.unescape(placed[int(m.group(1))]), quote=True), out)


class _Parser(HTMLParser):
    """`HTMLParser` events into a `Document`; ``xml``: every tag inline, lines are the blocks."""

    def __init__(self, kind: str, attributes: frozenset[str], keep: Keep | None = None,
                 inline_breaks: frozenset[tuple[int, int]] = frozenset()) -> None:
        super().__init__(convert_charrefs=False)
        # inline_breaks: where a <br> breaks a line inside a sentence (`_inline_breaks`)
        self.kind, self.attributes, self.keep, self.inline_breaks = kind, attributes, keep, inline_breaks
        self.parts: list[str | int] = []
        self.segments: list[Segment] = []
        self.attribute_texts: list[str] = []  # translated attributes' values, in order of appearance
        self._new_block()
        self.verbatim: list[str] | None = None  # the raw text of an element kept whole
        self.verbatim_open: list[str] = []  # its open elements' names (nested ones of the same kind too)
        self.around: list[str] = []  # xml: open elements whose text spans lines (`_line_break`), outermost first
        self._end_raw = ""

    # ----------------------------------------------------------------- state of the block being read
    def _new_block(self) -> None:
        self.raw: list[str] = []  # the block's markup as written (kept when it has no word)
        self.text: list[str] = []  # its characters, entities decoded: offsets are into "".join(self.text)
        self.chars = 0
        self.open: list[tuple[int, str]] = []  # open inline tags: (index in self.tags, name)
        self.tags: list[tuple[str, str, int, int, int | None]] = []  # start, end, char from, char to, parent
        self.entities: dict[str, str] = {}
        self.opened_at: dict[int, str] = {}  # where each inline tag began, for an error
        self.breaks: list[int] = []  # offsets where a word ends though no space follows (<br> in a tag)

    def _where(self) -> str:
        line, column = self.getpos()
        return f"line {line}, column {column + 1}"

    def _add_text(self, text: str, raw: str) -> None:
        self.text.append(text)
        self.chars += len(text)
        self.raw.append(raw)

    def flush(self) -> None:
        """End the block: its segment (or, without a word, its markup verbatim)."""
        if self.open:
            index, name = self.open[-1]
            lines = " (in xml each line is one text: an element around several lines has its tags on lines of their " \
                "own)" if self.kind == "xml" else ""
            raise MarkupError(f"{self.opened_at[index]}: <{name}> is not closed (its block ends at {self._where()})"
                              + lines)
        text = "".join(self.text)
        kept = _together(_apart([*_markers(self.tags, text), *(self.keep(text) if self.keep is not None else ())]),
                         text, self.tags)
        if kept:
            text = self._taken_out(text, kept)
        spans = _split_at([(m.start(), m.end()) for m in re.finditer(r"\S+", text)], self.breaks)
        if not spans:
            if self.raw:
                self.parts.append("".join(self.raw))
            self._new_block()
            return
        segment = Segment([text[a:b] for a, b in spans], entities=self.entities,
                          before=text[: spans[0][0]], after=text[spans[-1][1]:], glued=_glued(spans))
        self.tags = _collapsed(self.tags)
        tags = self._outside_the_words(segment, spans, text)
        _inner_edges(segment, tags, spans[0][0], spans[-1][1])
        for start, end, lo, hi, parent in tags:
            first, last = _covered(spans, lo, hi)
            glued = lo == hi and 0 < first and spans[first - 1][1] >= lo  # after the word before it, no space
            after_word = lo == hi and 0 < lo and text[lo - 1].isalnum()
            word_after = lo == hi and lo < len(text) and text[lo].isalnum()
            after_opening = lo == hi and 0 < lo and text[lo - 1] in _OPENING
            lead = text[spans[first][0] : lo] if first < len(spans) else ""
            tail = text[hi : spans[last - 1][1]] if last > 0 else ""
            segment.tags.append(Tag(start, end, first, last, parent, _punctuation(lead), _punctuation(tail),
                                    glued, after_word, word_after, after_opening))
        self.parts.append(len(self.segments))
        self.segments.append(segment)
        self._new_block()

    def _taken_out(self, text: str, kept: list[tuple[int, int]]) -> str:
        """``text`` without its ``kept`` spans (characters the model cannot read, links: the caller's `Keep`),
        each a point where it stood, as written with the elements inside it (`_span_markup`), inside the
        innermost tag around it (one it fills becomes the point, whole: ``<b><a href=…>https://…</a></b>``
        was an empty ``<b></b>`` beside the link). Between two letters or digits a span leaves a space, the
        words stay two (``runs<sup>1</sup>.`` is one word, its point after it). Later positions move back."""
        tags, starts = self.tags, [a for _, _, a, _, _ in self.tags]  # in the order they began: ``a`` ascends
        children = _children(tags)
        glues = _glues(text, kept)
        inner, points, places = {}, [], []
        for lo, hi in kept:  # in the source's positions: they all move once, below
            place = bisect_right(starts, lo)  # the tags begun before it, in the source
            inside = _enclosing(tags, place, lo, hi)
            filled = [k for k in inside if tags[k][2:4] == (lo, hi)]  # <b>https://…</b>: the element is the point
            if filled:  # the outermost it fills holds the markup inside it; the elements there go (`_without`)
                outer = filled[0]
                start, end, a, b, parent = tags[outer]
                tags[outer] = (start + _inner(tags, text, outer, children, self.entities), end, a, b, parent)
                inner.update({k: outer for k in _held(children, outer)})
            else:
                held, markup = _span_markup(tags, text, lo, hi, children, self.entities)
                inner |= dict.fromkeys(held, len(tags) + len(points))
                points.append((markup, "", lo, lo, inside[-1] if inside else None))
                places.append(place)
        moved = _moved(kept, glues)
        self.tags = [(s, e, moved(a), moved(b), p) for s, e, a, b, p in tags + points]
        self.breaks = [moved(b) for b in self.breaks]
        self.tags, index = _in_source_order(self.tags, len(tags), places)
        if inner:
            self.tags = _without(self.tags, {index[k]: index[v] for k, v in inner.items()})
        bounds = [0, *(x for span in kept for x in span), len(text)]
        pieces = [text[bounds[2 * i] : bounds[2 * i + 1]] for i in range(len(kept) + 1)]
        text = "".join(piece + glue for piece, glue in zip(pieces, [*glues, ""], strict=True))
        return text

    def _outside_the_words(self, segment: Segment, spans: list[tuple[int, int]], text: str
                           ) -> list[tuple[str, str, int, int, int | None]]:
        """The block's tags, less the elements with nothing to translate that stand in the whitespace
        before its first word or after its last (``<p><img> A dog</p>``): those go into the segment's
        ``before`` / ``after``, verbatim, where they were (placed as points before the first target
        word they put the space before themselves: ``<p> <img>Ein Hund</p>``). Parent indices are
        renumbered for the tags that remain."""
        first, last = spans[0][0], spans[-1][1]
        outside = {k for k, (_, _, lo, hi, parent) in enumerate(self.tags)
                   if lo == hi and parent is None and (lo < first or lo > last)}
        if not outside:
            return self.tags
        for edge, lo_text, hi_text in (("before", 0, first), ("after", last, len(text))):
            at, parts = lo_text, []
            here = sorted((k for k in outside if lo_text <= self.tags[k][2] <= hi_text), key=lambda k: self.tags[k][2])
            for k in here:
                start, end, lo, _, _ = self.tags[k]
                parts += [text[at:lo], start + end]
                at = lo
            setattr(segment, edge, "".join(parts) + text[at:hi_text])
        kept = [k for k in range(len(self.tags)) if k not in outside]
        index = {old: new for new, old in enumerate(kept)}
        return [(start, end, lo, hi, None if parent is None else index[parent])
                for start, end, lo, hi, parent in (self.tags[k] for k in kept)]

    # ----------------------------------------------------------------- HTMLParser's events
    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self._start(tag, attrs, self.get_starttag_text() or f"<{tag}>", closed=False)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self._start(tag, attrs, self.get_starttag_text() or f"<{tag}/>", closed=True)

    def _start(self, tag: str, attrs: list[tuple[str, str | None]], raw: str, closed: bool) -> None:
        void = closed or (self.kind == "html" and tag in VOID)
        if self.verbatim is not None:
            self.verbatim.append(raw)
            if not void and tag == self.verbatim_open[0]:
                self.verbatim_open.append(tag)
            return
        raw = self._translated_attributes(raw, attrs)
        last = self.text[-1] if self.text else ""
        if last[-1:].strip() and _ends_sentence(last.split()[-1]):
            self.breaks.append(self.chars)  # "park.</seg><seg>Two": two words (the sentences are cut there)
        keep = dict(attrs)
        if self._kept_whole(tag, keep):
            if void:
                self._point(raw)
            else:
                self.verbatim, self.verbatim_open = [raw], [tag]
            return
        inline = void and (bool(self.open) or self.getpos() in self.inline_breaks)  # <b>a<br>b</b>, a<br>b
        if self.kind == "html" and tag in BLOCKS and not inline:
            self.flush()
            self.parts.append(raw)
            return
        if void:
            self._point(raw)
            if tag in BLOCKS:  # a line break inside an inline tag or a sentence: a point, and the end of a word
                self.breaks.append(self.chars)
            return
        self.tags.append((raw, "", self.chars, -1, self.open[-1][0] if self.open else None))
        self.open.append((len(self.tags) - 1, tag))
        self.opened_at[len(self.tags) - 1] = self._where()
        self.raw.append(raw)

    def _kept_whole(self, tag: str, attrs: dict[str, str | None]) -> bool:
        if attrs.get("translate", "") == "no" or "notranslate" in (attrs.get("class") or "").split():
            return True
        if self.kind == "xml" and attrs.get("mtype") == "protected":  # XLIFF 1.2's text not to translate
            return True
        return tag in (VERBATIM if self.kind == "html" else NATIVE_CODE)

    def _point(self, raw: str) -> None:
        """An element with nothing to translate inside: placed between words."""
        self.tags.append((raw, "", self.chars, self.chars, self.open[-1][0] if self.open else None))
        self.raw.append(raw)

    def _translated_attributes(self, raw: str, attrs: list[tuple[str, str | None]]) -> str:
        """``raw`` with the values of the attributes to translate replaced by slots."""
        for name, value in attrs:
            if name in self.attributes and value and value.strip():
                found = re.search(rf"""(\s{re.escape(name)}\s*=\s*)("[^"]*"|'[^']*'|[^\s>"']+)""", raw, re.IGNORECASE)
                if found:
                    self.attribute_texts.append(value)
                    slot = f'"\x00{len(self.attribute_texts) - 1}\x00"'
                    raw = raw[: found.start(2)] + slot + raw[found.end(2):]
        return raw

    def parse_endtag(self, i: int) -> int:  # the end tag as written (HTMLParser passes its name only)
        self._end_raw = self.rawdata[i : self.rawdata.find(">", i) + 1]
        return super().parse_endtag(i)

    def handle_endtag(self, tag: str) -> None:
        raw = self._end_raw or f"</{tag}>"
        if self.verbatim is not None:
            self.verbatim.append(raw)
            if tag == self.verbatim_open[0]:
                self.verbatim_open.pop()
                if not self.verbatim_open:
                    element, self.verbatim = "".join(self.verbatim), None
                    self._point(element)
            return
        if self.kind == "html" and tag in BLOCKS:
            self.flush()
            self.parts.append(raw)
            return
        if self.kind == "html" and tag in VOID:  # </br> and the like: nothing to close
            self._point(raw)
            return
        if not self.open and self.around and self.around[-1] == tag:  # xml: the end of an element around lines
            self.flush()
            self.parts.append(raw)
            self.around.pop()
            return
        if not self.open or self.open[-1][1] != tag:
            expected = f"</{self.open[-1][1]}>" if self.open else "no end tag (none is open in this block)"
            raise MarkupError(f"{self._where()}: </{tag}> where {expected} was expected")
        index, _ = self.open.pop()
        start, _, lo, _, parent = self.tags[index]
        self.tags[index] = (start, raw, lo, self.chars, parent)
        self.raw.append(raw)

    def handle_data(self, data: str) -> None:
        if self.verbatim is not None:
            self.verbatim.append(data)
            return
        if "\x00" in data:
            raise MarkupError(f"{self._where()}: a NUL character in the text")
        if _BROKEN_TAG.match(data):  # HTMLParser passes on as text a tag it could not end
            raise MarkupError(f"{self._where()}: {data[:40]!r} is not a complete tag (a quote of an attribute's "
                              "value not closed?)")
        if self.kind == "xml" and "\n" in data:  # lines are xml's blocks
            lines = data.split("\n")
            for k, line in enumerate(lines):
                if k:
                    self._line_break()
                if line:
                    self._add_text(line, _as_text(line))
            return
        self._add_text(data, _as_text(data))

    def _line_break(self) -> None:
        """The end of an xml line, which ends its block. Elements still open there with no word of the
        line inside them (a document's root and containers, each tag on a line of its own: ``<doc>`` /
        ``  <seg>A dog.</seg>`` / ``</doc>``) are kept as written around the lines they hold, as html's
        block elements are; an element whose words go on past the line is an error, as before."""
        if self.open and not "".join(self.text).strip():
            self.around += [name for _, name in self.open]
            self.parts.append("".join(self.raw))
            self._new_block()
        self.flush()
        self.parts.append("\n")

    def _entity(self, raw: str) -> None:
        if self.verbatim is not None:
            self.verbatim.append(raw)
            return
        char = html.unescape(raw)
        if char == raw:  # not an entity HTML knows: kept as written, as text
            self._add_text(raw, _as_text(raw))
            return
        if char not in "&<":
            self.entities[char] = raw
        self._add_text(char, raw)

    def handle_entityref(self, name: str) -> None:
        self._entity(f"&{name};")

    def handle_charref(self, name: str) -> None:
        self._entity(f"&#{name};")

    def handle_comment(self, data: str) -> None:
        self._in_place(f"<!--{data}-->")

    def _in_place(self, raw: str) -> None:
        """A comment or processing instruction: kept where it stands, between the words around it."""
        if self.verbatim is not None:
            self.verbatim.append(raw)
        else:
            self._point(raw)

    def handle_decl(self, decl: str) -> None:
        self.flush()
        self.parts.append(f"<!{decl}>")

    def handle_pi(self, data: str) -> None:  # <?xml …?>, <?php …?>: as a comment (it ended the block and
        self._in_place(f"<?{data}>")          # its sentence; in xml, inside an element, an error)

    def unknown_decl(self, data: str) -> None:  # <![CDATA[...]]>: kept as it is (``data`` is "CDATA[...")
        self._in_place(f"<![{data}]]>")


#: A block's tag as the parser keeps it: start and end tags as written, [from, to) characters of its text,
#: the index of its parent.
RawTag = tuple[str, str, int, int, "int | None"]


def _markers(tags: list[RawTag], text: str) -> list[tuple[int, int]]:
    """The outermost elements holding no letter and no point (a footnote's ``1`` or ``[1]``, also as a
    link in ``<sup>``, the ``2`` of m², a ``*``) written right after a word and not inside one
    (``dog<sup>1</sup> runs``): kept as they are, each placed after the target word aligned to its word,
    as a point is. Read as text they glued to the word ("dog1", which the demo model read as the whole
    line's word: ``<p><sup>Ein Hund rennt.</sup></p>``). ``H<sub>2</sub>O`` is inside a word, and read as one."""
    points = sorted(a for _, _, a, b, _ in tags if a == b)
    found = [(lo, hi) for _, end, lo, hi, _ in tags
             if end and 0 < lo < hi and not text[lo - 1].isspace() and (hi == len(text) or not text[hi].isalnum())
             and text[lo:hi].strip() == text[lo:hi] and not any(c.isalpha() for c in text[lo:hi])
             and bisect_left(points, lo) == bisect_right(points, hi)]  # no <img> inside
    return [(lo, hi) for lo, hi in found if not any(a <= lo and hi <= b and (a, b) != (lo, hi) for a, b in found)]


def _span_markup(tags: list[RawTag], text: str, lo: int, hi: int, children: dict[int | None, list[int]],
                 entities: dict[str, str]) -> tuple[list[int], str]:
    """A kept span's markup: its characters with the elements that lie inside it where they stood
    (``H<sub>2</sub>O``, which came back "H2O <sub></sub>": the code kept without its subscript, the
    subscript emptied beside it); and those elements' indices, at any depth."""
    top = [k for k, (_, _, a, b, parent) in enumerate(tags)
           if lo <= a and b <= hi and (a < b or lo < a < hi)
           and not (parent is not None and lo <= tags[parent][2] and tags[parent][3] <= hi)]
    out, at = [], lo
    for k in top:
        start, end, a, b, _ = tags[k]
        out += [_escaped(text[at:a], entities), start, _inner(tags, text, k, children, entities), end]
        at = b
    out.append(_escaped(text[at:hi], entities))
    return [h for k in top for h in (k, *_held(children, k))], "".join(out)


def _inner(tags: list[RawTag], text: str, k: int, children: dict[int | None, list[int]],
           entities: dict[str, str]) -> str:
    """What element ``k`` holds, as written: its characters of ``text`` escaped (``entities`` as written)
    and the elements and points in it, each where it stood (``<span>[</span>1<span>]</span>``,
    ``<img src="a.png"> 🐶``)."""
    out, at = [], tags[k][2]
    for child in children.get(k, ()):  # in the order they began: the order they stand in
        start, end, lo, hi, _ = tags[child]
        out += [_escaped(text[at:lo], entities), start, _inner(tags, text, child, children, entities), end]
        at = hi
    out.append(_escaped(text[at : tags[k][3]], entities))
    return "".join(out)


def _children(tags: list[RawTag]) -> dict[int | None, list[int]]:
    """Each tag's (None: the block's) children, in the order they began."""
    children: dict[int | None, list[int]] = {}
    for k, tag in enumerate(tags):
        children.setdefault(tag[4], []).append(k)
    return children


def _held(children: dict[int | None, list[int]], k: int) -> list[int]:
    """The elements and points inside element ``k``, at any depth."""
    out = list(children.get(k, ()))
    for child in out:
        out += children.get(child, ())  # (the list grows as it is read: breadth first)
    return out


def _enclosing(tags: list[RawTag], place: int, lo: int, hi: int) -> list[int]:
    """The elements around ``[lo, hi)``, outermost first, of ``tags[:place]`` (those begun at or before
    ``lo``): the last begun that ends at or after ``hi`` is the innermost, the others are its ancestors."""
    k = place - 1
    while k >= 0 and not (tags[k][2] < tags[k][3] and hi <= tags[k][3]):
        k -= 1
    chain: list[int] = []
    at: int | None = k if k >= 0 else None
    while at is not None:
        chain.append(at)
        at = tags[at][4]
    return chain[::-1]


def _glues(text: str, kept: list[tuple[int, int]]) -> list[str]:
    """What each ``kept`` span leaves in its place: a space between two letters or digits (the words stay
    two), else nothing. Its right neighbour is the one left once the spans after it are out: of
    ``e🐶https://…`` the emoji leaves nothing where the link after it leaves nothing either."""
    glues, after = [""] * len(kept), None  # the character after the span, the later spans out
    for k in range(len(kept) - 1, -1, -1):
        lo, hi = kept[k]
        if k + 1 < len(kept) and kept[k + 1][0] == hi:
            after = glues[k + 1][:1] or after
        else:
            after = text[hi] if hi < len(text) else None
        if 0 < lo and text[lo - 1].isalnum() and after is not None and after.isalnum():
            glues[k] = " "
    return glues


def _moved(kept: list[tuple[int, int]], glues: list[str]) -> Callable[[int], int]:
    """Where a position of a block's text goes once the ``kept`` spans (in order) are taken out, each
    leaving its glue: a position inside a span goes to just after the span's glue."""
    his = [hi for _, hi in kept]
    shifts = [0]
    for (lo, hi), glue in zip(kept, glues, strict=True):
        shifts.append(shifts[-1] + hi - lo - len(glue))

    def moved(at: int) -> int:
        k = bisect_right(his, at)  # the spans that end at or before it
        if k < len(kept) and kept[k][0] < at:  # inside span k
            return kept[k][0] - shifts[k] + len(glues[k])
        return at - shifts[k]

    return moved


def _in_source_order(tags: list[RawTag], before: int, places: list[int]) -> tuple[list[RawTag], dict[int, int]]:
    """``tags[:before]`` (in the order they began) with the points ``tags[before:]`` put among them where
    they stood (``places``: how many of the former began before each), parents renumbered; and where each
    old index went. A point standing before a tag must come before it: ``A 🐶<b>dog</b>`` came back
    ``<b>🐶Hund</b>``, a menu's ``|`` inside the next link."""
    order = sorted([(k, 1, k) for k in range(before)] + [(at, 0, before + j) for j, at in enumerate(places)])
    index = {old: new for new, (_, _, old) in enumerate(order)}
    return [(start, end, lo, hi, None if parent is None else index[parent])
            for start, end, lo, hi, parent in (tags[old] for _, _, old in order)], index


def _inner_edges(segment: Segment, tags: list[RawTag], first: int, last: int) -> None:
    """The whitespace inside an element that opens before the block's first word (or closes after its
    last) is that element's, not the block's: ``<p><a><img> Home</a></p>`` came back ``<p> <a><img>
    Startseite</a></p>``, the space written both before the block and by the image's placement."""
    lead = min([first, *(lo for _, _, lo, hi, _ in tags if lo < first < hi)])
    tail = max([last, *(hi for _, _, lo, hi, _ in tags if lo < last < hi)])
    before, after = segment.before, segment.after  # their markup of points outside every tag stays
    segment.before = before[: len(before) - min(first - lead, len(before) - len(before.rstrip()))]
    segment.after = after[min(tail - last, len(after) - len(after.lstrip())) :]


def _collapsed(tags: list[RawTag]) -> list[RawTag]:
    """``tags`` with each empty element that holds other points (``<i><img src="x"></i>``, an icon) made
    one point of its markup: placed apart, the image came out of its element (``<em></em> <img>``), and
    at a block's edge the parser failed (a KeyError)."""
    parents = {tag[4] for tag in tags}
    holders = [k for k, (_, _, lo, hi, parent) in enumerate(tags)
               if lo == hi and k in parents and (parent is None or tags[parent][2] != tags[parent][3])]
    if not holders:
        return tags
    gone: dict[int, int] = {}
    children = _children(tags)
    for k in holders:  # all points: no text inside
        tags[k] = (tags[k][0] + _inner(tags, "", k, children, {}) + tags[k][1], "", *tags[k][2:])
        gone.update({d: k for d in _held(children, k)})
    return _without(tags, gone)


def _without(tags: list[RawTag], gone: dict[int, int]) -> list[RawTag]:
    """``tags`` less ``gone`` (index -> the tag that now holds its markup), parents renumbered."""
    kept = [k for k in range(len(tags)) if k not in gone]
    index = {old: new for new, old in enumerate(kept)}
    return [(start, end, lo, hi, None if parent is None else index[gone.get(parent, parent)])
            for start, end, lo, hi, parent in (tags[k] for k in kept)]


def _apart(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """``spans`` in order, each overlapping an earlier (or, from the same place, a longer) one left out: a
    marker ``[1]`` is kept whole, though the vocabulary cannot spell its brackets."""
    out: list[tuple[int, int]] = []
    for lo, hi in sorted(spans, key=lambda span: (span[0], -span[1])):
        if not out or lo >= out[-1][1]:
            out.append((lo, hi))
    return out


def _together(spans: list[tuple[int, int]], text: str, tags: list[RawTag]) -> list[tuple[int, int]]:
    """``spans`` (in order, apart) with those that only white space parts, no tag beginning or ending
    between them, as one: they stand together in one element and come back together; and an element
    that holds nothing but spans, white space and images, in elements of its own or not, is one span,
    kept whole (``<sup>🐶 🐱</sup>`` came back ``<sup></sup> 🐶 🐱``,
    ``<b><i>jo@x.org</i> B-52</b>`` ``<b></b> <i>jo@x.org</i> B-52``)."""
    spans = _filled_elements(spans, text, tags)
    if len(spans) < 2:
        return spans
    bounds = sorted({x for _, _, a, b, _ in tags for x in (a, b)})
    out = [spans[0]]
    for lo, hi in spans[1:]:
        last_lo, last_hi = out[-1]
        if not text[last_hi:lo].strip() and bisect_left(bounds, last_hi) == bisect_right(bounds, lo):
            out[-1] = (last_lo, hi)
        else:
            out.append((lo, hi))
    return out


def _filled_elements(spans: list[tuple[int, int]], text: str, tags: list[RawTag]) -> list[tuple[int, int]]:
    """``spans`` with those inside an element that holds nothing else but white space (and images or other
    points) as the element's one span, the outermost such element's; so is an element of images and
    white space alone (``<span><img> <img></span>``)."""
    read, held = [0], [0]  # up to each place: characters neither white space nor kept; kept ones
    inside, cut = [False] * len(text), [False] * (len(text) + 1)  # cut: a place a span runs across
    for lo, hi in spans:
        inside[lo:hi] = [True] * (hi - lo)
        cut[lo + 1 : hi] = [True] * max(hi - lo - 1, 0)
    for char, is_kept in zip(text, inside, strict=True):
        read.append(read[-1] + (not is_kept and not char.isspace()))
        held.append(held[-1] + is_kept)
    pointed = {parent for _, _, a, b, parent in tags if a == b}  # elements holding a point (an image)
    filled = [(a, b) for k, (_, _, a, b, _) in enumerate(tags)
              if a < b and read[b] == read[a] and (held[b] > held[a] or k in pointed) and not (cut[a] or cut[b])]
    outer: list[tuple[int, int]] = []
    for a, b in sorted(filled, key=lambda ab: (ab[0], -ab[1])):
        if not outer or a >= outer[-1][1]:
            outer.append((a, b))
    if not outer:
        return spans
    starts = [a for a, _ in outer]

    def within(span: tuple[int, int]) -> bool:
        k = bisect_right(starts, span[0]) - 1
        return k >= 0 and span[1] <= outer[k][1]

    return sorted([*outer, *(span for span in spans if not within(span))])


def _split_at(spans: list[tuple[int, int]], breaks: list[int]) -> list[tuple[int, int]]:
    """Word spans, each cut where a break falls inside it."""
    out = []
    for a, b in spans:
        for cut in (x for x in breaks if a < x < b):
            out.append((a, cut))
            a = cut
        out.append((a, b))
    return out


def _punctuation(text: str) -> bool:
    return bool(text) and not any(c.isalnum() for c in text)


def _covered(spans: list[tuple[int, int]], lo: int, hi: int) -> tuple[int, int]:
    """The words ``[first, last)`` whose characters overlap ``[lo, hi)``; none: the point before the
    first word that begins at or after ``lo``."""
    if lo == hi:  # a point: before the first word that begins at or after it (inside a word: its nearer end)
        for i, (a, b) in enumerate(spans):
            if a >= lo or a < lo < b:
                return (i + 1, i + 1) if lo - a > b - lo else (i, i)
        return len(spans), len(spans)
    inside = [i for i, (a, b) in enumerate(spans) if a < hi and b > lo]
    if inside:
        return inside[0], inside[-1] + 1
    point = next((i for i, (a, _) in enumerate(spans) if a >= lo), len(spans))
    return point, point


def parse(markup: str, kind: str = "html", attributes: Sequence[str] = (), keep: Keep | None = None) -> Document:
    """``markup`` (``html``, or ``xml``: inline tags in lines of text) cut into segments; the values of
    ``attributes`` (``alt``, ``title``) become segments of their own, after those of the text. ``keep``:
    the spans of a block's text (entities decoded) to take out of its words and keep as they are, as
    void elements are kept (`nmtk.decode.unknown`: what the model cannot read, links)."""
    if kind not in ("html", "xml"):
        raise ValueError(kind)
    parser = _Parser(kind, frozenset(a.lower() for a in attributes), keep, _inline_breaks(markup))
    parser.feed(markup)
    parser.close()
    if parser.verbatim is not None or parser.around:
        name = parser.verbatim_open[0] if parser.verbatim is not None else parser.around[-1]
        raise MarkupError(f"<{name}> is not closed before the end of the input")
    parser.flush()
    segments, offset = parser.segments, len(parser.segments)
    for segment in segments:  # attribute values follow the text's segments: their slots shift by as many
        for tag in segment.tags:
            tag.start = _shift_slots(tag.start, offset)
        # and so do those of elements standing before a block's first word or after its last, kept verbatim
        segment.before, segment.after = _shift_slots(segment.before, offset), _shift_slots(segment.after, offset)
    segments += [Segment(value.split()) for value in parser.attribute_texts]
    return Document([_shift_slots(p, offset) if isinstance(p, str) else p for p in parser.parts], segments)


#: A ``<br>`` between a word (or a comma) and a word in small letters, inline elements closing before it
#: and opening after it let through (`_inline_breaks` checks their names): a line broken inside a sentence.
_BREAK_IN_SENTENCE = re.compile(r"(?:[^\W_]|,)(?P<closed>(?:</[a-z][\w:-]*\s*>)*)[ \t]*(?P<br><br\s*/?>)\s*"
                                r"(?P<opened>(?:<[a-z][\w:-]*(?:\s[^<>]*)?>)*)(?=[^\W\d_])", re.IGNORECASE)
_TAG_NAME = re.compile(r"</?([a-z][\w:-]*)", re.IGNORECASE)


def _inline_breaks(markup: str) -> frozenset[tuple[int, int]]:
    """Where (`HTMLParser.getpos`'s line and column) a ``<br>`` breaks a line inside a sentence (``A man<br>sits
    on a bench.``, ``Terms and<br>conditions``): a point between the words around it, as it is inside an
    inline element, not the end of a block. Read as two blocks, each half was translated alone ("Ein
    Mann<br>Ein sitzt auf einer Bank."). A ``<br>`` after a sentence's end or before a capital (an
    address's lines, a poem's) still ends its block."""
    found = set()
    for m in _BREAK_IN_SENTENCE.finditer(markup):
        around = _TAG_NAME.findall(m.group("closed") + m.group("opened"))  # ``sits</b><br>on``: inline
        if markup[m.end()].islower() and not any(n.lower() in BLOCKS or n.lower() in VERBATIM for n in around):
            at = m.start("br")
            found.add((markup.count("\n", 0, at) + 1, at - markup.rfind("\n", 0, at) - 1))
    return frozenset(found)


def text_of(markup: str, kind: str = "html") -> str:
    """The words of ``markup``'s text, without its tags (what language identification should read: the
    tag names of ``<p>A <b>dog</b>.</p>`` are not English); the markup itself where it does not parse
    (the error is said where it is translated)."""
    try:
        document = parse(markup, kind)
    except MarkupError:
        return markup
    return " ".join(word for segment in document.segments for word in segment.words)


def _shift_slots(raw: str, offset: int) -> str:
    """Slots number the attribute values from 0; in the document they follow the text's segments."""
    return _SLOT.sub(lambda m: f"\x00{int(m.group(1)) + offset}\x00", raw) if "\x00" in raw else raw


# --------------------------------------------------------------------------- placing the tags back

def token_spans(tokens: Sequence[str], text: str) -> list[tuple[int, int]]:
    """Where each of ``tokens`` (a tokenisation of ``text``: Moses tokens, detokenised words) lies in
    ``text``, as character spans. Characters are matched with whitespace left out; where the
    tokenisation changed some (normalised quotes), the best matching (`difflib`) decides."""
    joined = "".join(tokens)
    owner = [k for k, token in enumerate(tokens) for _ in token]
    places = [i for i, c in enumerate(text) if not c.isspace()]
    visible = "".join(text[i] for i in places)
    to_text: list[int | None] = [None] * len(joined)
    if joined == visible:
        to_text = list(places)
    else:
        matcher = difflib.SequenceMatcher(None, joined, visible, autojunk=False)
        for op, a0, a1, b0, b1 in matcher.get_opcodes():
            for k in range(a0, a1):
                if op in ("equal", "replace") and b1 > b0:
                    to_text[k] = places[min(b0 + (k - a0) * (b1 - b0) // max(1, a1 - a0), b1 - 1)]
    lows, highs = [None] * len(tokens), [None] * len(tokens)
    for c, p in enumerate(to_text):
        if p is not None:
            k = owner[c]
            lows[k] = p if lows[k] is None else min(lows[k], p)
            highs[k] = p + 1 if highs[k] is None else max(highs[k], p + 1)
    spans: list[tuple[int, int]] = []
    at = 0
    for lo, hi in zip(lows, highs, strict=True):
        spans.append((lo, hi) if lo is not None else (at, at))
        at = spans[-1][1]
    return spans


def owners(words: Sequence[str], tokens: Sequence[str]) -> list[int]:
    """For each of ``tokens`` (a finer tokenisation of the text ``" ".join(words)``), the word it is part of."""
    text = " ".join(words)
    starts, at = [], 0
    for word in words:
        starts.append(at)
        at += len(word) + 1
    out = []
    word = 0
    for lo, hi in token_spans(tokens, text):
        position = lo if hi > lo else max(0, lo - 1)
        while word + 1 < len(starts) and starts[word + 1] <= position:  # tokens come in the text's order
            word += 1
        out.append(word)
    return out


@dataclass
class Target:
    """A segment's translation: its text, its words' character spans in it, and for each target word
    the source word (of the segment's words) it is aligned to."""

    text: str
    spans: list[tuple[int, int]]
    aligned: list[int]


def place(segment: Segment, target: Target) -> str:
    """The translation as markup: escaped text (entities as the source wrote them) with every tag of
    ``segment`` around the target words aligned to the source words it covered, exactly once, nested as
    in the source; empty elements, void ones and verbatim ones between the words they stood between.
    A tag that left a word's punctuation outside (``<a>link</a>.``) leaves the target word's outside
    too, unless that would cross another tag."""
    ranges = _target_ranges(segment, target)
    inserts = _inserts(segment, target, ranges, trim=True)
    if not _nested(inserts):
        inserts = _inserts(segment, target, ranges, trim=False)
    out, at = [], 0
    for char, _, order, markup, kind in inserts:
        out.append(_escaped(target.text[at:char], segment.entities))
        if markup[:1] == " " and "".join(out[-2:])[-1:] == " ":  # two points side by side: one space
            markup = markup[1:]
        out.append(markup)
        at = char
        tag = segment.tags[order[-1]] if kind == 0 and target.spans else None
        if tag is not None and tag.point and tag.after_word and tag.word_after and target.text[char : char + 1] == " ":
            at = char + 1  # between two words with no space (``man<br>sits``): none after it either
    out.append(_escaped(target.text[at:], segment.entities))
    return segment.before + "".join(out) + segment.after


def _glued(spans: list[tuple[int, int]]) -> frozenset[int]:
    """The words (by index) written with no space before the next: a tag between them (``runs.</b><i>A``)."""
    return frozenset(i for i in range(len(spans) - 1) if spans[i][1] == spans[i + 1][0])


#: An insertion into the target text: (character, phase, order, markup, +tag opened / -tag closed / 0).
Insert = tuple[int, int, tuple, str, int]


def _inserts(segment: Segment, target: Target, ranges: list[tuple[int, int]], trim: bool) -> list[Insert]:
    """Where each tag's markup goes, sorted. At equal characters: closes (inner first) and the points
    after a word (each inside its parent, outside the tags closing there that are not its ancestors),
    then opens (outer first), then points before a word."""
    inserts: list[Insert] = []
    spans, n, text = target.spans, len(target.spans), target.text
    depth = _depths(segment.tags)
    for k, tag in enumerate(segment.tags):
        lo, hi = ranges[k]
        if n == 0:
            inserts.append((len(text), 2, (k,), tag.start + tag.end, 0))
        elif tag.point:  # before word lo, or after word lo - 1 where that keeps it inside its parent
            parent = ranges[tag.parent] if tag.parent is not None else (0, n)
            after = lo > 0 and (lo == n or lo == parent[1] and lo > parent[0] or tag.glued and lo - 1 >= parent[0])
            char, phase = (_end(text, spans[_before_marks(text, spans, lo - 1, parent[0], trim and tag.trim_end)],
                                trim and tag.trim_end), 1) if after else (spans[lo][0], 3)
            # a space between it and the words around it, unless it was glued to a word (``dog<img>``,
            # ``<img>dog``) or follows an opening quote or bracket: "isst <img>." for ``eats <img>.``,
            # "siehe <img> jetzt" for ``(see <img>) now`` where the model dropped the (), never "555 ."
            lead = char > 0 and not tag.after_word and not (after and tag.glued and not tag.after_opening) \
                and not text[char - 1].isspace() and text[char - 1] not in _OPENING  # (``dog.<img>``: glued to ".")
            trail = not after and char < len(text) and not tag.word_after and (
                text[char].isalnum() or text[char] in _OPENING)
            markup = " " * lead + tag.start + tag.end + " " * trail  # an empty element: both its tags
            # after a word: with the closes there, after those of tags inside its parent, before its parent's
            # (``<i>a cat</i><img>`` keeps the point outside ``<i>``); before a word: after the opens
            order = (depth[k], k) if not after else (-parent[0], -depth[tag.parent] - 0.5, k) if (
                tag.parent is not None) else (float("inf"), 0, k)
            inserts.append((char, phase, order, markup, 0))
        else:
            if trim and tag.trim_start:  # leading target words of punctuation alone stay outside too
                while lo < hi - 1 and _only_punctuation(text, spans[lo]):
                    lo += 1
            hi = _before_marks(text, spans, hi - 1, lo, trim and tag.trim_end) + 1  # and trailing ones
            start = _start(text, spans[lo], trim and tag.trim_start)
            end = _end(text, spans[hi - 1], trim and tag.trim_end)
            if end <= start:  # its words were left out of the text: empty, but there once
                inserts.append((spans[lo][0], 2, (-hi, depth[k], k), tag.start + tag.end, 0))
                continue
            inserts.append((start, 2, (-hi, depth[k], k), tag.start, k + 1))
            inserts.append((end, 1, (-lo, -depth[k], -k), tag.end, -(k + 1)))
    inserts.sort(key=lambda x: (x[0], x[1], x[2]))
    return _before_later_opens(inserts)


def _before_later_opens(inserts: list[Insert]) -> list[Insert]:
    """``inserts`` (sorted) with each point before a word put in front of the tags opening at its character
    that came after it in the source: ``<!-- c --><b>dog</b>`` keeps the comment outside ``<b>``, where the
    sort puts such points after every open there. Tags that opened before it (its ancestors among them)
    still open first. (Points before a word sort as ``(depth, index)``, opens as ``(-hi, depth, index)``.)"""
    out: list[Insert] = []
    for insert in inserts:
        char, phase, order, _, _ = insert
        at = len(out)
        while phase == 3 and at and out[at - 1][0] == char and out[at - 1][1] == 2 and out[at - 1][2][2] > order[1]:
            at -= 1
        out.insert(at, insert)
    return out


def _nested(inserts: list[Insert]) -> bool:
    """Whether every close ends the innermost open tag (the markup is well-formed)."""
    stack: list[int] = []
    for *_, which in inserts:
        if which > 0:
            stack.append(which)
        elif which < 0 and (not stack or stack.pop() != -which):
            return False
    return not stack


#: What opens a quotation or a bracket: a point before one is spaced as before a word.
_OPENING = "\"'“„«‘([{¿¡"


def _only_punctuation(text: str, span: tuple[int, int]) -> bool:
    return _punctuation(text[span[0] : span[1]])


def _start(text: str, span: tuple[int, int], trim: bool) -> int:
    """Where a tag opens on a target word: its start, or (``trim``) after its leading punctuation."""
    word = text[span[0] : span[1]]
    lead = len(word) - len(word.lstrip("\"'“‘«([¿¡"))
    return span[0] + lead if trim and lead < len(word) else span[0]


def _before_marks(text: str, spans: list[tuple[int, int]], last: int, first: int, trim: bool) -> int:
    """The target word a tag ends on or a point after word ``last`` follows: with ``trim`` (it stood
    before its source word's trailing marks, a carried ``]`` in ``[fast].``), the last before the marks
    that end the text there as words of their own ("schnell ." → "[schnell]." , not "[schnell.]"), not
    before ``first``."""
    while trim and last > first and _only_punctuation(text, spans[last]):
        last -= 1
    return last


def _end(text: str, span: tuple[int, int], trim: bool) -> int:
    """Where a tag closes on a target word: its end, or (``trim``) before its trailing punctuation."""
    word = text[span[0] : span[1]]
    tail = len(word) - len(word.rstrip(".,;:!?\"'”’»)]…"))
    return span[1] - tail if trim and tail < len(word) else span[1]


def _as_text(text: str) -> str:
    """``text`` as markup's text: ``&`` and ``<`` escaped, which text cannot hold as they are; a ``>`` it can
    (``00:01 --> 00:04`` in a subtitle came back ``--&gt;``: `_escaped` writes ``&gt;`` where the source
    did)."""
    return text.replace("&", "&amp;").replace("<", "&lt;")


def _escaped(text: str, entities: dict[str, str]) -> str:
    text = _as_text(text)
    for char, entity in entities.items():
        if char in text:
            text = text.replace(char, entity)
    return text


def _depths(tags: list[Tag]) -> list[int]:
    out = []
    for tag in tags:
        out.append(0 if tag.parent is None else out[tag.parent] + 1)
    return out


def _target_ranges(segment: Segment, target: Target) -> list[tuple[int, int]]:
    """Each tag's target words ``[lo, hi)`` (a point: ``lo == hi``, the word it goes before), as a family
    in which two ranges are nested or apart, never crossing (so the markup is well-formed), each inside
    its parent's, each non-empty when its source words were (so its content is)."""
    n = len(target.spans)
    ranges: list[tuple[int, int]] = []
    sentences = segment.sentences()
    aligned = _stray_stops_left_out(segment, target)
    for tag in segment.tags:  # parents come before their children
        parent = ranges[tag.parent] if tag.parent is not None else (0, n)
        if n == 0:
            ranges.append((0, 0))
            continue
        if tag.point:
            at = _point_in(tag.first, aligned, parent)
            if at == n == parent[1] > parent[0] and tag.first < len(segment.words) and not tag.glued and (
                    _only_punctuation(target.text, target.spans[-1])):  # it stood before words: not after the "."
                at -= 1
            ranges.append((at, at))
            continue
        hits = [j for j, s in enumerate(aligned) if tag.first <= s < tag.last and parent[0] <= j < parent[1]]
        if not hits:
            hits = [_nearest(tag, target.aligned, parent, sentences)]
        lo, hi = min(hits), max(hits) + 1
        for k, (plo, phi) in enumerate(ranges):  # crossing a placed range (not an ancestor): cut to one side
            if plo == phi or _ancestor(segment.tags, k, len(ranges)) or hi <= plo or lo >= phi:
                continue
            if lo < plo < hi < phi:
                hi = plo
            elif plo < lo < phi < hi:
                lo = phi
        ranges.append((lo, hi))
    return ranges


def _ancestor(tags: list[Tag], k: int, of: int) -> bool:
    parent = tags[of].parent
    while parent is not None:
        if parent == k:
            return True
        parent = tags[parent].parent
    return False


def _nearest(tag: Tag, aligned: list[int], parent: tuple[int, int], sentences: list[tuple[int, int]]) -> int:
    """The target word (inside ``parent``, and of the tag's own sentence where that has one there)
    aligned nearest to the tag's source words: where a tag goes whose words no target word is aligned
    to. (A link on a sentence's last word, which its translation lost, went around the next sentence's
    first word.)"""
    def distance(j: int) -> tuple[int, int]:
        s = aligned[j]
        return (0 if tag.first <= s < tag.last else min(abs(s - tag.first), abs(s - (tag.last - 1))), j)

    first, last = next(((a, b) for a, b in sentences if a <= tag.first < b), (tag.first, tag.last))
    own = [j for j in range(parent[0], parent[1]) if first <= aligned[j] < last]
    return min(own or range(parent[0], parent[1]), key=distance)


def _stray_stops_left_out(segment: Segment, target: Target) -> list[int]:
    """``target.aligned`` with each target word of punctuation alone that is aligned to a source word of
    letters and digits alone counted as aligned to nothing (-1): a sentence's final "." is often aligned
    to its verb, and a point after the verb went after the "." ("Ein Hund rennt im Park.<sup>1</sup>"
    for ``A dog runs<sup>1</sup> in the park.``), a tag around it around the rest of the sentence
    ("<b>rennt im Park.</b>"). One aligned to ``park.`` is that word's own."""
    words, text = segment.words, target.text
    return [-1 if _only_punctuation(text, span) and 0 <= s < len(words) and words[s].isalnum() else s
            for s, span in zip(target.aligned, target.spans, strict=True)]


def _point_in(source_point: int, aligned: list[int], parent: tuple[int, int]) -> int:
    """The target position (before that word; ``n``: the end) of a point before source word
    ``source_point``: after the last target word aligned before it, kept inside ``parent``."""
    before = [j for j, s in enumerate(aligned) if 0 <= s < source_point]
    at = max(before) + 1 if before else 0
    return min(max(at, parent[0]), parent[1])
