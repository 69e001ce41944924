"""Subtitle files (SubRip ``.srt``, WebVTT ``.vtt``, (Advanced) SubStation Alpha ``.ass``/``.ssa``): each
cue's text apart from what is not to be translated, and the file written back around the translations.

Why: read as lines of text, a subtitle file's numbers and timings are kept, but WebVTT's ``WEBVTT``
header and ``NOTE`` comments went to the model (the demo model: "WAAATTTNNNGA."), and a sentence broken
over a cue's two lines was translated as two fragments. Here a cue's lines are one sentence's text (one
segment, translated as markup is, its ``<i>`` tags kept) and the translation is wrapped back over as
many lines; a dialogue cue (each line a speaker's, ``- Hi.`` / ``- Hello.``) is translated line by line,
its dashes kept. Everything else (numbers, timings with their settings, cue identifiers, the header,
``NOTE``, ``STYLE`` and ``REGION`` blocks) is written as it was, line endings included. WebVTT's
notation inside a cue, and the ASS codes many SubRip files carry (``{\\an8}``: the cue at the top of the
picture), become html that markup parses and comes back (`marked_up`, `restored`). A cue whose lines
are each a speaker's (a dash or a WebVTT voice begins every line) or each a whole sentence is translated
line by line, so that its lines stay as they were split (`Cue.by_line`). An ASS script's cues are the
Text fields of its ``Dialogue`` events, its lines split at ``\\N`` (`AssScript`).
"""

from __future__ import annotations

import functools
import html
import re
from dataclasses import dataclass

from nmtk.errors import NmtkError
from nmtk.text.langid import translated_label
from nmtk.text.line_breaks import CLOSERS
from nmtk.text.markup import MarkupError, parse

_BLOCKS = re.compile(r"\n[ \t]*\n+")
_TIMING = re.compile(r"\s*\d[\d:.,]*\s*-->\s*\d")  # a cue's timing line
_DIALOGUE = re.compile(r"^(\s*[-–—]\s*)")
_TIMESTAMP = re.compile(r"<\d[\d:.]*>")  # WebVTT's karaoke timings inside a cue's text
_CLASSES = re.compile(r"<(\w+)((?:\.[\w-]+)+)")  # <c.yellow.big>: WebVTT's classes on a tag
_CLASSED = re.compile(r'<(\w+) data-vtt-class="([^"]*)"')
_VOICE = re.compile(r"<v[ .>]")
_VOICE_FIRST = re.compile(r"\s*<v[ .>]")  # a line that begins with a speaker's voice
_ASS = re.compile(r"\{\\[^{}]*\}")  # an ASS override code in SubRip: {\an8} (placed at the top), {\i1}
_ASS_MARKED = re.compile(r'<img data-ass="([^"]*)">')
_SENTENCE_END = re.compile(r"(?<!\.)[.!?。！？]$")  # "..." goes on more often than it ends
_TRAILING = re.compile(rf"(?:<[^<>]*>|{_ASS.pattern}|[\s{re.escape(CLOSERS)}])+$")  # tags, quotes after an end
_WORD = re.compile(r"(?:<[^<>]*>|\S)+")  # a word with its tags: no break inside <font color="red">
_INVISIBLE = re.compile(rf"<[^<>]*>|{_ASS.pattern}")  # what a line holds but does not show
_TAG = re.compile(r"(<[^<>]*>)")
_LANGUAGE = re.compile(r"(?im)^(Language:[ \t]*)([\w-]+)(?=[ \t]*$)")  # a WebVTT header's language
#: The characters a subtitle line holds, by the usual rule (Netflix's and the BBC's 37–42).
LINE_WIDTH = 42


def marked_up(text: str) -> str:
    """A cue's text as html that markup parses: WebVTT's classes as an attribute (``<c.yellow>`` closes
    with ``</c>``), a voice left open to the cue's end closed (``<v Anna>Hi.``), an ASS code as an empty
    element that markup places (``{\\an8}`` at the start stays there), karaoke timings left out.
    `restored` undoes all but the last on the translation."""
    text = _CLASSES.sub(lambda m: f'<{m.group(1)} data-vtt-class="{m.group(2)}"', _TIMESTAMP.sub("", text))
    text = _ASS.sub(lambda m: f'<img data-ass="{html.escape(m.group(0)[1:-1])}">', text)
    return text + "</v>" if _VOICE.search(text) and "</v>" not in text else text


def restored(translated: str, text: str) -> str:
    """``translated`` (the translation of ``marked_up(text)``) with ``text``'s own WebVTT notation back."""
    if _VOICE.search(text) and "</v>" not in text:
        head, _, tail = translated.rpartition("</v>")
        translated = head + tail if _ else translated
    translated = _ASS_MARKED.sub(lambda m: "{" + html.unescape(m.group(1)) + "}", translated)
    return _CLASSED.sub(lambda m: f"<{m.group(1)}{m.group(2)}", translated)


def _shown(text: str) -> int:
    """How many characters ``text`` shows (its tags and ASS codes none)."""
    return len(_INVISIBLE.sub("", text.strip()))


def _ends_sentence(line: str) -> bool:
    return bool(_SENTENCE_END.search(_TRAILING.sub("", line)))


def _nests(line: str) -> bool:
    """Whether a line's own tags nest (a cue's ``<i>`` may open on one line and close on the next)."""
    try:
        parse(marked_up(line), "html")
    except MarkupError:
        return False
    return True


@dataclass
class Cue:
    """A cue: its lines up to the timing (``head``) and its text lines."""

    head: list[str]
    lines: list[str]
    wraps: bool = True  # its translation may take a line more than it had (an ASS renderer wraps its own)

    @property
    def dialogue(self) -> bool:
        """Whether each of its lines is a speaker's (two or more, each begun by a dash)."""
        return len(self.lines) > 1 and all(_DIALOGUE.match(line) for line in self.lines)

    @functools.cached_property
    def by_line(self) -> bool:
        """Whether its lines are translated apart: a dialogue's, lines that each begin with a WebVTT voice
        (``<v Anna>Where?`` / ``<v Bo>Here.``: as one text, Anna's voice never closed), or lines that each
        end a sentence ("A woman sings." / "A man plays.": as one text, wrapped back mid-sentence) and
        whose tags nest line by line."""
        if len(self.lines) < 2:
            return False
        if self.dialogue:
            return True
        apart = all(_VOICE_FIRST.match(line) for line in self.lines) or all(map(_ends_sentence, self.lines))
        return apart and all(map(_nests, self.lines))

    def texts(self) -> list[str]:
        """Its text as translated: each line without its dash (dialogue), each line (`by_line`), else the
        lines as one."""
        if self.dialogue:
            return [line[_DIALOGUE.match(line).end():] for line in self.lines]  # type: ignore[union-attr]
        if self.by_line:
            return [line.strip() for line in self.lines]
        return [" ".join(line.strip() for line in self.lines)] if self.lines else []

    def segments(self) -> list[str]:
        """Its texts as html for markup (`marked_up`)."""
        return [marked_up(text) for text in self.texts()]

    def written(self, translated: list[str]) -> list[str]:
        """Its lines with ``translated`` (one per segment) in place of its text."""
        translated = [restored(t, text) for t, text in zip(translated, self.texts(), strict=True)]
        if self.dialogue:
            text = [_DIALOGUE.match(line).group(1) + t for line, t in zip(self.lines, translated, strict=True)]  # type: ignore[union-attr]
        elif self.by_line:
            text = translated
        else:
            text = wrapped(translated[0], self.room(translated[0])) if self.lines else []
        return self.head + text

    def room(self, translated: str) -> int:
        """The lines a translation of its text is wrapped over, as subtitles are written (at most two lines
        of about 42 characters, one where the text fits it): one where it fits `LINE_WIDTH` (or the cue's
        own widest line: a file's own rule), however many lines the source took ("A dog" / "runs." is
        "Ein Hund rennt."); else two, or as many as the cue had where it had more; a longer one stays as
        wide as it must. Lines that each ended a sentence keep their count (one text where their tags
        span them). An ASS event keeps its lines (a renderer wraps its own)."""
        if not self.wraps:
            return len(self.lines)
        width = max(LINE_WIDTH, *(_shown(line) for line in self.lines))
        needed = -(-_shown(translated) // width)
        if len(self.lines) > 1 and all(map(_ends_sentence, self.lines)):  # a sentence a line: kept so
            return max(len(self.lines), min(needed, 2))
        return max(1, min(needed, max(2, len(self.lines))))


def _cues(lines: list[str], timing: int) -> list[tuple[int, list[str]]]:
    """A block's cues, each as (the index of its timing line in it, its lines): more than one where a file
    leaves out the blank line between cues (a timing line after the text, its cue's number before it)."""
    starts, timings = [0], [timing]
    for i in range(timing + 1, len(lines)):
        if _TIMING.match(lines[i]):
            number = i - 1 > timings[-1] and lines[i - 1].strip().isdigit()
            starts.append(i - 1 if number else i)
            timings.append(i)
    return [(t - a, lines[a:b]) for t, a, b in zip(timings, starts, [*starts[1:], len(lines)], strict=True)]


@dataclass
class Subtitles:
    """A subtitle file as blocks: cues and the blocks written as they are (the header, notes, styles)."""

    blocks: list[Cue | str]
    separators: list[str]  # what stood between block i and i + 1 (blank lines)
    newline: str = "\n"
    end: str = ""  # what followed the last block
    webvtt: bool = False  # WebVTT escapes ``<`` and ``&`` in text (``&lt;``); SubRip writes them as they are

    @classmethod
    def parse(cls, text: str) -> Subtitles:
        newline = "\r\n" if "\r\n" in text else "\n"
        text = text.replace("\r\n", "\n")
        body = text.rstrip("\n")
        end, between = text[len(body):], _BLOCKS.findall(body)
        blocks: list[Cue | str] = []
        separators: list[str] = []
        for k, block in enumerate(_BLOCKS.split(body)):
            lines = block.split("\n")
            timing = next((i for i, line in enumerate(lines[:3]) if "-->" in line), None)
            if timing is None or lines[0].startswith(("WEBVTT", "NOTE", "STYLE", "REGION")):
                blocks.append(block)
            else:
                cues = [Cue(piece[: at + 1], piece[at + 1 :]) for at, piece in _cues(lines, timing)]
                blocks += cues
                separators += ["\n"] * (len(cues) - 1)  # cues with no blank line between them
            separators += between[k : k + 1]
        return cls(blocks, separators, newline, end, text.lstrip("\ufeff").startswith("WEBVTT"))

    def relabelled(self, source: str, target: str) -> None:
        """A WebVTT header's ``Language: en`` (YouTube's captions say it) as the translation's ``Language:
        de``, where it names the source's language (a region, ``en-US``, is its language's)."""
        def said(m: re.Match[str]) -> str:
            return m.group(1) + translated_label(m.group(2), source, target)

        self.blocks = [_LANGUAGE.sub(said, b) if isinstance(b, str) and b.startswith("WEBVTT") else b
                       for b in self.blocks]

    @property
    def cues(self) -> list[Cue]:
        return [b for b in self.blocks if isinstance(b, Cue)]

    def segments(self) -> list[str]:
        """Every cue's segments, in order (what `render` takes translated)."""
        return [segment for cue in self.cues for segment in cue.segments()]

    def render(self, translated: list[str]) -> str:
        """The file with the cues' segments replaced by ``translated`` (as many, in order): html, whose
        escapes (``3 &lt; 5``) a SubRip file writes as the characters they stand for."""
        if not self.webvtt:
            translated = [_unescaped(text) for text in translated]
        parts, at = [], 0
        for block in self.blocks:
            if isinstance(block, str):
                parts.append(block)
                continue
            count = len(block.texts())
            parts.append("\n".join(block.written(translated[at : at + count])))
            at += count
        text = "".join(part + (self.separators[i] if i < len(self.separators) else "") for i, part in enumerate(parts))
        return (text + self.end).replace("\n", self.newline)


def _unescaped(text: str) -> str:
    """Html's text with its character references as characters (``&lt;`` ``<``), tags as they are."""
    pieces = _TAG.split(text)
    return "".join(piece if k % 2 else html.unescape(piece) for k, piece in enumerate(pieces))


def wrapped(text: str, lines: int) -> list[str]:
    """``text`` over at most ``lines`` lines, broken at spaces so that the longest line is as short as it
    can be (a subtitle's lines are read together: "Ein Hund rennt im" / "Park mit einem Ball."). Lines
    are as wide as what they show: tags and ASS codes count nothing, and a tag's own spaces (``<font
    color="red">``) are no place to break."""
    words = _WORD.findall(text)
    shown = [_shown(word) for word in words]
    lines = max(1, min(lines, len(words)))

    def width(start: int, end: int) -> int:
        return sum(shown[start:end]) + end - start - 1

    @functools.cache
    def split(start: int, count: int) -> tuple[int, tuple[int, ...]]:
        """(longest line, where the lines after the first begin) for ``words[start:]`` on ``count`` lines."""
        if count == 1:
            return width(start, len(words)), ()
        return min((max(width(start, end), split(end, count - 1)[0]), (end, *split(end, count - 1)[1]))
                   for end in range(start + 1, len(words) - count + 2))

    starts = (0, *split(0, lines)[1], len(words))
    return [" ".join(words[a:b]) for a, b in zip(starts, starts[1:], strict=False)]


_ASS_SECTION = re.compile(r"\s*\[([^\]]*)\]\s*$")
_ASS_FORMAT = re.compile(r"\s*Format\s*:(.*)$", re.IGNORECASE)
_ASS_DIALOGUE = re.compile(r"\s*Dialogue\s*:\s*(.*)$", re.IGNORECASE)
_ASS_HARD_SPACE = "\\h"  # ASS's non-breaking space, read as one (U+00A0) and written back
_ASS_SOFT_BREAK = "\\n"  # a break only some wrap styles make: read as a space
_ASS_BLOCK = re.compile(r"(\{[^{}]*\})")  # an override block, codes (``{\i1}``) or a note (``{TL: a pun}``)


@dataclass
class AssScript:
    """An Advanced SubStation Alpha (``.ass``) or SubStation Alpha (``.ssa``) script, as Aegisub and
    Subtitle Edit write them: the Text field of each ``Dialogue`` line of its ``[Events]`` is a cue, its
    lines split at ``\\N``; every other line, and each event's fields before its text (layer, timings,
    style, margins), are written as they were. A script's text is plain text with override codes
    (``{\\i1}``, ``{\\pos(10,20)}``): no html, so ``<`` and ``&`` are escaped for markup and come back as
    they were. A renderer wraps an event's lines itself, so a translation keeps the lines its text had."""

    lines: list[str]
    events: dict[int, tuple[str, Cue]]  # a Dialogue line's index -> (the line up to its text, its text)
    newline: str = "\n"

    @classmethod
    def parse(cls, text: str, where: str) -> AssScript:
        newline = "\r\n" if "\r\n" in text else "\n"
        lines = text.replace("\r\n", "\n").split("\n")
        section, fields, events = "", 0, {}
        for k, line in enumerate(lines):
            if (m := _ASS_SECTION.match(line)) is not None:
                section = m.group(1).strip().lower()
            elif section == "events" and (m := _ASS_FORMAT.match(line)) is not None:
                names = [name.strip().lower() for name in m.group(1).split(",")]
                if names[-1] != "text":
                    raise NmtkError(f"{where}: line {k + 1}: an [Events] Format whose last field is not Text")
                fields = len(names)
            elif section == "events" and (m := _ASS_DIALOGUE.match(line)) is not None:
                if not fields:
                    raise NmtkError(f"{where}: line {k + 1}: a Dialogue line before its [Events] section's Format line")
                values = m.group(1).split(",", fields - 1)
                if len(values) < fields:
                    raise NmtkError(f"{where}: line {k + 1}: a Dialogue line of {len(values)} fields, its Format "
                                    f"names {fields}")
                text = values[-1].replace(_ASS_HARD_SPACE, "\u00a0").replace(_ASS_SOFT_BREAK, " ")
                events[k] = (line[: len(line) - len(values[-1])], Cue([], text.split("\\N"), wraps=False))
        return cls(lines, events, newline)

    @property
    def cues(self) -> list[Cue]:
        return [cue for _, cue in self.events.values()]

    def relabelled(self, source: str, target: str) -> None:
        """Nothing: a script does not name its language."""

    def segments(self) -> list[str]:
        """Every event's segments, in order, as html (what `render` takes translated): its text escaped,
        each override block an empty element markup places (a note in one, ``{TL: a pun}``, is no text
        to translate either: renderers show none of a block)."""
        return [_ass_marked_up(text) for cue in self.cues for text in cue.texts()]

    def render(self, translated: list[str]) -> str:
        """The script with its events' segments replaced by ``translated`` (as many, in order)."""
        lines, at = list(self.lines), 0
        translated = [_unescaped(text) for text in translated]
        for k, (head, cue) in self.events.items():
            count = len(cue.texts())
            written = "\\N".join(cue.written(translated[at : at + count])).replace("\u00a0", _ASS_HARD_SPACE)
            lines[k], at = head + written, at + count
        return self.newline.join(lines)


def _ass_marked_up(text: str) -> str:
    """An ASS event's text as html: its characters escaped, its blocks as `marked_up` makes ``{\\i1}``."""
    return "".join(f'<img data-ass="{html.escape(part[1:-1])}">' if k % 2 else html.escape(part, quote=False)
                   for k, part in enumerate(_ASS_BLOCK.split(text)))
