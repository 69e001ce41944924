"""Everything nmtk shows a person: one rich console on stderr (stdout is for data), rank 0 only."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

from rich.console import Console

#: Messages, tables and progress go to stderr so that stdout can carry translations and JSON.
console = Console(stderr=True, highlight=False, soft_wrap=True)


def is_main_process() -> bool:
    """True on rank 0 of a torchrun job, and in a single process."""
    return int(os.environ.get("RANK", "0")) == 0


def error_line(message: str) -> None:
    """One plain line on stderr: no markup, no wrapping, so scripts and people read it alike."""
    sys.stderr.write(f"error: {message}\n")
    sys.stderr.flush()


class JsonlWriter:
    """Appends one JSON object per line (metrics logs); each line is flushed as written."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._handle = open(path, "a", encoding="utf-8")

    def write(self, record: dict[str, Any]) -> None:
        self._handle.write(json.dumps(record, sort_keys=False) + "\n")
        self._handle.flush()

    def close(self) -> None:
        self._handle.close()
