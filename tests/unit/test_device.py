"""nmtk.device: the allocator setting that stops large tensors being faulted in afresh every step."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux") or not os.confstr("CS_GNU_LIBC_VERSION"), reason="glibc only"
)

# Allocates, touches and frees a 64 MiB tensor twenty times (after twenty rounds of warm-up); prints
# whether the setting was applied and the minor page faults that took. Run in a fresh process: the
# setting lasts for the process.
PROBE = """
import json, resource, sys, torch
from nmtk.device import keep_freed_memory
applied = keep_freed_memory() if sys.argv[1] == "apply" else False
for _ in range(20):  # warm up: the heap settles after a few rounds
    torch.ones(16 * 2**20).sum()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(20):
    x = torch.ones(16 * 2**20)  # 64 MiB, every page written
    del x
after = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
print(json.dumps({"applied": applied, "faults": after - before}))
"""
PAGES_64MIB = 64 * 2**20 // os.sysconf("SC_PAGE_SIZE")


def probe(mode: str, **env: str) -> dict:
    chosen = ("LD_PRELOAD", "NMTK_MALLOC")
    clean = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_") and k not in chosen}
    out = subprocess.run([sys.executable, "-c", PROBE, mode], env={**clean, **env}, capture_output=True, text=True,
                         check=True)
    return json.loads(out.stdout)


def test_freed_tensors_are_reused_without_page_faults() -> None:
    default = probe("default")
    kept = probe("apply")
    assert kept["applied"] is True
    assert default["faults"] >= 19 * PAGES_64MIB, default  # glibc mmaps and unmaps each 64 MiB block
    assert kept["faults"] <= 4 * PAGES_64MIB, kept  # reused from the heap: most rounds fault nothing


@pytest.mark.parametrize("env", [{"NMTK_MALLOC": "system"}, {"MALLOC_ARENA_MAX": "2"}, {"LD_PRELOAD": ""}])
def test_a_user_chosen_allocator_is_left_alone(env: dict[str, str]) -> None:
    assert probe("apply", **env)["applied"] is False


@pytest.mark.parametrize(("capability", "expected"), [((9, 0), "bf16"), ((8, 0), "bf16"), ((7, 5), "fp16"),
                                                      ((7, 0), "fp16")])
def test_auto_precision_on_a_gpu_is_native_bf16_else_fp16(monkeypatch, capability, expected) -> None:
    """H100/A100 multiply bf16 natively; V100 and T4 only emulate it (is_bf16_supported may still say yes)."""
    import torch

    from nmtk.device import resolve_precision

    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    precision, why = resolve_precision("auto", torch.device("cuda"))
    assert precision == expected and f"{capability[0]}.{capability[1]}" in why


def test_fp32_on_a_gpu_uses_tf32_and_nothing_changes_on_a_cpu() -> None:
    import torch

    from nmtk.device import use_tf32

    before = torch.get_float32_matmul_precision()
    try:
        torch.set_float32_matmul_precision("highest")
        use_tf32(torch.device("cpu"), "fp32")
        use_tf32(torch.device("cuda"), "bf16")
        assert torch.get_float32_matmul_precision() == "highest"
        use_tf32(torch.device("cuda"), "fp32")
        assert torch.get_float32_matmul_precision() == "high"
    finally:
        torch.set_float32_matmul_precision(before)


