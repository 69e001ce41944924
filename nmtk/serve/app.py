"""`nmtk serve`'s HTTP API (FastAPI): the request formats clients already speak, over one `Worker`.

- ``POST /translate``: LibreTranslate's shape (``{"q", "source", "target", "alternatives"}`` →
  ``{"translatedText"}``), which LibreTranslate clients and CAT-tool plug-ins send, plus nmtk's
  ``beam``, ``n_best``, ``scores`` and ``alignment`` (``i-j`` word pairs, as ``translate --print-alignment``);
- ``POST /translator/translate``: OpenNMT-py's REST server shape (``[{"id", "src"}]`` →
  ``[[{"src", "tgt", "n_best", "pred_score", "align"}]]``);
- ``GET /health``, ``GET /models``, ``POST /reload``, ``GET /`` (a page to try it), ``/docs`` (OpenAPI).

LibreTranslate's clients are served as LibreTranslate serves them: form-encoded bodies as well as
JSON, the API key as ``api_key`` in the body as well as ``Authorization: Bearer``, language codes in
any case, ``GET /languages``, ``POST /detect`` (among the model's source languages: `nmtk.text.langid`),
``source: "auto"`` (a multilingual model: each text goes to the pair of its detected language; a text
surely in the target language already comes back as it is), and
``format: "html"`` (inline tags kept around the words they covered: `nmtk.decode.markup`).

Errors are JSON ``{"error": ...}``, all of them: 400 (invalid JSON or UTF-8, unknown language pair, empty
input, malformed html, html on an export), 401 (API key), 404/405 (no such path or method), 413 (over a
limit), 422 (wrong type, unknown field), 503 (queue full, or stopping), 500 (the decoder failed on this
request; the server goes on).
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from importlib import resources
from typing import Annotated, Any, Literal
from urllib.parse import parse_qs

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field
from starlette.exceptions import HTTPException

from nmtk.decode.base import TranslatorBase, refuse_tags
from nmtk.decode.guide import Glossary, Guidance, guided
from nmtk.decode.markup import (
    MarkedUp,
    check_engine,
    markup_search,
    own_marks,
    renumbered_documents,
    take_renumbered,
)
from nmtk.decode.search.config import Hypothesis, SearchConfig
from nmtk.decode.unknown import (
    can_carry,
    carried_lines,
    keeper,
    left_out,
    lost_numbers,
    rebracketed_better,
    rebracketed_lines,
    renumbered_lines,
    renumbered_taken,
    restored,
    sentences_apart,
)
from nmtk.errors import NmtkError, validator_words
from nmtk.model_source import NOT_ALIGNED
from nmtk.pair import Pair, PairError, choose_pair, pairs_text, sources_of
from nmtk.serve.worker import QueueFull, Worker
from nmtk.text import langid
from nmtk.text.brackets import rebracketed, tidied, to_rebracket
from nmtk.text.line_breaks import cut_at_breaks, join_at_breaks
from nmtk.text.markup import MarkupError, text_of


@dataclass(frozen=True)
class Limits:
    max_chars: int = 20_000  # characters per request, all lines together
    max_lines: int = 200  # lines per request
    max_beam: int = 16
    max_nbest: int = 16


@dataclass
class ModelInfo:
    """What ``/models`` reports: languages, recipe, checkpoint, engine, precision."""

    source: str
    target: str
    recipe: str
    checkpoint: str
    engine: str
    precision: str
    beam: int
    pairs: list[Pair] = field(default_factory=list)  # every pair the model translates (one for a one-pair model)

    @property
    def multilingual(self) -> bool:
        return len(self.pairs) > 1

    def pairs_text(self) -> str:
        return pairs_text(self.pairs)


class ApiError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status, self.message = status, message


#: A request's glossary: ``[[source term, target term], ...]``, or ``{"source term": "target term"}``.
GlossaryPairs = Annotated[list[tuple[str, str]],
                          BeforeValidator(lambda value: list(value.items()) if isinstance(value, dict) else value)]


def _text_or_texts(value: object) -> object:
    """``q`` (and ``prefix``) as pydantic takes them; anything else is one error saying what is taken
    (a union's own errors name its members: ``q.str: Input should be a valid string``)."""
    if isinstance(value, str) or (isinstance(value, list) and all(isinstance(v, str) for v in value)):
        return value
    raise ValueError("expected a string or a list of strings")


TextOrTexts = Annotated[str | list[str], BeforeValidator(_text_or_texts)]
MaybeTexts = Annotated[str | list[str] | None, BeforeValidator(lambda v: v if v is None else _text_or_texts(v))]


class LibreRequest(BaseModel):
    """LibreTranslate's request, and nmtk's options; any other field is an error naming it."""

    model_config = ConfigDict(extra="forbid")
    q: TextOrTexts
    source: str = "auto"
    target: str | None = None
    format: Literal["text", "html"] = "text"
    api_key: str | None = None  # LibreTranslate's place for the key (checked by the guard)
    alternatives: int = Field(0, ge=0)
    beam: int | None = Field(None, ge=1)
    n_best: int = Field(1, ge=1)
    scores: bool = False
    alignment: bool = False
    prefix: MaybeTexts = None  # the start of the translation (per line when q is a list)
    constraints: list[str] | list[list[str]] | None = None  # terms it must contain (per line when q is a list)
    glossary: GlossaryPairs | None = None  # [[source term, target term], ...] or {term: term}: added to the server's
    glossary_ignore_case: bool = False
    ban: list[str] | None = None  # phrases never to produce
    no_repeat_ngram_size: int | None = Field(None, ge=0)
    repetition_penalty: float | None = Field(None, gt=0.0)
    translate_attributes: list[str] = []  # format html: attributes whose values are translated (alt, title)

    @property
    def texts(self) -> list[str]:
        return _texts(self.q)


class DetectRequest(BaseModel):
    """LibreTranslate's ``/detect`` request."""

    model_config = ConfigDict(extra="forbid")
    q: TextOrTexts
    api_key: str | None = None

    @property
    def texts(self) -> list[str]:
        return _texts(self.q)


def _texts(q: str | list[str]) -> list[str]:
    """A request's ``q`` as a list: one string, or each of a list's; an empty one (nothing but
    whitespace) is a 400, at ``/translate`` and ``/detect`` alike."""
    items = [q] if isinstance(q, str) else q
    if not items or not any(item.strip() for item in items):
        raise ApiError(400, "q is empty")
    return items


class OnmtSegment(BaseModel):
    """OpenNMT-py's segment, and nmtk's controls (as `LibreRequest`'s, for this one segment); any other
    field is an error naming it, as in `LibreRequest` (OpenNMT-py's beam and n-best are its server's
    settings, not a request's: nmtk's are ``serve --beam``)."""

    model_config = ConfigDict(extra="forbid")
    src: str
    id: int | str | None = None
    prefix: str | None = None
    constraints: list[str] | None = None
    glossary: GlossaryPairs | None = None
    ban: list[str] | None = None
    no_repeat_ngram_size: int | None = Field(None, ge=0)
    repetition_penalty: float | None = Field(None, gt=0.0)


@dataclass(frozen=True)
class ServerGuides:
    """What the server asks of every translation (``serve --glossary``, ``--ban``); requests add theirs."""

    glossary: Glossary | None = None
    bans: tuple[str, ...] = ()
    hints: bool = False  # glossaries go into the sources as hints (serve --terms inline), not into the search


def _json_error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)


FORM = b"application/x-www-form-urlencoded"
MULTIPART = b"multipart/form-data"


def _as_json(body: bytes, content_type: bytes) -> bytes:
    """A form's body (LibreTranslate's clients send ``q=...&source=en``, or a browser's ``FormData`` as
    multipart, which LibreTranslate reads alike) as the JSON object it means; anything else as it is. A
    form's content type with a JSON body (``curl -d '{...}'``) stays JSON. A field given twice (``q``)
    becomes a list."""
    kind = content_type.split(b";")[0].strip().lower()
    if kind not in (FORM, MULTIPART) or body.lstrip()[:1] in (b"{", b"["):
        return body
    if kind == MULTIPART:
        fields = _multipart_fields(body, content_type)
    else:
        fields = parse_qs(body.decode("utf-8"), keep_blank_values=True, errors="surrogateescape")  # see `_not_text`
    return json.dumps({k: v[0] if len(v) == 1 else v for k, v in fields.items()}).encode()


def _multipart_fields(body: bytes, content_type: bytes) -> dict[str, list[str]]:
    """A multipart/form-data body's fields by name, read by the standard library's MIME parser; a body
    it cannot read has none (the request then misses ``q``: one error saying so)."""
    from email.parser import BytesParser
    from email.policy import HTTP

    message = BytesParser(policy=HTTP).parsebytes(b"Content-Type: " + content_type + b"\r\n\r\n" + body)
    fields: dict[str, list[str]] = {}
    for part in message.iter_parts() if message.is_multipart() else ():
        name = part.get_param("name", header="content-disposition")
        if isinstance(name, str):
            value = part.get_payload(decode=True) or b""
            fields.setdefault(name, []).append(value.decode("utf-8", errors="surrogateescape"))
    return fields


#: A JSON string escape of a UTF-16 surrogate (``\ud800``): half of an escaped emoji, or a lone one.
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")
_SURROGATE = re.compile("[\ud800-\udfff]")


def _not_text(body: bytes) -> str | None:
    """What a JSON body holds that is not Unicode text, named by its field, else None. JSON may escape a
    lone surrogate (``"\\ud800"``; a pair is an emoji), and a form's percent-escaped bytes that are not
    UTF-8 are read as such (``surrogateescape``): no text pipeline can encode them (sentencepiece and
    CTranslate2 failed deep inside a search: a 500). Parsed only where the body holds such an escape."""
    if not _SURROGATE_ESCAPE.search(body):
        return None
    try:
        parsed = json.loads(body)
    except ValueError:
        return None  # not JSON: FastAPI's own error says so
    return _first_surrogate(parsed, "")


def _first_surrogate(value: object, where: str) -> str | None:
    """The first string inside ``value`` (a parsed JSON body) holding a lone surrogate, as an error."""
    if isinstance(value, str):
        found = _SURROGATE.search(value)
        return (f"{where or 'body'}: not Unicode text at character {found.start() + 1} (a lone surrogate, "
                f"{ascii(found.group())[1:-1]}, or escaped bytes that are not UTF-8)") if found else None
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        if isinstance(key, str) and _SURROGATE.search(key):
            return f"{where or 'body'}: a field name that is not Unicode text"
        inner = f"{where}[{key}]" if isinstance(key, int) else f"{where}.{key}" if where else key
        if found := _first_surrogate(item, inner):
            return found
    return None


def _body_key(body: bytes) -> str | None:
    try:
        parsed = json.loads(body)
    except ValueError:
        return None
    return parsed.get("api_key") if isinstance(parsed, dict) else None


class _Guard:
    """What every POST passes first: the server still accepting (503), the API key (401), a UTF-8
    body (400); the body is then read as JSON whatever the client labelled it (curl -d sends a form's
    content type). A plain ASGI middleware: Starlette's ``@app.middleware("http")`` wraps every
    request in a second task and stream, measured at a third of the server's CPU per request."""

    def __init__(self, app: Any, state: Any, api_key: str | None) -> None:
        self.app, self.state, self.api_key = app, state, api_key

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            return await self.app(scope, receive, send)
        headers = scope["headers"]
        if not self.state.accepting:
            return await _json_error(503, "the server is stopping")(scope, receive, send)
        chunks, more = [], True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return None
            chunks.append(message.get("body", b""))
            more = message.get("more_body", False)
        body = b"".join(chunks)
        try:
            body.decode("utf-8")
        except UnicodeDecodeError as exc:
            return await _json_error(400, f"the body is not UTF-8 (byte {exc.start})")(scope, receive, send)
        header = dict(headers)
        body = _as_json(body, header.get(b"content-type", b""))
        if problem := _not_text(body):
            return await _json_error(400, problem)(scope, receive, send)
        if self.api_key and header.get(b"authorization") != f"Bearer {self.api_key}".encode() \
                and _body_key(body) != self.api_key:
            message = "missing or wrong API key (Authorization: Bearer KEY, or api_key in the body)"
            return await _json_error(401, message)(scope, receive, send)
        replayed = False

        async def replay() -> dict[str, Any]:
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        scope = {**scope, "headers": [*(h for h in headers if h[0] != b"content-type"),
                                      (b"content-type", b"application/json")]}
        return await self.app(scope, replay, send)


def create_app(worker: Worker, info: ModelInfo, default: SearchConfig, limits: Limits, api_key: str | None = None,
               reload: Any = None, guides: ServerGuides = ServerGuides()) -> FastAPI:
    """The app over ``worker``, searching as ``default`` unless a request chooses otherwise;
    ``reload()`` (optional) starts loading a new checkpoint in the background."""
    app = FastAPI(title="nmtk serve", description=f"{info.source} → {info.target} ({info.recipe})")
    app.state.accepting = True
    _install_errors(app)
    app.add_middleware(_Guard, state=app.state, api_key=api_key)
    service = _Service(worker, info, default, limits, guides)
    _translation_routes(app, service)
    _information_routes(app, service, reload)
    return app


def _install_errors(app: FastAPI) -> None:
    """Every error in one JSON shape, ``{"error": ...}``: validation, 404/405, and nmtk's own."""

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0] if exc.errors() else {"type": "", "msg": "invalid request", "loc": ()}
        if first.get("type") in ("json_invalid", "json_type", "value_error.jsondecode") or "JSON" in first["msg"]:
            return _json_error(400, f"invalid JSON body: {first['msg']}")
        where = ".".join(str(p) for p in first.get("loc", ()) if p != "body") or "body"
        if first.get("type") == "extra_forbidden":
            return _json_error(422, f"{where}: unknown field (see /docs for the fields this API takes)")
        return _json_error(422, f"{where}: {validator_words(first['msg'])}")

    @app.exception_handler(HTTPException)
    async def _http_error(request: Request, exc: HTTPException) -> JSONResponse:  # 404, 405: the one shape too
        return _json_error(exc.status_code, f"{request.method} {request.url.path}: {exc.detail}")

    @app.exception_handler(ApiError)
    async def _api_error(_: Request, exc: ApiError) -> JSONResponse:
        return _json_error(exc.status, exc.message)


class _Service:
    """What every route does the same way: build a request's search, check its size, queue it."""

    def __init__(self, worker: Worker, info: ModelInfo, default: SearchConfig, limits: Limits,
                 guides: ServerGuides = ServerGuides()) -> None:
        self.worker, self.info, self.default, self.limits, self.server_guides = worker, info, default, limits, guides
        self._joined: dict[tuple[object, bool], Glossary | None] = {}  # `every_glossary`'s latest, by request glossary

    def guides(self, lines: list[str], prefix: list[str | None], constraints: list[list[str]],
               glossary: list[tuple[str, str]] | None, ignore_case: bool, ban: list[str] | None,
               pair: Pair | None = None) -> list[Guidance | None] | None:
        """Each line's `Guidance`: its prefix and constraints, the terms of the server's and the
        request's glossaries its source holds (found by ``pair``'s Moses: a multilingual model's other
        sources are not its first's), and the banned phrases (None: nothing asked). With the server's
        ``--terms inline`` the glossaries are hints (`hinted`), their terms preferred among the finished
        hypotheses (`preferring`), not constraints."""
        server = self.server_guides
        every = self.every_glossary(glossary, ignore_case)
        bans = tuple(server.bans) + tuple(b.strip() for b in ban or () if b.strip())
        if every is None and not bans and not any(prefix) and not any(constraints):
            return None
        view = self.worker.translator.for_pair(pair)
        out: list[Guidance | None] = []
        for line, start, terms in zip(lines, prefix, constraints, strict=True):
            if any(not t.strip() for t in terms):
                raise ApiError(422, "constraints: an empty term")
            guide = Guidance(prefix=(start or "").strip(), constraints=tuple(t.strip() for t in terms))
            out.append(guided(view.reading.read(line), guide, every, bans, view.src_pipe.moses.tokenize, server.hints))
        return out

    @staticmethod
    def request_glossary(glossary: list[tuple[str, str]] | None, ignore_case: bool) -> Glossary | None:
        """A request's glossary (None: none); a bad pair is a 422 naming it."""
        try:
            return Glossary.of(glossary, ignore_case, "glossary") if glossary else None
        except NmtkError as exc:
            raise ApiError(422, str(exc)) from None

    def segment_guides(self, lines: list[str], segments: list[OnmtSegment]
                       ) -> tuple[list[Guidance | None] | None, list[list[int] | None] | None]:
        """OpenNMT-py segments' `guides` and `hinted` ids, each segment's glossary and bans its own (one
        segment's glossary asked nothing of the others'); an error names its segment."""
        guides, hints = [], []
        for k, (line, seg) in enumerate(zip(lines, segments, strict=True)):
            try:
                guide = self.guides([line], [seg.prefix], [seg.constraints or []], seg.glossary, False, seg.ban)
                hint = self.hinted([line], seg.glossary, False, None)
            except ApiError as exc:
                raise ApiError(exc.status, f"segment {k}: {exc.message}") from None
            guides.append(guide[0] if guide else None)
            hints.append(hint[0] if hint else None)
        if all(h is None for h in hints):
            return (guides if any(guides) else None), None
        plain = self.worker.translator.for_pair(None)
        ids = [h if h is not None else plain.encode([line])[0] for line, h in zip(lines, hints, strict=True)]
        return (guides if any(guides) else None), ids

    def every_glossary(self, glossary: list[tuple[str, str]] | None, ignore_case: bool) -> Glossary | None:
        """The server's glossary and a request's (`request_glossary`) as one (None: neither): joined once
        for the few latest request glossaries, which a request asks for up to four times (its guides,
        the lines to carry, markup, alternatives: 2.5 ms each with a server glossary of 5,000 terms)."""
        key = (tuple(tuple(pair) for pair in glossary) if glossary else None, ignore_case)
        if key not in self._joined:
            if len(self._joined) >= 16:
                self._joined.pop(next(iter(self._joined)))
            self._joined[key] = self.with_server(self.request_glossary(glossary, ignore_case))
        return self._joined[key]

    def with_server(self, extra: Glossary | None) -> Glossary | None:
        """The server's glossary with a request's added (None: neither)."""
        server = self.server_guides.glossary
        return server + extra if server and extra else (extra or server)

    def hinted(self, lines: list[str], glossary: list[tuple[str, str]] | None, ignore_case: bool,
               pair: Pair | None) -> list[list[int] | None] | None:
        """With ``--terms inline``: the lines' ids with the glossaries' hints (None: no glossary, or not inline)."""
        every = self.hint_glossary(glossary, ignore_case, pair)
        if every is None:
            return None
        try:
            return self.worker.translator.for_pair(pair).encode(lines, 1, every)
        except NmtkError as exc:
            raise ApiError(422, str(exc)) from None

    def hint_glossary(self, glossary: list[tuple[str, str]] | None, ignore_case: bool, pair: Pair | None
                      ) -> Glossary | None:
        """With ``--terms inline``: the server's and the request's glossaries, to be written into the
        sources as hints (None: no glossary, or not inline); a request's term the model's source
        vocabulary cannot spell is a 422."""
        if not self.server_guides.hints:
            return None
        extra = self.request_glossary(glossary, ignore_case)
        if extra is not None:  # the server's own were checked at its start
            try:
                self.worker.translator.for_pair(pair).check_hints(extra)
            except NmtkError as exc:
                raise ApiError(422, str(exc)) from None
        return self.with_server(extra)

    def search_for(self, **choices: Any) -> SearchConfig:
        """A request's search: ``default`` with its choices, by `SearchConfig`'s rules (one place)."""
        try:
            search = self.default.choose(**choices)
        except NmtkError as exc:
            raise ApiError(422, str(exc)) from None
        limits = self.limits
        if search.beam > limits.max_beam or search.nbest > limits.max_nbest:
            raise ApiError(413, f"beam {search.beam}, n_best {search.nbest}: this server takes a beam of at most "
                                f"{limits.max_beam} and at most {limits.max_nbest} hypotheses a line (n_best, or "
                                f"alternatives {limits.max_nbest - 1} and the translation)")
        if search.align and not self.worker.translator.can_align:
            raise ApiError(400, f"alignment: {NOT_ALIGNED}")
        return search

    async def run(self, lines: list[str], search: SearchConfig, guides: list[Guidance | None] | None = None,
                  pair: tuple[str, str] | None = None, ids: list[list[int] | None] | None = None
                  ) -> tuple[list[list[Hypothesis]], TranslatorBase]:
        chars, limits = sum(map(len, lines)), self.limits
        if len(lines) > limits.max_lines:
            raise ApiError(413, f"{len(lines)} lines in one request; the limit is {limits.max_lines} (--max-lines)")
        if chars > limits.max_chars:
            raise ApiError(413, f"{chars} characters in one request; the limit is {limits.max_chars} (--max-chars)")
        try:
            future = self.worker.submit(lines, search, guides, pair, ids)
        except QueueFull:
            raise ApiError(503, "the queue is full; try again shortly (--max-queue)") from None
        except NmtkError as exc:  # a prefix, constraint or banned phrase the model cannot take
            raise ApiError(422, str(exc)) from None
        try:
            return await asyncio.wrap_future(future)
        except Exception as exc:  # noqa: BLE001 - the decoder failed on this request only
            raise ApiError(500, f"decoding failed: {type(exc).__name__}: {exc}") from None

    def check_pair(self, source: str, target: str | None) -> Pair | None:
        """The pair a request asks for (`choose_pair`, as the command line chooses, with LibreTranslate's
        ``auto`` for the source), its refusals worded for the API. Returns a multilingual model's pair,
        which the request is routed to (None: one pair); ``auto`` where several sources have the
        target: the first of them (`route` chooses per text)."""
        info = self.info
        try:
            chosen = choose_pair(info.pairs, target, source, auto_source=True)
        except PairError as exc:
            if exc.kind == "no-target":
                raise ApiError(400, f"target is missing: this server translates {info.pairs_text()}") from None
            if exc.kind == "several":
                raise ApiError(400, f"→ {target}: this server has it from {', '.join(exc.sources)}: say the "
                                    "source") from None
            raise ApiError(400, f"this server translates {info.pairs_text()}, not {source} → {target}") from None
        return chosen if info.multilingual else None

    def detect(self, text: str, among: list[str] | None = None) -> list[tuple[str, float]]:
        """``text``'s language among ``among`` (default: every language of the model, as ``/languages``
        lists them), likeliest first."""
        return langid.detect(text, among or list(dict.fromkeys(lang for p in self.info.pairs for lang in p)))

    def route(self, source: str, target: str | None, texts: list[str], html: bool = False
              ) -> tuple[list[Pair | None], list[tuple[str, float]] | None, set[int]]:
        """Per text, the pair it goes to, and (source ``auto``) its detected language with the
        identifier's probability: among the sources that have the target, when there are several; and
        the texts already in the target language (source ``auto``: `langid.already_in`), which are given
        back as they are.
        ``html``: the texts are documents, identified by their words (`text_of`), not their tags."""
        chosen = self.check_pair(source, target)
        if source.lower() != "auto":
            return [chosen] * len(texts), None, set()
        target = chosen.target if chosen else self.info.pairs[0].target
        sources = sources_of(self.info.pairs, target)
        read = [text_of(text) for text in texts] if html else texts
        every = [self.detect(text) for text in read]  # among all the model's languages, as /detect answers
        found = [languages[0] for languages in every]  # what is reported: what was detected
        as_is = {i for i, detected in enumerate(found) if langid.already_in(detected, target, sources)}
        if len(sources) == 1:
            return [chosen] * len(texts), found, as_is
        # each text to the likeliest of the sources that have the target (German sent to a de+fr -> en model)
        routed = [Pair(next(lang for lang, _ in languages if lang in sources), target) for languages in every]
        return routed, found, as_is


def _per_line(value: Any, lines: int, name: str, one: type) -> list[Any]:
    """A request's per-line field: one value (of type ``one``) for every line, else one per line."""
    if value is None:
        return [None] * lines
    if isinstance(value, one) and not (one is list and value and isinstance(value[0], list)):
        return [value] * lines
    if len(value) != lines:
        raise ApiError(422, f"{name}: {len(value)} entries for {lines} lines of q")
    return list(value)


def _groups(pairs: list[Pair | None], as_is: set[int]) -> dict[Pair | None, list[int]]:
    """The indices of a request's texts per pair they go to (those given back ``as_is`` go to none)."""
    groups: dict[Pair | None, list[int]] = {}
    for i, pair in enumerate(pairs):
        if i not in as_is:
            groups.setdefault(pair, []).append(i)
    return groups


def _as_it_is(req: LibreRequest, text: str) -> dict[str, Any]:
    """A text given back untranslated (already in the target language), with what else the request asks
    of a translation, as the translation of a text that is its own."""
    if req.format == "html":
        _refuse_per_line_asks(req)
        return _html_answer(req, text)
    answer: dict[str, Any] = {"translatedText": text}
    if req.alternatives:
        answer["alternatives"] = []
    if req.n_best > 1:
        answer["n_best"] = [{"text": text, "score": 0.0}]
    if req.scores:
        answer["scores"] = 0.0
    if req.alignment:
        answer["alignment"] = ""
    return answer


def _per_line_asks(req: LibreRequest) -> list[str]:
    """What a request asks of each line beyond its translation (its fields' names)."""
    return [name for name, value in (("prefix", req.prefix), ("constraints", req.constraints),
                                     ("alternatives", req.alternatives), ("n_best", req.n_best > 1),
                                     ("scores", req.scores), ("alignment", req.alignment)) if value]


async def _text_answers(service: _Service, req: LibreRequest, indices: list[int], pair: Pair | None
                        ) -> list[dict[str, Any]]:
    """The answers to the texts ``indices`` of ``req.q`` (one pair's), their line breaks written back
    where they end a sentence, a paragraph or a list item (`nmtk.text.line_breaks`: each piece between
    them translated as a line); where the request asks more of a text than its translation and its
    alternatives, the text is one line, its breaks spaces. A text with breaks has no alternatives (the
    beam's are of one piece)."""
    if not _as_translate(req):
        return await _line_answers(service, req, indices, pair)
    items = req.texts
    cut = [cut_at_breaks(items[i]) for i in indices]
    if all(around == [""] for _, around in cut):
        return await _line_answers(service, req, indices, pair)
    pieces = [piece for text, _ in cut for piece in text]
    answers = await _line_answers(service, req.model_copy(update={"q": pieces}), list(range(len(pieces))), pair)
    joined, start = [], 0
    for text, around in cut:
        done = answers[start : start + len(text)]
        joined.append({"translatedText": join_at_breaks([answer["translatedText"] for answer in done], around)})
        if req.alternatives:
            joined[-1]["alternatives"] = done[0]["alternatives"] if around == [""] else []
        start += len(text)
    return joined


def _as_translate(req: LibreRequest) -> bool:
    """Whether each text is answered as `nmtk translate` answers a line (breaks written back, glued
    sentences set apart, links, numbers and codes carried through): it asks for its translation and at
    most LibreTranslate's ``alternatives`` (its page asks for 3 with every text), not n-best lists,
    scores, alignments, prefixes or constraints."""
    return _per_line_asks(req) in ([], ["alternatives"])


async def _line_answers(service: _Service, req: LibreRequest, indices: list[int], pair: Pair | None
                        ) -> list[dict[str, Any]]:
    """The answers to the texts ``indices`` of ``req.q`` (one pair's), each read as one line: per text,
    ``translatedText`` and what else the request asked for."""
    items, alone = req.texts, _as_translate(req)
    lines = [" ".join(items[i].splitlines()) for i in indices]  # one segment per string
    reading = service.worker.translator.for_pair(pair).reading
    if alone and reading.carry and reading.split:  # "snow.A cat": two sentences, as `translate` reads them
        lines = [sentences_apart(line) for line in lines]
    search = service.search_for(beam=req.beam, nbest=max(req.n_best, req.alternatives + 1), align=req.alignment,
                                no_repeat_ngram_size=req.no_repeat_ngram_size,
                                repetition_penalty=req.repetition_penalty)
    if alone and req.alternatives:  # the beam's other finished translations: one search, its best as without
        search = replace(search, nbest=1, alternatives=True)  # them, so carried as translate carries a line
    prefix = _per_line(req.prefix, len(items), "prefix", str)
    terms = _per_line(req.constraints, len(items), "constraints", list) if req.constraints else [[] for _ in items]
    guides = service.guides(lines, [prefix[i] for i in indices], [terms[i] for i in indices], req.glossary,
                            req.glossary_ignore_case, req.ban, pair)
    sources = lines
    kept = await _carried(service, req, lines, search, pair)
    lines, guides = left_out(lines, guides, kept)
    hints = service.hinted(lines, req.glossary, req.glossary_ignore_case, pair)
    hyps, translator = await service.run(lines, search, guides, pair, hints)
    answers = []
    for k, h in enumerate(hyps):
        answer: dict[str, Any] = {"translatedText": kept[k] if k in kept else
                                  translator.detokenize(h[0]) if h else ""}
        if req.alternatives:
            answer["alternatives"] = [translator.detokenize(x) for x in h[1:]]
        if req.n_best > 1:
            answer["n_best"] = [{"text": translator.detokenize(x), "score": x.score} for x in h[: req.n_best]]
        if req.scores:
            answer["scores"] = h[0].score if h else None
        if req.alignment:
            answer["alignment"] = str(h[0].alignment or "") if h else ""
        answers.append(answer)
    texts = [answer["translatedText"] for answer in answers]
    for k, text in (await _renumbered(service, req, sources, texts, search, pair)).items():
        answers[k]["translatedText"] = text
    texts = [answer["translatedText"] for answer in answers]
    for k, text in (await _rebracketed(service, req, sources, texts, search, pair)).items():
        answers[k]["translatedText"] = text
    if alone:  # as `nmtk translate` ends a line: "A dog runs!" with its "!", not the model's "."; no stray brackets
        for source, answer in zip(sources, answers, strict=True):
            answer["translatedText"] = own_marks(source, tidied(source, answer["translatedText"]))
    if req.alternatives:
        _keep_alternatives(service, req, sources, answers, pair, alone)
    return answers


def _keep_alternatives(service: _Service, req: LibreRequest, sources: list[str], answers: list[dict[str, Any]],
                       pair: Pair | None, alone: bool) -> None:
    """Each answer's first ``req.alternatives`` alternatives; with ``alone`` (`_as_translate`), only those
    that keep what its translation carries (links, codes, emoji, numbers) and none twice or the same as
    it. Why: the beam searched the line as it is, and its others wrote "3555 1 1 1 19999999999999999"
    for "3.5 km at 12:30" where the translation carried them."""
    view = service.worker.translator.for_pair(pair)
    keep = keeper(view, glossary=service.every_glossary(req.glossary, req.glossary_ignore_case))
    for source, answer in zip(sources, answers, strict=True):
        others, text = answer["alternatives"], answer["translatedText"]
        if alone:
            spans = [source[a:b].strip("()[]{}<>\"'“”‘’«»") for a, b in keep(source)]
            others = [a for a in dict.fromkeys(others) if a != text and a.strip() and all(span in a for span in spans)
                      and not lost_numbers(source, a, view.tgt_pipe.moses.lang)]
        answer["alternatives"] = others[: req.alternatives]


def _carries(req: LibreRequest, view: TranslatorBase, search: SearchConfig) -> bool:
    """Whether a text request's lines are carried (`nmtk.decode.unknown`): each asks for its translation
    alone (no prefix, constraints or scores), from an engine that aligns (`can_carry`)."""
    return not (req.prefix or req.constraints or req.scores) and can_carry(view, search)


async def _carried(service: _Service, req: LibreRequest, lines: list[str], search: SearchConfig, pair: Pair | None
                   ) -> dict[int, str]:
    """The translations of the ``lines`` holding characters the source vocabulary cannot spell, by index,
    their spans carried through (`nmtk.decode.unknown`); none where the request asks more of a line
    than its translation, or the engine cannot align."""
    view = service.worker.translator.for_pair(pair)
    if not _carries(req, view, search):
        return {}
    try:
        refuse_tags(view, lines)  # as `encode` checks the lines it is given
    except NmtkError as exc:
        raise ApiError(422, str(exc)) from None
    found = carried_lines(view, lines, service.every_glossary(req.glossary, req.glossary_ignore_case))
    if not found:
        return {}
    return restored(found, await _marked_texts(service, req, list(found.values()), pair))


async def _renumbered(service: _Service, req: LibreRequest, lines: list[str], texts: list[str], search: SearchConfig,
                      pair: Pair | None) -> dict[int, str]:
    """The translations of the ``lines`` whose text (``texts``) lost a number of the line
    (`nmtk.decode.unknown.lost_numbers`), made again with their numbers carried through, by index; none
    where lines are not carried (`_carried`) or are read as typed, as `nmtk translate` does."""
    return await _made_again(service, req, lines, texts, search, pair, renumbered_lines, renumbered_taken)


async def _rebracketed(service: _Service, req: LibreRequest, lines: list[str], texts: list[str],
                       search: SearchConfig, pair: Pair | None) -> dict[int, str]:
    """The translations of the ``lines`` whose text (``texts``) dropped their brackets, made again with the
    bracketed parts placed by alignment, by index, as `nmtk translate` makes them (`Engine.rebracketed`)."""
    return await _made_again(service, req, lines, texts, search, pair, rebracketed_lines, rebracketed_better)


async def _made_again(service: _Service, req: LibreRequest, lines: list[str], texts: list[str], search: SearchConfig,
                      pair: Pair | None, found_in: Callable[[TranslatorBase, list[str], list[str]], dict[int, str]],
                      taken: Callable[[TranslatorBase, str, str, str], str | None]) -> dict[int, str]:
    """The lines ``found_in`` names made again through markup with their numbers carried, by index, where
    ``taken`` takes the new text (`Engine._made_again`'s rule); none where lines are not carried."""
    view = service.worker.translator.for_pair(pair)
    if not _carries(req, view, search):
        return {}
    found = found_in(view, lines, texts)
    if not found:
        return {}
    again = restored(found, await _marked_texts(service, req, list(found.values()), pair, numbers=True))
    return {k: text for k, made in again.items() if (text := taken(view, lines[k], texts[k], made)) is not None}


def _refuse_per_line_asks(req: LibreRequest) -> None:
    """An html request that asks what only lines of text have; but ``alternatives``, which LibreTranslate
    answers with none for html (its page asks for 3 with every text), as `_html_answer` does."""
    asked = [name for name in _per_line_asks(req) if name != "alternatives"]
    if asked:
        raise ApiError(400, f'format "html": {", ".join(asked)} cannot be asked with it (they are per line of '
                            "text, and an html document's sentences are the server's to cut)")


async def _html_answers(service: _Service, req: LibreRequest, indices: list[int], pair: Pair | None
                        ) -> list[dict[str, Any]]:
    """``format: "html"``: the documents ``indices`` of ``req.q`` (one pair's), their sentences in one
    job (batched with other requests' as text is), tags placed by the alignment (`nmtk.decode.markup`)."""
    _refuse_per_line_asks(req)
    try:
        check_engine(service.worker.translator, "html")
    except NmtkError as exc:
        raise ApiError(400, str(exc)) from None
    items = req.texts
    documents = [items[i] for i in indices]
    try:
        texts = await _marked_texts(service, req, documents, pair, own_stops=True)
    except MarkupError as exc:
        item = f"q[{indices[exc.document]}]: " if len(items) > 1 and exc.document is not None else ""
        raise ApiError(400, f"malformed html: {item}{exc}") from None
    if service.worker.translator.for_pair(pair).reading.carry:  # brackets given back, as `translate` does
        found = to_rebracket(documents, texts)
        again = await _marked_texts(service, req, list(found.values()), pair, own_stops=True) if found else []
        texts = rebracketed(documents, texts, found, again)
    return [_html_answer(req, text) for text in texts]


def _html_answer(req: LibreRequest, text: str) -> dict[str, Any]:
    """An html document's answer: its translation, and no alternatives where it asks for some."""
    return {"translatedText": text, "alternatives": []} if req.alternatives else {"translatedText": text}


async def _marked_texts(service: _Service, req: LibreRequest, documents: list[str], pair: Pair | None,
                        numbers: bool = False, own_stops: bool = False) -> list[str]:
    """``documents`` (html, one pair's) translated, tags placed by the alignment, with the request's
    glossary, bans and search settings: html requests' (``own_stops``: ending as their source does,
    `MarkedUp.render`) and text carrying unknown characters' (and, with ``numbers``, its numbers:
    `_renumbered`)."""
    view = service.worker.translator.for_pair(pair)
    marked = MarkedUp.of(documents, "html", view, tuple(req.translate_attributes), numbers,
                         service.every_glossary(req.glossary, req.glossary_ignore_case))
    lines = marked.lines
    if not lines:  # markup and no word: nothing to translate
        return list(documents)
    search = markup_search(service.search_for(beam=req.beam, no_repeat_ngram_size=req.no_repeat_ngram_size,
                                              repetition_penalty=req.repetition_penalty))
    guides = service.guides(lines, [None] * len(lines), [[] for _ in lines], req.glossary,
                            req.glossary_ignore_case, req.ban, pair)  # the glossaries are constraints, or hints:
    hints = service.hint_glossary(req.glossary, req.glossary_ignore_case, pair)
    hyps, translator = await service.run(lines, search, guides, pair, marked.ids(view, hints))
    out = marked.render(hyps, translator, own_stops)
    # a document whose translation lost a number: made again with its numbers carried, as `translate` does
    again = [] if numbers else renumbered_documents(view, documents, out, "html")
    if again:
        redone = await _marked_texts(service, req, [documents[k] for k in again], pair, numbers=True,
                                     own_stops=own_stops)
        take_renumbered(view, documents, out, again, redone, "html")
    return out


def _translation_routes(app: FastAPI, service: _Service) -> None:
    """``POST /translate`` (LibreTranslate's shape and nmtk's options) and ``/translator/translate``
    (OpenNMT-py's)."""

    @app.post("/translate")
    async def translate(req: LibreRequest) -> dict[str, Any]:
        """LibreTranslate's request; ``q`` a string or a list of strings (``format: "html"``: documents)."""
        items = req.texts
        pairs, detected, as_is = service.route(req.source, req.target, items, html=req.format == "html")
        answer = _html_answers if req.format == "html" else _text_answers
        groups = _groups(pairs, as_is)
        answers = [_as_it_is(req, items[i]) if i in as_is else {} for i in range(len(items))]
        found = await asyncio.gather(*(answer(service, req, indices, pair) for pair, indices in groups.items()))
        for indices, group in zip(groups.values(), found, strict=True):
            for i, one in zip(indices, group, strict=True):
                answers[i] = one
        out: dict[str, Any] = {}
        for key in answers[0]:
            out[key] = answers[0][key] if isinstance(req.q, str) else [a[key] for a in answers]
        if detected is not None:  # LibreTranslate's shape: confidence 0-100
            languages = [{"confidence": round(100 * p, 1), "language": lang} for lang, p in detected]
            out["detectedLanguage"] = languages[0] if isinstance(req.q, str) else languages
        return out

    @app.post("/translator/translate")
    async def onmt(segments: list[OnmtSegment]) -> list[list[dict[str, Any]]]:
        """OpenNMT-py's REST request: a list of ``{"id", "src"}``."""
        if not segments:
            raise ApiError(400, "empty request: send [{\"src\": \"...\", \"id\": 100}]")
        if service.info.multilingual:  # OpenNMT-py's request names no language
            raise ApiError(400, f"this server translates {service.info.pairs_text()}: OpenNMT-py's request cannot "
                                "say which; use POST /translate with source and target")
        settings = {(s.no_repeat_ngram_size, s.repetition_penalty) for s in segments}
        if len(settings) > 1:
            raise ApiError(422, "no_repeat_ngram_size, repetition_penalty: one request asks for one setting of each")
        no_repeat, penalty = settings.pop()
        search = service.search_for(no_repeat_ngram_size=no_repeat, repetition_penalty=penalty)
        lines = [" ".join(s.src.splitlines()) for s in segments]
        guides, ids = service.segment_guides(lines, segments)
        hyps, translator = await service.run(lines, search, guides, None, ids)
        return [[{"src": s.src, "tgt": translator.detokenize(h[0]) if h else "", "n_best": 1,
                  "pred_score": h[0].score if h else 0.0, "align": None}] for s, h in zip(segments, hyps, strict=True)]


def _information_routes(app: FastAPI, service: _Service, reload: Any) -> None:
    """``/languages``, ``/detect`` (LibreTranslate's), ``/health``, ``/models``, ``/reload``, the page."""
    info, worker = service.info, service.worker

    @app.get("/languages")
    async def languages() -> list[dict[str, Any]]:
        """LibreTranslate's list: each language, its English name and the targets it translates into."""
        from nmtk.text.langid import language_name

        targets: dict[str, list[str]] = {}
        for source, target in info.pairs:
            targets.setdefault(source, []).append(target)
        for _, target in info.pairs:
            targets.setdefault(target, [])
        return [{"code": code, "name": language_name(code), "targets": into} for code, into in targets.items()]

    @app.post("/detect")
    async def detect(req: DetectRequest) -> list[Any]:
        """LibreTranslate's: the languages ``q`` may be in, among the model's, likeliest first, confidence
        0-100 (a list of texts: one such list each)."""
        def languages(text: str) -> list[dict[str, Any]]:
            return [{"confidence": round(100 * p, 1), "language": lang} for lang, p in service.detect(text)]

        texts = req.texts
        return languages(texts[0]) if isinstance(req.q, str) else [languages(text) for text in texts]

    @app.get("/health")
    async def health() -> dict[str, Any]:
        s = worker.stats
        return {"status": "ok" if app.state.accepting else "stopping", "requests": s.requests, "lines": s.lines,
                "batches": s.batches, "failed": s.failed, "queued": worker.queue.qsize(), "reloads": s.reloads,
                "checkpoint": info.checkpoint}

    @app.get("/models")
    async def models() -> list[dict[str, Any]]:
        # ``pairs`` lists a multilingual model's pairs; a one-pair model's are its source and target
        return [{**info.__dict__, "pairs": info.pairs if info.multilingual else []}]

    @app.post("/reload")
    async def reload_model() -> JSONResponse:
        if reload is None:
            raise ApiError(400, "nothing to reload: an export holds one checkpoint")
        reload()
        return JSONResponse({"status": "reloading"}, status_code=202)

    @app.get("/", response_class=HTMLResponse)
    async def page() -> str:
        return resources.files("nmtk.serve").joinpath("page.html").read_text(encoding="utf-8")

