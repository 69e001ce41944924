"""Checkpoints: written atomically (temp file, fsync, rename), read with ``weights_only=True``.

A crash mid-write leaves at most a stray ``.tmp`` file; every name a reader can open always holds a
complete checkpoint. ``checkpoint_last.pt`` is a hard link to the newest numbered checkpoint (no
extra disk), replaced by rename so it too is never half-written.
"""

from __future__ import annotations

import os
import pickle
import random
import shutil
import threading
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from nmtk import interrupts
from nmtk.errors import NmtkError
from nmtk.files import atomic_write, fsync_dir, temp_path

if TYPE_CHECKING:
    from nmtk.model import Transformer


def save_atomic(state: dict[str, Any], path: Path) -> None:
    """torch.save into ``path`` so that ``path`` is either the old file or the complete new one."""
    with atomic_write(path, "wb") as handle:
        torch.save(state, handle)


def link_atomic(source: Path, link: Path) -> None:
    """Make ``link`` name the same file as ``source`` (hard link, or a copy), atomically."""
    tmp = temp_path(link)
    tmp.unlink(missing_ok=True)
    try:
        os.link(source, tmp)
    except OSError:
        shutil.copyfile(source, tmp)
    os.replace(tmp, link)
    fsync_dir(link.parent)


def load_checkpoint(path: Path, mmap: bool = False) -> dict[str, Any]:
    """Load on CPU with ``weights_only=True``; a missing or damaged file is one clear error.

    ``mmap=True`` maps the file instead of reading it: a tensor's bytes are read only when touched,
    so taking the model out of a checkpoint never reads its optimizer state.
    """
    if not path.is_file():
        raise NmtkError(f"{path}: checkpoint not found")
    if not zipfile.is_zipfile(path):  # torch.save's archive (its own message speaks of mmap options)
        raise NmtkError(f"{path}: not a readable nmtk checkpoint (not the zip archive torch.save writes: text, "
                        "another format, or a file cut short)")
    try:
        return torch.load(path, map_location="cpu", weights_only=True, mmap=mmap)
    except (RuntimeError, EOFError, OSError, zipfile.BadZipFile, pickle.UnpicklingError, ValueError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise NmtkError(f"{path}: not a readable nmtk checkpoint ({first.split('. ')[0]})") from None


#: The layout `Checkpoint` writes. Files without the field (before it existed) have this layout too; a
#: higher number is a file from a newer nmtk, refused with one line rather than misread.
CHECKPOINT_FORMAT = 1


@dataclass
class Checkpoint:
    """The one shape of an nmtk checkpoint, whoever writes it (training, averaging, import) and whoever
    reads it (resume, ``--init-from``, averaging, every model loader).

    On disk it is a plain dict of tensors and Python values (what ``torch.load(weights_only=True)``
    accepts): `to_dict` and `of` convert, and `of` checks what every reader needs (the model, its
    configuration, a format this nmtk knows) once, naming the file.
    """

    model: dict[str, torch.Tensor]
    model_config: dict[str, Any]
    vocab: dict[str, str] | None = None  # sha256 of each subword model the model was trained with
    recipe: dict[str, Any] | None = None
    recipe_hash: str | None = None
    nmtk: str | None = None  # the version that wrote it
    state: dict[str, Any] = field(default_factory=dict)  # `TrainState` fields ({"update": 0}: an import)
    full: bool = False  # holds optimizer, scaler and random states: a run can resume from it
    world_size: int = 1
    optimizer: dict[str, Any] | None = None
    scaler: dict[str, Any] | None = None
    rng: list[Any] | None = None  # every rank's random state
    averaged_from: list[str] | None = None
    imported_from: str | None = None
    format: int = CHECKPOINT_FORMAT

    def to_dict(self) -> dict[str, Any]:
        """What is saved: every field, the unset optional ones left out."""
        return {k: v for k, v in ((f.name, getattr(self, f.name)) for f in fields(self)) if v is not None}

    @classmethod
    def of(cls, data: dict[str, Any], path: Path) -> Checkpoint:
        """A loaded file's checkpoint; one line naming ``path`` when it is none this nmtk can read."""
        if not isinstance(data, dict) or "model" not in data or "model_config" not in data:
            raise NmtkError(f"{path}: not an nmtk checkpoint (no model)")
        version = data.get("format", CHECKPOINT_FORMAT)
        if not isinstance(version, int) or version > CHECKPOINT_FORMAT:
            raise NmtkError(f"{path}: checkpoint format {version} is newer than this nmtk reads "
                            f"({CHECKPOINT_FORMAT}): update nmtk")
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})

    @classmethod
    def read(cls, path: Path, mmap: bool = False) -> Checkpoint:
        """`load_checkpoint`, checked (``mmap``: tensors read only when touched)."""
        return cls.of(load_checkpoint(path, mmap=mmap), path)

    def save(self, path: Path) -> None:
        save_atomic(self.to_dict(), path)


def load_model(path: Path, device: torch.device, expected_vocab: dict[str, str] | None = None) -> Transformer:
    """A checkpoint's model in eval mode on ``device``; refuses one trained with another vocabulary."""
    checkpoint = Checkpoint.read(path, mmap=True)  # the model only: its optimizer state is never read
    if expected_vocab is not None and checkpoint.vocab not in (None, expected_vocab):
        raise NmtkError(f"{path}: trained with another vocabulary than this run's subword model")
    from nmtk.model import ModelConfig, Transformer  # the model's code only where a model is loaded

    cfg = ModelConfig(**checkpoint.model_config)
    model = None
    if device.type == "cpu" and not checkpoint.optimizer:  # parameters alone: read them (`_assigned`)
        model = _assigned(Transformer, cfg, Checkpoint.read(path).model)
    if model is None:
        model = Transformer.empty(cfg, device)
        model.load_state_dict(checkpoint.model)
    return model.eval()


def _assigned(cls: type[Transformer], cfg: Any, state: dict[str, torch.Tensor]) -> Transformer | None:
    """On a CPU, from a checkpoint of parameters alone (an average, a best) read into memory, a model
    whose parameters are the read tensors themselves (``assign``): no second copy of the weights (the
    demo model: 253 instead of 329 MiB at the peak of loading). Read, not mapped: a mapped file that
    is later overwritten in place (``cp`` over it) would change a server's weights, or end it with
    SIGBUS. None where a tensor's dtype or shape is not the model's (then it is copied into a model
    of its own, as on a GPU, and as from a checkpoint with its optimizer state, which is mapped so
    that those bytes are never read)."""
    with torch.device("meta"):
        model = cls(cfg)
    own = model.state_dict()
    if any(k in own and (v.dtype != own[k].dtype or v.shape != own[k].shape) for k, v in state.items()):
        return None
    model.load_state_dict(state, assign=True)
    for embed in (model.src_embed, model.tgt_embed):  # the sinusoids are in no state dict: computed here
        embed.pe = torch.empty(embed.pe.shape)
        embed.fill_positions()
    return model


def rng_state() -> dict[str, Any]:
    """Every random generator training touches, in a form ``weights_only`` loading accepts."""
    py = random.getstate()
    np_state = np.random.get_state()
    state = {
        "python": [py[0], list(py[1]), py[2]],
        "numpy": [np_state[0], torch.from_numpy(np_state[1].astype(np.int64)), *map(float, np_state[2:])],
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    name, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((name, keys.numpy().astype(np.uint32), int(pos), int(has_gauss), float(cached)))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


class SnapshotBuffers:
    """Host copies of a checkpoint's tensors in buffers allocated once and reused at every save.

    On a GPU the buffers are pinned (page-locked) and filled by a side stream, so each save is one
    DMA per tensor into memory that already exists, instead of allocating gigabytes of pageable memory
    per save; on a CPU they are plain tensors (still no allocation per save). The caller must not
    refill them while a previous snapshot is still being written (the trainer waits for the writer).
    """

    def __init__(self, model_state: dict[str, torch.Tensor] | None = None) -> None:
        self._buffers: dict[tuple[Any, ...], torch.Tensor] = {}
        if model_state is not None:  # under the key `Checkpoint.to_dict` gives the parameters
            self.reserve({"model": model_state})

    def reserve(self, obj: Any, path: tuple[Any, ...] = ()) -> None:
        """Allocate (pin, on a GPU) the buffers ``obj``'s tensors will be copied into, without copying: the
        trainer reserves the model's at start, so the first save does not pin gigabytes while training
        waits. What does not exist yet (the optimizer's moments) is allocated at the first save."""
        if isinstance(obj, torch.Tensor):
            if obj.is_cuda:  # a CPU run allocates at its first save, as before
                self._buffer(obj, path)
        elif isinstance(obj, dict):
            for key, value in obj.items():
                self.reserve(value, (*path, key))
        elif isinstance(obj, list | tuple):
            for i, value in enumerate(obj):
                self.reserve(value, (*path, i))

    def _buffer(self, obj: torch.Tensor, path: tuple[Any, ...]) -> torch.Tensor:
        buffer = self._buffers.get(path)
        if buffer is None or buffer.shape != obj.shape or buffer.dtype != obj.dtype:
            buffer = torch.empty(obj.shape, dtype=obj.dtype, device="cpu", pin_memory=obj.is_cuda)
            self._buffers[path] = buffer
        return buffer

    def copy(self, obj: Any, path: tuple[Any, ...] = ()) -> Any:
        """``obj`` with every tensor replaced by its host copy (same structure, same dtypes)."""
        if isinstance(obj, torch.Tensor):
            buffer = self._buffer(obj, path)
            if obj.is_cuda:
                stream = self._stream(obj.device)
                stream.wait_stream(torch.cuda.current_stream(obj.device))  # the values of now
                with torch.cuda.stream(stream):
                    buffer.copy_(obj.detach(), non_blocking=True)
                obj.record_stream(stream)  # a temporary freed meanwhile is not reused before the copy
            else:
                buffer.copy_(obj.detach())
            return buffer
        if isinstance(obj, dict):
            return {key: self.copy(value, (*path, key)) for key, value in obj.items()}
        if isinstance(obj, list | tuple):
            return type(obj)(self.copy(value, (*path, i)) for i, value in enumerate(obj))
        return obj

    def _stream(self, device: torch.device) -> Any:
        if not hasattr(self, "_side"):
            self._side = torch.cuda.Stream(device)
        return self._side

    def snapshot(self, state: dict[str, Any]) -> tuple[dict[str, Any], Callable[[], None]]:
        """The state's host copy, and a function that returns once the copy is complete.

        On a GPU the copies run on the side stream and the host does not wait for them: the training
        stream waits on the device (the next update must not change a tensor before it is copied), and
        the writer thread waits on the copies' event before it writes. No device-wide synchronize, so
        kernel launches go on. On a CPU the copy is complete when this returns."""
        copied = self.copy(state)
        if not hasattr(self, "_side"):
            return copied, lambda: None
        copied_event = torch.cuda.Event()
        copied_event.record(self._side)
        torch.cuda.current_stream(self._side.device).wait_stream(self._side)
        return copied, copied_event.synchronize


class BackgroundWriter:
    """Runs checkpoint writes on a thread, one at a time, so that training does not wait for the disk.

    `submit` first waits for the previous write (so at most one snapshot is held besides the live
    state); `wait` blocks until the current one is on disk and re-raises its error, if any. Writes
    stay atomic (`save_atomic`): a crash mid-write leaves the previous checkpoints as they were.
    """

    def __init__(self) -> None:
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None

    def submit(self, write: Callable[[], None]) -> None:
        self.wait()
        self._thread = threading.Thread(target=self._run, args=(write,), name="nmtk-checkpoint-writer")
        self._thread.start()

    def _run(self, write: Callable[[], None]) -> None:
        try:
            write()
        except BaseException as exc:  # reported by the next submit() or wait(), on the training thread
            self._error = exc

    def wait(self) -> None:
        if self._thread is not None:
            interrupts.join(self._thread)  # (a Ctrl-C meanwhile is recorded: training stops after the write)
            self._thread = None
        if self._error is not None:
            error, self._error = self._error, None
            if isinstance(error, NmtkError):
                raise error
            raise NmtkError(f"writing a checkpoint failed: {error}") from error
