"""The fp32 output projection of a decoding step through oneDNN, with its weight packed once, on CPUs
whose vendor is not Intel.

Why: torch multiplies fp32 matrices on a CPU with MKL, which on an AMD CPU runs its product of a
decoding step's few rows by the (d, V) output matrix well below the core's rate. oneDNN (which torch
ships too, and which CTranslate2 uses on AMD CPUs for the same reason) reads a weight packed for it
once in its own blocked layout. One thread, d 256, V 8,000, GFLOP/s at 4 / 16 / 40 / 76 rows, torch
2.13: on a 2-core AMD EPYC Zen 4 (AVX-512; 2026-11-29) MKL on the (d, V) copy 39 / 55 / 68 / 85,
oneDNN packed 89 / 95 / 100 / 96; on a 2-core AMD EPYC Zen 3 (AVX2 alone; 2026-12-01) MKL 8.8 / 22.2 /
38.2 / 43.7, oneDNN 16.8 / 36.4 / 50.7 / 56.8, the test set 1.20× faster in fp32 (byte-identical
translations). On an Intel CPU MKL is the vendor's own library: on a
2-core Intel Xeon (family 6 model 207, 2026-11-30) oneDNN's product was faster alone (107 against 71
GFLOP/s at 16 rows) but the test set through it slower (261-263 against 265-275 sentences/s), so MKL
stays there. A CPU with neither AVX2 nor AVX-512 keeps MKL (not measured).

oneDNN compiles a kernel for every shape it meets and keeps it (about 0.6 MiB each, torch's default
cache holds 1,024): a search's row counts would make one per step's count. Rows are padded to a
multiple of `ROW_STEP` instead (at most a few dozen shapes; the padding's rows are computed and
dropped). The layers' products stay MKL's: packed too they gained less (256 columns; slower than MKL's
on the AVX2 CPU) and each of their five shapes multiplies the kernels kept (+70 MiB peak RSS measured).
"""

from __future__ import annotations

import functools
import os

import torch
import torch.nn.functional as F
from torch import Tensor

from nmtk.errors import NmtkError
from nmtk.model.int8 import cpu

#: Rows are padded to a multiple of this (fewer distinct shapes, fewer compiled kernels).
ROW_STEP = 8
#: The row count oneDNN is told to pack the weight for (measured best from 4 rows to 300 above).
PACKED_FOR_ROWS = 64
#: ``NMTK_CPU_GEMM=onednn`` or ``mkl`` in the environment overrides the vendor's choice (to measure).
CHOICE_ENV = "NMTK_CPU_GEMM"


@functools.cache
def preferred() -> bool:
    """Whether the CPU's fp32 output projection goes through oneDNN: on an AVX-512 or AVX2 CPU not
    Intel's (the kinds measured: AMD EPYC Zen 4 and Zen 3), where torch has oneDNN's packed product; or
    as ``NMTK_CPU_GEMM`` says."""
    choice = os.environ.get(CHOICE_ENV, "").strip().lower()
    if choice not in ("", "onednn", "mkl"):
        raise NmtkError(f"{CHOICE_ENV}={choice!r} in the environment: onednn, mkl or unset")
    available = torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_reorder_linear_weight")
    if choice:
        return choice == "onednn" and available
    vendor, flags = cpu()
    return available and vendor not in ("GenuineIntel", "") and bool({"avx512f", "avx2"} & flags)


def pack(weight: Tensor) -> Tensor:
    """``weight`` (V, d), fp32, in oneDNN's layout for `product` (a copy: the weight itself is untouched)."""
    return torch.ops.mkldnn._reorder_linear_weight(weight.detach().float().contiguous(), PACKED_FOR_ROWS)


def product(flat: Tensor, packed: Tensor, bias: Tensor | None) -> Tensor:
    """``flat`` (rows, d) times the packed weight, plus ``bias``: (rows, V), contiguous."""
    rows = flat.size(0)
    padded = -(-rows // ROW_STEP) * ROW_STEP
    if padded != rows:
        flat = F.pad(flat, (0, 0, 0, padded - rows))
    return torch.ops.mkldnn._linear_pointwise(flat, packed, bias, "none", [], "")[:rows]

