"""The paper's learning-rate schedule (§5.3, equation 3)."""

from __future__ import annotations


def inverse_sqrt_lr(step: int, warmup: int, peak: float) -> float:
    """lr = peak · min(√(warmup / step), step / warmup), for step ≥ 1.

    Linear warm-up for ``warmup`` steps to ``peak``, then decay with the inverse square root of the step.
    This is the paper's lr = d_model^-0.5 · min(step^-0.5, step · warmup^-1.5) written around its
    maximum: with ``peak = d_model^-0.5 · warmup^-0.5`` (`OptimSection.peak_lr`) the two are equal.
    """
    step = max(step, 1)
    return peak * min((warmup / step) ** 0.5, step / warmup)
