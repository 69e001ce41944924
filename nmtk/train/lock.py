"""The training lock: one training job at a time writes a run directory."""

from __future__ import annotations

import fcntl
import os
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager

from nmtk.errors import NmtkError
from nmtk.rundir import RunDir


@contextmanager
def training_lock(run: RunDir) -> Iterator[None]:
    """Held while a training job writes ``run``: an OS lock (``flock``) on `RunDir.lock_path`, so a run
    that was killed, even by SIGKILL, leaves no stale lock behind. A second ``nmtk train`` is refused
    with one line naming the process that holds it. Reading commands (translate, average, export)
    never take it."""
    run.path.parent.mkdir(parents=True, exist_ok=True)
    handle = open(run.lock_path, "a+", encoding="utf-8")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        handle.seek(0)
        holder = handle.read().strip() or "another process"
        handle.close()
        raise NmtkError(f"{run.path}: already being trained by {holder}; wait for it to finish, or stop it "
                        "(it saves and exits on Ctrl-C / SIGTERM)") from None
    try:
        handle.seek(0)
        handle.truncate()
        handle.write(f"process {os.getpid()} on {socket.gethostname()} since {time.strftime('%Y-%m-%d %H:%M:%S')}")
        handle.flush()
        yield
    finally:
        fcntl.flock(handle, fcntl.LOCK_UN)
        handle.close()
