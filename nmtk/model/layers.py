"""Encoder and decoder layers (paper §3.1, §3.3) with residual connections and LayerNorm.

``post`` norm is the paper's LayerNorm(x + Dropout(Sublayer(x))); ``pre`` norm is
x + Dropout(Sublayer(LayerNorm(x))), which trains deep stacks without warmup tricks.
"""

from __future__ import annotations

from collections.abc import Callable

import torch.nn.functional as F
from torch import Tensor, nn

from nmtk.model.attention import CrossAttention, LayerCache, SelfAttention
from nmtk.model.config import ModelConfig

#: The feed-forward non-linearity: the paper's ReLU, and what other Transformers use (opus-mt: swish).
ACTIVATIONS: dict[str, Callable[[Tensor], Tensor]] = {"relu": F.relu, "swish": F.silu, "gelu": F.gelu}


class FeedForward(nn.Module):
    """FFN(x) = max(0, x W1 + b1) W2 + b2 (paper §3.3); swish or GELU in place of max(0, ·) on request."""

    def __init__(self, d_model: int, d_ff: int, relu_dropout: float, activation: str = "relu") -> None:
        super().__init__()
        self.w1 = nn.Linear(d_model, d_ff)
        self.w2 = nn.Linear(d_ff, d_model)
        self.relu_dropout = relu_dropout
        self.activation = ACTIVATIONS[activation]
        for linear in (self.w1, self.w2):
            nn.init.xavier_uniform_(linear.weight)
            nn.init.zeros_(linear.bias)

    def forward(self, x: Tensor) -> Tensor:
        return self.w2(dropout(self.activation(self.w1(x)), self.relu_dropout, self.training))


def dropout(x: Tensor, p: float, training: bool) -> Tensor:
    """``F.dropout``, not called where it does nothing: a decoding step has nine of them, each a
    dispatch to the identity."""
    return F.dropout(x, p, training) if training and p > 0 else x


class _Residual(nn.Module):
    """Wraps one sub-layer with dropout, the residual connection and LayerNorm (pre or post)."""

    def __init__(self, d_model: int, dropout: float, pre_norm: bool) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(d_model)
        self.dropout = dropout
        self.pre_norm = pre_norm

    def forward(self, x: Tensor, sublayer: Callable[[Tensor], Tensor]) -> Tensor:
        if self.pre_norm:
            return x + dropout(sublayer(self.norm(x)), self.dropout, self.training)
        return self.norm(x + dropout(sublayer(x), self.dropout, self.training))


class EncoderLayer(nn.Module):
    """Self-attention then feed-forward, each in a residual block."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        pre = cfg.norm == "pre"
        self.self_attn = SelfAttention(cfg.d_model, cfg.heads, cfg.attention_dropout)
        self.ffn = FeedForward(cfg.d_model, cfg.d_ff, cfg.relu_dropout, cfg.activation)
        self.res_attn = _Residual(cfg.d_model, cfg.dropout, pre)
        self.res_ffn = _Residual(cfg.d_model, cfg.dropout, pre)

    def forward(self, x: Tensor, mask: Tensor | None) -> Tensor:
        x = self.res_attn(x, lambda h: self.self_attn(h, mask))
        return self.res_ffn(x, self.ffn)


class DecoderLayer(nn.Module):
    """Causal self-attention, encoder-decoder attention, feed-forward (paper §3.1)."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        pre = cfg.norm == "pre"
        self.self_attn = SelfAttention(cfg.d_model, cfg.heads, cfg.attention_dropout)
        self.cross_attn = CrossAttention(cfg.d_model, cfg.heads, cfg.attention_dropout)
        self.ffn = FeedForward(cfg.d_model, cfg.d_ff, cfg.relu_dropout, cfg.activation)
        self.res_self = _Residual(cfg.d_model, cfg.dropout, pre)
        self.res_cross = _Residual(cfg.d_model, cfg.dropout, pre)
        self.res_ffn = _Residual(cfg.d_model, cfg.dropout, pre)

    def forward(
        self, y: Tensor, memory: Tensor, memory_mask: Tensor | None, cache: LayerCache | None = None,
        beams: int = 1,
    ) -> Tensor:
        """Full sequence (cache None, causal mask) or one new position (cache holds the past). Without a
        cache the pass is causal whatever its length (a one-token sequence's mask allows everything): a
        test of the length would be a symbolic bool under `torch.compile`'s dynamic shapes, which SDPA
        refuses, breaking each compiled decoder layer's graph in two."""
        causal = cache is None
        y = self.res_self(y, lambda h: self.self_attn(h, causal=causal, cache=cache))
        if cache is not None:
            k, v = cache.memory_k, cache.memory_v
        else:
            k, v = self.cross_attn.project_memory(memory)
        y = self.res_cross(y, lambda h: self.cross_attn(h, k, v, memory_mask, beams))
        return self.res_ffn(y, self.ffn)
