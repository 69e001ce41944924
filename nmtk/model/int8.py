"""int8 decoding on a CPU (``translate --precision int8``): every matrix product of the encoder, the
decoder and the output projection in 8-bit integers, through PyTorch's own dynamically quantised linear
product (``torch.ao``, the fbgemm kernels, VNNI/AMX where the CPU has them).

"Dynamic": the weights are quantised once, per output row (one scale each, symmetric), and packed in
the layout the kernel reads; each product quantises its input rows on the fly (one op: the scale is
found, the input rounded and multiplied in int8, the int32 sums scaled back to fp32). Everything else
(layer norms, softmax, attention over the cache, the search) stays fp32. ``reduce_range``: inputs in 7
bits, so that a CPU whose int8 multiply-add sums pairs in int16 (AVX2 without VNNI) cannot saturate.
``torch.ao``'s own dynamic modules follow that rule on every x86 CPU; nmtk only where the CPU lacks VNNI
(`reduce_range`): with it, int8 products sum into int32 and 8-bit inputs are safe. The output
projection is int8 on every CPU (`quantize_for_decoding` says what was measured).

PyTorch marks these kernels deprecated in favour of the torchao package (pytorch#184982); they are what
torch ships and what was measured here (docs/decoding.md). Their warnings are silenced where nmtk calls
them, once.
"""

from __future__ import annotations

import functools
import warnings
from pathlib import Path

import torch
from torch import Tensor, nn


@functools.cache
def reduce_range() -> bool:
    """Whether inputs are quantised to 7 bits: on a CPU without VNNI (AVX2, AVX-512F alone), whose
    int8 multiply-add sums pairs into int16 (255 × 127 × 2 overflows it); 8 bits where it has VNNI or AMX
    (one more bit: on the demo model 0.09 BLEU nearer fp32). Read from /proc/cpuinfo (`cpu`); 7 bits where
    that says nothing."""
    return not cpu()[1] & {"avx512_vnni", "avx_vnni", "amx_int8"}


@functools.cache
def cpu() -> tuple[str, frozenset[str]]:
    """/proc/cpuinfo's vendor and flags of the first CPU (``""`` and none where it cannot be read): what
    the CPU's products are chosen by (here, and `nmtk.model.onednn`)."""
    try:
        first = Path("/proc/cpuinfo").read_text(encoding="utf-8").split("\n\n", 1)[0]
    except OSError:
        return "", frozenset()
    field = {k.strip(): v.strip() for k, _, v in (line.partition(":") for line in first.splitlines())}
    return field.get("vendor_id", ""), frozenset(field.get("flags", "").split())


def pack(weight: Tensor, bias: Tensor | None) -> object:
    """``weight`` (out, in) as per-row symmetric int8 and ``bias`` (fp32), packed for
    ``torch.ops.quantized.linear_dynamic``; torch.ao's deprecation notice (one per quantised tensor) left out."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*deprecated.*", category=UserWarning)
        weight = weight.float()
        scales = (weight.abs().amax(dim=1) / 127.0).clamp(min=1e-8).double()
        zeros = torch.zeros(weight.size(0), dtype=torch.long)
        quantized = torch.quantize_per_channel(weight, scales, zeros, 0, torch.qint8)
        return torch.ops.quantized.linear_prepack(quantized, None if bias is None else bias.float())


@functools.cache
def _kernel() -> object:
    """``quantized::linear_dynamic`` itself: the C++ operator behind ``torch.ops.quantized.linear_dynamic``,
    without the Python wrapper's check for traced script objects (a tree walk over the arguments, ~7 µs a
    call, 13 calls a decoding step of the demo model) that nothing here needs: decoding never traces."""
    overload = torch.ops.quantized.linear_dynamic.default
    return getattr(overload, "_op", overload)


def linear(x: Tensor, packed: object) -> Tensor:
    """``x`` (..., in) times a `pack`ed weight, plus its bias: (..., out), fp32. The kernel takes all of
    ``x``'s leading dimensions as the rows of one matrix (one input scale for all of them)."""
    return _kernel()(x if x.dtype == torch.float32 else x.float(), packed, reduce_range())


class Int8Linear(nn.Module):
    """An ``nn.Linear`` for decoding only: its weight packed in int8 (`pack`), fp32 in and out."""

    def __init__(self, linear: nn.Linear) -> None:
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.packed = pack(linear.weight.detach(), None if linear.bias is None else linear.bias.detach())

    def forward(self, x: Tensor) -> Tensor:
        return linear(x, self.packed)


def quantize_for_decoding(model: nn.Module) -> nn.Module:
    """``model`` (a `Transformer` on the CPU, in eval mode) with every linear layer of its encoder and
    decoder an `Int8Linear` and its output projection int8 too (`OutputProjection.quantize`), in place.
    With 7-bit inputs (`reduce_range`, a CPU without VNNI) the output projection was once kept fp32 (on
    one model 0.29 BLEU lost with it, 2026-11-28; the CPU was not recorded beside it); on an AVX2 CPU
    itself (AMD EPYC Zen 3, 2026-12-01, its own demo model) it cost 0.01 BLEU on test_2016_flickr and
    gained 0.09-0.10 on test_2017_flickr and the validation set, and made the test set 1.18x faster:
    so it is int8 everywhere. For decoding only: nothing of it trains or saves (a checkpoint is written
    from a training model)."""
    if next(model.parameters()).device.type != "cpu":
        raise ValueError("int8 decoding runs on a CPU")
    model.eval()
    for stack in (model.encoder, model.decoder):
        for parent in stack.modules():
            for name, child in list(parent.named_children()):
                if isinstance(child, nn.Linear):
                    setattr(parent, name, Int8Linear(child))
    model._projection.quantize(model.output_weight, model.output_bias)
    model._scripted.reset()  # its products were the layers' fp32 ones
    return model
