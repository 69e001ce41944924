"""The `nmtk` command line: the typer app (`app.py`) and the glue of commands too big for one function."""

from __future__ import annotations

from typing import Any

__all__ = ["app", "main"]


def main() -> None:
    """The `nmtk` program (console script, ``python -m nmtk``): `app.main`, imported here so that a Ctrl-C
    while it loads (typer, rich: a few tenths of a second) is one line too; and an interrupted command's
    exit without the interpreter's teardown (`nmtk.interrupts.leave`): the command has cleaned up and
    said its line by then, and torch's teardown alone costs ~0.5 s of CPU, which ten commands stopped at
    once on a busy 2-core machine wait for in turn. (The tests' in-process runner calls `app.main`.)"""
    from nmtk.interrupts import INTERRUPTED_CODES, exit_code, leave

    try:
        from . import app as _app
    except KeyboardInterrupt as exc:
        from nmtk.console import error_line

        error_line("interrupted")
        leave(exit_code(exc))
        raise SystemExit(exit_code(exc)) from None
    try:
        _app.main()
    except SystemExit as exc:
        if exc.code in INTERRUPTED_CODES:
            leave(int(exc.code))
        raise


def __getattr__(name: str) -> Any:
    """``nmtk.cli.app``, the Typer object, loaded when asked for (`main` loads it itself)."""
    if name == "app":
        from .app import app

        return app
    raise AttributeError(name)
