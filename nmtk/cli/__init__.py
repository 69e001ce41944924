"""The `nmtk` command line: the typer app (`app.py`) and the glue of commands too big for one function."""

from __future__ import annotations

from . import app as _app
from .app import app

__all__ = ["app", "main"]


def main() -> None:
    """The `nmtk` program (console script, ``python -m nmtk``): `app.main`, and an interrupted command's
    exit without the interpreter's teardown (`nmtk.interrupts.leave`): the command has cleaned up and
    said its line by then, and torch's teardown alone costs ~0.5 s of CPU, which ten commands stopped at
    once on a busy 2-core machine wait for in turn. (The tests' in-process runner calls `app.main`.)"""
    try:
        _app.main()
    except SystemExit as exc:
        from nmtk.interrupts import INTERRUPTED_CODES, leave

        if exc.code in INTERRUPTED_CODES:
            leave(int(exc.code))
        raise
