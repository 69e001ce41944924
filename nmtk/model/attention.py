"""Multi-head attention (paper §3.2) over `scaled_dot_product_attention`, with a key/value cache.

Scaled dot-product attention (§3.2.1, equation 1) is

    Attention(Q, K, V) = softmax(Q Kᵀ / √d_k) V

computed per head, with d_k = d_model / h; multi-head attention (§3.2.2) projects the input h times
with W^Q_i, W^K_i, W^V_i, attends, concatenates the heads and projects with W^O. `attention` below
hands equation 1 to PyTorch's fused `scaled_dot_product_attention` (SDPA), or, decoding on a CPU,
to the plain ops of `attention_weights`; masked positions get -∞ before the softmax.
tests/unit/test_model.py checks both against a five-line transcription of the formula, with padding
and causal masks.

Projections are fused (one matmul for Q, K, V in self-attention; one for K, V in encoder-decoder
attention): the same parameters as separate W^Q, W^K, W^V matrices, fewer kernel launches.
Masks are boolean, ``True`` where attention is allowed, shaped to broadcast as (batch, heads, query, key).
"""

from __future__ import annotations

import math
from contextlib import AbstractContextManager, nullcontext
from contextvars import ContextVar

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.attention import SDPBackend, sdpa_kernel

KEPT: ContextVar[dict[nn.Module, Tensor] | None] = ContextVar("nmtk_kept_attention", default=None)
"""Where this thread's `Transformer.attention_weights` block collects weights (None: outside one).
Per thread, so that a server decoding on two threads can align on one while the other searches."""


CUDA_KERNELS = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]
"""SDPA's kernels on a GPU: all but cuDNN's. PyTorch 2.11 picks cuDNN first on an H100, and cuDNN
builds an execution plan for every new shape: 90–135 ms each over two runs (`benchmarks/sdpa.py`,
base model), where token-bucket batches and every decoding step bring new shapes. Once built it is no
faster than flash (causal) or memory-efficient (masked): 0.24–0.31 against 0.22–0.36 ms per call."""


def _kernels(q: Tensor) -> AbstractContextManager:
    """The SDPA kernels allowed for ``q``'s device. On CPU, the "math" kernel (batched matmuls +
    softmax): for translation-length sequences its backward is ~10x faster than the CPU flash kernel
    (measured: d_model 256, 4 heads, ~25 tokens). On CUDA, `CUDA_KERNELS`."""
    if q.device.type == "cpu":
        return sdpa_kernel(SDPBackend.MATH)
    return sdpa_kernel(CUDA_KERNELS) if q.device.type == "cuda" else nullcontext()


def _plain_on_cpu(q: Tensor, dropout: float) -> bool:
    """Decoding on a CPU (no gradient, no dropout) skips SDPA: its math kernel dispatches ~40 small
    ops per call (q and k scaled apart, the mask turned into floats, checks for fully masked rows), a
    fixed cost of every beam step. The plain ops (`attention_weights`, then V) agree to float rounding;
    on the Multi30k model, 1 thread: ~3 % more sentences/s, test_2016_flickr's translations unchanged."""
    return q.device.type == "cpu" and dropout == 0.0 and not torch.is_grad_enabled()


def attention(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None, causal: bool = False,
              dropout: float = 0.0) -> Tensor:
    """softmax(Q Kᵀ / √d_k) V over (B, heads, T, d_k) tensors; ``mask`` True where attention is allowed,
    ``causal`` hides later keys (position i sees keys ≤ i); ``dropout`` on the attention weights."""
    if _plain_on_cpu(q, dropout):
        return attention_weights(q, k, mask, causal) @ v
    if causal and mask is not None:  # SDPA takes one or the other: fold the causal mask into ``mask``
        mask = mask & torch.ones(q.size(-2), k.size(-2), dtype=torch.bool, device=q.device).tril()
        causal = False
    with _kernels(q):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout, is_causal=causal)


def attention_weights(q: Tensor, k: Tensor, mask: Tensor | None = None, causal: bool = False) -> Tensor:
    """softmax(Q Kᵀ / √d_k) itself, (B, heads, T_q, T_k): what `attention` weighs V with."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:  # in place: the scores are this call's own (a decoding step's fewer copies)
        scores = scores.masked_fill_(~mask, float("-inf"))
    if causal:
        hidden = torch.ones(q.size(-2), k.size(-2), dtype=torch.bool, device=q.device).triu(1)
        scores = scores.masked_fill_(hidden, float("-inf"))
    if scores.dtype == torch.float32:
        return scores.softmax(dim=-1)
    return scores.float().softmax(dim=-1).to(q.dtype)


def _init_fused(linear: nn.Linear, parts: int) -> None:
    """Xavier-uniform each d×d block separately, as if W^Q, W^K, W^V were separate matrices."""
    for block in linear.weight.data.chunk(parts, dim=0):
        nn.init.xavier_uniform_(block)
    nn.init.zeros_(linear.bias)


class _Heads(nn.Module):
    """Shared plumbing: split into heads, attend, merge heads, output projection W^O.

    While some thread is inside `Transformer.attention_weights` (``keep_weights`` counts them), that
    thread's forwards compute the weights explicitly and keep them in its `KEPT` dict, (B, heads,
    T_q, T_k) per module. Otherwise the fused SDPA kernel runs and nothing else is done; the plain
    attribute test is all a compiled training step sees.
    """

    def __init__(self, d_model: int, heads: int, dropout: float) -> None:
        super().__init__()
        self.heads = heads
        self.d_head = d_model // heads
        self.dropout = dropout
        self.keep_weights = 0
        self.out = nn.Linear(d_model, d_model)
        nn.init.xavier_uniform_(self.out.weight)
        nn.init.zeros_(self.out.bias)

    def split(self, x: Tensor, parts: int) -> tuple[Tensor, ...]:
        """(B, T, parts·d) -> `parts` tensors of (B, heads, T, d_head)."""
        b, t, _ = x.shape
        return x.view(b, t, parts, self.heads, self.d_head).permute(2, 0, 3, 1, 4).unbind(0)

    def attend(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, causal: bool = False) -> Tensor:
        kept = KEPT.get() if self.keep_weights else None
        if kept is not None:
            w = attention_weights(q, k, mask, causal)
            kept[self] = w.detach()
            o = F.dropout(w, self.dropout, self.training) @ v
        else:
            o = attention(q, k, v, mask, causal, self.dropout if self.training else 0.0)
        b, _, t, _ = o.shape
        return self.out(o.transpose(1, 2).reshape(b, t, self.heads * self.d_head))


class SelfAttention(_Heads):
    """Self-attention; with a `LayerCache`, keys and values of earlier steps are reused."""

    def __init__(self, d_model: int, heads: int, dropout: float) -> None:
        super().__init__(d_model, heads, dropout)
        self.qkv = nn.Linear(d_model, 3 * d_model)
        _init_fused(self.qkv, 3)

    def forward(
        self, x: Tensor, mask: Tensor | None = None, causal: bool = False, cache: LayerCache | None = None
    ) -> Tensor:
        q, k, v = self.split(self.qkv(x), 3)
        if cache is not None:
            k, v = cache.append(k, v)
        return self.attend(q, k, v, mask, causal)


class CrossAttention(_Heads):
    """Encoder-decoder attention: queries from the decoder, keys and values from the encoder output."""

    def __init__(self, d_model: int, heads: int, dropout: float) -> None:
        super().__init__(d_model, heads, dropout)
        self.q = nn.Linear(d_model, d_model)
        self.kv = nn.Linear(d_model, 2 * d_model)
        _init_fused(self.q, 1)
        _init_fused(self.kv, 2)

    def project_memory(self, memory: Tensor) -> tuple[Tensor, Tensor]:
        """Keys and values of the encoder output: computed once per sentence when decoding."""
        return self.split(self.kv(memory), 2)

    def forward(self, x: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, beams: int = 1) -> Tensor:
        """``beams`` > 1: ``x`` holds one step (rows, 1, d) of ``beams`` rows per sentence of ``k``/``v``;
        a sentence's beams are attended as its queries, against its one copy of the keys and values."""
        (q,) = self.split(self.q(x), 1)
        if beams == 1:
            return self.attend(q, k, v, mask)
        rows = q.size(0)
        q = q.view(rows // beams, beams, self.heads, self.d_head).transpose(1, 2)  # (sentences, heads, beams, d)
        return self.attend(q, k, v, mask).reshape(rows, 1, -1)


#: Positions a `LayerCache` starts with and grows by when full: a copy of the cache every 16 steps, and
#: at most 16 positions held for nothing (doubling held up to half of it).
GROWTH = 16


class LayerCache:
    """One decoder layer's state during incremental decoding.

    Self-attention keys and values live in preallocated (rows, heads, positions, d_head) buffers: a
    step writes one position in place (no ``torch.cat`` copying the history every step), and the
    attention reads the filled prefix as a view whose (rows, heads) fold into one batch of matrices
    (no copy before its matmuls). Reordering beams gathers the filled prefix once, straight into a
    spare buffer, so the history is copied once per reorder, not twice per step. One spare serves
    every buffer of the cache (`DecoderCache.reorder` hands it on: the buffer it replaces becomes the
    next one's spare), so a cache holds 2 × layers + 1 buffers, not 4 × layers (demo model, beam 4,
    8,192 source tokens × beam: 232 → 162 MiB at the peak). In this layout the gather copies a few long
    blocks per row (time-major, one 1 KB block per row and position, it ran 1.8x slower: the reorder
    was a fifth of a small model's beam step on a CPU). The attention's matmuls read this layout a
    little slower (the heads' blocks lie a capacity apart), the reorder and the attention together
    faster (CHANGELOG). Buffers start at `GROWTH` positions and grow by as many when full (doubling
    from 32 held twice the memory at a batch's start and was slower: 6.0 against 6.4 s for
    test_2016_flickr at the CPU's default budget). Encoder-decoder keys/values are projected once, held
    once per sentence however many beams it has (`DecoderCache.expand`), and only change when finished
    sentences leave the batch.
    """

    def __init__(self, memory_k: Tensor, memory_v: Tensor, capacity: int = GROWTH) -> None:
        self.memory_k = memory_k
        self.memory_v = memory_v
        self.capacity = capacity
        self.length = 0
        self.k: Tensor | None = None  # (rows, heads, capacity, d_head)
        self.v: Tensor | None = None

    def _empty(self, rows: int, like: Tensor) -> Tensor:
        _, heads, _, d_head = like.shape
        return torch.empty((rows, heads, self.capacity, d_head), dtype=like.dtype, device=like.device)

    def reserve(self, rows: int, like: Tensor) -> int:
        """Room for one more position in the buffers (made at the first step, grown by `GROWTH` when
        full: a copy every 16 steps), counted as filled; returns its index, which the step then writes
        (`append`, or `nmtk.model.script`'s step in place). ``like``: any (·, heads, ·, d_head) tensor
        of the step's dtype and device."""
        if self.k is None:
            self.k, self.v = self._empty(rows, like), self._empty(rows, like)
        elif self.length == self.capacity:
            self.capacity += GROWTH
            grown_k, grown_v = self._empty(rows, like), self._empty(rows, like)
            grown_k[:, :, : self.length] = self.k[:, :, : self.length]
            grown_v[:, :, : self.length] = self.v[:, :, : self.length]
            self.k, self.v = grown_k, grown_v
        self.length += 1
        return self.length - 1

    def append(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Add this step's keys and values (rows, heads, 1, d_head); all so far, as (rows, heads, T, d_head)."""
        position = self.reserve(k.size(0), k)
        self.k[:, :, position] = k[:, :, 0].detach()  # the cache holds values for decoding, never a graph
        self.v[:, :, position] = v[:, :, 0].detach()
        return self.k[:, :, : self.length], self.v[:, :, : self.length]

    def reorder(self, index: Tensor, sentences: Tensor | None = None, spare: Tensor | None = None) -> Tensor | None:
        """Keep rows ``index`` of the self-attention history, gathered into ``spare`` where it has the
        shape (else a new buffer); ``sentences`` (None: unchanged) selects the encoder keys/values, which
        are held per sentence (`DecoderCache.expand`). Returns the spare for the next buffer: one this
        reorder replaced, where it has the new shape."""
        if self.k is not None:
            rows, n = index.numel(), self.length
            self.k, spare = self._gathered(self.k, index, n, spare)
            self.v, spare = self._gathered(self.v, index, n, spare)
            spare = spare if spare is not None and spare.size(0) == rows else None
        if sentences is not None:
            self.memory_k = self.memory_k.index_select(0, sentences)
            self.memory_v = self.memory_v.index_select(0, sentences)
        return spare

    def _gathered(self, buffer: Tensor, index: Tensor, n: int, spare: Tensor | None) -> tuple[Tensor, Tensor]:
        """``buffer``'s rows ``index`` (its first ``n`` positions) in ``spare`` (or a new buffer where
        ``spare`` has another shape); and ``buffer``, the next spare."""
        shape = (index.numel(), *buffer.shape[1:])
        if spare is None or spare.shape != shape or spare.dtype != buffer.dtype:
            spare = self._empty(index.numel(), buffer)
        torch.index_select(buffer[:, :, :n], 0, index, out=spare[:, :, :n])
        return spare, buffer
