"""Worker processes that Ctrl-C and SIGTERM end at once, never deadlock, and leave no traceback.

Why not ``multiprocessing.Pool`` (issue 77): a signal sent to a terminal's process group reaches the
workers too. A worker killed while it holds the pool's shared queue lock leaves ``Pool.terminate``
waiting on that lock for ever (a `prepare` hung until killed), and one that dies on ``KeyboardInterrupt``
prints its own traceback. Here every worker has a pipe of its own and nothing else is shared: the
parent sends one piece of work at a time to each, reads the answers in order, waits for them in a way
a signal interrupts (`nmtk.interrupts.wait_readable`), and on leaving kills whatever still runs.
Workers ignore Ctrl-C (their parent decides) and die silently on SIGTERM.
"""

from __future__ import annotations

import multiprocessing
import os
import pickle
import signal
import subprocess
import sys
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from multiprocessing.connection import Connection
from typing import Any

from nmtk.errors import NmtkError
from nmtk.interrupts import deferred, quiet_worker, wait_readable

#: How long a worker that was told to stop gets before it is killed.
STOP_S = 1.0


def _serve(conn: Connection, setup: Callable[..., None] | None, setup_args: tuple) -> None:
    """A worker's loop: ``(function, args)`` in, ``("ok", result)`` or ``("error", exception)`` out, until
    the parent closes its end."""
    quiet_worker()
    if setup is not None:
        setup(*setup_args)
    while True:
        try:
            function, args = conn.recv()
        except (EOFError, OSError):
            return
        try:
            conn.send(_answer(function, *args))
        except (BrokenPipeError, OSError):
            return


def _answer(function: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[str, Any]:
    """A call's outcome as sent to the parent: ``("ok", result)`` or ``("error", exception)``."""
    try:
        return "ok", function(*args, **kwargs)
    except Exception as exc:  # the parent raises it: its message is the user's
        return "error", exc


def _result(answer: tuple[str, Any]) -> Any:
    """`_answer`'s outcome, in the parent: the result, or the call's exception raised here."""
    status, value = answer
    if status == "error":
        raise value
    return value


class Workers:
    """``size`` worker processes, each set up once with ``setup(*setup_args)`` (Moses objects, a cleaner),
    forked where the system can (they share the parent's objects without pickling them; the signal mask
    is inherited, so `deferred` covers their start). A context manager: leaving it ends them, whatever
    raised."""

    def __init__(self, size: int, setup: Callable[..., None] | None = None, setup_args: tuple = ()) -> None:
        methods = multiprocessing.get_all_start_methods()
        context = multiprocessing.get_context("fork" if "fork" in methods else "spawn")
        self.workers: list[tuple[Any, Connection]] = []
        try:
            for index in range(size):
                ours, theirs = context.Pipe()
                process = context.Process(target=_serve, args=(theirs, setup, setup_args),
                                          name=f"nmtk-worker-{index}", daemon=True)
                with deferred():  # the child holds Ctrl-C and SIGTERM until `quiet_worker`
                    process.start()
                theirs.close()
                self.workers.append((process, ours))
        except BaseException:
            self.close()
            raise

    def __enter__(self) -> Workers:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def imap(self, function: Callable[[Any], Any], items: Iterable[Any]) -> Iterator[Any]:
        """``function(item)`` for every item, in order, each worker holding one item at a time (so a
        send never waits on a worker that is itself waiting to send its answer)."""
        pending: deque[int] = deque()
        items = iter(items)
        turn = 0
        for _ in self.workers:
            if not self._send(turn, function, items, pending):
                break
            turn = (turn + 1) % len(self.workers)
        while pending:
            index = pending.popleft()
            result = self._receive(index)
            self._send(index, function, items, pending)
            yield result

    def _send(self, index: int, function: Callable, items: Iterator[Any], pending: deque[int]) -> bool:
        item = next(items, _END)
        if item is _END:
            return False
        self.workers[index][1].send((function, (item,)))
        pending.append(index)
        return True

    def _receive(self, index: int) -> Any:
        process, conn = self.workers[index]
        while not wait_readable(conn.fileno(), 1.0):  # a signal's handler runs here
            if not process.is_alive():
                break
        try:
            answer = conn.recv()
        except (EOFError, OSError):
            process.join(STOP_S)
            raise NmtkError(f"a worker process ended unexpectedly (exit code {process.exitcode}); "
                            "see the messages above") from None
        return _result(answer)

    def close(self) -> None:
        """End every worker: its pipe closed (it leaves its loop), then SIGTERM, then SIGKILL."""
        for _, conn in self.workers:
            conn.close()
        for process, _ in self.workers:
            process.join(0.05)
            if process.is_alive():
                process.terminate()
                process.join(STOP_S)
            if process.is_alive():
                os.kill(process.pid, signal.SIGKILL)
                process.join()
        self.workers = []


_END = object()


def in_child(function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``function(*args, **kwargs)`` in a new Python process, whose memory is gone when it returns (a
    subword learner's sample); its exception is raised here. The child leads a session of its
    own, so a Ctrl-C typed at the terminal reaches only this process, which ends the child at once
    rather than waiting for it (a new interpreter's start-up cannot ignore signals early enough)."""
    child = subprocess.Popen([sys.executable, "-m", "nmtk.workers"], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, start_new_session=True)
    try:
        child.stdin.write(pickle.dumps(sys.path))  # first: where the function's module is found
        child.stdin.write(pickle.dumps((function, args, kwargs)))
        child.stdin.close()
        while not wait_readable(child.stdout.fileno(), 1.0):  # a signal's handler runs here
            pass
        answer = child.stdout.read()
        child.wait()
        if not answer:
            raise NmtkError(f"a child process ended unexpectedly (exit code {child.returncode}); see the messages "
                            "above")
        return _result(pickle.loads(answer))
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


def _child_main() -> None:
    """`in_child`'s other end: one call read from stdin, its result or exception pickled to stdout (what
    the call itself prints goes to stderr)."""
    answers = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    sys.path[:] = pickle.load(sys.stdin.buffer)
    function, args, kwargs = pickle.load(sys.stdin.buffer)
    answers.write(pickle.dumps(_answer(function, *args, **kwargs)))
    answers.close()


if __name__ == "__main__":
    _child_main()
