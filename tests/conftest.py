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

# `auto` precision for the whole session, in this process and every `nmtk` it starts: what this CPU's
# flags allow (bf16 with AVX-512 BF16/AMX, else fp32), or what the developer forces with
# NMTK_TEST_AUTO_PRECISION=fp32|bf16 to run the suite as a host of the other kind would. Pinned so
# that no test process times the hardware (nmtk.bf16_probe has tests of its own) and no outcome hangs
# on a measurement; tests that assert figures pin fp32 in their recipes or calls regardless.
AUTO_SWITCH = "NMTK_TEST_AUTO_PRECISION"
if not os.environ.get(AUTO_SWITCH):
    from nmtk.device import cpu_has_bf16_hardware

    os.environ[AUTO_SWITCH] = "bf16" if cpu_has_bf16_hardware() else "fp32"


def pytest_report_header() -> str:
    return f"auto precision on the CPU in this session: {os.environ[AUTO_SWITCH]} ({AUTO_SWITCH})"


def run_nmtk(*args: str, stdin: str | None = None, cwd: Path | None = None,
             env: dict[str, str] | None = None, process: bool = False) -> subprocess.CompletedProcess[str]:
    """`nmtk ARGS` as a user runs it, stdout and stderr captured: in this process (`cli_runner`: the real
    command line without a new interpreter's start-up), or in one of its own where ``process`` asks or
    the command needs one (a server, torchrun)."""
    from cli_runner import run_nmtk as run

    return run(*args, stdin=stdin, cwd=cwd or ROOT, env={**os.environ, **(env or {})}, process=process)


@pytest.fixture
def nmtk():
    return run_nmtk


@pytest.fixture(scope="session")
def multi30k_root() -> Path:
    root = Path(os.environ.get("NMTK_DATA", SHARED_DATA))
    if not (root / "multi30k" / "train.en.gz").is_file():
        pytest.skip(f"Multi30k not found under {root}")
    return root


@pytest.fixture(scope="session")
def copy_run(tmp_path_factory: pytest.TempPathFactory):
    """A small run trained by `nmtk train` to copy its input (700 updates, validated at 350 and 700, saved
    every 100; ~30 s on 2 cores; its training words kept for typo correction), shared by the tests that
    need a trained model: (folder, recipe, environment). Tests that change a run work on a copy of
    ``folder / "run"``."""
    from helpers import copy_pairs, toy_recipe, write_corpus

    tmp = tmp_path_factory.mktemp("copy")
    root = tmp / "root"
    write_corpus(root, "train", copy_pairs(3000, 1))
    write_corpus(root, "valid", copy_pairs(40, 2))
    write_corpus(root, "test", copy_pairs(40, 3))
    # bf16 where the session's auto is; curves.png drawn as in a user's run (tests/integration/test_copy_run.py)
    recipe = toy_recipe(tmp, extra="log_every_updates = 20", precision="auto", curves=True)
    recipe.write_text(recipe.read_text().replace("[tokenizer]\n", "[tokenizer]\ncorrect_typos = true\n", 1))
    env = {**os.environ, "NMTK_DATA": str(root), "OMP_NUM_THREADS": "1"}
    result = run_nmtk("train", str(recipe), "--data", str(tmp / "data"), "--run-dir", str(tmp / "run"), "--threads",
                      "2", "--set", "train.max_updates=700", "--set", "train.validate_every_updates=350",
                      "--set", "train.save_every_updates=100", "--set", "model.d_model=64", "--set", "model.d_ff=128",
                      "--set", "batching.batch_tokens=1024", "--set", "optim.lr=0.002",
                      "--set", "tokenizer.vocab_size=140", cwd=tmp, env=env)  # 140: one piece per word
    assert result.returncode == 0, result.stderr[-3000:]
    return tmp, recipe, env


@pytest.fixture(scope="session")
def copy_models() -> dict:
    """Tiny Transformers trained in-process to copy (fp32), from one run: after 100 updates (not learned),
    250 (search decisions still non-trivial: tests/unit/test_beam.py) and 800 (learned:
    tests/integration/test_copy_task.py)."""
    from helpers import train_copy_models

    return train_copy_models((100, 250, 800))


@pytest.fixture(scope="session")
def exported(copy_run) -> Path:
    """The copy run exported to CTranslate2."""
    tmp, _, env = copy_run
    out = run_nmtk("export", str(tmp / "run"), "-o", str(tmp / "ct2"), cwd=tmp, env=env)
    assert out.returncode == 0, out.stderr
    return tmp / "ct2"
