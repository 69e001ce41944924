"""The paper's learning-rate schedule (§5.3, equation 3)."""

from __future__ import annotations


def inverse_sqrt_lr(step: int, d_model: int, warmup: int, lr_scale: float = 1.0, peak: float | None = None) -> float:
    """lr = lr_scale · d_model^-0.5 · min(step^-0.5, step · warmup^-1.5), for step ≥ 1.

    Linear warm-up for ``warmup`` steps, then decay with the inverse square root of the step. When
    ``peak`` is given, ``lr_scale`` is chosen so that the maximum (reached at ``step == warmup``) is ``peak``.
    """
    step = max(step, 1)
    if peak is not None:
        lr_scale = peak * d_model**0.5 * warmup**0.5
    return lr_scale * d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)
