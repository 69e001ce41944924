"""`nmtk train` on a toy corpus: exact resume after SIGKILL, SIGTERM, DDP, refusals, translate (that a run
learns, and averaging: tests/integration/test_copy_run.py)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from cli_runner import run_in_process, run_nmtk
from helpers import synthetic_pairs, toy_data, toy_recipe, without_key_bias

from nmtk.rundir import numbered_checkpoints

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


def nmtk_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "nmtk", *args]


@pytest.fixture(scope="module")
def toy(tmp_path_factory: pytest.TempPathFactory):
    """One corpus for the module (prepared by the first train): each test trains runs named its own."""
    tmp_path = tmp_path_factory.mktemp("toy")
    root = toy_data(tmp_path / "root", n_train=600)
    recipe = toy_recipe(tmp_path, extra="log_every_updates = 5")
    env = {**os.environ, "NMTK_DATA": str(root), "OMP_NUM_THREADS": "1"}
    return tmp_path, recipe, env


def train(tmp: Path, recipe: Path, env: dict, run: str, *extra: str, check: bool = True) -> subprocess.CompletedProcess:
    """`nmtk train` in this test's process (`cli_runner`: ~3 s less a run), or in its own with --nproc."""
    result = run_nmtk("train", str(recipe), "--data", str(tmp / "data"), "--run-dir", str(tmp / run), "--threads", "1",
                      *extra, cwd=tmp, env=env)
    if check:
        assert result.returncode == 0, result.stderr
    return result


def params(path: Path) -> dict[str, torch.Tensor]:
    return torch.load(path, map_location="cpu", weights_only=True)["model"]


def assert_bitwise_equal(a: Path, b: Path) -> None:
    pa, pb = params(a), params(b)
    assert pa.keys() == pb.keys()
    for name in pa:
        assert torch.equal(pa[name], pb[name]), name


def test_sigkill_then_resume_is_bitwise_identical(toy) -> None:
    """Killed wherever it is after update 12 (it has no end to reach first, whatever the host's speed),
    resumed to 8 updates past its last save: equal to the bit to an uninterrupted run of that length."""
    tmp, recipe, env = toy
    common = ("--set", "train.save_every_updates=4", "--set", "train.validate_every_updates=100000")
    cmd = nmtk_cmd("train", str(recipe), "--data", str(tmp / "data"), "--run-dir", str(tmp / "killed"),
                   "--threads", "1", *common, "--set", "train.max_updates=100000")
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, cwd=tmp)
    deadline = time.monotonic() + 300  # a hang, not a speed
    while not (tmp / "killed" / "checkpoint_12.pt").exists():
        assert proc.poll() is None and time.monotonic() < deadline, "training ended before the kill"
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    # A resume starts from the newest numbered checkpoint. checkpoint_last.pt is re-linked just after
    # that file is renamed into place, so a kill between the two leaves the link one save behind.
    last = numbered_checkpoints(tmp / "killed", full_only=True)[-1][0]
    assert last >= 12
    linked = torch.load(tmp / "killed" / "checkpoint_last.pt", weights_only=True)["state"]["update"]
    assert linked in (last, last - 4)
    n = last + 8
    train(tmp, recipe, env, "straight", *common, "--set", f"train.max_updates={n}")
    resumed = train(tmp, recipe, env, "killed", *common, "--set", f"train.max_updates={n}")
    assert f"resuming {tmp / 'killed'} from update {last}" in resumed.stderr.replace("\n", "")
    assert_bitwise_equal(tmp / "straight" / "checkpoint_last.pt", tmp / "killed" / "checkpoint_last.pt")
    # The log, cut back to the resumed update, goes on: the uninterrupted run's lines (the first window
    # after the resume averages fewer updates; the windows after it are the same updates)
    logged = [[(r["update"], r["loss"]) for r in map(json.loads, (tmp / run / "train.jsonl").read_text().splitlines())
               if "validation" not in r] for run in ("straight", "killed")]
    assert [u for u, _ in logged[0]] == [u for u, _ in logged[1]] and logged[0][-1][0] == n, logged
    assert logged[0][-1] == logged[1][-1], logged


def test_sigterm_saves_and_exits_zero(toy) -> None:
    tmp, recipe, env = toy
    train(tmp, recipe, env, "warm", "--set", "train.max_updates=2")  # prepares the data once
    cmd = nmtk_cmd("train", str(recipe), "--data", str(tmp / "data"), "--run-dir", str(tmp / "term"),
                   "--threads", "1", "--set", "train.max_updates=100000",
                   "--set", "train.validate_every_updates=100000")
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=tmp)
    log = tmp / "term" / "train.jsonl"
    deadline = time.time() + 300
    while not (log.exists() and log.read_text().count("\n") >= 2):
        assert proc.poll() is None and time.time() < deadline
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert "received SIGTERM" in err
    checkpoint = torch.load(tmp / "term" / "checkpoint_last.pt", weights_only=True)
    assert checkpoint["state"]["update"] >= 10


def test_one_two_and_four_processes_train_the_same_updates_under_any_launcher(toy) -> None:
    """train.update_freq is the whole update's: 1 process × 4 batches, 2 × 2 (torchrun, compiled) and 4 × 1
    (--nproc, through train.cuda_graphs' static shapes) print the same update size and train the same
    updates; 3 processes are refused. (Plain DDP under torchrun, uncompiled, equals one process in
    tests/integration/test_multinode.py.)"""
    tmp, recipe, env = toy
    common = ("--set", "train.max_updates=3", "--set", "train.validate_every_updates=3", "--set", "train.update_freq=4")
    single = train(tmp, recipe, env, "single", *common)
    # Compiled layers under DDP (#46 point 2): dynamo's graphs inside DDP's forward, split at its buckets,
    # accumulated under no_sync, with dynamic shapes. The eager backend runs dynamo's graphs as they are
    # traced (10 s here against aot_eager's 21 s): AOT autograd's graphs are compared with eager training
    # in one process (tests/unit/test_train_parts.py).
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "-m", "nmtk",
                "train", str(recipe), "--data", str(tmp / "data"), "--run-dir", str(tmp / "ddp"), "--threads", "1",
                *common, "--set", "train.compile=true"]
    two = subprocess.run(torchrun, capture_output=True, text=True, env={**env, "NMTK_COMPILE_BACKEND": "eager"},
                         cwd=tmp, timeout=600)
    assert two.returncode == 0, two.stderr[-3000:]
    assert "graph(s) compiled, 0 recompilation(s)" in two.stderr, two.stderr[-3000:]
    # Graphed micro-batches (static shapes, replayed eagerly on a CPU) all-reduce once per update, by hand
    four = train(tmp, recipe, {**env, "NMTK_GRAPHS_EAGER": "1"}, "four", "--nproc", "4", *common,
                 "--set", "train.cuda_graphs=true")
    assert "static shapes run eagerly" in four.stderr and "shapes, padding" in four.stderr
    sizes = [" ".join(r.stderr.split()).split("update: ")[1].split(")")[0] for r in (single, two, four)]
    assert [s.split(" (")[0] for s in sizes] == ["4 batches of ≤ 256 tokens = ≤ 1,024 tokens per side"] * 3, sizes
    assert [s.split(" (")[1] for s in sizes] == ["1 process", "2 processes × 2", "4 processes × 1"]
    a = params(tmp / "single" / "checkpoint_last.pt")
    for run in ("ddp", "four"):
        b = params(tmp / run / "checkpoint_last.pt")
        for name in a:
            torch.testing.assert_close(without_key_bias(name, a[name]), without_key_bias(name, b[name]), atol=1e-5,
                                       rtol=0, msg=f"{run}: {name}")
    # validation sharded over the ranks, gathered: the single process's figures
    (one,), (other,) = ([json.loads(line) for line in (tmp / run / "train.jsonl").read_text().splitlines()
                         if '"validation"' in line] for run in ("single", "ddp"))
    assert one["bleu"] == other["bleu"] and abs(one["loss"] - other["loss"]) <= 1e-3
    # Refused in the launching process, before torchrun would start any (so run here, not in a process)
    three = run_in_process("train", str(recipe), "--data", str(tmp / "data"), "--run-dir", str(tmp / "three"),
                           "--threads", "1", "--nproc", "3", *common, cwd=tmp, env=env)
    assert three.returncode == 1 and "cannot be shared by 3 processes" in three.stderr
    assert not (tmp / "three").exists()  # refused before anything was written


def test_resume_refuses_breaking_changes_and_restart_moves_the_run_aside(toy) -> None:
    tmp, recipe, env = toy
    train(tmp, recipe, env, "run", "--set", "train.max_updates=3")
    files = {p.name: p.read_bytes() for p in (tmp / "run").iterdir() if p.is_file()}
    assert "curves.png" not in files  # train.curves = false (the toy recipe): validated, but no picture
    refused = train(tmp, recipe, env, "run", "--set", "train.max_updates=6", "--set", "model.d_ff=128", check=False)
    assert refused.returncode == 1
    assert "cannot resume: model.d_ff changed from 64 to 128" in refused.stderr and "--restart" in refused.stderr
    refused = train(tmp, recipe, env, "run", "--set", "train.max_updates=6", "--set", "batching.batch_tokens=300",
                    check=False)
    assert "batching.batch_tokens" in refused.stderr
    refused = train(tmp, recipe, env, "run", "--set", 'train.stages=[{name = "all"}]', check=False)
    assert "cannot resume: train.stages changed from none to 1 entry" in refused.stderr, refused.stderr  # the list's
    # A changed vocabulary, which would be prepared into a new folder: refused too, before that prepare ran
    # (on a large corpus it takes hours). None of the three refusals wrote anything into the run (issue 44:
    # its recipe.toml, manifest and spm.model were replaced).
    refused = run_nmtk("train", str(recipe), "--data", str(tmp / "data-70"), "--run-dir", str(tmp / "run"),
                       "--threads", "1", "--set", "tokenizer.vocab_size=70", cwd=tmp, env=env)
    assert refused.returncode == 1 and "tokenizer.vocab_size changed from 64 to 70" in refused.stderr, refused.stderr
    assert not (tmp / "data-70").exists() and "prepare" not in refused.stderr
    refused = train(tmp, recipe, env, "run", "--init-from", str(tmp / "run" / "checkpoint_last.pt"), check=False)
    assert refused.returncode == 1 and "already has checkpoints: --init-from starts a new run" in refused.stderr
    assert {p.name: p.read_bytes() for p in (tmp / "run").iterdir() if p.is_file()} == files
    translated = run_nmtk("translate", "-m", str(tmp / "run"), stdin="the cat\n", env=env, cwd=tmp)
    assert translated.returncode == 0, translated.stderr
    resumed = train(tmp, recipe, env, "run", "--set", "train.max_updates=6")  # allowed change
    assert "resuming" in resumed.stderr
    restarted = train(tmp, recipe, env, "run", "--set", "train.max_updates=2", "--set", "model.d_ff=128", "--restart")
    assert "moved to" in restarted.stderr
    assert len(list(tmp.glob("run.old-*"))) == 1
    assert torch.load(tmp / "run" / "checkpoint_last.pt", weights_only=True)["state"]["update"] == 2


def test_translate_errors_are_one_line(toy) -> None:
    tmp, recipe, env = toy
    missing = run_nmtk("translate", "-m", str(tmp / "nope"), stdin="x\n", env=env, cwd=tmp)
    assert missing.returncode == 1 and "run directory not found" in missing.stderr
    nothing = run_nmtk("translate", stdin="x\n", env={k: v for k, v in env.items() if k != "NMTK_MODEL"}, cwd=tmp)
    assert nothing.returncode == 1 and "pass -m RUN_DIR" in nothing.stderr
    train(tmp, recipe, env, "tiny", "--set", "train.max_updates=2")
    bad_ckpt = run_nmtk("translate", "-m", str(tmp / "tiny"), "--checkpoint", str(tmp / "x.pt"), stdin="x\n",
                        env=env, cwd=tmp)
    assert bad_ckpt.returncode == 1 and "x.pt: checkpoint not found" in bad_ckpt.stderr
    bad_utf8 = run_nmtk("translate", "-m", str(tmp / "tiny"), stdin=b"ok\n\xff\xfe\n", env=env, cwd=tmp)
    assert bad_utf8.returncode == 1 and "stdin:2: invalid UTF-8" in bad_utf8.stderr
    replaced = run_nmtk("translate", "-m", str(tmp / "tiny"), "--errors", "replace", stdin=b"ok\n\xff\xfe\n",
                        env=env, cwd=tmp)
    assert replaced.returncode == 0 and replaced.stdout.count("\n") == 2
    (tmp / "out.txt").write_text("keep me\n")
    refused = run_nmtk("translate", "-m", str(tmp / "tiny"), "-o", str(tmp / "out.txt"), stdin="x\n", env=env,
                       cwd=tmp)
    assert refused.returncode == 1 and "--force" in refused.stderr and (tmp / "out.txt").read_text() == "keep me\n"
    assert ROOT.is_dir()


def test_resume_after_a_crash_before_checkpoint_last_was_linked(toy) -> None:
    """A crash between writing checkpoint_N.pt and linking checkpoint_last.pt resumes from update N."""
    tmp, recipe, env = toy
    common = ("--set", "train.save_every_updates=2", "--set", "train.validate_every_updates=100")
    train(tmp, recipe, env, "crash", "--set", "train.max_updates=4", *common)
    (tmp / "crash" / "checkpoint_last.pt").unlink()  # the very first save: no link yet
    resumed = train(tmp, recipe, env, "crash", "--set", "train.max_updates=6", *common)
    assert "from update 4" in resumed.stderr.replace("\n", "")
    os.link(tmp / "crash" / "checkpoint_4.pt", tmp / "crash" / ".tmp")  # one save behind: last -> update 4
    os.replace(tmp / "crash" / ".tmp", tmp / "crash" / "checkpoint_last.pt")
    resumed = train(tmp, recipe, env, "crash", "--set", "train.max_updates=8", *common)
    assert "from update 6" in resumed.stderr.replace("\n", "")
    assert torch.load(tmp / "crash" / "checkpoint_last.pt", weights_only=True)["state"]["update"] == 8


def test_a_line_longer_than_the_model_is_translated_in_pieces(toy) -> None:
    tmp, recipe, env = toy
    train(tmp, recipe, env, "long", "--set", "train.max_updates=2")
    words = [w for src, _ in synthetic_pairs(400, seed=3) for w in src.split()]
    long = " ".join(words[:3000])  # ~3,300 subwords, 1,023 fit: cut after sentence ends ("." pieces)
    # >= 80 words against at most 2 x 12 in two of the longest training lines (any word splitting), and
    # two sentences of at most 4 words
    eight = " ".join(src for src, _ in synthetic_pairs(8, seed=4, min_words=10, max_words=12))
    two = " ".join(src for src, _ in synthetic_pairs(2, seed=5, min_words=2, max_words=4))
    text = f"the dog runs.\n{long}\n\na cat sits.\n{eight}\n{two}\n"
    out = run_nmtk("translate", "-m", str(tmp / "long"), "--beam", "1", stdin=text, env=env, cwd=tmp)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.split("\n")
    assert len(lines) == 7 and lines[2] == "" and lines[-1] == ""  # one line per input line, in order
    warnings = [line for line in out.stderr.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 2 and "line 2:" in warnings[0] and "more than the model's 1,023" in warnings[0]
    longest = json.loads((tmp / "long" / "manifest.json").read_text())["splits"]["train"]["sides"]["en"]["max_len"]
    assert "line 5:" in warnings[1] and f"twice the longest training source ({longest})" in warnings[1]
    assert "translated in 8 pieces" in warnings[1]  # one per sentence
