"""Label-smoothed cross-entropy (paper §5.4, Szegedy et al. 2016), and the same fused with the output
projection, chunk by chunk, so that the logits of a whole batch never exist at once.

The smoothed target puts 1 - ε on the reference token and ε spread uniformly over all V tokens:
loss = (1 - ε) · (-log p_y) + ε · mean_v(-log p_v), summed over non-pad target tokens. Sums, not
means: the trainer divides by the number of target tokens of the whole update (all batches, all
ranks), so gradient accumulation and data parallelism give the same update as one big batch.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

from nmtk.model.languages import OutputGroup

#: Target positions per chunk of `ProjectedLoss` on a CPU: 512 × 8,000 types × 4 bytes = 16 MiB of fp32
#: logits (the d256 benchmark's 1.32 GiB peak). On a GPU the trainer passes the whole micro-batch
#: (``train.loss_chunk_tokens``): one large product keeps the tensor cores busy, many small ones do not.
CHUNK_POSITIONS = 512

#: fp16's logit gradient is formed in fp32 and multiplied by this before its cast to fp16: ε/V (2.7e-6
#: at V = 37k) and the softmax of the many unlikely tokens fall below fp16's smallest normal number
#: (6.1e-5) otherwise, and loss scaling, which multiplies the incoming gradient only after the fact,
#: cannot reach them. The two products are divided by it again in fp32. 2^6 keeps a weight-gradient
#: sum (a frequent token's rows over a batch) far below fp16's largest number, 65,504.
FP16_LOGIT_GRAD_SCALE = 64.0


def label_smoothed_loss(logits: Tensor, target: Tensor, epsilon: float, pad_id: int) -> tuple[Tensor, Tensor]:
    """Summed smoothed loss and summed NLL over non-pad target tokens, from logits (..., V)."""
    lprobs = F.log_softmax(logits.reshape(-1, logits.size(-1)).float(), dim=-1)  # one pass serves both terms
    loss, nll, _ = _chunk(lprobs, target.reshape(-1, 1), epsilon, pad_id)
    return loss, nll.detach()


def _chunk(lprobs: Tensor, target: Tensor, epsilon: float, pad_id: int) -> tuple[Tensor, Tensor, Tensor]:
    """(smoothed loss, NLL, keep mask) of one chunk of log-probabilities (rows, V) and targets (rows, 1)."""
    keep = target.ne(pad_id)
    nll = -lprobs.gather(1, target).masked_fill(~keep, 0.0).sum()
    smooth = -lprobs.mean(dim=-1, keepdim=True).masked_fill(~keep, 0.0).sum()
    return (1.0 - epsilon) * nll + epsilon * smooth, nll, keep


def loss_head_chunk(logits: Tensor, target: Tensor, epsilon: float, pad_id: int, scale: float, with_bias: bool
                    ) -> tuple[Tensor, Tensor, Tensor, Tensor | None]:
    """One chunk's smoothed loss, NLL and the loss's gradient with respect to its logits (rows, V), in one
    pass over the (rows, V) values: softmax(z) - (1 - ε)·onehot(y) - ε/V, zero at padding, multiplied by
    ``scale`` and cast to the logits' dtype; and, ``with_bias``, that gradient's fp32 column sums.

    Eager, this is several passes over rows × V (log-softmax, mean, exp, sub, scatter, mask, cast);
    compiled (`fused_loss_head`, on a GPU), one or two kernels."""
    vocab = logits.size(-1)
    lprobs = F.log_softmax(logits, dim=-1, dtype=torch.float32)  # fp32 without a copy of the logits
    loss, nll, keep = _chunk(lprobs, target, epsilon, pad_id)
    grad = lprobs.exp_()  # the softmax, in place of the log-probabilities
    grad.sub_(epsilon / vocab).scatter_add_(1, target, torch.full(target.shape, epsilon - 1.0, device=grad.device))
    grad = grad.masked_fill_(~keep, 0.0)
    grad_b = grad.sum(0) if with_bias else None
    if scale != 1.0:
        grad = grad.mul_(scale)
    return loss, nll, grad.to(logits.dtype), grad_b


#: `loss_head_chunk` or its compiled form.
LossBody = Callable[[Tensor, Tensor, float, int, float, bool], tuple[Tensor, Tensor, Tensor, Tensor | None]]


@functools.cache
def fused_loss_head(backend: str | None = None) -> LossBody:
    """`loss_head_chunk` compiled once per backend (default inductor), with dynamic shapes: what a
    compiled model's training uses on a GPU (`UpdateStep`)."""
    return torch.compile(loss_head_chunk, dynamic=True, fullgraph=True, backend=backend or "inductor")


class ProjectedLoss(torch.autograd.Function):
    """logits = h Wᵀ and the label-smoothed loss, a chunk of target positions at a time.

    The loss is the end of the graph, so its gradient with respect to each chunk's logits is known
    as soon as the chunk's loss is (`loss_head_chunk`). The forward pass therefore also computes the
    gradients of ``h`` and ``W`` chunk by chunk and keeps only those (the size of ``h`` and of ``W``);
    the backward pass scales them by the incoming gradient. The same three matrix products as
    projecting, then differentiating, all the logits, but at most one chunk of logits (fp32) in memory
    instead of all of them and their gradients. In fp16 the logit gradient is scaled before its cast
    (`FP16_LOGIT_GRAD_SCALE`) and the products are unscaled in fp32.
    """

    @staticmethod
    def forward(ctx, h: Tensor, weight: Tensor, bias: Tensor | None, target: Tensor, epsilon: float, pad_id: int,
                dtype: torch.dtype, chunk: int, body: LossBody | None = None) -> tuple[Tensor, Tensor]:
        body = body or loss_head_chunk
        scale = FP16_LOGIT_GRAD_SCALE if dtype == torch.float16 else 1.0
        w = weight.to(dtype)  # cast once per call (autocast would cast per chunk)
        b = None if bias is None else bias.to(dtype)
        grad_h = torch.empty_like(h)
        whole = chunk >= h.size(0)  # one chunk: grad_w is one product, no accumulator
        grad_w = None if whole else torch.zeros(weight.shape, dtype=torch.float32, device=weight.device)
        grad_b = None if bias is None else torch.zeros(bias.shape, dtype=torch.float32, device=bias.device)
        loss = torch.zeros((), dtype=torch.float32, device=h.device)
        nll = torch.zeros((), dtype=torch.float32, device=h.device)
        for start in range(0, h.size(0), chunk):
            hc = h[start : start + chunk].to(dtype)
            tc = target[start : start + chunk, None]
            logits = hc @ w.t() if b is None else torch.addmm(b, hc, w.t())
            chunk_loss, chunk_nll, grad, grad_b_part = body(logits, tc, epsilon, pad_id, scale, grad_b is not None)
            loss += chunk_loss
            nll += chunk_nll
            if grad_b is not None:
                grad_b += grad_b_part
            product = grad @ w
            grad_h[start : start + chunk] = product if scale == 1.0 else product.float().div_(scale)
            part = grad.t() @ hc
            part = part if scale == 1.0 else part.float().div_(scale)
            if whole:
                grad_w = part.float()
            else:  # (addmm_ in place would round differently: the CPU path keeps its arithmetic exactly)
                grad_w += part
        ctx.has_bias = grad_b is not None
        ctx.save_for_backward(grad_h, grad_w.to(weight.dtype), *([grad_b.to(bias.dtype)] if grad_b is not None else []))
        return loss, nll

    @staticmethod
    def backward(ctx, grad_loss: Tensor, _grad_nll: Tensor):
        grad_h, grad_w, *grad_b = ctx.saved_tensors
        bias_grad = grad_b[0] * grad_loss if ctx.has_bias else None
        return grad_h * grad_loss, grad_w * grad_loss, bias_grad, None, None, None, None, None, None


def projected_label_smoothed_loss(h: Tensor, weight: Tensor, target: Tensor, epsilon: float, pad_id: int,
                                  chunk: int | None = CHUNK_POSITIONS, bias: Tensor | None = None,
                                  body: LossBody | None = None, groups: list[OutputGroup] | None = None
                                  ) -> tuple[Tensor, Tensor]:
    """`label_smoothed_loss` of ``h @ weight.T`` without holding the logits of more than ``chunk``
    positions at once (None: all of them, one product).

    ``h`` (B, T, d) are decoder states, ``weight`` (V, d) the output projection, ``bias`` (V,) its
    bias where the model has one. Under autocast the
    products run in its dtype, as ``F.linear`` would. ``body``: the chunk body when training
    (`loss_head_chunk`, or its compiled form `fused_loss_head`). ``groups``: a model with
    per-language output vocabularies (`Transformer.output_groups`): each group's sentences are scored
    over its language's columns only, smoothing spread over those. Returns (summed loss, summed NLL,
    detached).
    """
    if groups is not None:
        loss = nll = torch.zeros((), dtype=torch.float32, device=h.device)
        for rows, columns, local in groups:  # gathers: autograd scatters their gradients back
            part = projected_label_smoothed_loss(h[rows], weight[columns], local[target[rows]], epsilon, pad_id,
                                                 chunk, None if bias is None else bias[columns], body)
            loss, nll = loss + part[0], nll + part[1]
        return loss, nll
    device = h.device.type
    dtype = torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else h.dtype
    h, target = h.reshape(-1, h.size(-1)), target.reshape(-1)
    chunk = max(chunk or h.size(0), 1)
    with torch.autocast(device, enabled=False):
        if torch.is_grad_enabled() and (h.requires_grad or weight.requires_grad):
            loss, nll = ProjectedLoss.apply(h, weight, bias, target, epsilon, pad_id, dtype, chunk, body)
            return loss, nll.detach()
        w = weight.to(dtype)
        loss = nll = torch.zeros((), dtype=torch.float32, device=h.device)
        for start in range(0, h.size(0), chunk):
            logits = h[start : start + chunk].to(dtype) @ w.t()
            if bias is not None:
                logits = logits + bias.to(dtype)
            lprobs = F.log_softmax(logits, dim=-1, dtype=torch.float32)
            chunk_loss, chunk_nll, _ = _chunk(lprobs, target[start : start + chunk, None], epsilon, pad_id)
            loss, nll = loss + chunk_loss, nll + chunk_nll
        return loss, nll
