"""Downloads from a real HTTP server on 127.0.0.1: 404, dropped connections, resume, checksums, archives."""

from __future__ import annotations

import gzip
import hashlib
import io
import tarfile
import threading
import zipfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from nmtk.data.corpus import read_lines, read_parallel
from nmtk.data.fetch import default_data_root, download, ensure_file
from nmtk.errors import NmtkError
from nmtk.recipe import CorpusFile

PAYLOAD = b"".join(b"line %d of the corpus\n" % i for i in range(5000))


class Files(BaseHTTPRequestHandler):
    files: dict[str, bytes] = {}
    drop_after: dict[str, int] = {}  # path -> bytes sent before the connection is cut (once)
    requests: list[tuple[str, str | None]] = []

    def do_GET(self) -> None:  # http.server's name
        self.requests.append((self.path, self.headers.get("Range")))
        body = self.files.get(self.path)
        if body is None:
            self.send_error(404, "Not Found")
            return
        start = 0
        if rng := self.headers.get("Range"):
            start = int(rng.removeprefix("bytes=").split("-")[0])
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{len(body) - 1}/{len(body)}")
        else:
            self.send_response(200)
        self.send_header("Content-Length", str(len(body) - start))
        self.end_headers()
        cut = self.drop_after.pop(self.path, None)
        self.wfile.write(body[start:cut] if cut is not None else body[start:])
        if cut is not None:
            self.wfile.flush()
            self.close_connection = True

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def server():
    Files.files, Files.drop_after, Files.requests = {}, {}, []
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Files)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_download_verifies_and_renames(server: str, tmp_path: Path) -> None:
    Files.files["/c.en"] = PAYLOAD
    dest = tmp_path / "d" / "c.en"
    download(f"{server}/c.en", dest, sha(PAYLOAD))
    assert dest.read_bytes() == PAYLOAD and not (tmp_path / "d" / "c.en.part").exists()


def test_404_leaves_nothing(server: str, tmp_path: Path) -> None:
    dest = tmp_path / "missing.en"
    with pytest.raises(NmtkError, match=r"missing\.en: download failed: HTTP 404 .*/missing\.en"):
        download(f"{server}/missing.en", dest)
    assert list(tmp_path.iterdir()) == []


def test_dropped_connection_then_resume(server: str, tmp_path: Path) -> None:
    Files.files["/big.de"] = PAYLOAD
    Files.drop_after["/big.de"] = 30_000
    dest = tmp_path / "big.de"
    with pytest.raises(NmtkError, match=rf"interrupted after 30,000 of {len(PAYLOAD):,} bytes; run again to resume"):
        download(f"{server}/big.de", dest, sha(PAYLOAD))
    assert not dest.exists() and (tmp_path / "big.de.part").stat().st_size == 30_000
    download(f"{server}/big.de", dest, sha(PAYLOAD))
    assert dest.read_bytes() == PAYLOAD
    assert Files.requests[-1] == ("/big.de", "bytes=30000-")


def test_wrong_sha256_leaves_nothing(server: str, tmp_path: Path) -> None:
    Files.files["/c.en"] = PAYLOAD
    dest = tmp_path / "c.en"
    with pytest.raises(NmtkError, match=rf"sha256 mismatch .*expected {'0' * 64}, got {sha(PAYLOAD)}"):
        download(f"{server}/c.en", dest, "0" * 64)
    assert list(tmp_path.iterdir()) == []


def test_offline_names_file_and_url(tmp_path: Path) -> None:
    spec = CorpusFile(path="x/train.en", url="http://127.0.0.1:9/train.en")  # port 9: nothing listens
    with pytest.raises(NmtkError, match=r"x/train\.en: not under the data root and cannot be downloaded from "
                                        r"http://127\.0\.0\.1:9/train\.en"):
        ensure_file(spec, tmp_path)


def test_a_file_in_the_current_directory_instead_of_the_data_root_is_named(tmp_path: Path, monkeypatch) -> None:
    """A recipe's ``corpus.tsv`` beside it, not under the data root: the error says where it is and how to
    read it from there (it said only "not found")."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "corpus.tsv").write_text("a\tb\n")
    with pytest.raises(NmtkError, match=r"root/corpus\.tsv: file not found, .* \(corpus\.tsv is in the current "
                                        r"directory: a recipe's paths are relative to the data root; --data-root \.\)"):
        ensure_file(CorpusFile(path="corpus.tsv"), tmp_path / "root")
    with pytest.raises(NmtkError, match=r"download it from$"):
        ensure_file(CorpusFile(path="other.tsv"), tmp_path / "root")


def test_archives_are_unpacked(server: str, tmp_path: Path) -> None:
    tgz = io.BytesIO()
    with tarfile.open(fileobj=tgz, mode="w:gz") as tar:
        info = tarfile.TarInfo("training/corpus.en")
        info.size = len(PAYLOAD)
        tar.addfile(info, io.BytesIO(PAYLOAD))
    Files.files["/training.tgz"] = tgz.getvalue()
    spec = CorpusFile(path="wmt/training/corpus.en", url=f"{server}/training.tgz", archive="wmt/training.tgz",
                      sha256=sha(tgz.getvalue()))
    assert ensure_file(spec, tmp_path).read_bytes() == PAYLOAD

    zipped = io.BytesIO()
    with zipfile.ZipFile(zipped, "w") as zf:
        zf.writestr("dev/newstest.de", "Hallo Welt\n")
    Files.files["/dev.zip"] = zipped.getvalue()
    spec = CorpusFile(path="wmt/dev/newstest.de", url=f"{server}/dev.zip", archive="wmt/dev.zip")
    assert list(read_lines(ensure_file(spec, tmp_path))) == ["Hallo Welt"]
    assert not list(tmp_path.glob("wmt/.unpack-*"))


def test_sgml_and_gzip_reading(tmp_path: Path) -> None:
    sgm = tmp_path / "newstest2014-deen-src.en.sgm"
    sgm.write_text('<srcset setid="newstest2014">\n<doc docid="1">\n<p>\n<seg id="1">A &amp; B.</seg>\n'
                   '<seg id="2"> Second  line </seg>\n</p>\n</doc>\n</srcset>\n')
    assert list(read_lines(sgm)) == ["A & B.", "Second  line"]
    gz = tmp_path / "c.de.gz"
    gz.write_bytes(gzip.compress(b"eins\nzwei\r\n"))
    assert list(read_lines(gz)) == ["eins", "zwei"]
    plain = tmp_path / "c.en"
    plain.write_text("one\n")
    with pytest.raises(NmtkError, match=r"c\.en has 1 lines but .*c\.de\.gz has 2"):
        list(read_parallel(plain, gz))


def test_data_root_precedence(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NMTK_DATA", str(tmp_path / "env"))
    assert default_data_root(tmp_path / "cli") == tmp_path / "cli"
    assert default_data_root() == tmp_path / "env"
    monkeypatch.delenv("NMTK_DATA")
    assert default_data_root() == Path.home() / ".cache" / "nmtk"
