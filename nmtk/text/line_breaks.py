"""Line breaks inside a text sent to `nmtk serve`: kept where they end a sentence, a paragraph or a list
item, read as spaces where they wrap a sentence.

LibreTranslate gives a text's line breaks back ("Hello.\\nHow are you?" comes back on two lines); nmtk
read every break as a space and gave the translations back on one line. Cutting at every break is not
right either: a model reads whole sentences, and a sentence wrapped over two lines (a pasted e-mail,
a PDF's column) translated line by line comes back as two broken halves. So a break is kept (the text
cut there, each piece translated alone, the break written back between the translations) where the
line before it ends a sentence (``. ! ? …``, with closing quotes or brackets after it) or announces
what follows (``:``), where a blank line follows (a paragraph), or where the next line is a list item
(``- ``, ``* ``, ``• ``, ``1. ``, ``2) ``, ``(3) ``, ``a) ``: written back as they are, the rest of the item
translated; `translate` keeps a line's own marker so: `list_marker`) or follows one and begins, not
indented, with a capital (items seldom end with a stop: "- A cat sleeps\nThe sun shines." was one
sentence; an item's indented lines wrap it);
any other break is a space, as it was. A text's line breaks before its first word and after its last
are not written back, as its other outer spaces are not.
"""

from __future__ import annotations

import re

#: A line break: ``\n``, ``\r\n``, a lone ``\r`` (old Macs), Unicode's line and paragraph separators.
_NEWLINE = "(?:\r\n|[\n\r\u2028\u2029])"
_BREAK = re.compile(rf"[ \t]*(?:{_NEWLINE}[ \t]*)+")
#: What may stand after a sentence's end (``"Go."``, ``(see above.)``).
CLOSERS = "\"'”’»)]}"
_ENDS = re.compile(rf"[.!?…:。！？][{re.escape(CLOSERS)}]*$")
_ITEM = re.compile(r"(?:[-*•·–]|\d+[.)]|\(\d+\)|[a-z]\))[ \t]+")


def ends_sentence(text: str) -> bool:
    """Whether ``text`` ends as a sentence or a clause before a list does: a stop, question or exclamation
    mark, an ellipsis or a colon, perhaps followed by quotes or brackets."""
    return bool(_ENDS.search(text.rstrip()))


def list_marker(line: str) -> str:
    """The list item's marker ``line`` begins with and the white space after it (``"1. "``, ``"- "``,
    ``"a) "``), else "": not the model's to translate (the demo model dropped "1." and "2)"), and
    written back before the item's translation."""
    marker = _ITEM.match(line)
    return marker.group() if marker and line[marker.end():].strip() else ""


def cut_at_breaks(text: str) -> tuple[list[str], list[str]]:
    """``text``'s pieces between the line breaks it keeps, and what stands before each piece: before the
    first, its list item's marker or nothing; before each other, the break as the text writes it (its
    line breaks, ``\\n``, ``\\r\\n`` or another, and the next line's indentation) and the piece's list
    item marker, if any: markers are not the model's to translate."""
    text = text.strip()
    parts, breaks = _BREAK.split(text), _BREAK.findall(text)
    marker = _ITEM.match(parts[0])
    pieces, around = [parts[0][marker.end():] if marker else parts[0]], [marker.group() if marker else ""]
    item = marker is not None  # the last piece is a list item's
    for found, line in zip(breaks, parts[1:], strict=True):
        marker = _ITEM.match(line)
        newlines, indent = re.findall(_NEWLINE, found), re.split(_NEWLINE, found)[-1]
        if (len(newlines) > 1 or "\u2029" in newlines or ends_sentence(pieces[-1]) or marker
                or (item and not indent and line[:1].isupper())):  # after an item, an unindented capital
            item = marker is not None                                 # begins another sentence
            pieces.append(line[marker.end():] if marker else line)
            around.append("".join(newlines) + indent + (marker.group() if marker else ""))
        else:  # a wrapped sentence: the break is a space
            pieces[-1] = f"{pieces[-1]} {line}"
    return pieces, around


def join_at_breaks(pieces: list[str], around: list[str]) -> str:
    """The translations of `cut_at_breaks`'s pieces, with what stood around them written back."""
    return "".join(part for pair in zip(around, pieces, strict=True) for part in pair)
