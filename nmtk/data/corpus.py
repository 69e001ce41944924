"""Reading corpus files line by line: gzip, WMT SGML, UTF-8 checks, parallel line alignment."""

from __future__ import annotations

import gzip
import html
import re
from collections.abc import Iterator
from itertools import zip_longest
from pathlib import Path
from typing import BinaryIO

from nmtk.errors import NmtkError
from nmtk.files import decode_lines

_SEG = re.compile(r"<seg[^>]*>(.*)</seg>", re.IGNORECASE)
_REPLACE_HINT = 'set data.encoding_errors = "replace" to substitute U+FFFD'


def _open_binary(path: Path) -> BinaryIO:
    if path.suffix == ".gz":
        return gzip.open(path, "rb")
    return open(path, "rb")


def read_lines(path: Path, errors: str = "error") -> Iterator[str]:
    """Sentences of a corpus file, one per line, without the newline.

    ``.gz`` files are decompressed on the fly; ``.sgm``/``.sgm.gz`` WMT test sets yield the text of
    their ``<seg>`` elements. Invalid UTF-8 raises an error naming the file and line unless
    ``errors == "replace"``. Streams: memory does not grow with the file.
    """
    sgml = path.name.endswith((".sgm", ".sgm.gz"))
    try:
        with _open_binary(path) as handle:
            for text in decode_lines(handle, str(path), errors, hint=_REPLACE_HINT):
                if not sgml:
                    yield text
                elif match := _SEG.search(text):
                    yield html.unescape(match.group(1)).strip()
    except (gzip.BadGzipFile, EOFError) as exc:
        raise NmtkError(f"{path}: corrupt gzip file ({exc})") from None
    except FileNotFoundError:
        raise NmtkError(f"{path}: file not found") from None


def count_lines(path: Path, errors: str = "replace") -> int:
    return sum(1 for _ in read_lines(path, errors))


def read_parallel(src: Path, tgt: Path, errors: str = "error") -> Iterator[tuple[str, str]]:
    """Aligned (source, target) pairs; a line-count mismatch is an error naming both files and counts."""
    missing = object()
    for a, b in zip_longest(read_lines(src, errors), read_lines(tgt, errors), fillvalue=missing):
        if a is missing or b is missing:
            raise NmtkError(
                f"{src} has {count_lines(src):,} lines but {tgt} has {count_lines(tgt):,}: "
                "parallel files must have the same number of lines"
            )
        yield a, b
