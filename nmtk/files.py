"""Files nmtk reads and writes: UTF-8 lines with errors that name the line, and atomic writes.

Every reader of user text (corpora, `translate` input, `score` hypotheses and references) decodes
through `decode_lines`, so invalid UTF-8 is reported the same way everywhere: ``FILE:LINE: invalid
UTF-8 (...)``. Every writer of a file a user keeps (checkpoints, run-directory files, `translate -o`)
goes through `atomic_write`: the new content is written to a temporary file beside the target,
flushed and fsynced, then renamed over it, so a crash leaves the old file or the complete new one.
"""

from __future__ import annotations

import bz2
import fcntl
import gzip
import lzma
import os
import select
import shutil
import socket
import stat
import tempfile
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from enum import Enum
from pathlib import Path
from typing import IO, TYPE_CHECKING, Literal

from nmtk.errors import NmtkError
from nmtk.interrupts import wait_readable

if TYPE_CHECKING:  # numpy only where arrays are written: the command line starts without it
    import numpy as np


class InvalidUtf8(str, Enum):
    """What to do with input that is not valid UTF-8: stop naming the line, or put U+FFFD in its place."""

    error = "error"
    replace = "replace"

    def __str__(self) -> str:
        return self.value


Errors = InvalidUtf8 | str


def decode_lines(lines: Iterable[bytes], name: str, errors: Errors = "error", hint: str = "") -> Iterator[str]:
    """UTF-8 text of each line (split on ``\\n`` only), without its line ending, and the first without a
    byte-order mark (U+FEFF would be a vocabulary piece of its own, and stay in BLEU's references).

    Invalid UTF-8 raises an error naming ``name`` and the 1-based line, followed by ``hint`` (how to
    substitute U+FFFD instead); with ``errors="replace"`` invalid bytes become U+FFFD.
    """
    strict, first = errors == "error", b""
    for lineno, raw in enumerate(lines, start=1):
        first = first or raw
        try:
            text = raw.decode("utf-8", errors="strict" if strict else "replace")
        except UnicodeDecodeError as exc:
            raise NmtkError(_invalid(name, lineno, exc, first, hint)) from None
        if lineno == 1 and text.startswith("\ufeff"):  # a byte-order mark (Windows editors), not text
            text = text[1:]
        yield text.rstrip("\r\n")


def decode_text(raw: bytes, name: str, errors: Errors = "error", hint: str = "") -> str:
    """A whole document's UTF-8 text, line endings as they are; invalid UTF-8 as `decode_lines` says it."""
    try:
        return raw.decode("utf-8", errors="strict" if errors == "error" else "replace")
    except UnicodeDecodeError as exc:
        raise NmtkError(_invalid(name, raw.count(b"\n", 0, exc.start) + 1, exc, raw, hint)) from None


#: What a file that is not text is, by its first bytes, and what to do instead: compressed text and the
#: documents people try to translate (a Word file is a zip archive). Read as text, each was "invalid
#: UTF-8 at byte 1", and ``--errors replace`` made it a page of U+FFFD.
_NOT_TEXT = ((b"\x1f\x8b", "gzip-compressed", "decompress it first (zcat {file} | nmtk …)"),
             (b"\xfd7zXZ\x00", "xz-compressed", "decompress it first (xzcat {file} | nmtk …)"),
             (b"BZh", "bzip2-compressed", "decompress it first (bzcat {file} | nmtk …)"),
             (b"\x28\xb5\x2f\xfd", "zstd-compressed", "decompress it first (zstdcat {file} | nmtk …)"),
             (b"PK\x03\x04", "a zip archive (a .docx, .xlsx, .pptx, .odt or .epub file is one)",
              "save its text as plain text, html or XLIFF"),
             (b"%PDF-", "a PDF document", "save its text as plain text or html"))


#: Compressed text that is read as it is decompressed, known by its first bytes (its name need not say so;
#: bzip2's block header too, so that no text that begins "BZh" is taken for it): corpora in `prepare`,
#: `translate -i` (as Marian reads its input).
_DECOMPRESSED = ((b"\x1f\x8b", "gzip", gzip.open), (b"\xfd7zXZ\x00", "xz", lzma.open),
                 (b"BZh", "bzip2", bz2.open))
_CORRUPT = (EOFError, gzip.BadGzipFile, lzma.LZMAError, OSError)  # bz2's bad data is an OSError


def compression(path: Path) -> str | None:
    """``gzip``, ``xz`` or ``bzip2`` where the file is compressed so (`_DECOMPRESSED`), else None. Only a
    regular file is looked into: a pipe's first bytes (``-i <(zcat …)``) would be read and lost."""
    if not Path(path).is_file():
        return None
    with open(path, "rb") as handle:
        start = handle.read(10)
    for magic, name, _ in _DECOMPRESSED:
        if start.startswith(magic) and (name != "bzip2" or start[3:4].isdigit() and start[4:] == b"1AY&SY"):
            return name
    return None


def open_binary(path: Path) -> IO[bytes]:
    """A file's bytes, decompressed where it is gzip, xz or bzip2 (`compression`)."""
    kind = compression(path)
    return next(opener for _, name, opener in _DECOMPRESSED if name == kind)(path, "rb") if kind else open(path, "rb")


def checked_reads(reads: Iterable[bytes], path: Path) -> Iterator[bytes]:
    """What is read from `open_binary`'s handle (its lines, or blocks); a truncated or corrupt compressed
    file is one line naming it, where Python would raise its own error mid-stream."""
    try:
        yield from reads
    except _CORRUPT as exc:
        if isinstance(exc, OSError) and type(exc) is not OSError and not isinstance(exc, gzip.BadGzipFile):
            raise  # a real I/O error (a subclass), not bad data
        kind = compression(path) or "compressed"
        raise NmtkError(f"{path}: corrupt {kind} file ({exc or 'it ends early'})") from None


def _invalid(name: str, line: int, exc: UnicodeDecodeError, start: bytes, hint: str) -> str:
    """The one line for invalid UTF-8 (``start``: the input's first bytes); a file that begins with
    UTF-16's byte-order mark (Excel's "Unicode Text", Notepad's "Unicode") is said to be UTF-16, and a
    compressed file or a document (`_NOT_TEXT`) what it is, not invalid."""
    if start[:2] in (b"\xff\xfe", b"\xfe\xff"):
        mark = start[:2].hex(" ").upper()
        return f"{name}: UTF-16 text (it begins with the byte-order mark {mark}): save it as UTF-8"
    for magic, what, instead in _NOT_TEXT:
        if start.startswith(magic):
            return f"{name}: {what}, not text: {instead.format(file='FILE' if name == 'stdin' else name)}"
    where = f"{name}:{line}: invalid UTF-8 ({exc.reason} at byte {exc.start})"
    return f"{where}; {hint}" if hint else where


def read_lines(path: Path, what: str, errors: Errors = "error", hint: str = "") -> list[str]:
    """All lines of a small text file (hypotheses, references, a glossary), decompressed where it is
    gzip, xz or bzip2 (sacreBLEU reads a ``ref.de.gz``); one clear error when it cannot be read."""
    try:
        with open_binary(path) as handle:
            return list(decode_lines(checked_reads(handle, path), str(path), errors, hint))
    except FileNotFoundError:
        raise NmtkError(f"{path}: {what} file not found") from None
    except IsADirectoryError:
        raise NmtkError(f"{path}: is a directory, expected a {what} file") from None


def write_array(handle: IO[bytes], array: np.ndarray) -> None:
    """``array``'s bytes appended to an open binary file. Not ``ndarray.tofile``, nor ``np.fromfile``
    below: numpy asks whether its argument is a path with an ``isinstance`` check that runs Python code,
    and an exception raised there (a Ctrl-C or SIGTERM handler's) comes out as a TypeError, "expected
    str, bytes or os.PathLike object, not BufferedWriter", instead of itself (numpy 2.4: a SIGTERM to
    `prepare` ended in that line in one fresh-clone run of the suite)."""
    import numpy as np

    handle.write(np.ascontiguousarray(array).data)


def read_array(path: Path, dtype: np.dtype | type) -> np.ndarray:
    """A file's bytes as a (writable) array of ``dtype`` (see `write_array`: not ``np.fromfile``)."""
    import numpy as np

    return np.frombuffer(bytearray(path.read_bytes()), dtype=dtype)


def fsync_dir(directory: Path) -> None:
    """Make a rename inside ``directory`` durable (a no-op where directories cannot be opened)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:  # pragma: no cover - platforms without directory fds
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def temp_path(path: Path) -> Path:
    """A hidden temporary name beside ``path``, unique to this process."""
    return path.with_name(f".{path.name}.{os.getpid()}.tmp")


@contextmanager
def atomic_write(path: Path, mode: Literal["w", "wb"] = "wb") -> Iterator[IO]:
    """Open a temporary file to write ``path``'s new content; on success it replaces ``path``.

    On an exception (or Ctrl-C) the temporary file is removed and ``path`` is left as it was.
    """
    path = output_path(path)
    tmp = temp_path(path)
    try:
        try:
            handle = open(tmp, mode, **({"encoding": "utf-8"} if "b" not in mode else {}))
        except OSError as exc:  # named by the user's path, not the hidden temporary one
            raise NmtkError(f"{path}: cannot write there ({exc.strerror or type(exc).__name__})") from None
        with handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    fsync_dir(path.parent)


def partial_path(output: Path) -> Path:
    """Where a streamed ``output`` grows until it is whole (renamed to ``output`` then): what an
    interrupted `translate -o` leaves, and what going on appends to."""
    return output.with_name(output.name + ".partial")


def write_text_atomic(path: Path, text: str) -> None:
    with atomic_write(path, "w") as handle:
        handle.write(text)


def copy_atomic(source: Path, target: Path) -> None:
    with atomic_write(target, "wb") as out, open(source, "rb") as src:
        while block := src.read(1 << 20):
            out.write(block)


def output_path(path: Path) -> Path:
    """An output file the user named, its missing parent folders created (the one policy of every
    command that writes: translate, average, plot, export, attention); one line naming it when that
    is impossible or it is a folder."""
    path = Path(path)
    if path.is_dir():
        raise NmtkError(f"{path}: is a folder; give a file name")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise NmtkError(f"{path}: cannot create its folder ({exc.strerror or type(exc).__name__})") from None
    if not os.access(path.parent, os.W_OK):
        raise NmtkError(f"{path}: cannot write there (permission denied)")
    return path


def input_path(path: Path, what: str = "input file") -> Path:
    """A file the user named to read: one line naming it when it is missing, a folder or unreadable."""
    path = Path(path)
    if not path.exists():
        raise NmtkError(f"{path}: {what} not found")
    if path.is_dir():
        raise NmtkError(f"{path}: is a folder, not a file")
    if not os.access(path, os.R_OK):
        raise NmtkError(f"{path}: cannot read it (permission denied)")
    return path


def temp_dir_beside(target: Path) -> Path:
    """A new hidden folder next to ``target`` (same file system, so `swap_in` is a rename), with the
    permissions a plain ``mkdir`` would give under the user's umask (``mkdtemp`` gives 0700)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=target.parent))
    mask = os.umask(0)
    os.umask(mask)
    folder.chmod(0o777 & ~mask)
    return folder


def swap_in(tmp: Path, target: Path) -> None:
    """Replace the folder ``target`` by ``tmp`` with renames: the old one is removed only after the new
    one is in place, so a crash leaves one of the two whole."""
    if target.exists():
        old = target.with_name(f".{target.name}.old-{os.getpid()}")
        os.replace(target, old)
        os.replace(tmp, target)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(tmp, target)


@contextmanager
def built_beside(target: Path) -> Iterator[Path]:
    """A folder to build ``target`` in: swapped in when the block ends, removed if it raises, so the
    old ``target`` (if any) stays whole until the new one is complete."""
    tmp = temp_dir_beside(target)
    try:
        yield tmp
        swap_in(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


class LockHeld(Exception):
    """`os_lock` found the lock held and was not asked to wait; ``holder`` says by whom."""

    def __init__(self, holder: str) -> None:
        super().__init__(holder)
        self.holder = holder


@contextmanager
def os_lock(path: Path, waiting: Callable[[str], None] | None = None) -> Iterator[None]:
    """Hold an OS lock (``flock``) on the file ``path`` for the block, writing into it who holds it. The
    kernel releases it when the process ends however it ends (even SIGKILL), so no stale lock is left;
    the file itself stays (removing it would let a third process lock a new file while a second waits
    on the old one). Held by another process: ``LockHeld`` naming it, or, given ``waiting``, that is
    called with the holder once and the lock waited for."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle = open(path, "a+", encoding="utf-8")
    try:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            handle.seek(0)
            holder = handle.read().strip() or "another process"
            if waiting is None:
                raise LockHeld(holder) from None
            waiting(holder)
            fcntl.flock(handle, fcntl.LOCK_EX)
        handle.seek(0)
        handle.truncate()
        handle.write(f"process {os.getpid()} on {socket.gethostname()} since {time.strftime('%Y-%m-%d %H:%M:%S')}")
        handle.flush()
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
    finally:
        handle.close()


def buffered(lines: Iterable[str], size: int, waiting: Callable[[], bool] | None = None) -> Iterator[list[str]]:
    """Lists of ``size`` lines (the last may be shorter); with ``waiting``, a list also ends as soon as
    ``waiting()`` says that the next line is not at hand (`ReadyLines.waiting`)."""
    buffer: list[str] = []
    for line in lines:
        buffer.append(line)
        if len(buffer) >= size or (waiting is not None and waiting()):
            yield buffer
            buffer = []
    if buffer:
        yield buffer


class ReadyLines:
    """The lines of a pipe, FIFO or terminal, read from its descriptor, with `waiting` telling whether
    the next one is already at hand. A reader that takes lines until a buffer is full would wait on a
    writer who sends one line and waits for its answer (fairseq-interactive's and Marian's users' way);
    one that stops where `waiting` says so answers it at once, and still takes large buffers from a
    fast writer, whose lines are always ready."""

    BLOCK = 1 << 16

    def __init__(self, stream: IO[bytes]) -> None:
        self.fd = stream.fileno()
        self.lines: deque[bytes] = deque()
        self.tail = b""
        self.eof = False

    def __iter__(self) -> ReadyLines:
        return self

    def __next__(self) -> bytes:
        while not self.lines:
            if self.eof:
                raise StopIteration
            self._read()
        return self.lines.popleft()

    def _read(self) -> None:
        wait_readable(self.fd)  # not os.read alone: a Ctrl-C handled on another thread must end the wait too
        data = os.read(self.fd, self.BLOCK)
        if not data:
            self.eof = True
            if self.tail:
                self.lines.append(self.tail)
                self.tail = b""
            return
        parts = (self.tail + data).split(b"\n")
        self.tail = parts.pop()
        self.lines.extend(part + b"\n" for part in parts)

    def waiting(self) -> bool:
        """No line is at hand, and reading one now would block (the writer has sent nothing more)."""
        if self.lines or self.eof:
            return False
        return not select.select([self.fd], [], [], 0)[0]

    @staticmethod
    def applies(stream: IO[bytes]) -> bool:
        """For a pipe, FIFO, socket or terminal; a regular file is read with its own buffering."""
        try:
            return os.name == "posix" and not stat.S_ISREG(os.fstat(stream.fileno()).st_mode)
        except (OSError, ValueError, AttributeError):
            return False
