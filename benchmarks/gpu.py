"""GPU training and decoding of the paper's base and big models, through nmtk's real Trainer.

On a CUDA machine: WMT-shaped synthetic data (newstest-like subword lengths, a 37,000-type joint
vocabulary; no corpus or subword model needed) is binarised into a temporary folder, and the real
`Trainer` update (batching plan, micro-batches, prefetcher, chunked loss, optimizer, DDP where there
are several GPUs) runs on it in bf16, by default as users run it: each WMT14 recipe as written (8
batches of 3,125 tokens an update, run as the micro-batches nmtk chooses for the GPU), the paper's
8-GPU shape per GPU (one 3,125-token micro-batch an update) and the best shape (one of 25,000).

Per row: target tokens/s (the median of windows of ``WINDOW`` updates, the clock read after one
synchronize per window, so updates overlap as in training; the updates run under
``torch.cuda.set_sync_debug_mode("error")``: a host sync inside one is reported), model FLOPs
utilisation from the batches' real source and target tokens and lengths against the detected GPU's
dense 16-bit peak (`_util.DENSE_PEAK_FLOPS`), peak memory, CUDA kernels per update (torch profiler,
memcpy and memset left out, no checkpoint in the window: what compilation changes) with their GPU
time by family and the share of the update the GPU was busy (``kernel_time``), and the eager
update's ATen ops and host syncs (`nmtk.train.probe`; under its dispatch mode dynamo runs eagerly,
so those two describe the eager update). Then beam-4 decoding of 1,000 sentences with the same
(untrained) model: a random model writes to its length limit, so sentences/s is a lower bound and
target tokens/s is the figure to compare. With several GPUs the training rows are repeated on all
of them through torchrun. One JSON line.

On a machine without CUDA it says so and prints the CPU proxies instead (ATen ops and host syncs per
update for base and big, eager, fp32, small batches), then exits 0.

Usage: python benchmarks/gpu.py [--updates 30] [--rows base:compiled:recipe,base:eager:1x3125,...]
       make gpu-bench
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from _util import ROOT, dense_peak, flops_per_update

VOCAB = 37_000
#: What users run: each WMT14 recipe as written on one GPU (its micro-batches nmtk's choice), the per-GPU
#: shape of the paper's 8-GPU setup (one 3,125-token micro-batch per update) on one GPU, and the best
#: shape (one 25,000-token micro-batch) as the reference. A row is MODEL:MODE:SHAPE, MODE eager,
#: compiled (`compile_layers`), graphs (the same with CUDA graphs, ``reduce-overhead``), model (the
#: whole forward compiled: `compile_for_training`), eager-cuda-graphs, compiled-cuda-graphs or
#: model-cuda-graphs (each micro-batch one captured graph, ``train.cuda_graphs``: `nmtk.train.graphs`),
#: SHAPE ``recipe`` or ``NxT`` (N micro-batches of ≤ T tokens per update).
DEFAULT_ROWS = ("base:compiled:recipe,big:compiled:recipe,base:compiled:1x3125,base:compiled:1x25000,"
                "big:compiled:1x25000,base:compiled-cuda-graphs:1x3125,base:compiled-cuda-graphs:recipe,"
                "base:compiled-cuda-graphs:1x25000,base:eager-cuda-graphs:1x3125")


def synthetic_data(folder: Path, pairs: int, seed: int = 1) -> Any:
    """A prepared-data folder of ``pairs`` WMT-shaped pairs: subword lengths drawn log-normally around
    newstest's (median ~25, a long tail to 250), target ~1.05 × source, ids uniform over the vocabulary."""
    from nmtk.data.binarized import SideWriter, id_dtype
    from nmtk.manifest import Manifest, PreparedData

    rng = np.random.default_rng(seed)
    data, dtype = PreparedData(folder), id_dtype(VOCAB)
    folder.mkdir(parents=True, exist_ok=True)
    for split, n in (("train", pairs), ("valid", 64)):
        src_len = np.clip(rng.lognormal(3.2, 0.55, n), 1, 250).astype(int)
        tgt_len = np.clip((src_len * rng.normal(1.05, 0.1, n)).round(), 1, 250).astype(int)
        for lang, lengths in (("en", src_len), ("de", tgt_len)):
            writer = SideWriter(data.prefix(split, lang), dtype)
            for start in range(0, n, 10_000):
                writer.add([rng.integers(4, VOCAB, int(k)).tolist() for k in lengths[start : start + 10_000]])
            writer.close()
        data.raw(split, "de").write_text("x\n" * n)
    manifest = Manifest(format=1, source_lang="en", target_lang="de", dtype=str(dtype),
                        vocab={"joint": True, "models": {"en": "none", "de": "none"},
                               "size": {"en": VOCAB, "de": VOCAB}, "sha256": {"none": "0" * 64}})
    manifest.write(data.manifest_path)
    return manifest


def trainer_for(name: str, work: Path, overrides: list[str], device: Any, info: Any) -> Any:
    from nmtk.manifest import PreparedData
    from nmtk.recipe import load_recipe
    from nmtk.rundir import RunDir
    from nmtk.train.trainer import Trainer

    recipe = load_recipe(ROOT / "recipes" / f"wmt14-en-de-{name}.toml",
                         ["train.validate_every_updates=1000000", "train.validate_at_end=false",
                          "train.save_every_minutes=0", "train.log_every_updates=1000000", "model.max_positions=256",
                          *overrides])
    run = RunDir(work / f"run-{name}-{time.monotonic_ns()}")
    run.path.mkdir(parents=True, exist_ok=True)
    return Trainer(recipe, PreparedData(work / "data"), None, run, device, info)


#: Whether each row also counts the eager update's ATen ops and host syncs (``--no-costs``: not).
COUNT_OPS = True

#: Updates per timed window: the clock is read after one synchronize per window.
WINDOW = 5


def shape_overrides(shape: str, world_size: int) -> list[str]:
    """The recipe settings of a row's SHAPE: ``recipe`` (as written: its update and nmtk's micro-batches),
    or ``NxT`` (an update of N batches of ≤ T tokens per GPU, run as they are)."""
    if shape == "recipe":
        return []
    count, tokens = (int(x) for x in shape.split("x"))
    return [f"batching.batch_tokens={tokens}", f"train.update_freq={count * world_size}",
            f"train.micro_batch_tokens={tokens}"]


def train_row(name: str, mode: str, shape: str, updates: int, work: Path, info: Any) -> dict[str, Any]:
    """Target tokens/s of the real update loop after warm-up (compilation included in warm-up), then ops
    and syncs counted over 3 more updates (counting slows the host, so it is not timed)."""
    import torch

    from nmtk.train.probe import update_costs

    device = torch.device("cuda", info.local_rank if info.enabled else 0)
    compiled = mode not in ("eager", "eager-cuda-graphs")
    graphed = mode.endswith("cuda-graphs")
    overrides = [*shape_overrides(shape, info.world_size), "train.precision=bf16",
                 f"train.compile={'true' if compiled else 'false'}", f"train.cuda_graphs={str(graphed).lower()}"]
    if mode == "graphs":  # compile_layers with CUDA graphs
        os.environ["NMTK_COMPILE_MODE"] = "reduce-overhead"
    if mode.startswith("model"):  # the whole forward compiled, loss head included (model-cuda-graphs: graphed)
        os.environ["NMTK_COMPILE_SCOPE"] = "model"
    warm = 8 if compiled else 3
    updates = max(WINDOW, updates // WINDOW * WINDOW)
    trainer = trainer_for(name, work, [*overrides, f"train.max_updates={warm + updates}"], device, info)
    micro = trainer.plan_micro_batches()
    trainer.step.wrap()
    captured = trainer.step.graphs.prepare() if trainer.step.graphs is not None else None
    for variable in ("NMTK_COMPILE_MODE", "NMTK_COMPILE_SCOPE"):
        os.environ.pop(variable, None)
    clock = UpdateClock(trainer, warm, device)
    torch.cuda.reset_peak_memory_stats(device)
    trainer.train()
    trainer.train_step = clock.original
    kernels, timed_kernels = cuda_kernels_per_update(trainer, 3)
    fallbacks = trainer.step.graphs.eager_batches if trainer.step.graphs is not None else None
    timed = timings(trainer, clock, updates, info)
    row = {"model": name, "mode": mode, "shape": shape, "micro_batches": micro, "graphs": captured,
           "micro_batches_no_shape_held": fallbacks, **timed, "cuda_kernels_per_update": kernels,
           "kernel_time": kernel_breakdown(timed_kernels, 3, timed["step_s"]) if timed_kernels else None}
    if COUNT_OPS:  # a Python dispatch mode makes dynamo run eagerly: ops and syncs of the eager update (the
        trainer.recipe.train.max_updates += 3  # compiled launches are `cuda_kernels_per_update`)
        costs, sites = update_costs(trainer)
        steady = costs[:-1] or costs  # the last of the run saves its checkpoint
        row.update({"eager_aten_ops_per_update": int(np.median([c.ops for c in steady])),
                    "of_which_optimizer": int(np.median([c.optimizer_ops for c in steady])),
                    "host_syncs_per_update": float(np.mean([c.syncs for c in steady])), "sync_sites": sites})
    trainer.close()
    return row


def timings(trainer: Any, clock: UpdateClock, updates: int, info: Any) -> dict[str, Any]:
    """What the timed updates measured: tokens/s, MFU, peak memory, a host sync inside an update."""
    import torch

    device = clock.device
    rates = clock.window_rates(info.world_size)
    src, tgt = (v * info.world_size for v in clock.tokens())
    length = clock.mean_length()
    flops = flops_per_update(trainer.cfg, src / updates, tgt / updates, round(length))
    gpu = torch.cuda.get_device_name(device)
    peak, seconds = dense_peak(gpu), clock.seconds()
    return {"gpus": info.world_size, "gpu": gpu, "tgt_tokens_per_update": round(tgt / updates),
            "src_tokens_per_update": round(src / updates), "updates": updates,
            "tgt_tokens_per_s": round(float(np.median(rates))), "tgt_tokens_per_s_windows": [round(r) for r in rates],
            "step_s": round(seconds / updates, 4), "host_cpu_s_per_update": round(clock.host_seconds() / updates, 4),
            "mfu_percent": round(100 * flops * updates / seconds / (peak * info.world_size), 1) if peak else None,
            "peak_flops": peak, "peak_memory_gib": round(torch.cuda.max_memory_allocated(device) / 2**30, 2),
            "sync_in_update": clock.sync_error}


class UpdateClock:
    """Wraps ``trainer.train_step``: after ``warm`` updates, each update runs under CUDA's sync debug
    mode "error" (a host sync inside it is kept as ``sync_error`` and the run goes on without the mode)
    and the clock is read after one synchronize per ``WINDOW`` updates; the tokens of the timed updates
    are counted from the batching plan."""

    def __init__(self, trainer: Any, warm: int, device: Any) -> None:
        self.trainer, self.warm, self.device = trainer, warm, device
        self.original, self.done, self.stamps, self.groups = trainer.train_step, 0, [], []
        self.sync_error: str | None = None
        self.host: list[float] = []  # the training thread's CPU time at the same points as ``stamps``
        trainer.train_step = self

    def __call__(self, group: list[np.ndarray], *args: Any) -> Any:
        import torch

        timed = self.done >= self.warm
        if self.done == self.warm:
            torch.cuda.synchronize(self.device)
            self.stamps.append(time.perf_counter())
            self.host.append(time.thread_time())
        try:
            torch.cuda.set_sync_debug_mode("error" if timed and self.sync_error is None else "default")
            result = self.original(group, *args)
        except RuntimeError as exc:
            if "synchroniz" not in str(exc):
                raise
            self.sync_error = str(exc).splitlines()[0][:300]
            torch.cuda.set_sync_debug_mode("default")
            result = self.original(group, *args)
        finally:
            torch.cuda.set_sync_debug_mode("default")
        self.done += 1
        if timed:
            self.groups.append(group)
            if (self.done - self.warm) % WINDOW == 0:
                torch.cuda.synchronize(self.device)  # the benchmark's one sync per window
                self.stamps.append(time.perf_counter())
                self.host.append(time.thread_time())
        return result

    def tokens(self) -> tuple[int, int]:
        """Source and target tokens of this rank's timed updates."""
        t = self.trainer
        src = sum(int(t.plan.src_lengths[b].sum()) for g in self.groups for b in g)
        return src, sum(int(t.tgt_lengths[b].sum()) for g in self.groups for b in g)

    def mean_length(self) -> float:
        """The timed batches' mean sentence length (source and target), what attention's cost grows with."""
        src, tgt = self.tokens()
        return (src + tgt) / max(2 * sum(len(b) for g in self.groups for b in g), 1)

    def seconds(self) -> float:
        return self.stamps[-1] - self.stamps[0]

    def host_seconds(self) -> float:
        """CPU time the training thread spent over the timed updates (launching, not waiting: the
        synchronize of each window spins, so it counts a little of the wait too)."""
        return self.host[-1] - self.host[0]

    def window_rates(self, world_size: int) -> list[float]:
        """Target tokens/s of each window, all ranks (each rank's share of an update is alike)."""
        t, rates = self.trainer, []
        for i in range(len(self.stamps) - 1):
            groups = self.groups[i * WINDOW : (i + 1) * WINDOW]
            tgt = sum(int(t.tgt_lengths[b].sum()) for g in groups for b in g) * world_size
            rates.append(tgt / (self.stamps[i + 1] - self.stamps[i]))
        return rates


#: Kernel families by name (the first that matches), for where an update's GPU time goes.
KERNEL_KINDS = (("attention", ("flash", "fmha", "attention", "sdpa", "efficient")),
                ("products", ("gemm", "cutlass", "xmma", "cublas", "sm90_", "sm80_", "wgmma")),
                ("optimizer", ("adam", "multi_tensor", "foreach")),
                ("communication", ("nccl",)),
                ("compiled (triton)", ("triton",)),
                ("softmax and loss", ("softmax", "nll", "cross_entropy", "log_softmax")),
                ("norms and reductions", ("norm", "reduce")),
                ("element-wise", ("elementwise", "vectorized", "unrolled", "copy", "fill")))


def kernel_breakdown(kernels: list[tuple[str, float]], updates: int, step_s: float) -> dict[str, Any]:
    """Per update: kernels, their GPU time (ms), that time by family (`KERNEL_KINDS`), the longest kernels
    by name, and ``gpu_busy``: the share of an update's wall time (``step_s``) the GPU spent in kernels
    (near 1: the GPU is the bound, fewer or fused kernels the cure; far below: launches or the host).
    ``kernels``: (name, microseconds) over ``updates`` updates."""
    kinds: dict[str, float] = {}
    names: dict[str, float] = {}
    for name, us in kernels:
        low = name.lower()
        kind = next((k for k, keys in KERNEL_KINDS if any(key in low for key in keys)), "other")
        kinds[kind] = kinds.get(kind, 0.0) + us
        names[name] = names.get(name, 0.0) + us
    total = sum(kinds.values()) / 1000 / updates
    out: dict[str, Any] = {
        "kernels": round(len(kernels) / updates, 1), "kernel_ms": round(total, 3),
        "kernel_ms_by_kind": {k: round(v / 1000 / updates, 3) for k, v in sorted(kinds.items(), key=lambda x: -x[1])},
        "longest_kernels_ms": {n[:80]: round(v / 1000 / updates, 3)
                               for n, v in sorted(names.items(), key=lambda x: -x[1])[:8]}}
    out["gpu_busy"] = round(total / 1000 / step_s, 3)
    return out


def cuda_kernels_per_update(trainer: Any, updates: int) -> tuple[float | None, list[tuple[str, float]]]:
    """CUDA kernels launched per update over ``updates`` more updates (torch profiler), compiled or not:
    memcpy and memset left out (not the model's work), and no checkpoint in the window; and the kernels
    as (name, microseconds), for `kernel_breakdown`."""
    try:
        from torch.autograd import DeviceType
        from torch.profiler import ProfilerActivity, profile

        trainer.recipe.train.max_updates += updates
        save, trainer.save = trainer.save, lambda *args, **kwargs: None  # the run's end saves: not counted
        try:
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                trainer.train()
        finally:
            trainer.save = save
        kernels = [e for e in prof.events() if e.device_type == DeviceType.CUDA
                   and "memcpy" not in e.name.lower() and "memset" not in e.name.lower()]
        return round(len(kernels) / updates, 1), [(e.name, e.time_range.elapsed_us()) for e in kernels]
    except Exception as exc:  # the profiler is optional here: the row still has its timings
        print(f"cuda kernel count unavailable: {exc}", file=sys.stderr)
        return None, []


def decode_row(name: str, work: Path) -> dict[str, Any]:
    """Beam-4 decoding of 1,000 synthetic sources with the (untrained) model, bf16."""
    import torch

    from nmtk.decode.search.batches import decode_ids
    from nmtk.decode.search.config import SearchConfig
    from nmtk.model import Transformer
    from nmtk.recipe import load_recipe, model_config

    recipe = load_recipe(ROOT / "recipes" / f"wmt14-en-de-{name}.toml", ["model.max_positions=256"])
    model = Transformer(model_config(recipe, VOCAB, VOCAB)).cuda().eval()
    rng = np.random.default_rng(2)
    sources = [rng.integers(4, VOCAB, int(n)).tolist() for n in np.clip(rng.lognormal(3.2, 0.55, 1000), 1, 200)]
    search = SearchConfig(beam=4, max_len_a=1.0, max_len_b=10)
    decode_ids(model, sources[:50], search, device=torch.device("cuda"), precision="bf16")
    torch.cuda.synchronize()
    start = time.perf_counter()
    hyps = decode_ids(model, sources, search, device=torch.device("cuda"), precision="bf16")
    torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    out_tokens = sum(len(h[0].tokens) + 1 for h in hyps if h)
    return {"model": name, "beam": 4, "sentences_per_s": round(len(sources) / seconds, 1),
            "tgt_tokens_per_s": round(out_tokens / seconds), "beam_tokens": search.budget("cuda")}


def cpu_proxies(work: Path) -> dict[str, Any]:
    """Ops and host syncs per update of the eager fp32 update on this CPU, set up as on a GPU (the loss
    over the whole micro-batch, one micro-batch per update), 1,024 target tokens (the op count does not
    depend on the batch size then: no loop over chunks)."""
    import torch

    from nmtk.train.distributed import DistInfo
    from nmtk.train.probe import update_costs

    torch.set_num_threads(2)
    out = {}
    for name in ("base", "big"):
        trainer = trainer_for(name, work, ["batching.batch_tokens=1024", "train.update_freq=1", "train.max_updates=5",
                                           "train.precision=fp32", "train.compile=false", "train.log_every_updates=5",
                                           "train.loss_chunk_tokens=1000000"], torch.device("cpu"), DistInfo())
        costs, sites = update_costs(trainer)
        between = costs[1:-1]  # the first warms up; the last logs and saves
        out[name] = {"aten_ops_per_update": int(np.median([c.ops for c in between])),
                     "of_which_optimizer": int(np.median([c.optimizer_ops for c in between])),
                     "host_syncs_per_update_between_log_points": float(np.mean([c.syncs for c in between])),
                     "host_syncs_at_the_log_point": costs[-1].syncs, "sync_sites": sites}
        trainer.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--updates", type=int, default=30, help="timed updates per row (after warm-up)")
    parser.add_argument("--rows", default=DEFAULT_ROWS)
    parser.add_argument("--pairs", type=int, default=400_000, help="synthetic training pairs")
    parser.add_argument("--no-decode", action="store_true", help="training rows only")
    parser.add_argument("--no-costs", action="store_true", help="no ATen op and host sync counts (quicker)")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)  # a torchrun rank
    parser.add_argument("--work", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    import torch

    global COUNT_OPS
    COUNT_OPS = not args.no_costs
    if not torch.cuda.is_available():
        with tempfile.TemporaryDirectory() as tmp:
            synthetic_data(Path(tmp) / "data", 4_000)
            report = {"benchmark": "gpu", "cuda": False,
                      "note": "needs CUDA: these are the CPU proxies of the eager fp32 update",
                      "cpu_proxies": cpu_proxies(Path(tmp))}
        print(json.dumps(report))
        return
    if args.worker:
        from nmtk.train.distributed import init_distributed

        info = init_distributed("cuda")
        rows = [train_row(*r.split(":"), args.updates, args.work, info) for r in args.rows.split(",")]
        if info.is_main:
            print("ROWS " + json.dumps(rows), flush=True)
        return
    from nmtk.train.distributed import DistInfo

    report: dict[str, Any] = {"benchmark": "gpu", "cuda": True, "date": time.strftime("%Y-%m-%d"),
                              "gpu": torch.cuda.get_device_name(), "gpus": torch.cuda.device_count()}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        synthetic_data(work / "data", args.pairs)
        report["train_1gpu"] = [guarded(r, args.updates, work, DistInfo()) for r in args.rows.split(",")]
        if torch.cuda.device_count() > 1:
            report["train_all_gpus"] = _torchrun(args, work)
        if not args.no_decode:
            report["decode"] = [decode_row(name, work) for name in ("base", "big")]
    print(json.dumps(report))


def guarded(row: str, updates: int, work: Path, info: Any) -> dict[str, Any]:
    """`train_row` of ``row``; a row that fails (a mode this torch cannot run) is reported, not fatal. Each
    row is also printed to stderr as it finishes (``ROW {...}``): a run cut short by a time limit keeps
    the rows it measured (the second GPU call of issue 63 lost all of its rows to that)."""
    try:
        result = train_row(*row.split(":"), updates, work, info)
    except Exception as exc:  # noqa: BLE001 - the other rows still run
        import traceback

        import torch

        traceback.print_exc()  # the whole story, to stderr
        torch.cuda.empty_cache()
        result = {"row": row, "error": f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:300]}"}
    if info.is_main:
        print("ROW " + json.dumps(result), file=sys.stderr, flush=True)
    return result


def _torchrun(args: argparse.Namespace, work: Path) -> list[dict[str, Any]]:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
           f"--nproc_per_node={__import__('torch').cuda.device_count()}", str(Path(__file__).resolve()),
           "--worker", "--work", str(work), "--rows", args.rows, "--updates", str(args.updates)]
    result = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    line = next((line for line in result.stdout.splitlines() if line.startswith("ROWS ")), None)
    if result.returncode or line is None:
        return [{"error": result.stderr.strip()[-1000:]}]
    return json.loads(line[5:])


if __name__ == "__main__":
    main()
