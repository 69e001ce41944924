"""`nmtk serve`: load a translator, start the decoding worker, run the app under uvicorn.

Lifecycle: SIGTERM or Ctrl-C stops accepting connections, lets the requests in flight finish (the
worker drains its queue), then exits 0. SIGHUP, or ``POST /reload``, loads the run's default
checkpoint (`nmtk.model_source.default_checkpoint`: the recipe's average, else best, else last) on a thread of
its own and swaps it in between two batches: no request fails or waits for the load.
"""

from __future__ import annotations

import os
import signal
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any

from nmtk.console import console
from nmtk.decode.base import TranslatorBase
from nmtk.decode.guide import GuideOptions, TermsMode, inline_terms, read_guides
from nmtk.decode.load import LoadOptions, load_translator, with_glossary
from nmtk.decode.search.config import SearchConfig
from nmtk.errors import NmtkError
from nmtk.model_source import ModelSource, resolve_model
from nmtk.pair import Pair
from nmtk.serve.app import Limits, ModelInfo, ServerGuides, create_app
from nmtk.serve.worker import Worker, background

API_KEY_ENV = "NMTK_API_KEY"


@dataclass(frozen=True)
class ServeOptions:
    load: LoadOptions
    search: dict[str, Any] = field(default_factory=dict)  # the default search's `SearchConfig` choices
    host: str = "127.0.0.1"
    port: int = 5000
    gather_tokens: int | None = None  # a batch's source tokens × beam; None: the translator's decoding budget
    max_wait_ms: float = 5.0
    max_queue: int = 1000
    workers: int | None = None  # searches side by side; None: 2 on a CPU with 2 threads or more, else 1
    limits: Limits = Limits()
    api_key: str | None = None
    glossary: Path | None = None  # every request's glossary (None: the recipe's decode.glossary, if any)
    glossary_ignore_case: bool | None = None
    bans: Path | None = None  # phrases no request's translation may contain
    terms: TermsMode = "auto"  # glossaries as hints in the source (inline) or in the search (constrained)


def _on_gpu(device: str | None, export: bool) -> bool:
    """Whether the model will run on CUDA, by the rule its engine's loader applies (`ct2_device`,
    `pick_device`): the decoding threads are chosen before the model loads."""
    if export:
        import ctranslate2

        from nmtk.decode.ct2 import ct2_device

        return ct2_device(device or "auto", ctranslate2.get_cuda_device_count())[0] == "cuda"
    from nmtk.device import pick_device

    return pick_device(device).type == "cuda"


def build(options: ServeOptions):  # noqa: ANN201 - the FastAPI app and its worker (fastapi imported lazily)
    """The worker (started) and the app, as `serve` runs them; tests drive them in-process too.

    The model is resolved once (`resolve_model`): the server, its decoding processes and ``/models``
    name one checkpoint even when training writes a newer default while they load."""
    source = resolve_model(options.load.model, options.load.checkpoint)
    glossary, bans = read_guides(GuideOptions(glossary=options.glossary, ignore_case=options.glossary_ignore_case,
                                              bans=options.bans), source.recipe, requests=True)
    hints = inline_terms(options.terms, source.manifest, str(source.path))
    on_gpu = _on_gpu(options.load.device, source.is_export)
    threads = options.load.threads or len(os.sched_getaffinity(0))
    workers = options.workers or (1 if on_gpu or threads < 2 else 2)
    load = with_glossary(replace(options.load, threads=max(1, threads // workers), searches=workers, any_pair=True),
                         glossary, hints)
    translator = load_translator(source, load)
    default = SearchConfig.from_recipe(source.recipe.decode, **options.search)
    if hints and glossary is not None:
        translator.check_hints(glossary)
    translator.check_guides(None if hints else glossary, bans, False, default)  # never a 422 for the server's own
    if glossary is not None:
        glossary.index(translator.src_pipe.moses.tokenize)
    budget = options.gather_tokens or default.budget("cuda" if on_gpu else "cpu")
    child_loader = None if source.is_export or on_gpu or workers == 1 else _child_loader(source, load)
    worker = Worker(translator, gather_tokens=budget, max_wait_ms=options.max_wait_ms, max_queue=options.max_queue,
                    workers=workers, child_loader=child_loader)
    data = source.recipe.data
    pairs = list(translator.pairs) or [Pair(data.source_lang or "", data.target_lang or "")]
    info = ModelInfo(source="+".join(dict.fromkeys(p.source for p in pairs)),
                     target="+".join(dict.fromkeys(p.target for p in pairs)),
                     recipe=source.recipe.name, checkpoint=source.checkpoint_name, engine=translator.engine,
                     precision=translator.arithmetic, beam=default.beam, pairs=pairs)
    reload = None if source.is_export else (lambda: _reload(worker, info, source, load))
    api_key = options.api_key or os.environ.get(API_KEY_ENV) or None
    app = create_app(worker, info, default, options.limits, api_key=api_key, reload=reload,
                     guides=ServerGuides(glossary, bans, hints))
    worker.start()
    return app, worker, reload


def _child_loader(source: ModelSource, load: LoadOptions) -> partial[TranslatorBase]:
    """How a decoding process loads its translator: one search, on its share of the threads."""
    return partial(load_translator, source, replace(load, searches=1))


def _reload(worker: Worker, info: ModelInfo, source: ModelSource, load: LoadOptions) -> None:
    """Load the run's default checkpoint now (`ModelSource.again`: its average, best or newest; a
    ``--checkpoint`` given at start is not kept) on a thread of its own, and swap it in."""
    def swap() -> str | None:
        fresh = source.again()
        if worker.reload(load_translator(fresh, load), _child_loader(fresh, load)):  # with processes: once loaded
            return fresh.checkpoint_name
        return None  # the server stopped while it loaded

    def loaded(checkpoint: str | None) -> None:
        if checkpoint is None:
            console.print("reload dropped: the server stopped while it loaded")
            return
        info.checkpoint = checkpoint
        console.print(f"reloaded: {info.checkpoint}")

    def failed(exc: BaseException) -> None:
        console.print(f"[red]reload failed, serving the previous model:[/red] {exc}")

    background(swap, loaded, failed)


def _check_port(host: str, port: int) -> None:
    """One line before the model loads, instead of uvicorn's log after it."""
    import socket

    try:
        with socket.create_server((host, port)):
            pass
    except OSError as exc:
        raise NmtkError(f"{host}:{port}: cannot listen ({exc.strerror or exc})") from None


def serve(options: ServeOptions) -> None:
    """Run the server until SIGTERM or Ctrl-C; requests in flight are finished first."""
    import uvicorn

    if options.host not in ("127.0.0.1", "localhost", "::1") and not (options.api_key or os.environ.get(API_KEY_ENV)):
        console.print(f"[yellow]warning:[/yellow] listening on {options.host} without --api-key: anyone who can reach "
                      "this port can use the model")
    _check_port(options.host, options.port)
    app, worker, reload = build(options)
    if reload is not None:
        signal.signal(signal.SIGHUP, lambda *_: reload())
    # uvicorn shuts down gracefully on SIGTERM, then raises the signal again under the handler it found:
    # a handler of ours turns that into a normal exit (0) once the requests in flight are answered.
    signal.signal(signal.SIGTERM, lambda *_: None)
    config = uvicorn.Config(app, host=options.host, port=options.port, log_level="warning",
                            timeout_graceful_shutdown=60)
    server = uvicorn.Server(config)
    console.print(f"serving {app.description} on http://{options.host}:{options.port} (page: /, API: /docs)")
    try:
        server.run()
    finally:
        app.state.accepting = False
        worker.stop(timeout=120)
    s = worker.stats
    console.print(f"stopped: {s.requests} requests, {s.lines} lines in {s.batches} batches, {s.failed} failed")
