"""Finding corpus files under the data root, downloading (resumably) and unpacking what is missing.

A download goes to ``<name>.part`` and is renamed only once complete and verified, so a failed or
interrupted download never leaves a file under its final name; the next run resumes the ``.part``
with an HTTP range request.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tarfile
import tempfile
import urllib.error
import urllib.request
import zipfile
from pathlib import Path

from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn, TransferSpeedColumn

from nmtk.console import console, is_main_process
from nmtk.errors import NmtkError
from nmtk.recipe import CorpusFile

BLOCK_BYTES = 1 << 20  # read and written at a time when hashing and downloading


def default_data_root(explicit: str | Path | None = None) -> Path:
    """``--data-root``, else ``$NMTK_DATA``, else ``~/.cache/nmtk``."""
    if explicit:
        return Path(explicit).expanduser()
    if os.environ.get("NMTK_DATA"):
        return Path(os.environ["NMTK_DATA"]).expanduser()
    return Path.home() / ".cache" / "nmtk"


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(BLOCK_BYTES):
            digest.update(block)
    return digest.hexdigest()


def root_path(spec: CorpusFile, root: Path) -> Path:
    """Where a corpus file is (or would be) under the data root."""
    return root / spec.path


def ensure_file(spec: CorpusFile, root: Path) -> Path:
    """Path of the corpus file under ``root``, downloading and unpacking it first when missing."""
    target = root_path(spec, root)
    if target.is_file():
        return target
    if not spec.url:
        raise NmtkError(f"{target}: file not found, and the recipe gives no url to download it from{_elsewhere(spec)}")
    if spec.archive:
        archive = root / spec.archive
        if not archive.is_file():
            download(spec.url, archive, spec.sha256)
        unpack(archive, archive.parent)
        if not target.is_file():
            raise NmtkError(f"{target}: not found in {archive} after unpacking (check the recipe's path)")
        return target
    download(spec.url, target, spec.sha256)
    return target


def _elsewhere(spec: CorpusFile) -> str:
    """A hint where the file is in the current directory instead: a recipe's paths are relative to the data
    root (a new user's ``corpus.tsv`` beside the recipe was "not found" with no word of why)."""
    here = Path(spec.path)
    if here.is_absolute() or not here.is_file():
        return ""
    return f" ({spec.path} is in the current directory: a recipe's paths are relative to the data root; --data-root .)"


def _progress() -> Progress:
    return Progress(
        TextColumn("[bold]{task.description}"), BarColumn(), DownloadColumn(), TransferSpeedColumn(),
        TimeRemainingColumn(), console=console, disable=not is_main_process(), transient=True,
    )


def download(url: str, dest: Path, sha256: str | None = None, timeout: float = 60.0) -> None:
    """Download ``url`` to ``dest`` via ``dest.part`` (resumed if present), verifying ``sha256``."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    part = dest.with_name(dest.name + ".part")
    have = part.stat().st_size if part.exists() else 0
    headers = {"User-Agent": "nmtk", **({"Range": f"bytes={have}-"} if have else {})}
    request = urllib.request.Request(url, headers=headers)
    try:
        response = urllib.request.urlopen(request, timeout=timeout)
    except urllib.error.HTTPError as exc:
        if exc.code == 416 and have:  # the .part is already complete
            response = None
        else:
            raise NmtkError(f"{dest}: download failed: HTTP {exc.code} {exc.reason} from {url}") from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise NmtkError(f"{dest}: not under the data root and cannot be downloaded from {url} ({reason})") from None
    if response is not None:
        with response:
            resumed = have and response.status == 206
            if not resumed:
                have = 0
            length = response.headers.get("Content-Length")
            total = have + int(length) if length is not None else None
            _stream_to(response, part, "ab" if resumed else "wb", have, total, url, dest)
    if sha256:
        actual = sha256_file(part)
        if actual != sha256:
            part.unlink()
            raise NmtkError(f"{dest}: sha256 mismatch for {url}: expected {sha256}, got {actual}")
    os.replace(part, dest)


def _stream_to(response, part: Path, mode: str, have: int, total: int | None, url: str, dest: Path) -> None:
    received = have
    with _progress() as progress, open(part, mode) as out:
        task = progress.add_task(dest.name, total=total, completed=have)
        try:
            while block := response.read(BLOCK_BYTES):
                out.write(block)
                received += len(block)
                progress.update(task, completed=received)
        except (OSError, ValueError) as exc:  # connection reset, IncompleteRead, timeout
            raise NmtkError(
                f"{dest}: download from {url} interrupted after {received:,} bytes ({exc}); run again to resume"
            ) from None
    if total is not None and received < total:
        raise NmtkError(
            f"{dest}: download from {url} interrupted after {received:,} of {total:,} bytes; run again to resume"
        )


def unpack(archive: Path, into: Path) -> None:
    """Unpack a .tgz/.tar.gz/.tar/.zip into ``into`` through a temporary folder, so a failure leaves nothing."""
    name = archive.name.lower()
    with tempfile.TemporaryDirectory(dir=into, prefix=".unpack-") as tmp:
        try:
            if name.endswith((".tgz", ".tar.gz", ".tar")):
                with tarfile.open(archive) as tar:
                    if hasattr(tarfile, "data_filter"):  # refuses absolute paths and links out of tmp
                        tar.extractall(tmp, filter="data")
                    else:  # pragma: no cover - Python < 3.10.12
                        tar.extractall(tmp)
            elif name.endswith(".zip"):
                with zipfile.ZipFile(archive) as zf:
                    zf.extractall(tmp)
            else:
                raise NmtkError(f"{archive}: unknown archive type (expected .tgz, .tar.gz, .tar or .zip)")
        except (tarfile.TarError, zipfile.BadZipFile, EOFError, OSError) as exc:
            raise NmtkError(f"{archive}: cannot unpack ({exc}); delete it to download again") from None
        for path in sorted(Path(tmp).rglob("*")):
            if path.is_file():
                final = into / path.relative_to(tmp)
                final.parent.mkdir(parents=True, exist_ok=True)
                if not final.exists():
                    shutil.move(path, final)
