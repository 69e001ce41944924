"""Two torchrun "nodes" on this machine (c10d rendezvous on 127.0.0.1, one gloo process each).

The same commands as docs/distributed.md's two-machine example, with 127.0.0.1 for the head node:
training equals one process with the same update_freq (2), checkpoints are written once, the job resumes under
the same launch, and a node that dies ends the other with one error line instead of a hang.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from cli_runner import run_nmtk
from helpers import toy_data, toy_recipe

pytestmark = pytest.mark.slow
TIMEOUT_S = 20  # NMTK_DIST_TIMEOUT for these tests: a lost node must end the job well within it
FROZEN_TIMEOUT_S = 10  # the frozen node's test waits it out: shorter, but far above an update's collectives


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def toy(tmp_path_factory: pytest.TempPathFactory):
    """Data prepared once for the module's tests, each of which trains into run directories of its own."""
    tmp_path = tmp_path_factory.mktemp("multinode")
    root = toy_data(tmp_path / "root", n_train=600)
    recipe = toy_recipe(tmp_path, extra="log_every_updates = 5")
    env = {**os.environ, "NMTK_DATA": str(root), "OMP_NUM_THREADS": "1", "NMTK_DIST_TIMEOUT": str(TIMEOUT_S)}
    common = ["--data", str(tmp_path / "data"), "--threads", "1", "--set", "train.validate_every_updates=1000",
              "--set", "train.save_every_updates=5", "--set", "train.update_freq=2"]  # two nodes × 1 batch
    one_process(tmp_path, recipe, env, common, "prep", "--set", "train.max_updates=1")  # prepares the data once
    return tmp_path, recipe, env, common


def one_process(tmp: Path, recipe: Path, env: dict, common: list[str], run: str, *extra: str) -> None:
    """`nmtk train` as one process, in the test's own (`cli_runner`: no new interpreter to start)."""
    result = run_nmtk("train", str(recipe), *common, "--run-dir", str(tmp / run), *extra, env=env, cwd=tmp)
    assert result.returncode == 0, result.stderr[-3000:]


def node(tmp: Path, recipe: Path, env: dict, common: list[str], run: str, rank: int, port: int,
         *extra: str) -> subprocess.Popen:
    """One node's torchrun, in its own process group (so that the node can be killed whole).

    Both "machines" are 127.0.0.1 here, so each is told whether it hosts the rendezvous store
    (``is_host``); between real machines only the head's name matches the endpoint and it needs no saying.
    """
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc_per_node", "1",
           "--node_rank", str(rank), "--rdzv_backend", "c10d", "--rdzv_endpoint", f"127.0.0.1:{port}",
           "--rdzv_id", f"nmtk-{run}", "--rdzv_conf", f"is_host={int(rank == 0)}", "--max_restarts", "0",
           "-m", "nmtk", "train", str(recipe), "--run-dir", str(tmp / run), *common, *extra]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=tmp,
                            start_new_session=True)


def two_nodes(tmp: Path, recipe: Path, env: dict, common: list[str], run: str, *extra: str) -> list[str]:
    port = free_port()
    procs = [node(tmp, recipe, env, common, run, rank, port, *extra) for rank in (0, 1)]
    errs = []
    for proc in procs:
        _, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err[-3000:]
        errs.append(err)
    return errs


def params(path: Path) -> dict[str, torch.Tensor]:
    return torch.load(path, map_location="cpu", weights_only=True)["model"]


def assert_close(a: Path, b: Path) -> None:
    pa, pb = params(a), params(b)
    for name in pa:
        torch.testing.assert_close(pa[name], pb[name], atol=1e-6, rtol=0, msg=name)


def test_two_nodes_equal_one_process_write_once_and_resume(toy) -> None:
    tmp, recipe, env, common = toy
    one_process(tmp, recipe, env, common, "single", "--set", "train.max_updates=10")

    two_nodes(tmp, recipe, env, common, "nodes", "--set", "train.max_updates=10")
    assert_close(tmp / "single" / "checkpoint_10.pt", tmp / "nodes" / "checkpoint_10.pt")
    files = sorted(p.name for p in (tmp / "nodes").iterdir() if p.name.startswith(("checkpoint", ".")))
    # once each, no stray temp files (best: the validation at the end, train.validate_at_end)
    assert files == ["checkpoint_10.pt", "checkpoint_5.pt", "checkpoint_best.pt", "checkpoint_last.pt"]
    assert torch.load(tmp / "nodes" / "checkpoint_last.pt", weights_only=True)["world_size"] == 2

    errs = two_nodes(tmp, recipe, env, common, "nodes", "--set", "train.max_updates=14")
    assert any("from update 10" in err.replace("\n", "") for err in errs)
    one_process(tmp, recipe, env, common, "single", "--set", "train.max_updates=14")
    assert_close(tmp / "single" / "checkpoint_last.pt", tmp / "nodes" / "checkpoint_last.pt")
    assert torch.load(tmp / "nodes" / "checkpoint_last.pt", weights_only=True)["state"]["update"] == 14


def tree(pid: int) -> list[int]:
    """A process and all its descendants (torchrun starts its workers in sessions of their own)."""
    found, stack = [], [pid]
    while stack:
        p = stack.pop()
        found.append(p)
        for task in Path(f"/proc/{p}/task").glob("*"):
            stack.extend(int(c) for c in (task / "children").read_text().split())
    return found


@pytest.mark.parametrize("fate", ["dies", "freezes"])
def test_a_node_that_dies_or_freezes_ends_the_other_with_one_error_line(toy, fate: str) -> None:
    """Dies: every process of node 1 is killed, as when its machine goes down; the other notices at
    once (its connections close). Freezes: node 1's worker is stopped (SIGSTOP) with its connections
    open, as a hung machine; the other gives up after NMTK_DIST_TIMEOUT seconds."""
    tmp, recipe, env, common = toy
    timeout = TIMEOUT_S if fate == "dies" else FROZEN_TIMEOUT_S
    env = {**env, "NMTK_DIST_TIMEOUT": str(timeout)}
    port = free_port()
    run = f"dying-{fate}"
    procs = [node(tmp, recipe, env, common, run, rank, port, "--set", "train.max_updates=100000")
             for rank in (0, 1)]
    deadline = time.time() + 300
    while not (tmp / run / "checkpoint_5.pt").exists():
        assert all(p.poll() is None for p in procs) and time.time() < deadline, "the job ended before the kill"
        time.sleep(0.05)
    victims = tree(procs[1].pid)
    for pid in victims if fate == "dies" else victims[1:]:
        os.kill(pid, signal.SIGKILL if fate == "dies" else signal.SIGSTOP)
    struck = time.time()
    try:
        _, err = procs[0].communicate(timeout=timeout + 60)
        waited = time.time() - struck
    finally:
        for pid in victims:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        procs[1].communicate()
    print(f"node 0 ended {waited:.1f} s after node 1 {fate == 'dies' and 'died' or 'froze'}")
    assert procs[0].returncode != 0
    assert waited < (10 if fate == "dies" else timeout + 15), waited
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and "another process of this 2-process job stopped" in lines[0], err[-3000:]
    assert (tmp / run / "checkpoint_5.pt").is_file()  # what was written is kept
