"""The training lock: one training job at a time writes a run directory."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager

from nmtk.errors import NmtkError
from nmtk.files import LockHeld, os_lock
from nmtk.rundir import RunDir


@contextmanager
def training_lock(run: RunDir) -> Iterator[None]:
    """Held while a training job writes ``run``: an OS lock (`nmtk.files.os_lock`) on `RunDir.lock_path`, so
    a run that was killed, even by SIGKILL, leaves no stale lock behind. A second ``nmtk train`` is refused
    with one line naming the process that holds it. Reading commands (translate, average, export)
    never take it."""
    with ExitStack() as stack:
        try:
            stack.enter_context(os_lock(run.lock_path))
        except LockHeld as held:
            raise NmtkError(f"{run.path}: already being trained by {held.holder}; wait for it to finish, or stop "
                            "it (it saves and exits on Ctrl-C / SIGTERM)") from None
        yield
