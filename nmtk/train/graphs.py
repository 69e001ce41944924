"""Micro-batches as captured CUDA graphs (``train.cuda_graphs``): forward, loss and backward of one
micro-batch recorded once per shape and replayed, so that a small micro-batch (the paper's 3,125
tokens per GPU) costs its kernels' time, not ~50 ms of the host launching them one by one.

How, after PyTorch's CUDA notes ("whole-network capture") and torchtitan's graph wrapper:

- every micro-batch is padded to one of a bounded set of shapes (`nmtk.train.shapes`), copied into
  that shape's static buffers, and its graph replayed; all graphs share one memory pool (they are
  replayed one after another and each one's outputs are read before the next runs);
- the gradients exist before capture and are zeroed in place between updates (``set_to_none=False``),
  so each replay's backward adds into the same ``.grad`` tensors: accumulation over an update's
  micro-batches, in place;
- what changes per update is a device tensor the graph reads (``1 / update tokens``), never a Python
  number (a graph would keep the one it saw at capture);
- the optimizer (fused Adam), the clipping and the learning rate run outside, once per update;
- several processes all-reduce the gradients once per update, after the replays (`all_reduce_gradients`),
  in buckets: DDP's hooks would be recorded into the graph as they ran at capture.

Everything is captured at start (after a warm-up on a side stream, as the CUDA notes ask), with the
random state put back after, so that a resumed run draws the same dropout as an uninterrupted one.
On a CPU there is nothing to capture; ``NMTK_GRAPHS_EAGER=1`` runs the same static-shape path there
(buffers, padding, in-place accumulation, the all-reduce), each "replay" a plain call: how the tests
check it against ordinary training.
"""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING

import torch
import torch.distributed as dist

from nmtk.data.dataset import Batch
from nmtk.errors import NmtkError
from nmtk.precision import Precision
from nmtk.train.shapes import Shape, ShapeSet, pad_into
from nmtk.vocab import EOS_ID, PAD_ID

if TYPE_CHECKING:
    from nmtk.train.step import UpdateStep

EAGER_VARIABLE = "NMTK_GRAPHS_EAGER"
WARMUP_PASSES = 3  # before capture, on a side stream (lazy initialisation, cuBLAS workspaces)


#: ``auto`` graphs micro-batches that are the plan's own batches of at most this many tokens. Measured on
#: one H200 (torch 2.11, bf16, base, compiled, 2026-11-30), target tokens/s graphed against not: 3,125
#: tokens 312,968 vs 60,046; 6,250: 377,688 vs 125,148; 12,500: 409,381 vs 198,176; the recipe's update
#: re-cut into ≤ 25,000-token micro-batches: 258,291 vs 281,771 (slower: a shape pads a re-cut batch
#: more than a token bucket). Larger plan batches were not measured graphed.
AUTO_MOST_TOKENS = 12_500


def use_graphs(setting: bool | str, device: torch.device, precision: Precision, languages: int) -> bool:
    """``train.cuda_graphs``: whether this run's micro-batches may be graphed. ``auto``: where they can be
    (a CUDA device, bf16 or fp32, one output vocabulary), and then `graphs_pay` decides once the
    micro-batches are chosen; ``true`` needs all three (or, for tests, ``NMTK_GRAPHS_EAGER=1`` for the
    device) and says which is missing."""
    if setting == "auto":
        return device.type == "cuda" and precision in ("bf16", "fp32") and not languages
    if setting is not True:
        return False
    if device.type != "cuda" and os.environ.get(EAGER_VARIABLE) != "1":
        raise NmtkError(f"train.cuda_graphs = true needs a CUDA GPU (this run is on {device.type}): "
                        "set it to false or auto")
    if precision == "fp16":
        raise NmtkError("train.cuda_graphs = true runs in bf16 or fp32, not fp16 (its loss scaler decides "
                        "per update on the host): set train.precision = bf16 or fp32")
    if languages:
        raise NmtkError("train.cuda_graphs = true: a model with per-language output vocabularies groups each "
                        "batch's sentences on the host, which a graph cannot replay; set it to false")
    return True


def graphs_pay(setting: bool | str, as_planned: bool, tokens: int) -> bool:
    """Whether micro-batches of ``tokens`` tokens are graphed: always with ``true``; with ``auto`` where
    they are the plan's batches (not re-cut by nmtk) of at most `AUTO_MOST_TOKENS`, as on several GPUs
    that share the paper's 25,000-token update (3,125 to 12,500 tokens a GPU), measured 2.1 to 5.2×
    faster there."""
    return setting is True or (as_planned and tokens <= AUTO_MOST_TOKENS)


class StaticPass:
    """One shape's static buffers, the outputs of its recorded pass, and its graph (None: eager)."""

    def __init__(self, shape: Shape, device: torch.device) -> None:
        self.src, self.tgt_in, self.tgt_out = (
            torch.full((shape.rows, shape.length), PAD_ID, dtype=torch.long, device=device) for _ in range(3))
        self.loss: torch.Tensor | None = None
        self.nll: torch.Tensor | None = None
        self.graph: torch.cuda.CUDAGraph | None = None

    def batch(self) -> Batch:
        return Batch(self.src, self.tgt_in, self.tgt_out, src_padded=True)

    def fill_dummy(self) -> None:
        """Something valid to warm up and capture on: one token and a target each row."""
        for buffer in (self.src, self.tgt_in, self.tgt_out):
            buffer.fill_(PAD_ID)
            buffer[:, 0] = EOS_ID


class GraphedMicroBatches:
    """Runs an update's micro-batches through one graph per shape (`UpdateStep.run` hands over here)."""

    def __init__(self, step: UpdateStep, shapes: ShapeSet) -> None:
        self.step, self.shapes = step, shapes
        self.capture = step.device.type == "cuda"
        self.scale = torch.zeros((), device=step.device)  # 1 / the update's tokens over all ranks
        self.passes: dict[Shape, StaticPass] = {}
        self.pool = torch.cuda.graph_pool_handle() if self.capture else None
        self.eager_batches = 0  # micro-batches no shape held (none where the shapes came from the data)

    def largest_batch(self) -> Batch:
        """The largest shape, filled: what `UpdateStep.check_memory` probes."""
        static = StaticPass(max(self.shapes.shapes, key=lambda s: s.tokens), self.step.device)
        static.fill_dummy()
        return static.batch()

    def _record(self, static: StaticPass) -> None:
        """The pass a graph holds: forward, loss, backward into ``.grad``; its loss sums kept."""
        loss, nll = self.step.loss(static.batch())
        (loss * self.scale).backward()
        static.loss, static.nll = loss.detach(), nll

    def prepare(self) -> str:
        """Buffers for every shape and, on a GPU, each one's graph captured; the line that says so."""
        start = time.perf_counter()
        self.step.model.train()
        for p in self.step.model.parameters():
            if p.requires_grad and p.grad is None:
                p.grad = torch.zeros_like(p)  # captured backwards add into these (see the module)
        if self.capture:
            torch.cuda.reset_peak_memory_stats(self.step.device)
            self._capture_all()
            peak = torch.cuda.max_memory_allocated(self.step.device) / 2**20
            for p in self.step.model.parameters():
                if p.grad is not None:
                    p.grad.zero_()
            return (f"CUDA graphs: {len(self.passes)} captured in {time.perf_counter() - start:.1f} s, "
                    f"peak memory {peak:,.0f} MiB")
        self.passes = {shape: StaticPass(shape, self.step.device) for shape in self.shapes.shapes}
        return f"static shapes run eagerly on this {self.step.device.type.upper()} ({EAGER_VARIABLE}=1)"

    def _capture_all(self) -> None:
        """Every shape's graph, largest first (the pool's size), the random state put back after. A capture
        that fails is one line saying how to train without graphs: in a process where a capture failed,
        CUDA's random generator stays in a capturing state (seen on an H200: every later dropout failed
        with "Offset increment outside graph capture"), so training cannot go on without them here."""
        try:
            with torch.random.fork_rng(devices=[self.step.device]):
                for shape in sorted(self.shapes.shapes, key=lambda s: -s.tokens):
                    self.passes[shape] = self._captured(shape)
        except RuntimeError as exc:  # torch.OutOfMemoryError and torch.AcceleratorError are RuntimeErrors
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            how = ("fewer train.graph_shapes, a smaller train.micro_batch_tokens, or "
                   if isinstance(exc, torch.OutOfMemoryError) else "")
            raise NmtkError(f"capturing micro-batches as CUDA graphs failed ({first[:200]}): train with {how}"
                            "--set train.cuda_graphs=false") from exc

    def _captured(self, shape: Shape) -> StaticPass:
        """Warm up on a side stream, then capture the shape's pass into the shared pool."""
        static = StaticPass(shape, self.step.device)
        static.fill_dummy()
        side = torch.cuda.Stream(self.step.device)
        side.wait_stream(torch.cuda.current_stream(self.step.device))
        with torch.cuda.stream(side):
            for _ in range(WARMUP_PASSES):
                self._record(static)
        torch.cuda.current_stream(self.step.device).wait_stream(side)
        static.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(static.graph, pool=self.pool):
            self._record(static)
        return static

    def run(self, batches: list[Batch], total_tokens: float) -> tuple[torch.Tensor, torch.Tensor]:
        """`UpdateStep.run`'s contract: one update over ``batches``; the local (loss sum, nll sum)."""
        step = self.step
        step.model.train()
        self.scale.fill_(1.0 / total_tokens)  # summed over ranks by `all_reduce_gradients`
        loss_sum = torch.zeros((), device=step.device)
        nll_sum = torch.zeros((), device=step.device)
        for batch in batches:
            shape = self.shapes.shape_for(batch.src.size(0), max(batch.src.size(1), batch.tgt_in.size(1)))
            if shape is None:  # cannot happen for the data the shapes were chosen from; eager, correctly
                self.eager_batches += 1
                loss, nll = step.loss(batch.to(step.device))
                (loss * self.scale).backward()
                loss = loss.detach()
            else:
                static = self.passes[shape]
                pad_into(batch, static.src, static.tgt_in, static.tgt_out)  # from the host: one copy
                if static.graph is not None:
                    static.graph.replay()
                else:
                    self._record(static)
                loss, nll = static.loss, static.nll
            loss_sum += loss
            nll_sum += nll
        all_reduce_gradients(step.model, step.info.world_size, step.recipe.train.ddp_bucket_mb,
                             step.recipe.train.ddp_grad_dtype)
        step.apply()
        return loss_sum, nll_sum


def all_reduce_gradients(model: torch.nn.Module, world_size: int, bucket_mb: int, dtype: str = "fp32") -> None:
    """Sum every gradient over the processes, in flat buckets of about ``bucket_mb`` MiB (one collective
    each, as DDP's buckets), in bf16 where ``dtype`` says so. Nothing with one process."""
    if world_size == 1:
        return
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    limit, bucket, size = bucket_mb * 2**20, [], 0
    for grad in [*grads, None]:
        if grad is not None:
            bucket.append(grad)
            size += grad.numel() * grad.element_size()
        if bucket and (grad is None or size >= limit):
            flat = torch.cat([g.reshape(-1) for g in bucket])
            wire = flat.to(torch.bfloat16) if dtype == "bf16" else flat
            dist.all_reduce(wire)
            for g, part in zip(bucket, wire.split([g.numel() for g in bucket]), strict=True):
                g.copy_(part.view_as(g))
            bucket, size = [], 0

