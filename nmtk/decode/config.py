"""What a search is asked for and what it gives back, without torch.

Beam search, sampling and the CTranslate2 translator share these, and the last must load without
torch: a deployed (exported) model is run by CTranslate2 alone (`nmtk.decode.export`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from nmtk.decode.alignment import Alignment


@dataclass
class Hypothesis:
    tokens: list[int]
    score: float  # length-normalised log-probability
    alignment: Alignment | None = None  # word alignment, when asked for (`nmtk.decode.alignment`)


@dataclass
class SearchConfig:
    beam: int = 4
    length_penalty: float = 0.6
    max_len_a: float = 1.0
    max_len_b: int = 50
    nbest: int = 1


@dataclass
class SamplingConfig:
    topk: int = 0  # 0 = no top-k cut
    topp: float = 1.0  # 1.0 = no nucleus cut
    temperature: float = 1.0
    seed: int = 1


def length_batches(lengths: np.ndarray, max_tokens: int, beam: int) -> list[np.ndarray]:
    """Indices sorted by length, cut so that sentences · longest · beam ≤ max_tokens (at least one each)."""
    order = np.argsort(lengths, kind="stable")
    batches, start = [], 0
    for i in range(1, len(order) + 1):
        if i == len(order) or (i - start + 1) * int(lengths[order[i]]) * beam > max_tokens:
            batches.append(order[start:i])
            start = i
    return [b for b in batches if len(b)]
