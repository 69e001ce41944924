"""Choices of command-line options, as enums typer lists in ``--help`` (no heavy imports here)."""

from __future__ import annotations

from enum import Enum

from nmtk.files import InvalidUtf8
from nmtk.precision import Precision

__all__ = ["AttentionKind", "AttentionStyle", "InvalidUtf8", "PictureFormat", "PlotAxis", "Precision",
           "Quantization"]


class ExportFormat(str, Enum):
    """What `nmtk export` writes."""

    ctranslate2 = "ctranslate2"
    hf = "hf"


class Quantization(str, Enum):
    """How `nmtk export` stores the weights (CTranslate2's quantization types)."""

    float32 = "float32"
    int8 = "int8"
    int8_float32 = "int8_float32"
    int8_bfloat16 = "int8_bfloat16"
    bfloat16 = "bfloat16"
    float16 = "float16"


class AttentionKind(str, Enum):
    """Which attention `nmtk attention` draws."""

    encoder = "encoder"
    cross = "cross"
    decoder = "decoder"


class AttentionStyle(str, Enum):
    lines = "lines"
    heatmap = "heatmap"


class PictureFormat(str, Enum):
    png = "png"
    svg = "svg"


class PlotAxis(str, Enum):
    updates = "updates"
    minutes = "minutes"
