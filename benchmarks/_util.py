"""Shared helpers of the benchmark scripts: peak RSS of a process tree, Multi30k location."""

from __future__ import annotations

import os
import subprocess
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def data_root() -> Path:
    return Path(os.environ.get("NMTK_DATA", ROOT.parent / "shared" / "data"))


def _tree_rss_kib(pid: int) -> int:
    """Resident memory of a process and all its descendants, in KiB (Linux /proc)."""
    total, stack = 0, [pid]
    while stack:
        p = stack.pop()
        try:
            with open(f"/proc/{p}/status") as handle:
                total += next((int(line.split()[1]) for line in handle if line.startswith("VmRSS:")), 0)
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children") as handle:
                    stack.extend(int(c) for c in handle.read().split())
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
    return total


def run_measured(cmd: list[str], **kwargs) -> tuple[float, float, subprocess.CompletedProcess]:
    """Run a command; return (wall seconds, peak RSS of its process tree in MiB, result)."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kwargs)
    peak = 0
    done = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not done.is_set():
            peak = max(peak, _tree_rss_kib(proc.pid))
            time.sleep(0.2)

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    out, err = proc.communicate()
    done.set()
    thread.join()
    wall = time.perf_counter() - start
    return wall, peak / 1024, subprocess.CompletedProcess(cmd, proc.returncode, out, err)
