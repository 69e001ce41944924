"""Choices of command-line options, as enums typer lists in ``--help`` (no heavy imports here)."""

from __future__ import annotations

from enum import Enum

from nmtk.files import InvalidUtf8
from nmtk.precision import Precision, Quantization

__all__ = ["AttentionKind", "AttentionStyle", "InvalidUtf8", "PictureFormat", "PlotAxis", "Precision",
           "Quantization"]


class ExportFormat(str, Enum):
    """What `nmtk export` writes."""

    ctranslate2 = "ctranslate2"
    hf = "hf"


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
