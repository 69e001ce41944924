"""What one training update costs the host: ATen ops (each a kernel launch on a GPU) and host syncs.

Counted from outside the code, with a ``TorchDispatchMode`` around the real `Trainer` loop: every op
the training thread dispatches is seen, whatever module issued it. A host synchronisation is
``aten._local_scalar_dense``, the op behind ``.item()``, ``bool(t)``, ``float(t)`` and ``int(t)``: on
a GPU each makes the CPU wait until the GPU has caught up, so kernel launches stop overlapping GPU
work. So do ops whose output size depends on the values (``nonzero``, ``masked_select``, ``unique``)
and blocking copies from a device to the host (`_host_read`). The optimizer's own step counters are
excluded: they are host tensors on CUDA (reading them costs nothing), only on a CPU run do they look
like device reads. A ``.tolist()`` of a host tensor dispatches nothing, and reads nothing from a device.

Used by the test that holds nmtk's step to zero syncs between log points, and by benchmarks/gpu.py,
whose CPU proxies these counts are.
"""

from __future__ import annotations

import traceback
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

_SYNC = torch.ops.aten._local_scalar_dense.default
#: Ops whose output size depends on the values: on a GPU the host waits for them to know it.
_DATA_DEPENDENT = {torch.ops.aten.nonzero.default, torch.ops.aten.masked_select.default,
                   torch.ops.aten._unique2.default, torch.ops.aten.unique_consecutive.default,
                   torch.ops.aten.unique_dim.default}
_COPIES = {torch.ops.aten._to_copy.default, torch.ops.aten.copy_.default}


def _host_read(func: Any, args: Any, kwargs: dict[str, Any]) -> bool:
    """Whether ``func`` makes the host wait for the device: ``.item()``/``bool()``/``float()`` (one
    scalar), an op whose output size depends on the values, or a blocking copy from a device to the host
    (``.cpu()``, ``.tolist()`` on a device tensor, ``.to("cpu")``)."""
    if func is _SYNC or func in _DATA_DEPENDENT:
        return True
    non_blocking = kwargs.get("non_blocking") or (func is torch.ops.aten.copy_.default and len(args) > 2 and args[2])
    if func not in _COPIES or non_blocking:
        return False
    if func is torch.ops.aten._to_copy.default:
        source, target = args[0], kwargs.get("device")
        return source.device.type != "cpu" and target is not None and torch.device(target).type == "cpu"
    target, source = args[0], args[1]
    return source.device.type != "cpu" and target.device.type == "cpu"


class OpCounter(TorchDispatchMode):
    """Counts dispatched ATen ops and host syncs (outside the optimizer), with where each sync was."""

    def __init__(self) -> None:
        super().__init__()
        self.ops = 0
        self.optimizer_ops = 0  # of ``ops``: inside ``optimizer.step`` (a few fused kernels on CUDA)
        self.in_optimizer = False
        self.syncs = 0
        self.sites: dict[str, int] = {}

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        self.ops += 1
        self.optimizer_ops += self.in_optimizer
        if _host_read(func, args, kwargs or {}):
            stack = traceback.extract_stack()
            if not any("/torch/optim/" in frame.filename for frame in stack):
                self.syncs += 1
                ours = [f for f in stack if "/nmtk/" in f.filename and not f.filename.endswith("probe.py")]
                site = f"{ours[-1].filename.rsplit('/nmtk/', 1)[-1]}:{ours[-1].lineno}" if ours else "torch"
                self.sites[site] = self.sites.get(site, 0) + 1
        return func(*args, **(kwargs or {}))


@dataclass
class UpdateCost:
    update: int
    ops: int
    syncs: int
    optimizer_ops: int = 0


def update_costs(trainer: Any) -> tuple[list[UpdateCost], dict[str, int]]:
    """Run ``trainer.train()`` (its recipe's stopping criterion decides how long) counting ops and syncs
    per update (the update's step, log line, validation or save included); and the sync sites."""
    counter, costs, seen = OpCounter(), [], [0, 0, 0]
    original, step = trainer.after_update, trainer.step.optimizer.step

    def after_update(*args: Any) -> Any:
        reason = original(*args)
        costs.append(UpdateCost(trainer.state.update, counter.ops - seen[0], counter.syncs - seen[1],
                                counter.optimizer_ops - seen[2]))
        seen[:] = [counter.ops, counter.syncs, counter.optimizer_ops]
        return reason

    def optimizer_step(*args: Any, **kwargs: Any) -> Any:
        counter.in_optimizer = True
        try:
            return step(*args, **kwargs)
        finally:
            counter.in_optimizer = False

    trainer.after_update, trainer.step.optimizer.step = after_update, optimizer_step
    try:
        with counter:
            trainer.train()
    finally:
        trainer.after_update, trainer.step.optimizer.step = original, step
    return costs, counter.sites
