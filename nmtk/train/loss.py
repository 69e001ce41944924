"""Label-smoothed cross-entropy (paper §5.4, Szegedy et al. 2016)."""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor


def label_smoothed_loss(logits: Tensor, target: Tensor, epsilon: float, pad_id: int) -> tuple[Tensor, Tensor]:
    """Summed smoothed loss and summed NLL over non-pad target tokens.

    The smoothed target puts 1 - ε on the reference token and ε spread uniformly over all V tokens:
    loss = (1 - ε) · (-log p_y) + ε · mean_v(-log p_v). Sums, not means: the trainer divides by the
    number of target tokens of the whole update (all batches, all ranks), so gradient accumulation
    and data parallelism give the same update as one big batch.
    """
    target = target.reshape(-1, 1)
    keep = target.ne(pad_id)
    lprobs = F.log_softmax(logits.reshape(-1, logits.size(-1)).float(), dim=-1)  # one pass serves both terms
    nll = -lprobs.gather(1, target).masked_fill(~keep, 0.0).sum()
    smooth = -lprobs.mean(dim=-1, keepdim=True).masked_fill(~keep, 0.0).sum()
    return (1.0 - epsilon) * nll + epsilon * smooth, nll.detach()
