"""benchmarks/gpu.py's bookkeeping, on CPU (#46 point 10): the peak table, windows read after one
synchronize each, a host sync inside a timed update reported, tokens counted from the plan."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import gpu  # noqa: E402
from _util import dense_peak  # noqa: E402


@pytest.mark.parametrize(("name", "peak"), [("NVIDIA H100 80GB HBM3", 989e12), ("NVIDIA H100 PCIe", 756e12),
                                            ("NVIDIA H200", 989e12), ("NVIDIA A100-SXM4-40GB", 312e12),
                                            ("NVIDIA A100 80GB PCIe", 312e12), ("Tesla V100-SXM2-16GB", 125e12),
                                            ("NVIDIA L4", 121e12), ("NVIDIA GeForce RTX 4090", 165e12),
                                            ("NVIDIA L40S", None)])
def test_the_dense_peak_of_the_detected_gpu(name: str, peak: float | None) -> None:
    assert dense_peak(name) == peak


def test_the_update_clock_times_windows_and_reports_a_sync_inside_an_update(monkeypatch) -> None:
    events: list[str] = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: events.append("sync"))
    monkeypatch.setattr(torch.cuda, "set_sync_debug_mode", lambda mode: events.append(mode))
    src, tgt = np.array([3, 5, 7, 9]), np.array([4, 6, 8, 10])
    calls = []

    def train_step(group: list[np.ndarray]) -> tuple[int, int, int]:
        calls.append(events[-1])
        if len(calls) == 4 and events[-1] == "error":  # the first timed update reads a device value
            raise RuntimeError("called a synchronizing CUDA operation")
        return 0, 0, 0

    trainer = SimpleNamespace(plan=SimpleNamespace(src_lengths=src), tgt_lengths=tgt, train_step=train_step)
    clock = gpu.UpdateClock(trainer, warm=3, device=None)
    group = [np.array([0, 1]), np.array([2, 3])]
    for _ in range(3 + 2 * gpu.WINDOW):
        trainer.train_step(group)
    assert events.count("sync") == 3  # the start of timing and the end of each of the two windows
    assert clock.sync_error == "called a synchronizing CUDA operation"
    assert calls[:3] == ["default"] * 3 and calls[3] == "error" and set(calls[5:]) == {"default"}
    assert clock.tokens() == (24 * 2 * gpu.WINDOW, 28 * 2 * gpu.WINDOW)
    assert clock.mean_length() == pytest.approx((24 + 28) / 8)
    assert len(clock.window_rates(world_size=2)) == 2


def test_the_sdpa_benchmark_measures_every_call_and_kernel_on_a_cpu() -> None:
    """benchmarks/sdpa.py, sized for a CPU: each of the three calls gets nmtk's own row and every
    kernel's (timed, or the reason PyTorch gives for not running it), and the model every choice."""
    root = Path(__file__).resolve().parents[2]
    result = subprocess.run([sys.executable, str(root / "benchmarks" / "sdpa.py"), "--device", "cpu"],
                            capture_output=True, text=True, cwd=root, env={**os.environ, "PYTHONPATH": str(root)},
                            check=True)
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert set(report["calls"]) == {"encoder", "decoder", "cross"}
    for row in report["calls"].values():
        assert row["nmtk"]["host_ms"] > 0 and row["picked"]
        for kernel in ("pytorch", "flash", "efficient", "cudnn", "math"):
            assert isinstance(row[kernel], dict) or row[kernel].startswith("unsupported: ")
    assert set(report["model"]) == {"nmtk", "pytorch", "efficient", "cudnn", "math"}
    assert all(r["target_tokens_per_s"] > 0 for r in report["model"].values())


def test_the_kernel_breakdown_says_where_an_updates_gpu_time_goes() -> None:
    """Per update: kernels by family (a flash-attention kernel is attention though its name holds no
    gemm), the longest by name, and how busy the GPU was over the update's wall time."""
    kernels = [("sm90_xmma_gemm_bf16bf16_bf16f32", 300.0), ("flash_fwd_kernel", 100.0),
               ("triton_per_fused_native_layer_norm_0", 50.0), ("multi_tensor_apply_kernel (adam)", 40.0),
               ("void at::native::vectorized_elementwise_kernel<4>", 10.0), ("ncclDevKernel_AllReduce", 0.0),
               ("some_new_kernel", 100.0)] * 2
    out = gpu.kernel_breakdown(kernels, updates=2, step_s=0.0012)
    assert out["kernels"] == 7.0 and out["kernel_ms"] == 0.6
    assert out["kernel_ms_by_kind"] == {"products": 0.3, "attention": 0.1, "other": 0.1, "compiled (triton)": 0.05,
                                        "optimizer": 0.04, "element-wise": 0.01, "communication": 0.0}
    assert list(out["longest_kernels_ms"])[0] == "sm90_xmma_gemm_bf16bf16_bf16f32"
    assert out["gpu_busy"] == 0.5
