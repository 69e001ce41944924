"""Reading corpus files line by line: gzip, xz and bzip2, WMT SGML, UTF-8 checks, parallel line alignment."""

from __future__ import annotations

import html
import re
from collections.abc import Iterator
from itertools import zip_longest
from pathlib import Path

from nmtk.errors import NmtkError
from nmtk.files import checked_reads, decode_lines, open_binary
from nmtk.recipe import Corpus

_SEG = re.compile(r"<seg[^>]*>(.*)</seg>", re.IGNORECASE)
_REPLACE_HINT = 'set data.encoding_errors = "replace" to substitute U+FFFD'


def read_lines(path: Path, errors: str = "error", column: int | None = None) -> Iterator[str]:
    """Sentences of a corpus file, one per line, without the newline.

    gzip, xz and bzip2 files are decompressed on the fly (known by their first bytes,
    `nmtk.files.open_binary`); ``.sgm``/``.sgm.gz`` WMT test sets yield the text of
    their ``<seg>`` elements. Invalid UTF-8 raises an error naming the file and line unless
    ``errors == "replace"``. ``column``: each line's tab-separated field of that number (1: the first;
    `CorpusFile.column`); a line with fewer is an error naming it. Streams: memory does not grow with
    the file.
    """
    sgml = path.name.endswith((".sgm", ".sgm.gz"))
    try:
        with open_binary(path) as handle:
            lines = decode_lines(checked_reads(handle, path), str(path), errors, hint=_REPLACE_HINT)
            for number, text in enumerate(lines, 1):
                if column is not None:
                    yield _field(text, column, path, number)
                elif not sgml:
                    yield text
                elif match := _SEG.search(text):
                    yield html.unescape(match.group(1)).strip()
    except FileNotFoundError:
        raise NmtkError(f"{path}: file not found") from None


def _field(line: str, column: int, path: Path, number: int) -> str:
    fields = line.split("\t")
    if len(fields) < column:
        raise NmtkError(f"{path}:{number}: {len(fields)} tab-separated column{'s' if len(fields) > 1 else ''}, "
                        f"where the recipe reads column {column}")
    return fields[column - 1]


def columns(corpus: Corpus) -> tuple[int | None, int | None]:
    """A corpus's sides' columns (`read_parallel`'s ``columns``)."""
    return corpus.source.column, corpus.target.column


def count_lines(path: Path, errors: str = "replace") -> int:
    return sum(1 for _ in read_lines(path, errors))


def read_parallel(src: Path, tgt: Path, errors: str = "error", columns: tuple[int | None, int | None] = (None, None)
                  ) -> Iterator[tuple[str, str]]:
    """Aligned (source, target) pairs; a line-count mismatch is an error naming both files and counts.
    ``columns``: each side's tab-separated column (`read_lines`), where the sides share a file."""
    missing = object()
    sides = read_lines(src, errors, columns[0]), read_lines(tgt, errors, columns[1])
    for a, b in zip_longest(*sides, fillvalue=missing):
        if a is missing or b is missing:
            raise NmtkError(
                f"{src} has {count_lines(src):,} lines but {tgt} has {count_lines(tgt):,}: "
                "parallel files must have the same number of lines"
            )
        yield a, b
