"""Choices of command-line options, as enums typer lists in ``--help`` (no heavy imports here)."""

from __future__ import annotations

from enum import Enum


class Precision(str, Enum):
    """Arithmetic of the decoder."""

    fp32 = "fp32"
    bf16 = "bf16"
    fp16 = "fp16"


class InvalidUtf8(str, Enum):
    """What to do with input that is not valid UTF-8."""

    error = "error"
    replace = "replace"
