"""`nmtk serve`: load a translator, start the decoding worker, run the app under uvicorn.

Lifecycle: SIGTERM or Ctrl-C stops accepting connections, lets the requests in flight finish (the
worker drains its queue), then exits 0. SIGHUP, or ``POST /reload``, loads the run's default
checkpoint (`RunDir.default_checkpoint`: the recipe's average, else best, else last) on a thread of
its own and swaps it in between two batches: no request fails or waits for the load.
"""

from __future__ import annotations

import os
import signal
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path

from nmtk.console import console
from nmtk.decode.base import TranslatorBase
from nmtk.decode.load import LoadOptions, choose_run, load_translator, named_model
from nmtk.errors import NmtkError
from nmtk.rundir import ExportDir
from nmtk.serve.app import Limits, ModelInfo, create_app
from nmtk.serve.worker import Worker, background

API_KEY_ENV = "NMTK_API_KEY"


@dataclass(frozen=True)
class ServeOptions:
    load: LoadOptions
    host: str = "127.0.0.1"
    port: int = 5000
    max_tokens: int | None = None  # a batch's source tokens × beam; None: the translator's decoding budget
    max_wait_ms: float = 5.0
    max_queue: int = 1000
    workers: int | None = None  # searches side by side; None: 2 on a CPU with 2 threads or more, else 1
    limits: Limits = Limits()
    api_key: str | None = None


def _model_path(o: LoadOptions) -> Path:
    named = named_model(o)
    if named is not None and (ExportDir(named).is_export() or Path(named).is_file()):
        return Path(named)
    return choose_run(named).path


def _info(path: Path, translator: TranslatorBase, checkpoint: str) -> ModelInfo:
    export = ExportDir(path)
    if export.is_export():
        recipe, checkpoint = export.recipe(), export.meta().get("checkpoint", "?")
    else:
        from nmtk.rundir import RunDir

        recipe = RunDir(path if path.is_dir() else path.parent).recipe()
    return ModelInfo(source=recipe.data.source_lang, target=recipe.data.target_lang, recipe=recipe.name,
                     checkpoint=str(checkpoint), engine=translator.engine, precision=str(translator.precision.value),
                     beam=translator.search.beam)


def _on_gpu(device: str | None, export: bool) -> bool:
    """Whether the model will run on CUDA, by the rule its engine's loader applies (`ct2_device`,
    `pick_device`): the decoding threads are chosen before the model loads."""
    if export:
        import ctranslate2

        from nmtk.decode.ct2 import ct2_device

        return ct2_device(device or "auto", ctranslate2.get_cuda_device_count())[0] == "cuda"
    from nmtk.device import pick_device

    return pick_device(device).type == "cuda"


def _checkpoint_of(path: Path, o: LoadOptions) -> tuple[str, str]:
    """The checkpoint ``o`` serves and why ("" for an export, which holds its own)."""
    if o.checkpoint:
        return str(o.checkpoint), o.checkpoint_why
    if path.is_file():
        return str(path), "asked for"
    if ExportDir(path).is_export():
        return "", ""
    from nmtk.rundir import RunDir

    checkpoint, why = RunDir(path).default_checkpoint()
    return str(checkpoint), why


def build(o: ServeOptions):  # noqa: ANN201 - the FastAPI app and its worker (fastapi imported lazily)
    """The worker (started) and the app, as `serve` runs them; tests drive them in-process too."""
    path = _model_path(o.load)
    export = ExportDir(path).is_export()
    on_gpu = _on_gpu(o.load.device, export)
    threads = o.load.threads or len(os.sched_getaffinity(0))
    workers = o.workers or (1 if on_gpu or threads < 2 else 2)
    load = replace(o.load, model=path, align=not export, threads=max(1, threads // workers), searches=workers)
    load, checkpoint = _pinned(load)
    translator = load_translator(load)
    budget = o.max_tokens or translator.search.budget("cuda" if on_gpu else "cpu")
    processes = None if export or on_gpu or workers == 1 else _child_loader(load)
    worker = Worker(translator, max_tokens=budget, max_wait_ms=o.max_wait_ms, max_queue=o.max_queue,
                    workers=workers, processes=processes)
    info = _info(path, translator, checkpoint)
    reload = None if export else (lambda: _reload(worker, info, load))
    app = create_app(worker, info, o.limits, api_key=o.api_key or os.environ.get(API_KEY_ENV) or None, reload=reload)
    worker.start()
    return app, worker, reload


def _pinned(load: LoadOptions) -> tuple[LoadOptions, str]:
    """``load`` naming the checkpoint it serves, chosen now and once, and that checkpoint ("" for an
    export, which holds its own): the server's model, its decoding processes and /models then name one
    file even when training writes a newer default while they load. The loader still says why it was
    chosen. (-m RUN/checkpoint_N.pt: that file is the model already, and naming it again as
    --checkpoint is refused.)"""
    checkpoint, why = _checkpoint_of(Path(load.model), load)
    if not checkpoint or Path(load.model).is_file():
        return load, checkpoint
    return replace(load, checkpoint=Path(checkpoint), checkpoint_why=why), checkpoint


def _child_loader(load: LoadOptions) -> partial[TranslatorBase]:
    """How a decoding process loads its translator: one search, on its share of the threads."""
    return partial(load_translator, replace(load, searches=1))


def _load_default(load: LoadOptions) -> tuple[TranslatorBase, LoadOptions, str]:
    """What a reload serves: the run's default checkpoint (`RunDir.default_checkpoint`: its average,
    best or newest; a ``--checkpoint`` given at start is not kept), loaded, the options naming it, and
    its path. The path is chosen once and that file loaded, so that ``/models`` names what was loaded."""
    load, checkpoint = _pinned(replace(load, checkpoint=None))
    return load_translator(load), load, checkpoint


def _reload(worker: Worker, info: ModelInfo, load: LoadOptions) -> None:
    def swap() -> str:
        translator, pinned, checkpoint = _load_default(load)
        worker.reload(translator, _child_loader(pinned))  # with processes, once the new children are loaded
        return checkpoint

    def loaded(checkpoint: str) -> None:
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


def serve(o: ServeOptions) -> None:
    """Run the server until SIGTERM or Ctrl-C; requests in flight are finished first."""
    import uvicorn

    if o.host not in ("127.0.0.1", "localhost", "::1") and not (o.api_key or os.environ.get(API_KEY_ENV)):
        console.print(f"[yellow]warning:[/yellow] listening on {o.host} without --api-key: anyone who can reach "
                      "this port can use the model")
    _check_port(o.host, o.port)
    app, worker, reload = build(o)
    if reload is not None:
        signal.signal(signal.SIGHUP, lambda *_: reload())
    # uvicorn shuts down gracefully on SIGTERM, then raises the signal again under the handler it found:
    # a handler of ours turns that into a normal exit (0) once the requests in flight are answered.
    signal.signal(signal.SIGTERM, lambda *_: None)
    config = uvicorn.Config(app, host=o.host, port=o.port, log_level="warning", timeout_graceful_shutdown=60)
    server = uvicorn.Server(config)
    console.print(f"serving {app.description} on http://{o.host}:{o.port} (page: /, API: /docs)")
    try:
        server.run()
    finally:
        app.state.accepting = False
        worker.stop(timeout=120)
    s = worker.stats
    console.print(f"stopped: {s.requests} requests, {s.lines} lines in {s.batches} batches, {s.failed} failed")
