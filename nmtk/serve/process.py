"""A search in a process of its own: the torch engine's decoding threads, each backed by one.

Two searches on two threads of one Python process take turns at its interpreter lock: between its
tensor kernels, beam search runs Python (the step's bookkeeping, torch's argument parsing), and on a
small model that is a large part of each step. Measured on 2 cores (test_2016_flickr in batches of 32,
beam 4, 1 core per search): two threads translated 66-77 sentences/s, two processes 78-92. So on a
CPU the torch server's decoding threads only gather and hand out batches; each hands its batch to a
child process that loaded the same model and searches it there. CTranslate2 releases the lock for a
whole batch and keeps its threads; one search on a GPU stays in the server's process.

The child is started by ``spawn`` (a fork of a process with OpenMP threads is unsafe), loads the
translator (``load``: a picklable function, the server's is `load_translator` with its options), and
answers ``(search, lines, ids)`` with hypotheses or the exception its search raised. It ignores
SIGINT, SIGTERM and SIGHUP: those are the server's to handle
(Ctrl-C and systemd signal the whole process group), and the child ends when its pipe closes.
"""

from __future__ import annotations

import multiprocessing
import pickle
import signal
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

from nmtk.decode.base import TranslatorBase
from nmtk.decode.search.config import Hypothesis, LineControls, SearchConfig
from nmtk.errors import NmtkError

Loader = Callable[[], TranslatorBase]


def searched(translator: TranslatorBase, search: SearchConfig, lines: list[str], ids: list[list[int] | None],
             controls: list[LineControls | None] | None) -> list[list[Hypothesis]]:
    """One batch's hypotheses, its lines already encoded (``ids``) and their controls checked."""
    if controls is None:
        return translator.hypotheses(lines, search, ids=ids)
    return translator.reading.marked(lines, translator.hypotheses_of_ids(ids, search, controls=controls))


class SearchProcess:
    """One child process holding a translator, and the pipe to it. Not thread-safe: one decoding
    thread owns it."""

    def __init__(self, load: Loader) -> None:
        context = multiprocessing.get_context("spawn")
        self.load = load
        self._pipe, child = context.Pipe()
        self.process = context.Process(target=_child, args=(child, load), name="nmtk-search", daemon=True)
        self.process.start()
        child.close()

    def ready(self) -> SearchProcess:
        """Wait until the child has loaded its model; its loading error is raised here."""
        self._answer()
        return self

    def hypotheses(self, search: SearchConfig, lines: list[str], ids: list[list[int] | None],
                   controls: list[LineControls | None] | None = None) -> list[list[Hypothesis]]:
        """`TranslatorBase.hypotheses_of_ids`, computed in the child (``lines`` for its messages)."""
        try:
            self._pipe.send((search, lines, ids, controls))
        except OSError:
            self._answer()  # the child is gone: say how
        return self._answer()

    def close(self, timeout: float = 10.0) -> None:
        """Let the child finish and end; it is killed when it does not within ``timeout`` seconds."""
        try:
            self._pipe.send(None)
        except OSError:
            pass
        self.process.join(timeout)
        if self.process.is_alive():
            self.process.kill()
            self.process.join()
        self._pipe.close()

    def alive(self) -> bool:
        return self.process.is_alive()

    def _answer(self) -> Any:
        try:
            failed, value = self._pipe.recv()
        except (EOFError, OSError):
            self.process.join(5)
            raise NmtkError(f"the decoding process ended (exit code {self.process.exitcode})") from None
        if failed:
            raise value
        return value


def _child(pipe: Connection, load: Loader) -> None:
    from nmtk.console import console

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    console.quiet = True  # the server has reported what it loaded; a search's warnings are shown
    try:
        translator = load()
    except Exception as exc:  # noqa: BLE001 - reported to the server, which refuses to start
        _send(pipe, True, exc)
        return
    finally:
        console.quiet = False
    _send(pipe, False, None)
    while True:
        try:
            message = pipe.recv()
        except (EOFError, OSError):
            return
        if message is None:
            return
        search, lines, ids, controls = message
        try:
            result = searched(translator, search, lines, ids, controls)
        except Exception as exc:  # noqa: BLE001 - fails this batch only; the worker retries its jobs alone
            sent = _send(pipe, True, exc)
        else:
            sent = _send(pipe, False, result)
        if not sent:
            return


def _send(pipe: Connection, failed: bool, value: Any) -> bool:
    """Send an answer; an exception that does not pickle goes as a RuntimeError with its text. False
    when the server is gone (killed while this child searched): the child then ends quietly."""
    if failed:
        try:
            pickle.dumps(value)
        except Exception:  # noqa: BLE001
            value = RuntimeError(f"{type(value).__name__}: {value}")
    try:
        pipe.send((failed, value))
    except OSError:
        return False
    return True
