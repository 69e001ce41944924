"""Where and in what precision the model runs: device choice, autocast, and the CPU allocator setting.

Training, validation and translation all use these, so they live below both ``train`` and ``decode``.

**The CPU allocator.** A training step on the CPU allocates and frees tensors of tens to hundreds of
megabytes (the logits of 4,096 target tokens × 8,000 types, their gradients, autocast's bf16 weight
copies). glibc serves every allocation above its mmap threshold (at most 32 MiB) with a fresh ``mmap``
and gives it back with ``munmap`` on free, so each step the kernel faults in and zeroes those pages
again. On the Multi30k recipe with 2 threads that was a third of all CPU time (sys time), and training
ran at 3,216 target tokens/s; serving large blocks from the heap and keeping freed memory for reuse
gives 5,949 tokens/s, identical losses. The same setting helps decoding a little (about 5%).

The price is memory: tensors of ever-changing shapes fragment the heap. Over the first 125 updates
peak RSS goes from 3.7 to 5.4 GB; a 10-minute run peaks at 7.0 GB with 4,096-token batches and at
3.3 GB with the shipped recipe's 1,024. Trimming the heap (``malloc_trim``) every 50 updates did not
lower the peak and cost 3% of the updates, so nmtk does not trim.

Applied only on Linux with glibc, and never when the user has chosen for themselves: any ``MALLOC_*``
variable, an ``LD_PRELOAD`` (jemalloc, tcmalloc), or ``NMTK_MALLOC=system`` leaves the allocator alone.
"""

from __future__ import annotations

import ctypes
import os
import sys
from contextlib import AbstractContextManager, nullcontext

import torch

from nmtk.bf16_probe import MIN_SPEEDUP, Purpose, Shapes, Workload, bf16_speed, cpuinfo
from nmtk.errors import NmtkError
from nmtk.precision import Precision


def pick_device(name: str | None) -> torch.device:
    """``name`` (cpu, cuda, cuda:1...) checked for availability; CUDA when available otherwise."""
    if name:
        if name.startswith("cuda") and not torch.cuda.is_available():
            raise NmtkError("--device cuda: no CUDA device is available (this torch build or machine has none)")
        try:
            return torch.device(name)
        except RuntimeError:
            raise NmtkError(f"--device {name!r}: not a device (use cpu, cuda or cuda:N)") from None
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def cpu_has_bf16_hardware() -> bool:
    """Whether this CPU multiplies bf16 in hardware (AVX-512 BF16 or AMX, read from /proc/cpuinfo).

    Without them, PyTorch emulates bf16 matrix products on the CPU, several times slower than fp32
    (measured on an AVX2 host: 7.7 against 41 GFLOP/s), so `auto` does not even measure. With them,
    bf16 may still be slower than fp32 (`nmtk.bf16_probe`).
    """
    flags = (cpuinfo("flags") or "").split()
    return "avx512_bf16" in flags or "amx_bf16" in flags


def emulated_bf16(device: torch.device) -> bool:
    """Whether bf16 arithmetic on ``device`` is emulated, and so slower than fp32: a GPU before Ampere
    (a V100 has no bf16 units; Triton's bf16 on it is a risk of its own), a CPU without AVX-512 BF16 or
    AMX (`cpu_has_bf16_hardware`)."""
    if device.type == "cuda":  # the capability rule `resolve_precision` applies (Ampere, 8.0, and later)
        return torch.cuda.get_device_capability(device)[0] < 8
    return not cpu_has_bf16_hardware()


def explicit_bf16_warning(precision: Precision | str, device: torch.device) -> str | None:
    """The warning `nmtk recipe validate` gives for ``train.precision = "bf16"`` where bf16 is
    emulated (``auto`` would pick fp16 on such a GPU, fp32 on such a CPU); None otherwise."""
    if Precision(precision) is not Precision.bf16 or not emulated_bf16(device):
        return None
    better = "fp16" if device.type == "cuda" else "fp32"
    return (f"train.precision = \"bf16\" on this {device.type}, which emulates bf16 (slower than fp32): use "
            f"\"auto\" (here: {better})")


def explicit_bf16_warning_here(precision: Precision | str) -> str | None:
    """`explicit_bf16_warning` for the device training would pick on this machine."""
    return explicit_bf16_warning(precision, pick_device(None))


#: Test-only: ``fp32`` or ``bf16`` makes ``auto`` resolve to it on a CPU, whatever the CPU, so that one
#: machine runs the suite as a host of the other kind would (tests/conftest.py; docs/development.md).
AUTO_PRECISION_SWITCH = "NMTK_TEST_AUTO_PRECISION"


def resolve_precision(precision: Precision | str, device: torch.device, shapes: Shapes | None = None,
                      purpose: Purpose = "train", workload: Workload | None = None) -> tuple[Precision, str]:
    """The precision to run in, and why.

    ``auto`` is bf16 on a CUDA GPU that multiplies bf16 natively (fp16 with loss scaling on older
    ones). On a CPU it is bf16 only where the CPU has bf16 hardware *and* bf16 is measured faster for
    this model's ``shapes`` and ``purpose`` (`nmtk.bf16_probe`: its ``workload`` where given, else the
    shapes' matrix products); fp32 elsewhere.
    """
    precision = Precision(precision)
    if precision is Precision.int8 and (purpose != "decode" or device.type != "cpu"):
        raise NmtkError("precision int8 is for decoding on a CPU (its products are int8 modules there): "
                        + ("use bf16 on a GPU, or an int8 CTranslate2 export" if purpose == "decode"
                           else "train in fp32, bf16 or fp16"))
    if precision is not Precision.auto:
        return precision, "asked for"
    if device.type == "cuda":  # not is_bf16_supported(): it says yes where bf16 is emulated (V100, T4)
        major, minor = torch.cuda.get_device_capability(device)
        if major >= 8:
            return Precision.bf16, f"auto: this GPU (compute capability {major}.{minor}) multiplies bf16 natively"
        return Precision.fp16, (f"auto: this GPU (compute capability {major}.{minor}) has no native bf16: fp16 "
                                "with loss scaling")
    if device.type != "cpu":
        return Precision.fp32, f"auto: fp32 on {device.type}"
    forced = os.environ.get(AUTO_PRECISION_SWITCH, "")
    if forced:
        if forced not in ("fp32", "bf16"):
            raise NmtkError(f"{AUTO_PRECISION_SWITCH}={forced!r}: the test switch takes fp32 or bf16")
        return Precision(forced), f"auto: {AUTO_PRECISION_SWITCH}={forced} (test switch)"
    if not cpu_has_bf16_hardware():
        return Precision.fp32, "auto: no bf16 hardware on this CPU"
    return _measured_choice(shapes or Shapes(d_model=512, d_ff=2048, vocab=32000), purpose, workload)


def _measured_choice(shapes: Shapes, purpose: Purpose, workload: Workload | None) -> tuple[Precision, str]:
    measured, cached = bf16_speed(shapes, purpose, workload)
    what = "decoding steps" if workload is not None else "training products"
    how = f"bf16 {measured.speedup:.2f}x fp32's speed for this model's {what} on this CPU"
    how += ", cached" if cached else ", measured now"
    if measured.speedup >= MIN_SPEEDUP[purpose]:
        return Precision.bf16, f"auto: {how}"
    return Precision.fp32, f"auto: {how}; bf16 needs {MIN_SPEEDUP[purpose]:.2f}x"


def use_tf32(device: torch.device, precision: Precision | str) -> None:
    """fp32 on a CUDA GPU: matrix products in TF32 on the tensor cores (Ampere and later), as fairseq and
    Megatron run fp32; 8 to 16 times the plain fp32 rate at a 10-bit mantissa in the products only."""
    if device.type == "cuda" and Precision(precision) is Precision.fp32:
        torch.set_float32_matmul_precision("high")  # the API every torch >= 2.4 keeps (TF32 for float32)


def autocast_for(device: torch.device, precision: Precision | str, cache: bool = True) -> AbstractContextManager:
    """Autocast to bf16 or fp16 on ``device``; nothing for fp32 (nor int8, whose products are int8 modules).
    ``cache``: autocast's cache of cast weights, off where a CUDA graph is captured (each cast must be
    recorded; PyTorch's CUDA notes) and so on its warm-up too (a compiled model guards on the setting)."""
    if precision in ("fp32", "int8"):
        return nullcontext()
    dtype = torch.bfloat16 if precision == "bf16" else torch.float16
    return torch.autocast(device_type=device.type, dtype=dtype, cache_enabled=cache)

M_TRIM_THRESHOLD = -1  # glibc <malloc.h>
M_MMAP_MAX = -4
TRIM_THRESHOLD = 1 << 30  # free memory at the top of the heap is returned only beyond 1 GiB

_applied: bool | None = None


def _user_chose_allocator() -> bool:
    env = os.environ
    return env.get("NMTK_MALLOC", "") == "system" or "LD_PRELOAD" in env or any(k.startswith("MALLOC_") for k in env)


def keep_freed_memory() -> bool:
    """Serve large tensors from glibc's heap and keep freed memory for reuse; True when applied.

    Idempotent; a no-op (False) off glibc or when the user chose an allocator (see the module docstring).
    """
    global _applied
    if _applied is not None:
        return _applied
    _applied = False
    if not sys.platform.startswith("linux") or _user_chose_allocator():
        return False
    try:
        if not os.confstr("CS_GNU_LIBC_VERSION"):
            return False
        mallopt = ctypes.CDLL(None).mallopt
    except (AttributeError, OSError, ValueError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    _applied = bool(mallopt(M_MMAP_MAX, 0)) and bool(mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))
    return _applied


def give_back_freed_memory() -> None:
    """Return the heap's free pages to the system once (glibc's ``malloc_trim``), for memory that will
    not be needed again: weights a server frees for good. With `keep_freed_memory` applied, glibc would
    otherwise keep them. A no-op off glibc."""
    try:
        ctypes.CDLL(None).malloc_trim(0)
    except (AttributeError, OSError):
        pass
