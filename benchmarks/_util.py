"""Shared helpers of the benchmark scripts: peak RSS of a process tree, Multi30k location, training and
scoring through the command line."""

from __future__ import annotations

import gzip
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

# Runs the command as its only child and writes that child's peak RSS (ru_maxrss, KiB) to a file:
# the kernel's own accounting, which a sampler can miss between samples.
_WRAPPER = """
import resource, subprocess, sys
code = subprocess.call(sys.argv[2:])
open(sys.argv[1], "w").write(str(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss))
sys.exit(code)
"""


def data_root() -> Path:
    return Path(os.environ.get("NMTK_DATA", ROOT.parent / "shared" / "data"))


def tree_pids(pid: int) -> list[int]:
    """A process and all its descendants (Linux /proc); those that ended meanwhile are left out."""
    found, stack = [], [pid]
    while stack:
        p = stack.pop()
        try:
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children") as handle:
                    stack.extend(int(c) for c in handle.read().split())
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
        found.append(p)
    return found


def _tree_rss_kib(pid: int) -> int:
    """Resident memory of a process and all its descendants, in KiB (Linux /proc)."""
    total = 0
    for p in tree_pids(pid):
        try:
            with open(f"/proc/{p}/status") as handle:
                total += next((int(line.split()[1]) for line in handle if line.startswith("VmRSS:")), 0)
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
    return total


def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as handle:
            return [int(c) for c in handle.read().split()]
    except (FileNotFoundError, ProcessLookupError):
        return []


def run_measured(cmd: list[str], **kwargs) -> tuple[float, float, subprocess.CompletedProcess]:
    """Run a command; return (wall seconds, peak RSS in MiB, result).

    The peak is the larger of the process tree's RSS sampled every 0.1 s (all of the command's
    processes together) and the kernel's ru_maxrss of the command's own process.
    """
    with tempfile.NamedTemporaryFile(suffix=".rss", delete=False) as report:
        report_path = report.name
    start = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-c", _WRAPPER, report_path, *cmd], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, **kwargs)
    peak = 0
    done = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not done.is_set():
            peak = max(peak, sum(_tree_rss_kib(child) for child in _children(proc.pid)))
            time.sleep(0.1)

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    out, err = proc.communicate()
    done.set()
    thread.join()
    wall = time.perf_counter() - start
    try:
        peak = max(peak, int(Path(report_path).read_text() or 0))
    finally:
        os.unlink(report_path)
    return wall, peak / 1024, subprocess.CompletedProcess(cmd, proc.returncode, out, err)


PAPER_STEP_S = {"base": 0.4, "big": 1.0}  # §5.2, 8 × P100
P100_FP32_FLOPS = 10.6e12  # P100 SXM2 peak (the paper predates mixed-precision NMT training)
#: Dense (no sparsity) 16-bit tensor-core peaks in FLOP/s, by a word of `torch.cuda.get_device_name`
#: (a regular expression); the first match wins, so the more specific names come first. V100 has no
#: bf16: its fp16 peak.
DENSE_PEAK_FLOPS = ((r"H100 PCIe", 756e12), (r"H100 NVL", 835e12), (r"H100", 989e12), (r"H200", 989e12),
                    (r"A100", 312e12), (r"V100", 125e12), (r"L4", 121e12), (r"RTX 4090", 165e12))


def dense_peak(gpu_name: str) -> float | None:
    """The dense 16-bit peak of the GPU so named (H100 SXM and PCIe told apart; an L40S is not an L4),
    None if unknown."""
    return next((flops for name, flops in DENSE_PEAK_FLOPS if re.search(rf"\b{name}\b", gpu_name)), None)


def flops_per_update(cfg: Any, src_tokens: int, tgt_tokens: int, length: int) -> float:
    """Matmul FLOPs of one training update (forward + backward = 3 × forward, 2 FLOPs per multiply-add).

    Multiply-adds per token: encoder layers act on source tokens; decoder layers (self + cross
    attention) and the output projection on target tokens; each attention adds 2 · length · d_model
    (scores Q·Kᵀ and the weighted sum of V).
    """
    d, f = cfg.d_model, cfg.d_ff
    encoder = cfg.encoder_layers * (4 * d * d + 2 * d * f + 2 * length * d)
    decoder = cfg.decoder_layers * (8 * d * d + 2 * d * f + 4 * length * d)
    forward = 2 * (src_tokens * encoder + tgt_tokens * (decoder + d * cfg.tgt_vocab))
    return 3.0 * forward


# The command line as a user runs it, for benchmarks that train, translate and score.
def nmtk(*args: str) -> subprocess.CompletedProcess[str]:
    result = subprocess.run([sys.executable, "-m", "nmtk", *args], capture_output=True, text=True, cwd=ROOT,
                            env={**os.environ, "NMTK_DATA": str(data_root())})
    if result.returncode:
        sys.exit(f"nmtk {' '.join(args)} failed:\n{result.stderr[-2000:]}")
    return result


def train(recipe: Path, run: Path, data: Path, minutes: float, windows: list[int], seed: int,
          root: Path | None = None) -> int:
    """Train ``recipe`` into ``run`` for ``minutes`` from ``seed``, average its last N checkpoints for
    each N of ``windows`` (``checkpoint_avg_last<N>.pt``); returns the updates. ``root``: the data root
    (default: Multi30k's)."""
    nmtk("train", str(recipe), "--run-dir", str(run), "--data", str(data), "--set", f"train.max_minutes={minutes}",
         "--set", f"train.seed={seed}", *(["--data-root", str(root)] if root else []))
    for last in windows:
        if len(list(run.glob("checkpoint_[0-9]*.pt"))) >= last:  # a smoke run (--pair-minutes 0.2) has fewer
            nmtk("average", str(run), "--last", str(last), "--force")
    lines = (run / "train.jsonl").read_text().splitlines()
    return max(json.loads(line)["update"] for line in lines)


def bleu(run: Path, source: Path, reference: Path, *options: str) -> float:
    hypothesis = run / f"{source.name}.hyp"
    nmtk("translate", "-m", str(run), "-i", str(source), "-o", str(hypothesis), "--force", *options)
    score = nmtk("score", "-r", str(reference), str(hypothesis), "--metrics", "bleu", "--json")
    return round(json.loads(score.stdout)["bleu"]["score"], 2)


def multi30k_lines(name: str) -> list[str]:
    """The lines of one of Multi30k's files (``train.en.gz``) under the data root."""
    with gzip.open(data_root() / "multi30k" / name, "rt", encoding="utf-8") as handle:
        return [line.rstrip("\n") for line in handle]


def test_bleu(run: Path, data: Path, src: str = "en", tgt: str = "de") -> float:
    """test_2016_flickr's BLEU (its raw text as the prepared ``data`` keeps it), translated with the
    run's last 5 checkpoints averaged when it has them."""
    average = run / "checkpoint_avg_last5.pt"
    return bleu(run, data / f"test_2016_flickr.raw.{src}", data / f"test_2016_flickr.raw.{tgt}",
                *(["--checkpoint", str(average)] if average.exists() else []))
