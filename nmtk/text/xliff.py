"""XLIFF files (1.2 and 2.x), the exchange format of translation tools: each segment's ``<source>``, and
the file written back with each translation in its ``<target>``, every other byte as it was.

Why: read as an xml document (``--format xml --document``) the sources themselves were translated in
place and the targets left empty, so that a CAT tool took the German for the source. Here a segment is
a ``<trans-unit>`` (1.2) or a ``<segment>`` (2.x); its source's content (text and XLIFF's inline codes:
``<g>``, ``<x/>``, ``<bpt>``, ``<pc>``, ``<ph/>``) is translated as markup is, and the translation goes
into its target: an empty one is filled, a missing one is written after the source, and one that holds
a translation already (a translator's) is kept as it is. A target filled here says it is machine
translation awaiting review, as CAT tools read it: XLIFF 1.2's ``state="needs-review-translation"
state-qualifier="leveraged-mt"`` on the ``<target>``, 2.x's ``state="translated"`` on the ``<segment>``
(a CAT tool showed the German as untranslated, or, where the empty target said ``state="new"``, as new
text). Units marked ``translate="no"`` are left alone,
as are ``<alt-trans>`` proposals. The standard library's expat parser finds where each element lies;
the file is then changed at those places alone, so its declaration, comments, namespaces and layout
stay as they were.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from xml.parsers import expat

from nmtk.errors import NmtkError

#: The elements that hold one segment's source and target: XLIFF 1.2's and 2.x's.
_SEGMENTS = ("trans-unit", "segment")
#: What a translated segment's state says, by version: on its ``<target>`` (1.2: awaiting review, from
#: machine translation) or on the ``<segment>`` itself (2.x, whose states are initial, translated,
#: reviewed and final).
_STATE_12 = {"state": "needs-review-translation", "state-qualifier": "leveraged-mt"}
_STATE_2 = {"state": "translated"}


@dataclass
class Segment:
    """One segment: its source's content, and where its target is (or goes), as byte offsets."""

    source: str
    target: tuple[int, int] | None = None  # the target's content; None: no target element
    empty_target: tuple[int, int] | None = None  # a ``<target/>``: the whole element
    after_source: int = 0  # where a new target is written: after ``</source>``
    indent: bytes | None = None  # what stands before ``<source`` on its line, where it begins one
    name: str = "target"  # the target element's name as the file writes it (``xlf:target``)
    filled: bool = False  # its target holds a translation already: kept
    target_tag: tuple[int, int] | None = None  # the target's start tag (1.2: where its state is said)
    segment_tag: tuple[int, int] | None = None  # a 2.x ``<segment>``'s start tag (where its state is); None: 1.2
    seg_source: tuple[int, int] | None = None  # 1.2's ``<seg-source>`` content: the source cut into sentences
    marks: list[tuple[int, int]] = field(default_factory=list)  # its ``<mrk mtype="seg">`` contents


def _local(name: str) -> str:
    return name.rsplit(":", 1)[-1]


def _with_attributes(tag: bytes, values: dict[str, str]) -> bytes:
    """A start tag (``<target state="new">``, ``<target/>``) with ``values`` for those attributes: each
    one it has takes its value, the others are added before its end."""
    for name, value in values.items():
        said = re.compile(rb"(\s" + re.escape(name.encode()) + rb"\s*=\s*)([\"'])[^\"']*\2")
        if said.search(tag):
            tag = said.sub(lambda m, v=value: m.group(1) + m.group(2) + v.encode() + m.group(2), tag, count=1)
        else:
            end = len(tag) - (2 if tag.endswith(b"/>") else 1)
            tag = tag[:end].rstrip() + f' {name}="{value}"'.encode() + tag[end:]
    return tag


def _tag_end(raw: bytes, at: int) -> int:
    """The offset after the ``>`` that ends the tag beginning at ``at`` (a ``>`` in quotes is text)."""
    quote = None
    for k in range(at, len(raw)):
        c = raw[k]
        if quote is not None:
            quote = None if c == quote else quote
        elif c in b"\"'":
            quote = c
        elif c == ord(">"):
            return k + 1
    return len(raw)


@dataclass
class Xliff:
    """An XLIFF file's bytes and its segments, in order."""

    raw: bytes
    segments: list[Segment]
    languages: tuple[str, str] = ("", "")  # what the file says it is translated from and into (may be unsaid)

    @classmethod
    def parse(cls, text: str, name: str) -> Xliff:
        """``text``'s segments; one line naming ``name``, its line and column where it is not well-formed
        XML, and where its root is not ``<xliff>``."""
        raw = text.encode("utf-8")
        reader = _Reader(raw)
        try:
            reader.parser.Parse(raw, True)
        except expat.ExpatError as exc:
            raise NmtkError(f"{name}:{exc.lineno}: column {exc.offset + 1}: not well-formed XML "
                            f"({expat.ErrorString(exc.code)})") from None
        if reader.root != "xliff":
            raise NmtkError(f"{name}: not an XLIFF file (its root element is <{reader.root}>, not <xliff>)")
        return cls(raw, reader.segments, reader.languages)

    def pieces(self, k: int) -> list[str]:
        """What segment ``k`` is translated as: its ``<seg-source>``'s sentences (``<mrk mtype="seg">``, a
        CAT tool's segmentation, which its target mirrors), else its source whole."""
        segment = self.segments[k]
        if segment.marks:
            return [self.raw[lo:hi].decode("utf-8") for lo, hi in segment.marks]
        return [segment.source]

    def body(self, k: int, translated: list[str]) -> str:
        """Segment ``k``'s target content from its `pieces`' translations: with a ``<seg-source>``, that
        element's content with each sentence's translation in its ``<mrk>`` (Okapi and Trados read a
        target's sentences by their ``mid``s; a target of the whole text left them nothing to match)."""
        segment = self.segments[k]
        if not segment.marks:
            return translated[0]
        lo, hi = segment.seg_source
        marks = [(a - lo, b - lo, text.encode("utf-8")) for (a, b), text in zip(segment.marks, translated, strict=True)]
        return _edited(self.raw[lo:hi], marks).decode("utf-8")

    def todo(self) -> list[int]:
        """The segments to translate: those whose target holds nothing yet."""
        return [k for k, segment in enumerate(self.segments) if not segment.filled]

    def render(self, translations: dict[int, str]) -> str:
        """The file with ``translations`` (by segment) in their targets, all else as it was."""
        edits: list[tuple[int, int, bytes]] = []
        newline = b"\r\n" if b"\r\n" in self.raw else b"\n"
        for k, text in translations.items():
            segment, body, said = self.segments[k], text.encode("utf-8"), _STATE_12  # 1.2's state is the target's
            if segment.segment_tag is not None:  # 2.x's is the segment's
                lo, hi = segment.segment_tag
                edits.append((lo, hi, _with_attributes(self.raw[lo:hi], _STATE_2)))
                said = {}
            if segment.target is not None:
                edits += [(*segment.target, body), (*segment.target_tag, _with_attributes(
                    self.raw[slice(*segment.target_tag)], said))]
            elif segment.empty_target is not None:
                lo, hi = segment.empty_target
                head = _with_attributes(self.raw[lo:hi], said).rstrip(b">").rstrip(b"/").rstrip()
                edits.append((lo, hi, head + b">" + body + f"</{segment.name}>".encode()))
            else:
                line = b"" if segment.indent is None else newline + segment.indent
                tag = _with_attributes(f"<{segment.name}>".encode(), said)
                edits.append((segment.after_source, segment.after_source,
                              line + tag + body + f"</{segment.name}>".encode()))
        return _edited(self.raw, edits).decode("utf-8")


def _edited(raw: bytes, edits: list[tuple[int, int, bytes]]) -> bytes:
    """``raw`` with each ``(lo, hi, text)`` of ``edits`` (apart, or inserts at one place) putting ``text`` in
    place of ``raw[lo:hi]``, in one pass: an edit at a time copied the whole file for each (a 2.4 MB file
    of 20,000 segments took 26.6 s to write)."""
    out, at = [], 0
    for lo, hi, text in sorted(edits):
        out += [raw[at:lo], text]
        at = hi
    out.append(raw[at:])
    return b"".join(out)


class _Reader:
    """expat's events into `Segment`s: which element is open where, and the offsets of their tags."""

    def __init__(self, raw: bytes) -> None:
        self.raw, self.root, self.languages = raw, "", ("", "")
        self.stack: list[tuple[str, bool]] = []  # open elements: local name, inside a unit not translated
        self.segments: list[Segment] = []
        self.open: dict[str, tuple[int, int, str]] = {}  # source/target: start tag's offsets and its name
        self.current: Segment | None = None
        self.mark_depth = 0  # the open <seg-source> sentence's depth in ``stack``
        self.parser = expat.ParserCreate()
        self.parser.StartElementHandler, self.parser.EndElementHandler = self.start, self.end

    def start(self, name: str, attrs: dict[str, str]) -> None:
        local, parent = _local(name), self.stack[-1] if self.stack else ("", False)
        self.root = self.root or local
        said = (attrs.get("srcLang") or attrs.get("source-language", ""), attrs.get("trgLang") or
                attrs.get("target-language", ""))  # 2.x says it on the root, 1.2 on each <file>
        if local in ("xliff", "file") and not any(self.languages):
            self.languages = said
        skipped = parent[1] or attrs.get("translate") == "no" or local == "alt-trans"
        self.stack.append((local, skipped))
        at = self.parser.CurrentByteIndex
        if local in _SEGMENTS and not skipped:
            self.current = Segment(source="", segment_tag=(at, _tag_end(self.raw, at)) if local == "segment" else None)
        elif local in ("source", "target", "seg-source") and parent[0] in _SEGMENTS and self.current is not None:
            self.open[local] = (at, _tag_end(self.raw, at), name)
        elif local == "mrk" and attrs.get("mtype") == "seg" and parent[0] == "seg-source" and "seg-source" in self.open:
            self.open["mrk"] = (at, _tag_end(self.raw, at), name)
            self.mark_depth = len(self.stack)  # an inner <mrk> (protected text) ends first

    def end(self, name: str) -> None:
        local, _ = self.stack.pop()
        parent = self.stack[-1][0] if self.stack else ""
        segment = self.current
        if local in _SEGMENTS and segment is not None:
            if segment.after_source:
                self.segments.append(segment)
            self.current = None
        elif local == "mrk" and segment is not None and "mrk" in self.open and self.mark_depth == len(self.stack) + 1:
            begin, inner, _ = self.open.pop("mrk")
            if not self.raw[begin:inner].endswith(b"/>"):
                segment.marks.append((inner, self.parser.CurrentByteIndex))
        elif local == "seg-source" and segment is not None and local in self.open:
            begin, inner, _ = self.open.pop(local)
            close = inner if self.raw[begin:inner].endswith(b"/>") else self.parser.CurrentByteIndex
            segment.seg_source, segment.after_source = (inner, close), _tag_end(self.raw, close)
        elif local in ("source", "target") and parent in _SEGMENTS and segment is not None and local in self.open:
            begin, inner, written = self.open.pop(local)
            empty = self.raw[begin:inner].endswith(b"/>")
            close = inner if empty else self.parser.CurrentByteIndex
            if local == "source":
                segment.source = "" if empty else self.raw[inner:close].decode("utf-8")
                segment.after_source = inner if empty else _tag_end(self.raw, close)
                start = self.raw.rfind(b"\n", 0, begin) + 1
                before = self.raw[start:begin]
                segment.indent = None if before.strip() else before
                segment.name = written[: -len("source")] + "target"
            elif empty:
                segment.empty_target = (begin, inner)
            else:
                segment.target, segment.target_tag = (inner, close), (begin, inner)
                # its text, not its tags: Okapi writes a segmented target's empty sentences (<mrk .../>)
                segment.filled = bool(re.sub(rb"<[^<>]*>", b"", self.raw[inner:close]).strip())
