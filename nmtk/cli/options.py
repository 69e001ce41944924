"""Choices of command-line options, as enums typer lists in ``--help`` (no heavy imports here)."""

from __future__ import annotations

from enum import Enum

from nmtk.files import InvalidUtf8
from nmtk.precision import Precision, Quantization

__all__ = ["AttentionKind", "AttentionStyle", "ConstraintOrder", "InvalidUtf8", "PictureFormat", "PlotAxis",
           "Precision",
           "Quantization"]


class ExportFormat(str, Enum):
    """What `nmtk export` writes."""

    ctranslate2 = "ctranslate2"
    hf = "hf"


class TermsChoice(str, Enum):
    """``--terms``: how a glossary's terms reach the translation (`nmtk.decode.guide.TermsMode`)."""

    auto = "auto"
    inline = "inline"
    constrained = "constrained"


class LengthPenaltyForm(str, Enum):
    """``--lenpen-form``: the recipe's ``decode.length_penalty_form``."""

    gnmt = "gnmt"
    power = "power"


def form_value(form: LengthPenaltyForm | None) -> str | None:
    return form.value if form is not None else None


class ConstraintOrder(str, Enum):
    """``translate --constraints``: whether a line's terms may appear in any order (fairseq's choices)."""

    unordered = "unordered"
    ordered = "ordered"


class MarkupFormat(str, Enum):
    """``translate --format``: plain lines, one document with tags (`nmtk.decode.markup`), a subtitle
    file (`nmtk.text.subtitles`), or an XLIFF file (`nmtk.text.xliff`)."""

    text = "text"
    html = "html"
    xml = "xml"
    srt = "srt"
    vtt = "vtt"
    ass = "ass"
    xliff = "xliff"


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
