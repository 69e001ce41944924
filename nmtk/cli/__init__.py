"""The `nmtk` command line: the typer app (`app.py`) and the glue of commands too big for one function."""

from .app import app, main

__all__ = ["app", "main"]
