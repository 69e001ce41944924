"""The pre-softmax linear transformation when decoding (paper §3.4): decoder states to logits, in the
layout, the columns and the arithmetic decoding wants.

Training projects with the weight as it is (`Transformer.forward`'s loss head, or ``F.linear``). A
decoding step on a CPU is different in three ways, each owned here:

- **layout**: the states are multiplied by a (d, V) copy of the matrix: the CPU GEMM reads that layout
  faster than the (V, d) weight taken transposed, most at the few rows of a decoding step (one thread,
  d 256, V 8,000: 0.60 against 0.84 ms at 4 rows, 6.6 against 7.3 ms at 128); on an AVX2 or AVX-512 CPU not Intel's, a
  copy packed for oneDNN instead (`nmtk.model.onednn`: MKL is slow there). The copy follows the
  weight (its storage and version are the key) and is let go as soon as the plain path is taken;
- **columns**: a lexical shortlist's candidates alone (`OutputProjection.restrict`), gathered once per
  batch, not at every step, and per thread: searches side by side (`nmtk.decode.search.batches`) each
  project onto their own batch's;
- **int8**: with `quantize`, the matrix (or a shortlist's rows) as packed int8 weights, multiplied by
  PyTorch's dynamically quantised product (`nmtk.model.int8`).
"""

from __future__ import annotations

import threading

import torch
import torch.nn.functional as F
from torch import Tensor

from nmtk.model import onednn
from nmtk.model.int8 import linear, pack


class OutputProjection:
    """A model's decoding projection: its (d, V) copy, shortlist and int8 form (not a module: it holds
    no parameter, and nothing of it is saved)."""

    def __init__(self) -> None:
        self._columns: tuple[tuple[int, int, torch.dtype], Tensor] | None = None
        self._restricted = threading.local()  # .shortlist: ids, their rows, their bias (this thread's batch)
        self._int8: object | None = None  # the packed int8 matrix (`quantize`)

    def __getstate__(self) -> dict[str, object]:
        """A copied model (`copy.deepcopy`, pickling) projects onto the whole vocabulary: a restriction is
        its thread's batch's, not the copy's."""
        return {**self.__dict__, "_restricted": None}

    def __setstate__(self, state: dict[str, object]) -> None:
        self.__dict__.update(state, _restricted=threading.local())

    @property
    def _shortlist(self) -> tuple[Tensor, Tensor | object, Tensor | None] | None:
        return getattr(self._restricted, "shortlist", None)

    @_shortlist.setter
    def _shortlist(self, value: tuple[Tensor, Tensor | object, Tensor | None] | None) -> None:
        self._restricted.shortlist = value

    def logits(self, h: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
        """``h`` (..., d) times ``weight`` (V, d) transposed, plus ``bias``: (..., V), or (..., len(ids))
        when restricted."""
        if self._shortlist is not None:
            return self._shortlisted(h)
        if h.device.type != "cpu" or torch.is_grad_enabled() or weight.is_inference():  # (no version to key on)
            self._columns = None
            return F.linear(h, weight, bias)
        flat = h.reshape(-1, h.size(-1))
        if self._int8 is not None and flat.dtype == torch.float32:
            logits = linear(flat, self._int8)
        elif flat.dtype == torch.float32 and onednn.preferred():
            logits = onednn.product(flat, self._columns_of(weight, packed=True), bias)
        else:
            columns = self._columns_of(weight)
            logits = flat @ columns if bias is None else torch.addmm(bias, flat, columns)
        return logits.view(*h.shape[:-1], logits.size(-1))

    def reset(self) -> None:
        """Let the (d, V) copy go (training mode: the optimizer's steps would make it stale anyway)."""
        self._columns = None

    def quantize(self, weight: Tensor, bias: Tensor | None) -> None:
        """From now on, project a CPU's fp32 states through int8 weights (`nmtk.model.int8.pack`)."""
        self._int8 = pack(weight.detach(), None if bias is None else bias.detach())

    def restrict(self, ids: Tensor | None, weight: Tensor, bias: Tensor | None) -> None:
        """Project onto the target ``ids`` alone (None: the whole vocabulary again), in this thread; see
        `Transformer.restrict_output`. An int8 projection packs the candidates' rows in int8 too."""
        if ids is None:
            self._shortlist = None
            return
        rows = weight.detach().index_select(0, ids)
        kept_bias = None if bias is None else bias.detach().index_select(0, ids)
        if self._int8 is not None and ids.device.type == "cpu":
            self._shortlist = (ids, pack(rows, kept_bias), None)
        else:
            self._shortlist = (ids, rows.t().contiguous() if ids.device.type == "cpu" else rows, kept_bias)

    @property
    def ids(self) -> Tensor | None:
        """The target ids the logits are for when restricted, else None."""
        return None if self._shortlist is None else self._shortlist[0]

    def _shortlisted(self, h: Tensor) -> Tensor:
        ids, rows, bias = self._shortlist
        flat = h.reshape(-1, h.size(-1))
        if not isinstance(rows, Tensor):  # packed int8 rows, their bias inside
            part = linear(flat, rows)
        elif ids.device.type == "cpu":
            part = flat @ rows.to(flat.dtype)
        else:
            part = F.linear(flat, rows.to(flat.dtype))
        if bias is not None:
            part = part + bias.to(part.dtype)
        return part.view(*h.shape[:-1], part.size(-1))

    def _columns_of(self, weight: Tensor, packed: bool = False) -> Tensor:
        """``weight`` as a contiguous (d, V) matrix (``packed``: in oneDNN's layout, `nmtk.model.onednn`),
        remade when the weight is replaced or changed in place (an optimizer step, `load_state_dict`):
        its storage and version are the key."""
        key = (weight.data_ptr(), weight._version, weight.dtype, packed)
        if self._columns is None or self._columns[0] != key:
            self._columns = (key, onednn.pack(weight) if packed else weight.detach().t().contiguous())
        return self._columns[1]
