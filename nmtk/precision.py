"""The arithmetic of training and decoding: one type from the command line and the recipe to autocast.

Kept apart from the recipe models so that parsing the command line imports neither pydantic nor torch.
"""

from __future__ import annotations

from enum import Enum


class Precision(str, Enum):
    """``auto``: bf16 where the hardware multiplies bf16 natively and, on a CPU, is measured faster, else fp32
    (`nmtk.device.resolve_precision`);
    ``fp16`` trains with dynamic loss scaling; ``int8`` decodes on a CPU with int8 matrix products
    (`nmtk.model.int8`), and trains nothing."""

    auto = "auto"
    fp32 = "fp32"
    bf16 = "bf16"
    fp16 = "fp16"
    int8 = "int8"

    def __str__(self) -> str:  # f-strings and messages show the value, as the recipe spells it
        return self.value


class Quantization(str, Enum):
    """How `nmtk export` stores the weights: CTranslate2's quantization types (the Hugging Face export
    writes float32 only)."""

    float32 = "float32"
    int8 = "int8"
    int8_float32 = "int8_float32"
    int8_bfloat16 = "int8_bfloat16"
    bfloat16 = "bfloat16"
    float16 = "float16"
