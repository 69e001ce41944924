"""Shared test setup: the data root, and helpers that run the real `nmtk` command."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = ROOT.parent / "shared" / "data"

if "NMTK_DATA" not in os.environ and SHARED_DATA.is_dir():
    os.environ["NMTK_DATA"] = str(SHARED_DATA)


def run_nmtk(*args: str, stdin: str | None = None, cwd: Path | None = None,
             env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run `python -m nmtk ARGS` in a subprocess, as a user would, capturing stdout and stderr."""
    return subprocess.run(
        [sys.executable, "-m", "nmtk", *args],
        input=stdin, capture_output=True, text=True, cwd=cwd or ROOT,
        env={**os.environ, **(env or {})}, timeout=600,
    )


@pytest.fixture
def nmtk():
    return run_nmtk


@pytest.fixture(scope="session")
def multi30k_root() -> Path:
    root = Path(os.environ.get("NMTK_DATA", SHARED_DATA))
    if not (root / "multi30k" / "train.en.gz").is_file():
        pytest.skip(f"Multi30k not found under {root}")
    return root
