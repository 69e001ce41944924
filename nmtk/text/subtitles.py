"""Subtitle files (SubRip ``.srt``, WebVTT ``.vtt``): each cue's text apart from what is not to be
translated, and the file written back around the translations.

Why: read as lines of text, a subtitle file's numbers and timings are kept, but WebVTT's ``WEBVTT``
header and ``NOTE`` comments went to the model (the demo model: "WAAATTTNNNGA."), and a sentence broken
over a cue's two lines was translated as two fragments. Here a cue's lines are one sentence's text (one
segment, translated as markup is, its ``<i>`` tags kept) and the translation is wrapped back over as
many lines; a dialogue cue (each line a speaker's, ``- Hi.`` / ``- Hello.``) is translated line by line,
its dashes kept. Everything else (numbers, timings with their settings, cue identifiers, the header,
``NOTE``, ``STYLE`` and ``REGION`` blocks) is written as it was, line endings included. WebVTT's
notation inside a cue becomes html that markup parses and comes back (`marked_up`, `restored`).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

_BLOCKS = re.compile(r"\n[ \t]*\n+")
_DIALOGUE = re.compile(r"^(\s*[-–—]\s*)")
_TIMESTAMP = re.compile(r"<\d[\d:.]*>")  # WebVTT's karaoke timings inside a cue's text
_CLASSES = re.compile(r"<(\w+)((?:\.[\w-]+)+)")  # <c.yellow.big>: WebVTT's classes on a tag
_CLASSED = re.compile(r'<(\w+) data-vtt-class="([^"]*)"')
_VOICE = re.compile(r"<v[ .>]")


def marked_up(text: str) -> str:
    """A cue's text as html that markup parses: WebVTT's classes as an attribute (``<c.yellow>`` closes
    with ``</c>``), a voice left open to the cue's end closed (``<v Anna>Hi.``), karaoke timings left
    out. `restored` undoes the first two on the translation."""
    text = _CLASSES.sub(lambda m: f'<{m.group(1)} data-vtt-class="{m.group(2)}"', _TIMESTAMP.sub("", text))
    return text + "</v>" if _VOICE.search(text) and "</v>" not in text else text


def restored(translated: str, text: str) -> str:
    """``translated`` (the translation of ``marked_up(text)``) with ``text``'s own WebVTT notation back."""
    if _VOICE.search(text) and "</v>" not in text:
        head, _, tail = translated.rpartition("</v>")
        translated = head + tail if _ else translated
    return _CLASSED.sub(lambda m: f"<{m.group(1)}{m.group(2)}", translated)


@dataclass
class Cue:
    """A cue: its lines up to the timing (``head``) and its text lines."""

    head: list[str]
    lines: list[str]

    @property
    def dialogue(self) -> bool:
        """Whether each of its lines is a speaker's (two or more, each begun by a dash)."""
        return len(self.lines) > 1 and all(_DIALOGUE.match(line) for line in self.lines)

    def texts(self) -> list[str]:
        """Its text as translated: each line without its dash (dialogue), else the lines as one."""
        if self.dialogue:
            return [line[_DIALOGUE.match(line).end():] for line in self.lines]  # type: ignore[union-attr]
        return [" ".join(line.strip() for line in self.lines)] if self.lines else []

    def segments(self) -> list[str]:
        """Its texts as html for markup (`marked_up`)."""
        return [marked_up(text) for text in self.texts()]

    def written(self, translated: list[str]) -> list[str]:
        """Its lines with ``translated`` (one per segment) in place of its text."""
        translated = [restored(t, text) for t, text in zip(translated, self.texts(), strict=True)]
        if self.dialogue:
            text = [_DIALOGUE.match(line).group(1) + t for line, t in zip(self.lines, translated, strict=True)]  # type: ignore[union-attr]
        else:
            text = wrapped(translated[0], len(self.lines)) if self.lines else []
        return self.head + text


@dataclass
class Subtitles:
    """A subtitle file as blocks: cues and the blocks written as they are (the header, notes, styles)."""

    blocks: list[Cue | str]
    separators: list[str]  # what stood between block i and i + 1 (blank lines)
    newline: str = "\n"
    end: str = ""  # what followed the last block

    @classmethod
    def parse(cls, text: str) -> Subtitles:
        newline = "\r\n" if "\r\n" in text else "\n"
        text = text.replace("\r\n", "\n")
        body = text.rstrip("\n")
        end, separators, blocks = text[len(body):], _BLOCKS.findall(body), []
        for block in _BLOCKS.split(body):
            lines = block.split("\n")
            timing = next((i for i, line in enumerate(lines[:3]) if "-->" in line), None)
            verbatim = timing is None or lines[0].startswith(("WEBVTT", "NOTE", "STYLE", "REGION"))
            blocks.append(block if verbatim else Cue(lines[: timing + 1], lines[timing + 1 :]))
        return cls(blocks, separators, newline, end)

    @property
    def cues(self) -> list[Cue]:
        return [b for b in self.blocks if isinstance(b, Cue)]

    def segments(self) -> list[str]:
        """Every cue's segments, in order (what `render` takes translated)."""
        return [segment for cue in self.cues for segment in cue.segments()]

    def render(self, translated: list[str]) -> str:
        """The file with the cues' segments replaced by ``translated`` (as many, in order)."""
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


def wrapped(text: str, lines: int) -> list[str]:
    """``text`` over at most ``lines`` lines, broken at spaces so that the longest line is as short as it
    can be (a subtitle's lines are read together: "Ein Hund rennt im" / "Park mit einem Ball.")."""
    words = text.split()
    lines = max(1, min(lines, len(words)))

    def width(start: int, end: int) -> int:
        return sum(len(w) for w in words[start:end]) + end - start - 1

    @functools.cache
    def split(start: int, count: int) -> tuple[int, tuple[int, ...]]:
        """(longest line, where the lines after the first begin) for ``words[start:]`` on ``count`` lines."""
        if count == 1:
            return width(start, len(words)), ()
        return min((max(width(start, end), split(end, count - 1)[0]), (end, *split(end, count - 1)[1]))
                   for end in range(start + 1, len(words) - count + 2))

    starts = (0, *split(0, lines)[1], len(words))
    return [" ".join(words[a:b]) for a, b in zip(starts, starts[1:], strict=False)]
