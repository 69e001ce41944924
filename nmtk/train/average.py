"""Checkpoint averaging (paper §6.1): the element-wise mean of parameters, streamed.

Only the running sum and the checkpoint being read are in memory (about two models), however
many checkpoints are averaged.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from nmtk.checkpoint import load_checkpoint, save_atomic
from nmtk.errors import NmtkError


def _check_same_model(first: dict[str, Any], other: dict[str, Any], path: Path, first_path: Path) -> None:
    if other.get("model_config") != first.get("model_config"):
        raise NmtkError(f"{path}: a different model (recipe) than {first_path}: cannot average them")
    if other.get("vocab") != first.get("vocab"):
        raise NmtkError(f"{path}: a different vocabulary than {first_path}: cannot average them")


def average_checkpoints(paths: list[Path]) -> dict[str, Any]:
    """A checkpoint whose ``model`` is the mean of the given checkpoints' models."""
    if not paths:
        raise NmtkError("no checkpoints to average")
    first = load_checkpoint(paths[0])
    total: dict[str, torch.Tensor] = first["model"]
    for name, tensor in total.items():
        if tensor.is_floating_point():
            total[name] = tensor.float()  # no copy for fp32, so tied weights stay one tensor
    for path in paths[1:]:
        ckpt = load_checkpoint(path)
        _check_same_model(first, ckpt, path, paths[0])
        model = ckpt.pop("model")
        del ckpt
        if model.keys() != total.keys():
            raise NmtkError(f"{path}: parameter names differ from {paths[0]}: cannot average them")
        done: set[int] = set()  # tied weights appear under several names: add each tensor once
        for name, tensor in total.items():
            if not tensor.is_floating_point() or tensor.data_ptr() in done:
                continue
            if model[name].shape != tensor.shape:
                raise NmtkError(f"{path}: {name} has shape {tuple(model[name].shape)}, "
                                f"{paths[0]} has {tuple(tensor.shape)}: cannot average them")
            tensor.add_(model[name].float())
            done.add(tensor.data_ptr())
        del model
    done = set()
    for tensor in total.values():
        if tensor.is_floating_point() and tensor.data_ptr() not in done:
            tensor.div_(len(paths))
            done.add(tensor.data_ptr())
    keep = ("recipe", "recipe_hash", "vocab", "model_config", "nmtk")
    result = {key: first[key] for key in keep if key in first}
    result.update(model=total, averaged_from=[p.name for p in paths], state=first.get("state", {}))
    return result


def select_checkpoints(numbered: list[tuple[int, Path]], last: int | None, updates: str | None) -> list[Path]:
    """By ``--last N`` or ``--updates A-B`` among a run's numbered checkpoints."""
    if updates:
        try:
            low, high = (int(x) for x in updates.split("-", 1))
        except ValueError:
            raise NmtkError(f"--updates {updates!r}: expected A-B, e.g. --updates 9000-10000") from None
        chosen = [p for u, p in numbered if low <= u <= high]
        if not chosen:
            raise NmtkError(f"--updates {updates}: no checkpoint in that range")
        return chosen
    assert last is not None
    if len(numbered) < last:
        raise NmtkError(f"--last {last}: the run has only {len(numbered)} numbered checkpoint(s)")
    return [p for _, p in numbered[-last:]]


def write_average(paths: list[Path], out: Path, force: bool) -> dict[str, Any]:
    if out.exists() and not force:
        raise NmtkError(f"{out}: exists; use --force to overwrite or -o for another name")
    averaged = average_checkpoints(paths)
    save_atomic(averaged, out)
    return averaged
