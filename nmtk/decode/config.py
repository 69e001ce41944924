"""What a search is asked for and what it gives back, without torch.

Beam search, sampling and the CTranslate2 translator share these, and the last must load without
torch: a deployed (exported) model is run by CTranslate2 alone (`nmtk.decode.ct2`).

`SearchConfig` is the one home of the search settings: its defaults are the recipe's ``[decode]``
defaults (`nmtk.recipe.DecodeSection`), and `SearchConfig.from_recipe` is the one place a recipe's
section and a command's explicit choices become a search, for `translate`, validation and exports.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from nmtk.errors import NmtkError
from nmtk.recipe import DECODE_MAX_TOKENS, DecodeSection

if TYPE_CHECKING:
    from nmtk.decode.alignment import Alignment

_DEFAULTS = DecodeSection()


@dataclass
class Hypothesis:
    tokens: list[int]
    score: float  # length-normalised log-probability
    alignment: Alignment | None = None  # word alignment, when asked for (`nmtk.decode.alignment`)


@dataclass
class SearchConfig:
    """One search: beam (1 = greedy), GNMT length penalty α, output length ≤ a·|x| + b, the n best kept,
    and the batch budget ``max_tokens`` in source tokens × beam (× 1 for sampling; None: by device)."""

    beam: int = _DEFAULTS.beam
    length_penalty: float = _DEFAULTS.length_penalty
    max_len_a: float = _DEFAULTS.max_len_a
    max_len_b: int = _DEFAULTS.max_len_b
    nbest: int = 1
    max_tokens: int | None = _DEFAULTS.max_tokens  # None: by device (`budget`)

    def budget(self, device_type: str) -> int:
        """Source tokens × beam per batch on a device of this type (``cpu``, ``cuda``)."""
        return self.max_tokens or DECODE_MAX_TOKENS.get(device_type, DECODE_MAX_TOKENS["cpu"])

    @classmethod
    def from_recipe(cls, decode: DecodeSection, *, beam: int | None = None, nbest: int = 1,
                    length_penalty: float | None = None, max_len_a: float | None = None,
                    max_len_b: int | None = None, max_tokens: int | None = None) -> SearchConfig:
        """The search a command asks for, the recipe's ``[decode]`` filling what it leaves open (None).

        Rule for ``nbest`` K: without an explicit beam the beam is at least K (the recipe's beam, raised
        to K); an explicit beam smaller than K is an error, since a beam of B holds B hypotheses.
        """
        if beam is not None and nbest > beam:
            raise NmtkError(f"--nbest {nbest} exceeds --beam {beam}: a beam of {beam} keeps {beam} hypotheses; "
                            "raise --beam or leave it out (it then follows --nbest)")

        def pick(value: Any, default: Any) -> Any:
            return default if value is None else value

        return cls(beam=pick(beam, max(decode.beam, nbest)), nbest=nbest,
                   length_penalty=pick(length_penalty, decode.length_penalty),
                   max_len_a=pick(max_len_a, decode.max_len_a), max_len_b=pick(max_len_b, decode.max_len_b),
                   max_tokens=pick(max_tokens, decode.max_tokens))


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
