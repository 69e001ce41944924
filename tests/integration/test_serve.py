"""`nmtk serve` as a client sees it: a real server process on loopback, real HTTP, real signals."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import ModuleType

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

from conftest import ROOT, run_nmtk  # noqa: E402

pytestmark = pytest.mark.slow


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """``nmtk serve`` in a subprocess, and a small JSON client for it."""

    def __init__(self, model: Path, *args: str, env: dict[str, str] | None = None) -> None:
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen([sys.executable, "-m", "nmtk", "serve", "-m", str(model), "--port",
                                      str(self.port), "--threads", "2", *args], cwd=ROOT,
                                     env={**os.environ, **(env or {})}, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"server exited: {self.proc.stderr.read()}")
            try:
                self.get("/health")
                return
            except OSError:
                time.sleep(0.2)
        raise AssertionError("server did not start")

    def request(self, method: str, path: str, body: object = None, raw: bytes | None = None,
                headers: dict[str, str] | None = None) -> tuple[int, object]:
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        req = urllib.request.Request(self.url + path, data=data, method=method,
                                     headers={"Content-Type": "application/json", **(headers or {})})
        try:
            with urllib.request.urlopen(req, timeout=120) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read())

    def get(self, path: str) -> object:
        return self.request("GET", path)[1]

    def post(self, path: str, body: object) -> tuple[int, object]:
        return self.request("POST", path, body)

    def stop(self) -> tuple[int, str]:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            _, err = self.proc.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            _, err = self.proc.communicate()
        return self.proc.returncode, err


@pytest.fixture(scope="module")
def served(copy_run):
    tmp, _, _ = copy_run
    server = Server(tmp / "run")
    yield server, tmp
    server.stop()


def _test_lines(tmp: Path, n: int = 40) -> list[str]:
    return (tmp / "data" / "test.raw.en").read_text().splitlines()[:n]


def test_outputs_equal_translate_and_concurrent_requests_are_batched(served) -> None:
    server, tmp = served
    lines = [line.upper() if i % 8 == 3 else line for i, line in enumerate(_test_lines(tmp, 32))]  # some shouted
    before = server.get("/health")["batches"]
    with ThreadPoolExecutor(32) as pool:
        answers = list(pool.map(lambda line: server.post("/translate", {"q": line, "source": "en", "target": "de"}),
                                lines))
    assert all(status == 200 for status, _ in answers), answers
    batches = server.get("/health")["batches"] - before
    assert batches < 32, f"{batches} batches for 32 concurrent requests: requests were not batched together"
    offline = run_nmtk("translate", "-m", str(tmp / "run"), stdin="\n".join(lines) + "\n")
    assert offline.returncode == 0, offline.stderr
    assert [body["translatedText"] for _, body in answers] == offline.stdout.splitlines()


def test_text_with_characters_the_vocabulary_lacks_is_served_as_translate_writes_it(served) -> None:
    """A list mixing lines with an emoji and without: each answer is `nmtk translate`'s line (the emoji
    carried through beside its word: nmtk.decode.unknown); asked for alternatives (LibreTranslate's page
    asks for 3), the same translation, and alternatives only where they keep the emoji too."""
    server, tmp = served
    lines = [line.replace(" ", " 🐶 ", 1) if k % 2 else line for k, line in enumerate(_test_lines(tmp, 6))]
    lines.append(lines[0].replace(" ", " www.the.example/dog?a=1 ", 1))  # a link: carried whole
    status, body = server.post("/translate", {"q": lines, "source": "en", "target": "de"})
    offline = run_nmtk("translate", "-m", str(tmp / "run"), stdin="\n".join(lines) + "\n")
    assert status == 200 and offline.returncode == 0, (body, offline.stderr)
    assert body["translatedText"] == offline.stdout.splitlines()
    assert sum("🐶" in text for text in body["translatedText"]) == 3
    assert "www.the.example/dog?a=1" in body["translatedText"][-1]
    status, body = server.post("/translate", {"q": lines[1], "source": "en", "target": "de", "alternatives": 3})
    assert status == 200 and body["translatedText"] == offline.stdout.splitlines()[1], body
    assert all("🐶" in text and text != body["translatedText"] for text in body["alternatives"])


def test_both_request_formats_and_options(served) -> None:
    server, tmp = served
    line = _test_lines(tmp, 1)[0]
    status, body = server.post("/translate", {"q": [line, ""], "alternatives": 2, "scores": True,
                                              "alignment": True, "n_best": 3})
    assert status == 200
    assert body["translatedText"][1] == "" and len(body["alternatives"][0]) == 2 and len(body["n_best"][0]) == 3
    assert isinstance(body["scores"][0], float)
    aligned = run_nmtk("translate", "-m", str(tmp / "run"), "--print-alignment", stdin=line + "\n")
    assert body["alignment"][0] == aligned.stdout.rstrip("\n").split("\t")[1]
    status, body = server.post("/translator/translate", [{"id": 7, "src": line}])
    assert status == 200 and set(body[0][0]) == {"src", "tgt", "n_best", "pred_score", "align"}
    assert body[0][0]["src"] == line and body[0][0]["tgt"]
    status, body = server.post("/translator/translate", [{"id": 7, "src": line, "beam": 8}])
    assert status == 422 and "beam: unknown field" in body["error"]  # as LibreTranslate's shape (issue 62)
    models = server.get("/models")
    assert models[0]["source"] == "en" and models[0]["engine"] == "torch"


def test_line_breaks_come_back_where_they_end_a_paragraph_or_a_list_item(served) -> None:
    """A text's paragraphs and list items are translated as lines and its breaks written back between
    their translations (LibreTranslate's answer); a break inside a sentence is a space, as it was; asked
    for alternatives, the same (and none: the model's alternatives are of the text as one line)."""
    server, tmp = served
    one, two, three = _test_lines(tmp, 3)
    status, body = server.post("/translate", {"q": [one, two, three], "source": "en", "target": "de"})
    assert status == 200, body
    first, second, whole = body["translatedText"]
    middle = three.index(" ", len(three) // 2)
    texts = [f"{one}\n\n  {two}", f"- {one}\r\n- {two}", f"{three[:middle]}\n{three[middle + 1:]}", f"\n{one}\n"]
    status, body = server.post("/translate", {"q": texts, "source": "en", "target": "de"})
    assert status == 200, body
    assert body["translatedText"] == [f"{first}\n\n  {second}", f"- {first}\r\n- {second}", whole, first]
    status, body = server.post("/translate", {"q": texts[:2], "source": "en", "target": "de", "alternatives": 1})
    assert status == 200 and body["translatedText"] == [f"{first}\n\n  {second}", f"- {first}\r\n- {second}"], body
    assert body["alternatives"] == [[], []]


@pytest.mark.parametrize(("raw", "status"), [
    (b'{"q": ', 400),                                     # invalid JSON
    (b'{"q": 5}', 422),                                   # wrong type
    (b'{"q": "caf\xe9"}', 400),                           # not UTF-8
    (b'{"q": "x", "source": "fr", "target": "de"}', 400),  # unknown language pair
    (b'{"q": ""}', 400),                                  # empty q
    (b'{"q": ["   "]}', 400),                             # only blank lines
    (json.dumps({"q": "word " * 5000}).encode(), 413),    # over --max-chars
    (json.dumps({"q": ["a."] * 300}).encode(), 413),      # over --max-lines
    (b'{"q": "x", "n_best": 5, "beam": 2}', 422),         # n_best above beam
    (b'[{"src": 5}]', 422),                               # OpenNMT shape, wrong type (sent to /translate: a list)
    (b'{"q": "<p>A <b>dog.</p>", "format": "html"}', 400),   # malformed html: one error, nothing translated
    (b'{"q": "x", "formatt": "text"}', 422),              # an unknown field
])
def test_bad_input_gets_a_json_error_and_the_server_keeps_serving(served, raw, status) -> None:
    server, tmp = served
    got, body = server.request("POST", "/translate", raw=raw)
    assert got == status and isinstance(body, dict) and body["error"], body
    ok, answer = server.post("/translate", {"q": _test_lines(tmp, 1)[0]})
    assert ok == 200 and answer["translatedText"]


@pytest.mark.parametrize(("body", "error"), [
    ({"q": 123}, "q: expected a string or a list of strings"),
    ({"q": ["a", 5]}, "q: expected a string or a list of strings"),
    ({"q": "x", "prefix": 5}, "prefix: expected a string or a list of strings"),
    ({"q": "x", "alternatives": 100}, "beam 101, n_best 101: this server takes a beam of at most 16 and at most 16 "
                                      "hypotheses a line (n_best, or alternatives 15 and the translation)"),
])
def test_a_wrong_type_is_named_once(served, body: dict, error: str) -> None:
    """A field of a string or a list of strings says so, not each member of the union (``q.str: Input
    should be a valid string``); a request over the server's limits names them ("beam/n_best above 16/16")."""
    server, _ = served
    got, answer = server.post("/translate", body)
    assert got in (413, 422) and answer["error"] == error, answer


@pytest.mark.parametrize(("path", "raw", "error"), [
    ("/translate", b'{"q": ["a dog", "a \\ud800 dog"]}', "q[1]: not Unicode text at character 3"),
    ("/translate", b'{"q": "a dog", "glossary": {"dog": "\\udc00"}}', "glossary.dog: not Unicode text at character 1"),
    ("/translator/translate", b'[{"src": "a \\udfff"}]', "[0].src: not Unicode text at character 3"),
    ("/detect", b'{"q": "\\ud800"}', "q: not Unicode text at character 1"),
    ("/translate", b"q=a%20dog%FF", "q: not Unicode text at character 6"),  # a form's bytes that are not UTF-8
])
def test_strings_that_are_not_unicode_text_are_named(served, path: str, raw: bytes, error: str) -> None:
    """JSON can escape a lone surrogate and a form can percent-escape bytes that are not UTF-8: no text
    pipeline encodes them (they were a 500 from deep inside the search); one 400 names the field. An
    escaped emoji (a surrogate pair) is text."""
    server, _ = served
    form = {"Content-Type": "application/x-www-form-urlencoded"} if raw.startswith(b"q=") else None
    got, answer = server.request("POST", path, raw=raw, headers=form)
    assert got == 400 and answer["error"].startswith(error), answer
    got, answer = server.request("POST", "/translate", raw=b'{"q": "a \\ud83d\\ude00 dog"}')
    assert got == 200 and "\U0001f600" in answer["translatedText"], answer


def test_a_browsers_form_data_is_read_as_libretranslate_reads_it(served) -> None:
    """A browser's ``FormData`` posts multipart/form-data (LibreTranslate reads its fields as a form's);
    it was "invalid JSON body". Fields given twice are a list; bytes that are not UTF-8 are a 400 saying so."""
    server, tmp = served
    lines = _test_lines(tmp, 2)

    def multipart(*fields: tuple[str, str | bytes]) -> dict[str, object]:
        parts = [b'--xyz\r\nContent-Disposition: form-data; name="%s"\r\n\r\n%s\r\n'
                 % (name.encode(), value if isinstance(value, bytes) else value.encode()) for name, value in fields]
        kind = {"Content-Type": "multipart/form-data; boundary=xyz"}
        return {"raw": b"".join(parts) + b"--xyz--\r\n", "headers": kind}

    got, answer = server.request("POST", "/translate", **multipart(("q", lines[0]), ("q", lines[1]), ("source", "en"),
                                                                   ("target", "de"), ("api_key", "")))
    expected = server.post("/translate", {"q": lines, "source": "en", "target": "de"})[1]
    assert got == 200 and answer == expected, answer
    got, answer = server.request("POST", "/translate", **multipart(("q", b"a dog\xff")))
    assert got == 400 and "not UTF-8" in answer["error"], answer


def test_controls_in_both_request_shapes_equal_translate_and_are_batched(served) -> None:
    """prefix, constraints, glossary, ban and no_repeat_ngram_size per request: what `nmtk translate`
    gives with the same controls; requests of different controls share batches."""
    server, tmp = served
    lines = _test_lines(tmp, 32)
    words = [line.split() for line in lines]
    requests = []
    for i, w in enumerate(words):
        kind = i % 4
        if kind == 0:
            requests.append({"q": lines[i], "prefix": " ".join(w[:2])})
        elif kind == 1:
            requests.append({"q": lines[i], "constraints": ["dog"]})
        elif kind == 2:
            # a list of pairs, or an object of them (a JSON glossary's usual form)
            requests.append({"q": lines[i], "glossary": [[w[0], "bike"]] if i % 8 == 2 else {w[0]: "bike"}})
        else:
            requests.append({"q": lines[i], "ban": [w[-1]]})
    before = server.get("/health")["batches"]
    with ThreadPoolExecutor(32) as pool:
        answers = list(pool.map(lambda body: server.post("/translate", body), requests))
    assert all(status == 200 for status, _ in answers), answers
    assert server.get("/health")["batches"] - before < 32
    texts = [body["translatedText"] for _, body in answers]
    for i, (w, text) in enumerate(zip(words, texts, strict=True)):
        out = text.split()
        assert [out[:2] == w[:2], "dog" in out, "bike" in out, w[-1] not in out][i % 4], (i, w, text)
    shouted = server.post("/translate", {"q": lines[1].upper(), "constraints": ["dog"]})  # capitals: folded, recased
    cons = run_nmtk("translate", "-m", str(tmp / "run"), "--constraints", "unordered",
                    stdin="".join(f"{lines[i]}\tdog\n" for i in range(1, 32, 4)) + f"{lines[1].upper()}\tdog\n")
    assert cons.returncode == 0, cons.stderr
    assert cons.stdout.splitlines() == [*texts[1::4], shouted[1]["translatedText"]]
    assert shouted[1]["translatedText"] == shouted[1]["translatedText"].upper()
    status, body = server.post("/translator/translate", [{"id": 1, "src": lines[0], "prefix": " ".join(words[0][:2]),
                                                          "no_repeat_ngram_size": 2}])
    assert status == 200 and body[0][0]["tgt"].split()[:2] == words[0][:2]
    # each OpenNMT-py segment's glossary and bans are its own (they were merged across the request)
    status, body = server.post("/translator/translate", [{"src": lines[2], "glossary": [[words[2][0], "bike"]]},
                                                         {"src": lines[2]}, {"src": lines[2], "ban": ["bike"],
                                                                             "glossary": [[words[2][0], "dog"]]}])
    plain = server.post("/translate", {"q": lines[2]})[1]["translatedText"]
    outs = [b[0]["tgt"].split() for b in body]
    assert status == 200 and "bike" in outs[0] and " ".join(outs[1]) == plain and "dog" in outs[2], body
    assert "dog" not in outs[0] + outs[1] and "bike" not in outs[2], body
    status, body = server.post("/translator/translate", [{"src": lines[2]}, {"src": lines[2], "glossary": [["a", ""]]}])
    assert status == 422 and body["error"].startswith("segment 1: glossary[0]"), body
    for bad in ({"q": lines[0], "constraints": [" "]}, {"q": lines[0], "glossary": [["dog", ""]]},
                {"q": [lines[0], lines[1]], "prefix": ["a", "b", "c"]}, {"q": lines[0], "no_repeat_ngram_size": -1}):
        status, body = server.post("/translate", bad)
        assert status == 422 and body["error"], (bad, body)


def test_libretranslates_own_client_is_served(served) -> None:
    """libretranslatepy 2.1.4 (form-encoded bodies, GET /languages, POST /detect): translate equals
    `nmtk translate`; languages lists the pair; detect names the language among the server's; codes in
    any case; 404s answer in the one error shape."""
    from libretranslatepy import LibreTranslateAPI

    server, tmp = served
    client = LibreTranslateAPI(server.url)
    lines = _test_lines(tmp, 3)
    offline = run_nmtk("translate", "-m", str(tmp / "run"), stdin="\n".join(lines) + "\n").stdout.splitlines()
    assert [client.translate(line, "en", "de") for line in lines] == offline
    assert client.translate(lines[0], "EN", "De") == offline[0]
    assert client.translate(lines[0], "auto", "de") == offline[0]
    assert client.languages() == [{"code": "en", "name": "English", "targets": ["de"]},
                                  {"code": "de", "name": "German", "targets": []}]
    assert client.detect("Zwei Hunde spielen im Schnee.")[0]["language"] == "de"
    assert client.detect("Two dogs are playing in the snow.")[0]["language"] == "en"
    status, body = server.request("GET", "/nope")
    assert status == 404 and set(body) == {"error"}
    status, body = server.request("GET", "/translate")
    assert status == 405 and set(body) == {"error"}


def test_api_key_and_full_queue(copy_run) -> None:
    """--max-wait-ms 0: the worker decodes the first request at once, so the others fill the one-place
    queue (a longer wait would let the worker take them all while gathering, and nothing would be full)."""
    tmp, _, _ = copy_run
    server = Server(tmp / "run", "--max-queue", "1", "--max-wait-ms", "0", env={"NMTK_API_KEY": "s3cret"})
    try:
        assert server.post("/translate", {"q": "a b c"})[0] == 401
        assert server.post("/translate", {"q": "a b c", "api_key": "wrong"})[0] == 401
        assert server.post("/translate", {"q": "a b c", "api_key": "s3cret"})[0] == 200  # LibreTranslate's way
        from libretranslatepy import LibreTranslateAPI

        assert LibreTranslateAPI(server.url, api_key="s3cret").translate("a b c", "en", "de")  # form-encoded
        auth = {"Authorization": "Bearer s3cret"}
        lines = _test_lines(tmp, 20)
        with ThreadPoolExecutor(20) as pool:
            statuses = list(pool.map(lambda q: server.request("POST", "/translate", {"q": q}, headers=auth)[0], lines))
        assert 200 in statuses and 503 in statuses and set(statuses) <= {200, 503}
        assert server.get("/health")["status"] == "ok"
    finally:
        server.stop()


def test_sigterm_finishes_the_requests_in_flight(copy_run) -> None:
    tmp, _, _ = copy_run
    server = Server(tmp / "run", "--max-wait-ms", "300")
    lines = _test_lines(tmp, 40)
    with ThreadPoolExecutor(8) as pool:
        futures = [pool.submit(server.post, "/translate", {"q": lines[i : i + 5]}) for i in range(0, 40, 5)]
        deadline = time.monotonic() + 60  # a hang, not a speed
        while server.get("/health")["requests"] < 8:  # all 8 in, whatever the host's speed: none may
            assert time.monotonic() < deadline  # be lost, gathered, searching or answered
        code, err = server.stop()
        answers = [f.result() for f in futures]
    assert code == 0, err
    assert all(status == 200 and len(body["translatedText"]) == 5 for status, body in answers), answers
    assert "stopped:" in err


def test_sighup_reloads_without_failing_a_request(copy_run) -> None:
    """Started on an older checkpoint, a reload serves the run's default one, and /models names it."""
    from nmtk.model_source import default_checkpoint
    from nmtk.rundir import RunDir

    tmp, _, _ = copy_run
    default = default_checkpoint(RunDir(tmp / "run"))[0]
    older = min((tmp / "run").glob("checkpoint_[0-9]*.pt"))
    assert older != default
    server = Server(tmp / "run", "--checkpoint", str(older))
    lines = _test_lines(tmp, 40)
    try:
        with ThreadPoolExecutor(4) as pool:
            futures = [pool.submit(server.post, "/translate", {"q": line}) for line in lines]
            time.sleep(0.2)
            server.proc.send_signal(signal.SIGHUP)
            answers = [f.result() for f in futures]
        assert all(status == 200 for status, _ in answers)
        deadline = time.monotonic() + 60
        while server.get("/health")["reloads"] < 1 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert server.get("/health")["reloads"] == 1
        assert server.post("/translate", {"q": lines[0]})[0] == 200
        assert server.get("/models")[0]["checkpoint"] == str(default)
    finally:
        assert server.stop()[0] == 0


def test_the_default_checkpoint_is_chosen_once(copy_run, monkeypatch, capsys) -> None:
    """Training may write a new default checkpoint while the server starts: the model served is the
    file chosen first, /models names it, and the start-up line still says why it was chosen."""
    import asyncio

    from nmtk import checkpoint as checkpoint_module
    from nmtk import model_source
    from nmtk.decode.load import LoadOptions
    from nmtk.model_source import default_checkpoint
    from nmtk.rundir import RunDir
    from nmtk.serve.server import ServeOptions, build

    tmp, _, _ = copy_run
    run = tmp / "run"
    default, why = default_checkpoint(RunDir(run))
    older = min(run.glob("checkpoint_[0-9]*.pt"))
    assert older != default
    answers = iter([(older, "best validation BLEU")])  # the first answer; every later one: the new default
    monkeypatch.setattr(model_source, "default_checkpoint", lambda run, recipe=None: next(answers, (default, why)))
    loaded: list[Path] = []
    real = checkpoint_module.load_model
    monkeypatch.setattr(checkpoint_module, "load_model",
                        lambda path, *a, **k: loaded.append(path) or real(path, *a, **k))
    app, worker, _ = build(ServeOptions(load=LoadOptions(model=run), workers=1))
    try:
        models = next(r for r in app.routes if getattr(r, "path", "") == "/models").endpoint
        assert loaded == [older]
        assert asyncio.run(models())[0]["checkpoint"] == str(older)
        assert f"checkpoint: {older} (best validation BLEU)" in capsys.readouterr().err.replace("\n", "")
    finally:
        worker.stop(timeout=30)


def test_a_text_only_translator_encodes_and_detokenizes_but_cannot_search(copy_run) -> None:
    """What the server keeps while its decoding processes search: the text pipelines, no weights."""
    from nmtk.decode.load import LoadOptions, load_translator
    from nmtk.decode.search.config import SearchConfig
    from nmtk.errors import NmtkError
    from nmtk.model_source import resolve_model

    tmp, _, _ = copy_run
    translator = load_translator(resolve_model(tmp / "run"), LoadOptions())
    lines, search = _test_lines(tmp, 3), SearchConfig()
    ids, hyps = translator.encode(lines), translator.hypotheses(lines, search)
    texts = [translator.detokenize(h[0]) for h in hyps]
    translator.keep_text_only()
    assert all(p.is_meta for p in [*translator.model.parameters(), *translator.model.buffers()])
    assert translator.encode(lines) == ids
    assert [translator.detokenize(h[0]) for h in hyps] == texts and all(texts)
    with pytest.raises(NmtkError, match="weights were freed"):
        translator.hypotheses(lines, search)


def test_an_export_is_served_by_ctranslate2(exported, copy_run) -> None:
    tmp, _, env = copy_run
    server = Server(exported)
    try:
        lines = _test_lines(tmp, 10)
        status, body = server.post("/translate", {"q": lines})
        assert status == 200
        offline = run_nmtk("translate", "-m", str(exported), stdin="\n".join(lines) + "\n", env=env)
        assert body["translatedText"] == offline.stdout.splitlines()
        assert server.get("/models")[0]["engine"] == "ctranslate2"
        status, body = server.post("/translate", {"q": lines[0], "alignment": True})  # CTranslate2's attention
        aligned = run_nmtk("translate", "-m", str(exported), "--print-alignment", stdin=lines[0] + "\n", env=env)
        assert status == 200 and body["alignment"] == aligned.stdout.rstrip("\n").split("\t")[1], body
        status, body = server.post("/translate", {"q": lines[0], "constraints": ["dog"]})
        assert status == 422 and "nmtk's own engine" in body["error"], body
        words = lines[0].split()
        status, body = server.post("/translate", {"q": lines[0], "prefix": " ".join(words[:2]), "ban": [words[-1]],
                                                  "no_repeat_ngram_size": 2})
        assert status == 200 and body["translatedText"].split()[:2] == words[:2], body
        assert words[-1] in words[:2] or words[-1] not in body["translatedText"].split()
    finally:
        server.stop()


def _chromium() -> str | None:
    return next((p for p in (shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome")) if p), None)


def test_the_page_translates_in_a_real_browser(served, tmp_path) -> None:
    """Headless Chromium (the Debian package; `make test` installs it when missing) loads the page, types a
    sentence and reads the translation and the alignment grid from it."""
    playwright = pytest.importorskip("playwright.sync_api")
    browser_path = _chromium()
    if browser_path is None:
        pytest.skip("no Chromium on this machine (make test installs the Debian package)")
    server, tmp = served
    line = _test_lines(tmp, 1)[0]
    expected = server.post("/translate", {"q": line})[1]["translatedText"]
    with playwright.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=browser_path, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 900, "height": 700})
        page.goto(server.url + "/")
        page.fill("#input", line)
        page.click("#go")
        page.wait_for_function("document.getElementById('output').textContent.length > 1 && "
                               "document.getElementById('output').textContent !== '…'")
        assert page.text_content("#output") == expected
        assert page.locator("table.heat td").count() > 0
        first = line.split()[0]
        wanted = server.post("/translate", {"q": line, "glossary": [[first, "bike"]]})[1]["translatedText"]
        page.click("#controls summary")
        page.fill("#glossary", f"{first} = bike")
        page.click("#go")
        page.wait_for_function(f"document.getElementById('output').textContent === {json.dumps(wanted)}")
        assert "bike" in page.text_content("#output")
        shot = Path(os.environ.get("NMTK_SCREENSHOT", tmp_path / "page.png"))
        page.screenshot(path=str(shot), full_page=True)
        browser.close()
    assert shot.stat().st_size > 1000


def _benchmark() -> ModuleType:
    """benchmarks/serve.py, imported as a module."""
    pytest.importorskip("httptools")
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import serve as bench
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    return bench


def test_the_benchmarks_clients_send_every_line_once(served) -> None:
    """benchmarks/serve.py's clients, one line or several per request, send each line once and read
    every answer: its sentences/s count what the server translated."""
    bench = _benchmark()
    server, tmp = served
    lines = _test_lines(tmp, 7)
    before = server.get("/health")
    for per_request, requests in ((1, 7), (3, 3)):
        latencies, errors, seconds = bench._send(server.port, lines, clients=2, per_request=per_request)
        assert errors == [] and len(latencies) == requests and seconds > 0
    after = server.get("/health")
    assert (after["requests"] - before["requests"], after["lines"] - before["lines"]) == (7 + 3, 7 + 7)


def test_the_benchmarks_in_process_reference_decodes_as_translate(copy_run) -> None:
    """benchmarks/serve.py measures the server against decoding the same lines in-process, in the
    server's random batches on its 2 threads: that reference must translate what `nmtk translate` does."""
    bench = _benchmark()
    tmp, _, _ = copy_run
    import torch

    lines = _test_lines(tmp, 12)
    threads = torch.get_num_threads()
    try:
        rate, translations = bench.in_process(tmp / "run", lines, batch=4)
    finally:
        torch.set_num_threads(threads)  # it decodes on threads of one core each, as the server does
    offline = run_nmtk("translate", "-m", str(tmp / "run"), stdin="\n".join(lines) + "\n")
    assert rate > 0
    assert translations == offline.stdout.splitlines()


def test_a_model_trained_with_hints_takes_glossaries_as_hints_in_serve_and_translate(tmp_path: Path) -> None:
    """`--terms auto` on a model whose vocabulary has the hint symbols: a request's glossary is written into
    its source as hints (the server's answer equals `translate --glossary`'s, which hints too), and
    `--terms constrained` still forces the term."""
    from cli_runner import run_nmtk
    from helpers import synthetic_pairs, toy_recipe, write_corpus

    root = tmp_path / "root"
    for name, seed in (("train", 0), ("valid", 1), ("test", 2)):
        write_corpus(root, name, synthetic_pairs(300 if name == "train" else 20, seed))
    recipe = toy_recipe(tmp_path, extra='[[train.modifiers]]\nname = "terms"\np = 0.5\n', vocab_size=90)
    run = tmp_path / "run"
    trained = run_nmtk("train", str(recipe), "--data-root", str(root), "--data", str(tmp_path / "data"),
                       "--run-dir", str(run), "--set", "train.max_updates=3", "--set", "train.validate_at_end=false")
    assert trained.returncode == 0, trained.stderr[-2000:]
    line, glossary = "the dog runs in the park .", tmp_path / "terms.tsv"
    glossary.write_text("dog\tKatze\n", encoding="utf-8")
    translated = {mode: run_nmtk("translate", "-m", str(run), "--glossary", str(glossary), "--terms", mode,
                                 "--precision", "fp32", stdin=line + "\n") for mode in ("auto", "constrained")}
    assert all(r.returncode == 0 for r in translated.values()), [r.stderr for r in translated.values()]
    assert "Katze" in translated["constrained"].stdout.split()
    named = tmp_path / "names.tsv"  # a term that translates to itself: carried where the hints lose it
    named.write_text("dog\tKatze\npark\tpark\n", encoding="utf-8")
    carried = run_nmtk("translate", "-m", str(run), "--glossary", str(named), "--precision", "fp32", stdin=line + "\n")
    assert carried.returncode == 0 and carried.stdout.split().count("park") == 1, carried.stdout
    aligned = run_nmtk("translate", "-m", str(run), "--glossary", str(glossary), "--print-alignment", "--beam", "2",
                       "--precision", "fp32", stdin=line + "\n")  # the line's own 7 words, not the hinted 11
    pairs = [tuple(map(int, p.split("-"))) for p in aligned.stdout.rstrip("\n").split("\t")[1].split()]
    assert aligned.returncode == 0 and pairs and max(i for i, _ in pairs) < 7, aligned.stdout
    document = "<p>the <b>dog</b> runs in the park .</p>"  # markup takes the glossary as hints too
    marked = run_nmtk("translate", "-m", str(run), "--glossary", str(glossary), "--format", "html",
                      "--precision", "fp32", stdin=document + "\n")
    assert marked.returncode == 0 and marked.stdout.startswith("<p>") and marked.stdout.count("<b>") == 1, marked
    server = Server(run, "--precision", "fp32", "--workers", "1")
    try:
        status, answer = server.post("/translate", {"q": line, "source": "en", "target": "de",
                                                    "glossary": [["dog", "Katze"]]})
        html_status, html = server.post("/translate", {"q": document, "source": "en", "target": "de", "format": "html",
                                                       "glossary": [["dog", "Katze"]]})
    finally:
        server.stop()
    assert status == 200 and answer["translatedText"] == translated["auto"].stdout.strip(), answer
    assert html_status == 200 and html["translatedText"] == marked.stdout.strip(), (html, marked.stdout)
