"""Whether bf16 is faster than fp32 on this CPU, for one model's shapes: measured, then cached.

The flag ``avx512_bf16`` says that a CPU *can* multiply bf16; it does not say that doing so is faster.
On an AMD EPYC (Zen 4) bf16 trained the d256 setup at 2.0x fp32's speed; on a 2-core Intel Xeon with
the same flag it trained at 0.64x and decoded at 0.59x (issue 43): oneDNN's kernels, the tile units
present or not, and the casts that autocast adds decide it. So `auto` asks the hardware.

For training the probe times what dominates an update: the matrix products of the model's shapes
(attention projections, the feed-forward pair, the vocabulary projection with the fp32 log-softmax
of the loss), forward and backward on a batch of rows. For decoding, products alone mislead: on the
AMD EPYC above they said bf16 was 1.62x faster, while the demo model decoded test_2016_flickr at
108 sentences/s in bf16 and 109 in fp32 (a search step on few rows is mostly the cache, the beam's
bookkeeping and autocast's casts). So the decoder hands the probe a ``workload``: a few steps of its
own model's search (`nmtk.decode.search.batches.step_probe`). fp32 and bf16 alternate, and the fastest
repeat of each counts, so a burst of other work on the machine does not decide. Each purpose costs
well under a second for a model of the demo's size, once: the answer is cached per CPU model, torch
version, thread count, shapes and probe in the user's cache folder (``$XDG_CACHE_HOME/nmtk`` or
``~/.cache/nmtk``). A cache that cannot be read or parsed is ignored and
rewritten; one that cannot be written is not an error (the next process measures again).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

import torch

Purpose = Literal["train", "decode"]
#: One timed repeat of real work, in bf16 autocast when called with True, else in fp32.
Workload = Callable[[bool], None]

CACHE_NAME = "precision.json"
PROBE_VERSION = 3  # in the cache key: answers of an earlier probe are measured again (3: fp32 decoding steps scripted)
#: How much faster bf16 must be, per purpose. bf16 keeps more memory on a CPU (autocast's weight copies:
#: 2,186 against 1,326 MiB training the d256 setup, 1,197 against 730 MiB decoding the demo model) and
#: rounds, so a tie goes to fp32. Decoding asks more because even its probe, the model's own steps,
#: overstates the whole search's gain: 1.24-1.36x against 1.01x over test_2016_flickr in fresh processes
#: (AMD EPYC with AVX-512 BF16, 2026-11-25); training's products said 1.72x where training ran 1.59x.
MIN_SPEEDUP = {"train": 1.15, "decode": 1.5}
#: Floating-point operations one timed repeat may cost (~20-40 ms at 2 cores' fp32 rate): rows shrink
#: for big models so that the probe stays well under a second.
REPEAT_FLOPS = 1.5e9
REPEATS = 3


@dataclass(frozen=True)
class Shapes:
    """The model's widths and target vocabulary, and training's batch rows: the cache key, and what the
    training probe multiplies."""

    d_model: int
    d_ff: int
    vocab: int
    rows: int = 1024  # training: target tokens a batch holds (capped by REPEAT_FLOPS)


@dataclass(frozen=True)
class Measured:
    """Seconds per repeat in each precision (the fastest of `REPEATS`), and what `auto` makes of them."""

    fp32_s: float
    bf16_s: float

    @property
    def speedup(self) -> float:
        return self.fp32_s / self.bf16_s


def cache_path() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "nmtk" / CACHE_NAME


def cpuinfo(field: str) -> str | None:
    """The first ``field`` of /proc/cpuinfo (``model name``, ``flags``); None where there is none."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            return next((line.split(":", 1)[1].strip() for line in handle if line.startswith(field)), None)
    except OSError:
        return None


def cpu_model() -> str:
    return cpuinfo("model name") or "unknown"


def cache_key(shapes: Shapes, purpose: Purpose, threads: int) -> str:
    rows = f" rows {shapes.rows}" if purpose == "train" else ""
    return (f"{cpu_model()} | torch {torch.__version__} | {threads} threads | {purpose} | d_model {shapes.d_model} "
            f"d_ff {shapes.d_ff} vocab {shapes.vocab}{rows} | probe {PROBE_VERSION}")


def _read_cache(path: Path) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _cached(entry: object) -> Measured | None:
    try:
        measured = Measured(float(entry["fp32_s"]), float(entry["bf16_s"]))  # type: ignore[index]
    except (TypeError, KeyError, ValueError):
        return None
    return measured if measured.fp32_s > 0 and measured.bf16_s > 0 else None


def _write_cache(path: Path, key: str, measured: Measured) -> None:
    from nmtk.files import write_text_atomic

    data = _read_cache(path)
    data[key] = asdict(measured)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(path, json.dumps(data, indent=1, sort_keys=True) + "\n")
    except OSError:
        pass


def bf16_speed(shapes: Shapes, purpose: Purpose, workload: Workload | None = None) -> tuple[Measured, bool]:
    """This CPU's fp32 and bf16 times for ``shapes`` (of ``workload`` where given, else of the shapes'
    training products), and whether they came from the cache."""
    path, key = cache_path(), cache_key(shapes, purpose, torch.get_num_threads())
    cached = _cached(_read_cache(path).get(key))
    if cached is not None:
        return cached, True
    measured = fastest(workload) if workload is not None else measure(shapes)
    _write_cache(path, key, measured)
    return measured, False


def fastest(workload: Workload) -> Measured:
    """The fastest of `REPEATS` runs of ``workload`` in each precision, after one warm-up of each
    (oneDNN builds its kernels on first use), the two alternating."""
    def once(bf16: bool) -> float:
        start = time.perf_counter()
        workload(bf16)
        return time.perf_counter() - start

    best = {False: float("inf"), True: float("inf")}
    for bf16 in best:
        once(bf16)
    for _ in range(REPEATS):
        for bf16 in best:
            best[bf16] = min(best[bf16], once(bf16))
    return Measured(best[False], best[True])


def _weights(shapes: Shapes, generator: torch.Generator, grad: bool) -> list[torch.Tensor]:
    d, ff = shapes.d_model, shapes.d_ff
    dims = [(d, 3 * d), (3 * d, d), (d, ff), (ff, d), (d, shapes.vocab)]  # qkv (as d -> d chains), ffn, output
    return [(torch.randn(n, m, generator=generator) / n**0.5).requires_grad_(grad) for n, m in dims]


def _chain(x: torch.Tensor, weights: list[torch.Tensor]) -> torch.Tensor:
    qkv, out, w1, w2, vocab = weights
    h = x + (x @ qkv) @ out
    h = h + torch.relu(h @ w1) @ w2
    return torch.log_softmax((h @ vocab).float(), dim=-1)


def _rows(shapes: Shapes) -> int:
    d, ff, v = shapes.d_model, shapes.d_ff, shapes.vocab
    per_row = 2 * (3 * d * d + 3 * d * d + 2 * d * ff + d * v) * 3  # forward and backward
    return max(8, min(shapes.rows, int(REPEAT_FLOPS // per_row)))


def measure(shapes: Shapes) -> Measured:
    """Time the shapes' products forward and backward, in fp32 and under bf16 autocast (see the module
    docstring)."""
    generator = torch.Generator().manual_seed(0)
    weights = _weights(shapes, generator, grad=True)
    x = torch.randn(_rows(shapes), shapes.d_model, generator=generator)

    def products(bf16: bool) -> None:
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            _chain(x, weights).mean().backward()

    return fastest(products)
