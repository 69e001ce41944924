"""How OpenMP's wait policy shapes `nmtk translate` beside another job (issue 77).

Torch's CPU threads are GNU OpenMP's: after each parallel region a worker spins for a while before it
sleeps (``OMP_WAIT_POLICY`` unset), which is fastest when the cores are nmtk's alone and steals them
from whatever else runs when they are not. This times the `nmtk translate` command (greedy and beam
4, ``--threads 2``) on the same input under each policy, on an idle machine and beside one busy
loop (a job that wants one core), medians of ``--repeat`` runs, each in a process of its own.

Prints one JSON line: seconds per (load, policy, beam).
Usage: python benchmarks/threads.py --run RUN --input FILE [--lines 1000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

POLICIES = ("unset", "PASSIVE", "ACTIVE")


def timed(run: Path, source: Path, beam: int, policy: str) -> float:
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "NMTK_OMP_WAIT_POLICY")}
    if policy != "unset":
        env["OMP_WAIT_POLICY"] = policy
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "nmtk", "translate", "-m", str(run), "-i", str(source), "--beam", str(beam),
                    "--threads", "2", "--precision", "fp32"], check=True, env=env, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--run", type=Path, required=True)
    parser.add_argument("--input", type=Path, required=True)
    parser.add_argument("--lines", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        source = Path(tmp) / "input.txt"
        source.write_text("".join(args.input.read_text(encoding="utf-8").splitlines(keepends=True)[: args.lines]))
        out: dict[str, float] = {}
        for load in ("idle", "busy1"):
            busy = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if load == "busy1" else None
            try:
                for beam in (1, 4):
                    for policy in POLICIES:
                        runs = [timed(args.run, source, beam, policy) for _ in range(args.repeat)]
                        out[f"{load}:{policy}:beam{beam}"] = round(statistics.median(runs), 2)
            finally:
                if busy is not None:
                    busy.kill()
    print(json.dumps({"benchmark": "threads", "lines": args.lines, "repeat": args.repeat, "seconds": out}))


if __name__ == "__main__":
    main()
