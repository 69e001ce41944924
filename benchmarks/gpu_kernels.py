"""The CUDA kernels of one forward + backward of the base model, eager and with `compile_layers`.

One batch of 96 × 32 source and target tokens (~3,125, the paper's per-GPU batch), bf16 autocast, a
37,000-type vocabulary, the loss over full logits. Per mode: kernels launched in the profiled step,
milliseconds per step (mean of 10, one synchronize at the end), the warm-up's seconds (compilation
included), and the 22 most frequent kernel names with their counts. It shows where a host-bound
step's launches go and what per-layer compilation fuses. Needs CUDA.

Usage: python benchmarks/gpu_kernels.py
"""

from __future__ import annotations

import collections
import time
from functools import partial

import torch
from sdpa import forward_backward
from torch.profiler import ProfilerActivity, profile

from nmtk.model.config import ModelConfig
from nmtk.model.transformer import Transformer


def main() -> None:
    torch.manual_seed(0)
    device = torch.device("cuda")
    cfg = ModelConfig(src_vocab=37_000, tgt_vocab=37_000)
    src = torch.randint(4, 37_000, (96, 32), device=device)
    src[:, -3:] = 0  # padded, as most batches are
    tgt = torch.randint(4, 37_000, (96, 33), device=device)
    for mode in ("eager", "compiled"):
        model = Transformer(cfg).to(device).train()
        if mode == "compiled":
            model.compile_layers()
        step = partial(forward_backward, model, src, tgt, torch.bfloat16)
        start = time.perf_counter()
        for _ in range(3):
            step()
        torch.cuda.synchronize()
        warm = time.perf_counter() - start
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            step()
            torch.cuda.synchronize()
        names = collections.Counter(e.name for e in prof.events() if e.device_type.name == "CUDA")
        start = time.perf_counter()
        for _ in range(10):
            step()
        torch.cuda.synchronize()
        ms = (time.perf_counter() - start) * 100
        print(f"== {mode}: {sum(names.values())} kernels per forward + backward, {ms:.1f} ms per step, "
              f"warm-up {warm:.1f} s", flush=True)
        for name, n in names.most_common(22):
            print(f"{n:6d}  {name[:150]}")


if __name__ == "__main__":
    main()
