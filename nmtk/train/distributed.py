"""Process-group setup for torchrun (DDP): NCCL on GPU, gloo on CPU; helpers that work with 1 process too.

**Timeouts.** Every collective of training (gradient all-reduce, the few numbers summed each update)
gives up after ``NMTK_DIST_TIMEOUT`` seconds (default 600): a process or node that stops answering
ends the run on the others with one error line instead of leaving them waiting forever. A process
that *dies* is noticed at once (its connections close). Waits that are long by nature — the other
ranks waiting while rank 0 prepares the data or runs validation — use a second (gloo) group with a
timeout of ``NMTK_DIST_WAIT_TIMEOUT`` seconds (default 6 hours). torchrun's own rendezvous waits
``join_timeout`` (600 s by default) for every node to arrive.
"""

from __future__ import annotations

import gc
import os
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, TypeVar

import torch
import torch.distributed as dist

from nmtk.errors import NmtkError

T = TypeVar("T")
DEFAULT_TIMEOUT_S = 600
DEFAULT_WAIT_TIMEOUT_S = 6 * 3600


@dataclass(frozen=True)
class DistInfo:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    wait_group: Any = field(default=None, compare=False)  # gloo group for long waits (see module docstring)

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def enabled(self) -> bool:
        return self.world_size > 1


def _seconds(name: str, default: int) -> timedelta:
    raw = os.environ.get(name, str(default))
    try:
        value = float(raw)
    except ValueError:
        raise NmtkError(f"{name}={raw!r}: expected a number of seconds") from None
    if value <= 0:
        raise NmtkError(f"{name}={raw!r}: expected a positive number of seconds")
    return timedelta(seconds=value)


def collective_timeout() -> timedelta:
    return _seconds("NMTK_DIST_TIMEOUT", DEFAULT_TIMEOUT_S)


def init_distributed(device_type: str) -> DistInfo:
    """Join the torchrun job described by RANK / WORLD_SIZE / LOCAL_RANK; one process when absent."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return DistInfo()
    rank, local = int(os.environ["RANK"]), int(os.environ.get("LOCAL_RANK", "0"))
    timeout, wait = collective_timeout(), _seconds("NMTK_DIST_WAIT_TIMEOUT", DEFAULT_WAIT_TIMEOUT_S)
    if not dist.is_initialized():
        backend = "nccl" if device_type == "cuda" else "gloo"
        if device_type == "cuda":
            torch.cuda.set_device(local)
        dist.init_process_group(backend=backend, timeout=timeout)
    wait_group = dist.new_group(backend="gloo", timeout=max(wait, timeout))
    return DistInfo(rank, world, local, wait_group)


def lost_peer(exc: BaseException) -> bool:
    """Whether ``exc`` says another process of the job stopped or stopped answering."""
    if isinstance(exc, getattr(dist, "DistError", ())):
        return True
    text = str(exc)
    return isinstance(exc, RuntimeError) and any(
        sign in text for sign in ("gloo", "Gloo", "NCCL", "Connection closed", "Connection reset", "Timed out",
                                  "timed out", "Broken pipe"))


def lost_peer_error(exc: BaseException, info: DistInfo) -> NmtkError:
    """One line for a training job that lost one of its processes."""
    detail = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    timeout = int(collective_timeout().total_seconds())
    return NmtkError(f"rank {info.rank}: another process of this {info.world_size}-process job stopped or did not "
                     f"answer within NMTK_DIST_TIMEOUT={timeout} s ({detail[:200]}); relaunch the same command "
                     "to resume from the last checkpoint")


def all_reduce_sum(values: list[float], device: torch.device, info: DistInfo) -> list[float]:
    """Sum a few numbers over ranks (identity in a single process)."""
    if not info.enabled:
        return values
    tensor = torch.tensor(values, dtype=torch.float64, device=device)
    dist.all_reduce(tensor)
    return tensor.tolist()


class FlagSum:
    """Sums a few rank-local numbers (stop and save flags) over the ranks, every time in the same
    tensors, allocated once: on CUDA a pinned host buffer and a device buffer, so the copy in does not
    wait and the host reads back once, after the one all-reduce."""

    def __init__(self, size: int, device: torch.device, info: DistInfo) -> None:
        self.info = info
        cuda = device.type == "cuda"
        self.host = torch.zeros(size, dtype=torch.float64, pin_memory=cuda)
        self.buffer = torch.zeros(size, dtype=torch.float64, device=device) if cuda else self.host

    def __call__(self, values: list[float]) -> list[float]:
        if not self.info.enabled:
            return values
        for i, value in enumerate(values):
            self.host[i] = value
        if self.buffer is not self.host:
            self.buffer.copy_(self.host, non_blocking=True)
        dist.all_reduce(self.buffer)
        if self.buffer is not self.host:
            self.host.copy_(self.buffer)
        return self.host.tolist()


def all_gather_object(obj: T, info: DistInfo) -> list[T]:
    """Every rank's ``obj``, in rank order, on every rank (``[obj]`` in a single process)."""
    if not info.enabled:
        return [obj]
    gathered: list[Any] = [None] * info.world_size
    dist.all_gather_object(gathered, obj, group=info.wait_group)
    return gathered


def broadcast_object(obj: T, info: DistInfo, wait: bool = False) -> T:
    """Rank 0's ``obj`` (any picklable object) on every rank; ``wait=True`` after long rank-0 work."""
    if not info.enabled:
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=0, group=info.wait_group if wait else None)
    return box[0]


def barrier(info: DistInfo) -> None:
    if info.enabled:
        dist.barrier()


def shutdown(info: DistInfo) -> None:
    """Destroy the job's process groups, then collect what still refers to them (DDP's reducer, a
    trainer in a reference cycle) while the interpreter is alive: a gloo group freed only during the
    interpreter's finalisation can abort the process (SIGABRT, "terminate called without an active
    exception", seen once in 4-process runs; pytorch#179291)."""
    if info.enabled and dist.is_initialized():
        try:
            dist.destroy_process_group()
        except (RuntimeError, ValueError):  # a broken group after a lost peer: nothing left to tidy
            pass
        gc.collect()


def per_process_update_freq(update_freq: int, world_size: int) -> int:
    """The batches each of ``world_size`` processes accumulates per update: ``train.update_freq`` is the
    whole update's, so that no launcher changes the update size (fairseq's ``--update-freq`` is per
    process: torchrun with 8 processes makes a one-GPU recipe's update 8 times larger, silently)."""
    if update_freq % world_size:
        lower = max(world_size, update_freq // world_size * world_size)
        raise NmtkError(f"train.update_freq = {update_freq} (batches per update, all processes together) cannot be "
                        f"shared by {world_size} processes: set a multiple of {world_size}, e.g. --set "
                        f"train.update_freq={lower}, and batching.batch_tokens to keep the tokens per update")
    return update_freq // world_size


def update_size(update_freq: int, batch_tokens: int, world_size: int) -> str:
    """The line a run starts with: how large an update is and how it is shared."""
    per = per_process_update_freq(update_freq, world_size)
    shared = f"{world_size} processes × {per}" if world_size > 1 else "1 process"
    batches = f"{update_freq} batch{'es' if update_freq > 1 else ''}"
    total = update_freq * batch_tokens
    return f"update: {batches} of ≤ {batch_tokens:,} tokens = ≤ {total:,} tokens per side ({shared})"


def launch_local(argv: list[str], nproc: int, update_freq: int) -> int:
    """Re-run this ``nmtk`` command line under torchrun with ``nproc`` local processes (each takes its
    share of the update: `per_process_update_freq`); returns torchrun's exit code."""
    import subprocess
    import sys

    from nmtk.console import console

    cleaned, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg == "--nproc":
            skip = True
        elif not arg.startswith("--nproc="):
            cleaned.append(arg)
    per_process_update_freq(update_freq, nproc)  # refused here, before torchrun starts nproc processes
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}",
           "-m", "nmtk", *cleaned]
    console.print(f"launching: {' '.join(cmd[2:])}")
    return subprocess.call(cmd)
