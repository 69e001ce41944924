"""Ctrl-C and SIGTERM that end nmtk's blocking waits at once, whichever thread the kernel hands them to.

Why this module exists (issue 61): the kernel delivers a signal sent to a process to *any* of its
threads that does not block it: torch's intra-op (OpenMP) threads, a prefetch or writer thread.
CPython's C handler then only records the signal; the main thread runs the Python handler at its next
bytecode. A main thread blocked in ``read()``, ``select()`` or a lock is woken (EINTR) only when the
signal was delivered to *it*. So `nmtk translate` reading a pipe could record a Ctrl-C on another
thread and go on waiting for a line that never came. The same happens when the signal arrives while
the main thread blocks it (`deferred`), or between its last check and the system call.

The cure is the self-pipe trick asyncio uses: inside `interruptible`, ``signal.set_wakeup_fd`` makes
the C handler, on whatever thread it runs, write a byte to a pipe, and every blocking wait here
(`wait_readable`, `join`, `get`) waits on that pipe too (and wakes at least every `POLL_S` seconds
besides). Once the main thread is back in Python the recorded signal's handler runs: Ctrl-C raises
`KeyboardInterrupt`, SIGTERM `Terminated`.
"""

from __future__ import annotations

import multiprocessing
import os
import queue
import select
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

T = TypeVar("T")

#: The longest a wait here goes without returning to Python (where a recorded signal's handler runs),
#: should the wakeup pipe be missing (off the main thread, or another library's pipe in place).
POLL_S = 0.5

#: The signals that stop a command: Ctrl-C, and what `kill`, systemd and batch schedulers send.
STOPPING = (signal.SIGINT, signal.SIGTERM)

_wakeup: dict[str, int] = {}  # "read": the wakeup pipe's read end while `interruptible` is active


class Terminated(KeyboardInterrupt):
    """SIGTERM inside `interruptible`: handled wherever Ctrl-C is (it is a `KeyboardInterrupt`), with
    the exit code of its own signal (143)."""

    signum = signal.SIGTERM


#: The exit codes of a command a signal stopped: 128 + SIGINT, 128 + SIGTERM.
INTERRUPTED_CODES = (130, 143)


def exit_code(exc: BaseException) -> int:
    """128 + the signal that interrupted: 130 for Ctrl-C, 143 for SIGTERM."""
    return 128 + int(getattr(exc, "signum", signal.SIGINT))


def _raise_terminated(signum: int, frame: Any) -> None:
    raise Terminated


@contextmanager
def interruptible(terminate: bool = True) -> Iterator[None]:
    """Inside: signals wake the waits of this module wherever the kernel delivers them, and (with
    ``terminate``) SIGTERM raises `Terminated` as Ctrl-C raises `KeyboardInterrupt`. A no-op off the
    main thread (only it may set handlers and the wakeup pipe); nestable; everything is restored on leaving."""
    if threading.current_thread() is not threading.main_thread() or "read" in _wakeup:
        yield
        return
    read, write = os.pipe()
    os.set_blocking(read, False)
    os.set_blocking(write, False)
    old_term = signal.signal(signal.SIGTERM, _raise_terminated) if terminate else None
    old_fd = signal.set_wakeup_fd(write, warn_on_full_buffer=False)
    _wakeup["read"] = read
    try:
        yield
    finally:
        del _wakeup["read"]
        signal.set_wakeup_fd(old_fd)
        if old_term is not None:
            signal.signal(signal.SIGTERM, old_term)
        os.close(read)
        os.close(write)


def _drain(fd: int) -> None:
    try:
        while os.read(fd, 512):
            pass
    except BlockingIOError:
        pass


def _run_pending_handlers() -> None:
    """Run the Python handlers of signals recorded on other threads now, on this (the main) thread:
    CPython checks for them after every change of the signal mask (here, none)."""
    if threading.current_thread() is threading.main_thread():
        signal.pthread_sigmask(signal.SIG_BLOCK, [])


def wait_readable(fd: int, timeout: float | None = None) -> bool:
    """Wait until ``fd`` can be read without blocking (True), ``timeout`` seconds pass (False), or a
    signal arrives: its handler then runs here (Ctrl-C raises `KeyboardInterrupt`)."""
    wakeup = _wakeup.get("read")
    watched = [fd] if wakeup is None else [fd, wakeup]
    left = timeout
    while left is None or left > 0:
        slice_s = POLL_S if left is None else min(POLL_S, left)
        ready = select.select(watched, [], [], slice_s)[0]
        if wakeup in ready:
            _drain(wakeup)
        _run_pending_handlers()  # a signal wins over input that came with it
        if fd in ready:
            return True
        if left is not None:
            left -= slice_s
    return False


def join(thread: threading.Thread, timeout: float | None = None) -> bool:
    """``thread.join(timeout)`` in slices, so that a signal's handler runs meanwhile; whether it ended."""
    left = timeout
    while thread.is_alive() and (left is None or left > 0):
        slice_s = POLL_S if left is None else min(POLL_S, left)
        thread.join(slice_s)
        _run_pending_handlers()
        if left is not None:
            left -= slice_s
    return not thread.is_alive()


def get(source: queue.Queue[T]) -> T:
    """``source.get()`` in slices, so that a signal's handler runs while it waits."""
    while True:
        try:
            return source.get(timeout=POLL_S)
        except queue.Empty:
            _run_pending_handlers()


@contextmanager
def deferred() -> Iterator[None]:
    """Ctrl-C and SIGTERM arriving inside are delivered on leaving (the POSIX signal mask): a block that
    must finish whole (a buffer written and counted) does. Signals sent meanwhile go to another thread
    or wait; their handlers run as the mask is lifted (`pthread_sigmask` checks for them)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    before = signal.pthread_sigmask(signal.SIG_BLOCK, set(STOPPING))
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)


def leave(code: int) -> None:
    """End the process now with ``code``, its streams flushed, without the interpreter's teardown
    (``os._exit``): an interrupted command has done its own cleanup by the time it gets here, and
    the teardown of torch's operator registry (finalizers run at exit) costs ~0.5 s of CPU, which a
    Ctrl-C or a scheduler's SIGTERM should not wait for. Where something may still need that
    teardown, a thread that is not a daemon (a checkpoint being written) or a child process, this
    returns and the caller exits the ordinary way."""
    alive = [t for t in threading.enumerate() if t is not threading.current_thread() and not t.daemon]
    tracker = getattr(sys.modules.get("multiprocessing.resource_tracker"), "_resource_tracker", None)
    if alive or multiprocessing.active_children() or getattr(tracker, "_pid", None) is not None:
        return  # (the resource tracker warns of semaphores that the teardown would have released)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed or broken stream: nothing more can reach it
            pass
    os._exit(code)


def quiet_worker() -> None:
    """Set up a worker process (the first thing it runs; forked inside `deferred`, it holds signals until
    then, so none can reach it half set up): Ctrl-C typed at a terminal reaches the whole process group,
    and a worker leaves it to its parent, which ends it, instead of dying with a traceback of its own;
    SIGTERM (the parent's ``terminate``) ends it without one; the parent's wakeup pipe is not the
    worker's to write."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        signal.set_wakeup_fd(-1)
    except ValueError:  # not the main thread: nothing was inherited there
        pass
    signal.pthread_sigmask(signal.SIG_UNBLOCK, set(STOPPING))  # started inside `deferred`: signals held until now
