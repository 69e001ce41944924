"""Checkpoint averaging (paper §6.1): the element-wise mean of parameters, streamed.

Each checkpoint is memory-mapped and only its parameters are read (its Adam moments, twice the
model's size, are never touched). Once a parameter has been added to the running sum, its pages are
handed back to the kernel (``madvise``), so memory holds the running sum plus one parameter tensor,
however many checkpoints are averaged (benchmarks/average.py measures it).
"""

from __future__ import annotations

import ctypes
import mmap
import sys
from pathlib import Path

import torch

from nmtk.checkpoint import Checkpoint
from nmtk.errors import NmtkError
from nmtk.rundir import RunDir


def _check_same_model(first: Checkpoint, other: Checkpoint, path: Path, first_path: Path) -> None:
    if other.model_config != first.model_config:
        raise NmtkError(f"{path}: a different model (recipe) than {first_path}: cannot average them")
    if other.vocab != first.vocab:
        raise NmtkError(f"{path}: a different vocabulary than {first_path}: cannot average them")


MADV_DONTNEED = 4  # <sys/mman.h> on Linux


def _release(tensor: torch.Tensor) -> None:
    """Drop the resident pages of a tensor read from a memory-mapped checkpoint (Linux).

    The pages are clean copies of the file: were any of them (or a neighbour sharing a page) read
    again, the kernel would read it back from the file. Elsewhere this does nothing and the mapping
    is released when the checkpoint is closed.
    """
    if not sys.platform.startswith("linux") or tensor.numel() == 0:
        return
    start = tensor.data_ptr() // mmap.PAGESIZE * mmap.PAGESIZE
    end = tensor.data_ptr() + tensor.numel() * tensor.element_size()
    ctypes.CDLL(None).madvise(ctypes.c_void_p(start), ctypes.c_size_t(end - start), MADV_DONTNEED)


def _float_copy(model: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The parameters as fp32 tensors of their own; tied weights (one storage, several names) stay tied."""
    copies: dict[int, torch.Tensor] = {}
    total = {}
    for name, tensor in model.items():
        key = tensor.data_ptr()
        if key not in copies:
            copies[key] = tensor.float().clone() if tensor.is_floating_point() else tensor.clone()
            _release(tensor)
        total[name] = copies[key]
    return total


def average_checkpoints(paths: list[Path]) -> Checkpoint:
    """A checkpoint whose ``model`` is the mean of the given checkpoints' models; the first one's
    description (configuration, vocabulary, recipe, training state) with the names averaged."""
    if not paths:
        raise NmtkError("no checkpoints to average")
    first = Checkpoint.read(paths[0], mmap=True)
    total = _float_copy(first.model)
    for path in paths[1:]:
        other = Checkpoint.read(path, mmap=True)
        _check_same_model(first, other, path, paths[0])
        _add(total, other.model, path, paths[0])
        del other
    done: set[int] = set()
    for tensor in total.values():
        if tensor.is_floating_point() and tensor.data_ptr() not in done:
            tensor.div_(len(paths))
            done.add(tensor.data_ptr())
    return Checkpoint(model=total, model_config=first.model_config, vocab=first.vocab, recipe=first.recipe,
                      recipe_hash=first.recipe_hash, nmtk=first.nmtk, state=first.state,
                      averaged_from=[p.name for p in paths])


def _add(total: dict[str, torch.Tensor], model: dict[str, torch.Tensor], path: Path, first: Path) -> None:
    if model.keys() != total.keys():
        raise NmtkError(f"{path}: parameter names differ from {first}: cannot average them")
    done: set[int] = set()  # tied weights appear under several names: add each tensor once
    for name, tensor in total.items():
        if not tensor.is_floating_point() or tensor.data_ptr() in done:
            continue
        if model[name].shape != tensor.shape:
            raise NmtkError(f"{path}: {name} has shape {tuple(model[name].shape)}, "
                            f"{first} has {tuple(tensor.shape)}: cannot average them")
        tensor.add_(model[name])
        _release(model[name])
        done.add(tensor.data_ptr())


def update_range(updates: str) -> tuple[int, int]:
    """``--updates A-B`` as (A, B), A ≤ B."""
    try:
        low, high = (int(x) for x in updates.split("-", 1))
    except ValueError:
        raise NmtkError(f"--updates {updates!r}: expected A-B, e.g. --updates 9000-10000") from None
    if low > high:
        raise NmtkError(f"--updates {updates}: {low} is after {high}; the first update comes first")
    return low, high


def select_checkpoints(numbered: list[tuple[int, Path]], last: int | None, updates: str | None) -> list[Path]:
    """By ``--last N`` or ``--updates A-B`` among a run's numbered checkpoints."""
    if updates:
        low, high = update_range(updates)
        chosen = [p for u, p in numbered if low <= u <= high]
        if not chosen:
            raise NmtkError(f"--updates {updates}: no checkpoint in that range")
        return chosen
    assert last is not None
    if len(numbered) < last:
        raise NmtkError(f"--last {last}: the run has only {len(numbered)} numbered checkpoint(s)")
    return [p for _, p in numbered[-last:]]


def average_run(run_dir: Path, files: list[Path], last: int | None, updates: str | None, out: Path | None,
                force: bool) -> tuple[list[Path], Path]:
    """`nmtk average`: the chosen checkpoints of a run (``files``, else ``--updates A-B``, else the last
    ``last``, by default the recipe's ``average.last``) averaged into ``out`` (by default
    ``RUN/checkpoint_avg_<how>.pt``); returns (the checkpoints, the file written)."""
    run = RunDir(run_dir).require()
    if files and (last is not None or updates):
        raise NmtkError("--last/--updates choose among the run's checkpoints: give them or checkpoint files, not both")
    if last is not None and updates:
        raise NmtkError("--last and --updates: give one of them")
    if last is not None and last < 1:
        raise NmtkError(f"--last {last}: must be at least 1")
    if files:
        paths, label = list(files), f"files{len(files)}"
    else:
        n = run.recipe().average.last if last is None else last
        paths = select_checkpoints(run.numbered(), None if updates else n, updates)
        label = "updates{}-{}".format(*update_range(updates)) if updates else f"last{n}"
    target = out or run.path / f"checkpoint_avg_{label}.pt"
    write_average(paths, target, force)
    return paths, target


def write_average(paths: list[Path], out: Path, force: bool) -> Checkpoint:
    """The average of ``paths`` saved to ``out``; an existing ``out`` is replaced with ``force`` only
    where it is a checkpoint (what nmtk writes there), never another file of that name or a folder."""
    if out.is_dir():
        raise NmtkError(f"{out}: is a folder; give -o a file name")
    if out.exists():
        if not force:
            raise NmtkError(f"{out}: exists; use --force to overwrite or -o for another name")
        try:
            Checkpoint.read(out, mmap=True)
        except NmtkError:
            raise NmtkError(f"{out}: exists and is not an nmtk checkpoint: --force replaces only those; "
                            "give -o another name") from None
    averaged = average_checkpoints(paths)
    averaged.save(out)
    return averaged
