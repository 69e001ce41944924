"""Label-smoothed cross-entropy (paper §5.4, Szegedy et al. 2016)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor


def label_smoothed_loss(logits: Tensor, target: Tensor, epsilon: float, pad_id: int) -> tuple[Tensor, Tensor]:
    """Summed smoothed loss and summed NLL over non-pad target tokens.

    The smoothed target puts 1 - ε on the reference token and ε spread uniformly over all V tokens:
    loss = (1 - ε) · (-log p_y) + ε · mean_v(-log p_v). Sums, not means: the trainer divides by the
    number of target tokens of the whole update (all batches, all ranks), so gradient accumulation
    and data parallelism give the same update as one big batch.
    """
    logits = logits.reshape(-1, logits.size(-1)).float()
    target = target.reshape(-1)
    loss = F.cross_entropy(logits, target, ignore_index=pad_id, reduction="sum", label_smoothing=epsilon)
    with torch.no_grad():
        nll = F.cross_entropy(logits, target, ignore_index=pad_id, reduction="sum")
    return loss, nll
