"""`nmtk prepare` under Ctrl-C and SIGTERM sent to its process group, as a terminal or a job scheduler
sends them (issue 77): one line, exit 130 or 143, at once, its worker processes ended without a
traceback of their own, its temporary folder removed, and no process of the group left behind."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import synthetic_pairs, toy_recipe, write_corpus

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="process groups and fork: Linux")

#: A hang, not a speed: the command ends in well under a second where nothing is wrong.
PROMPT_S = 10.0


@pytest.fixture(scope="module")
def big_toy(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A corpus whose Moses pass takes seconds on 2 workers, so a signal finds the workers busy."""
    tmp = tmp_path_factory.mktemp("big")
    write_corpus(tmp / "root", "train", synthetic_pairs(60_000, 1))
    write_corpus(tmp / "root", "valid", synthetic_pairs(20, 2))
    write_corpus(tmp / "root", "test", synthetic_pairs(20, 3))
    return tmp / "root", toy_recipe(tmp)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_a_signal_to_the_process_group_ends_prepare_at_once_and_cleanly(big_toy, tmp_path: Path, sig: int) -> None:
    root, recipe = big_toy
    out = tmp_path / "data"
    err = tmp_path / "err.txt"
    with open(err, "w") as handle:
        proc = subprocess.Popen([sys.executable, "-m", "nmtk", "prepare", str(recipe), "--out", str(out)],
                                stdout=handle, stderr=subprocess.STDOUT, start_new_session=True,
                                env={**os.environ, "NMTK_DATA": str(root)})
    try:
        deadline = time.monotonic() + 300
        while not any(p.stat().st_size for p in tmp_path.glob(".data.tmp-*/work-*/train.tok.en")):
            assert proc.poll() is None, err.read_text()
            assert time.monotonic() < deadline, "prepare never reached its Moses pass"
            time.sleep(0.02)
        signalled = time.monotonic()
        os.killpg(proc.pid, sig)
        proc.wait(timeout=PROMPT_S)
        seconds = time.monotonic() - signalled
        text = err.read_text()
        assert proc.returncode == 128 + sig, text
        assert "Traceback" not in text and "KeyboardInterrupt" not in text, text
        lines = [line for line in text.splitlines() if line.startswith("error:")]
        assert lines == [f"error: interrupted: {out} was not prepared (nothing was written there); run the same "
                         "command to prepare it"], text
        assert sorted(p.name for p in tmp_path.iterdir()) == [".data.lock", "err.txt"], "a temporary folder was left"
        for _ in range(100):  # the workers are ended before prepare exits; give the kernel a moment to reap
            if not _group_alive(proc.pid):
                break
            time.sleep(0.02)
        assert not _group_alive(proc.pid), "a worker process outlived prepare"
        print(f"{signal.Signals(sig).name}: exited {seconds:.2f} s after the signal")
    finally:
        if _group_alive(proc.pid):
            os.killpg(proc.pid, signal.SIGKILL)
