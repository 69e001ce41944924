"""A decoding step of the decoder stack as one TorchScript call, on a CPU.

Why: a beam step of the demo model is ~130 small ops from Python in the decoder alone (2 layers: 13
products, attention over the cache and the source, layer norms, residuals), each a trip through the
interpreter and torch's Python bindings, and each holding Python's interpreter lock while it is
dispatched. Two searches side by side (`nmtk.decode.search.batches`) then take turns at that lock more
than they multiply. TorchScript runs the same ATen ops from C++, with the lock let go for the whole
call: the decoder's part of a step is one call from Python instead of ~130, and the other search's
Python runs meanwhile. The same ops in the same order, so the same numbers: translations byte-identical
to the eager step (tests/unit/test_script.py compares them). docs/decoding.md has the figures.

What it covers: the embedding of the step's tokens, every decoder layer (the self-attention's new
position written into `LayerCache`'s buffers in place, attention over the cache and over the encoder's
keys and values, the feed-forward block, residuals and norms, pre or post) and the final norm, with each
layer's products fp32 (`nn.Linear`) or int8 (`nmtk.model.int8.Int8Linear`). What stays eager: the
output projection (`nmtk.model.output`: its layouts, shortlists and int8 form change per batch), the
cache's growth and reorders, and every step where `applies` says no: training or gradients, another
device, another dtype or autocast (bf16), attention weights kept (alignments, `attention`).

TorchScript is in maintenance in PyTorch (``torch.jit.script`` warns that it is deprecated); where it is
missing or cannot compile a model, `build` returns None and the eager step runs, as it does with
``NMTK_TORCHSCRIPT=0`` in the environment (to measure one against the other).
"""

from __future__ import annotations

import math
import os
import threading
import warnings
from typing import List, Optional, TypeVar  # noqa: UP035 (TorchScript reads these annotations, not PEP 604's)

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from nmtk.errors import NmtkError
from nmtk.model.int8 import Int8Linear, reduce_range

#: ``NMTK_TORCHSCRIPT=0`` in the environment: decode with the eager step (to measure or to rule it out).
SWITCH_ENV = "NMTK_TORCHSCRIPT"
T = TypeVar("T")
_BUILDING = threading.Lock()  # two searches side by side may both be first to need the script


def enabled() -> bool:
    """Whether decoding may use TorchScript: yes unless ``NMTK_TORCHSCRIPT`` says 0 (or false, no, off)."""
    value = os.environ.get(SWITCH_ENV, "").strip().lower()
    if value not in _SWITCH:
        raise NmtkError(f"{SWITCH_ENV}={value!r} in the environment: 1 or 0 (or unset)")
    return _SWITCH[value]


_SWITCH = {"": True, "1": True, "true": True, "yes": True, "on": True, "0": False, "false": False, "no": False,
           "off": False}


class _Linear(nn.Module):
    """An ``nn.Linear``'s product on its own weight and bias (shared, not copied)."""

    def __init__(self, linear: nn.Linear) -> None:
        super().__init__()
        self.weight = linear.weight
        self.bias = linear.bias

    def forward(self, x: Tensor) -> Tensor:
        return F.linear(x, self.weight, self.bias)


class _Int8Linear(nn.Module):
    """An `Int8Linear`'s product on its packed weight (shared)."""

    def __init__(self, linear: Int8Linear) -> None:
        super().__init__()
        self.packed = linear.packed
        self.reduce_range = reduce_range()

    def forward(self, x: Tensor) -> Tensor:
        return torch.ops.quantized.linear_dynamic(x, self.packed, self.reduce_range)


#: The eager feed-forward's non-linearities (`nmtk.model.layers.ACTIVATIONS`) by name: a function
#: TorchScript cannot hold, so `_Layer._activate` calls the one named; any other leaves the step eager.
_ACTIVATION_NAMES = {F.relu: "relu", F.silu: "swish", F.gelu: "gelu"}


def _product(linear: nn.Module) -> nn.Module:
    if isinstance(linear, Int8Linear):
        return _Int8Linear(linear)
    if type(linear) is nn.Linear:
        return _Linear(linear)
    raise TypeError(f"no TorchScript form for {type(linear).__name__}")


class _Layer(nn.Module):
    """One `DecoderLayer` for one new position: the ops of its eager forward with a cache, in order."""

    def __init__(self, layer: nn.Module, pre_norm: bool) -> None:
        super().__init__()
        attn, cross, ffn = layer.self_attn, layer.cross_attn, layer.ffn
        if ffn.activation not in _ACTIVATION_NAMES:
            raise TypeError(f"no TorchScript form for the activation {ffn.activation!r}")
        self.qkv, self.self_out = _product(attn.qkv), _product(attn.out)
        self.q, self.cross_out = _product(cross.q), _product(cross.out)
        self.w1, self.w2 = _product(ffn.w1), _product(ffn.w2)
        self.norm_self, self.norm_cross, self.norm_ffn = layer.res_self.norm, layer.res_cross.norm, layer.res_ffn.norm
        self.heads, self.d_head = attn.heads, attn.d_head
        self.sqrt_d = math.sqrt(attn.d_head)
        self.pre_norm = pre_norm
        self.activation = _ACTIVATION_NAMES[ffn.activation]

    def forward(self, y: Tensor, k_cache: Tensor, v_cache: Tensor, position: int, memory_k: Tensor,
                memory_v: Tensor, memory_mask: Optional[Tensor], beams: int) -> Tensor:  # noqa: UP045
        h = self.norm_self(y) if self.pre_norm else y
        o = self._self_attention(h, k_cache, v_cache, position)
        y = y + o if self.pre_norm else self.norm_self(y + o)
        h = self.norm_cross(y) if self.pre_norm else y
        o = self._cross_attention(h, memory_k, memory_v, memory_mask, beams)
        y = y + o if self.pre_norm else self.norm_cross(y + o)
        h = self.norm_ffn(y) if self.pre_norm else y
        o = self.w2(self._activate(self.w1(h)))
        return y + o if self.pre_norm else self.norm_ffn(y + o)

    def _self_attention(self, h: Tensor, k_cache: Tensor, v_cache: Tensor, position: int) -> Tensor:
        rows = h.size(0)
        q, k, v = self.qkv(h).view(rows, 1, 3, self.heads, self.d_head).permute(2, 0, 3, 1, 4).unbind(0)
        k_cache[:, :, position] = k[:, :, 0]
        v_cache[:, :, position] = v[:, :, 0]
        keys, values = k_cache[:, :, : position + 1], v_cache[:, :, : position + 1]
        o = (q @ keys.transpose(-2, -1) / self.sqrt_d).softmax(dim=-1) @ values
        return self.self_out(o.transpose(1, 2).reshape(rows, 1, self.heads * self.d_head))

    def _cross_attention(self, h: Tensor, memory_k: Tensor, memory_v: Tensor, memory_mask: Optional[Tensor],  # noqa: UP045
                         beams: int) -> Tensor:
        rows = h.size(0)
        q = self.q(h).view(rows, 1, 1, self.heads, self.d_head).permute(2, 0, 3, 1, 4)[0]
        if beams != 1:  # a sentence's beams are its queries against its one copy of the source
            q = q.view(rows // beams, beams, self.heads, self.d_head).transpose(1, 2)
        scores = q @ memory_k.transpose(-2, -1) / self.sqrt_d
        if memory_mask is not None:
            scores = scores.masked_fill_(~memory_mask, float("-inf"))
        o = scores.softmax(dim=-1) @ memory_v
        o = self.cross_out(o.transpose(1, 2).reshape(o.size(0), o.size(2), self.heads * self.d_head))
        return o if beams == 1 else o.reshape(rows, 1, -1)

    def _activate(self, x: Tensor) -> Tensor:
        if self.activation == "relu":
            return F.relu(x)
        if self.activation == "swish":
            return F.silu(x)
        return F.gelu(x)  # the one name left (`_ACTIVATION_NAMES`)


class _DecoderStep(nn.Module):
    """Embedding, decoder layers and final norm of one step: (rows,) tokens to (rows, 1, d) states."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        cfg, embed = model.cfg, model.tgt_embed
        self.layers = nn.ModuleList([_Layer(layer, cfg.norm == "pre") for layer in model.decoder])
        self.table, self.pe, self.scale = embed.table.weight, embed.pe, embed.scale
        self.norm = model.decoder_norm

    def forward(self, tokens: Tensor, position: int, k_caches: List[Tensor], v_caches: List[Tensor],  # noqa: UP006
                memory_k: List[Tensor], memory_v: List[Tensor], memory_mask: Optional[Tensor],  # noqa: UP006, UP045
                beams: int) -> Tensor:
        y = F.embedding(tokens[:, None], self.table) * self.scale + self.pe[position : position + 1]
        i = 0
        for layer in self.layers:
            y = layer(y, k_caches[i], v_caches[i], position, memory_k[i], memory_v[i], memory_mask, beams)
            i += 1
        return self.norm(y)


def script(target: T) -> T | None:
    """``target`` (a module or a function) as TorchScript, or None where TorchScript is switched off,
    missing or cannot compile it (the eager form is the reference, and runs instead)."""
    if not enabled():
        return None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # its deprecation notice, once per script
            return torch.jit.script(target)
    except Exception:  # noqa: BLE001 (any failure to compile leaves the eager form)
        return None


def build(model: nn.Module) -> torch.jit.ScriptModule | None:
    """``model``'s decoder step as a TorchScript module (sharing its weights), or None (`script`; a
    product of another kind, say)."""
    try:
        step = _DecoderStep(model)
    except TypeError:
        return None
    return script(step)


class ScriptedStep:
    """A `Transformer`'s TorchScript step, built on first use (not a module: nothing of it is saved, and
    a copied or pickled model builds its own)."""

    def __init__(self) -> None:
        self._module: torch.jit.ScriptModule | None = None
        self._built = False

    def __getstate__(self) -> dict[str, object]:
        return {"_module": None, "_built": False}

    def reset(self) -> None:
        """Build again at the next step: the model's modules or tensors were replaced."""
        self._module, self._built = None, False

    def module(self, model: nn.Module) -> torch.jit.ScriptModule | None:
        if not self._built:
            with _BUILDING:
                if not self._built:
                    self._module, self._built = build(model), True
        return self._module


def applies(model: nn.Module, tokens: Tensor) -> bool:
    """Whether this step may run scripted: eval mode on a CPU, no gradient, fp32 weights and no autocast,
    and no attention module keeping its weights (alignments, `Transformer.attention_weights`)."""
    if model.training or tokens.device.type != "cpu" or torch.is_grad_enabled() or torch.is_autocast_enabled("cpu"):
        return False
    if model.tgt_embed.table.weight.dtype != torch.float32:
        return False
    return not any(layer.self_attn.keep_weights or layer.cross_attn.keep_weights for layer in model.decoder)
