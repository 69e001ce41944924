"""The decoding contract: what a search needs from a model, stated once.

`Transformer` and `Ensemble` both implement it; greedy, beam and sampling search depend on nothing
else. A search calls ``cache = model.start_cache(model.encode(src))`` once per batch, then
``model.decode_step(tokens, cache)`` once per output position, and ``cache.reorder(index)`` when beams
are re-ranked or finished sentences leave the batch; a beam search first calls ``cache.expand(K)``
(K rows per sentence, sharing its encoder output). What ``encode`` returns is opaque to the search.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Protocol

from torch import Tensor, nn

from nmtk.model import ModelConfig


class Cache(Protocol):
    """Incremental-decoding state of a batch of rows."""

    def expand(self, beams: int) -> None:
        """Make each sentence's row ``beams`` rows (sentence-major) sharing its encoder output."""

    def reorder(self, index: Tensor, memory: bool = True) -> None:
        """Keep rows ``index`` (in that order); ``memory=False`` when only beams of a sentence move,
        else whole sentences are kept (all their rows, in order)."""


class Decoder(Protocol):
    """A model a search can decode with (a `Transformer`, an `Ensemble`)."""

    cfg: ModelConfig
    training: bool

    def encode(self, src: Tensor) -> Any:
        """Encode a padded batch of source ids (B, S), EOS included."""

    def start_cache(self, encoded: Any) -> Cache:
        """The decoding state before the first target position."""

    def decode_step(self, tokens: Tensor, cache: Cache) -> Tensor:
        """Scores (B, V) of the next token after ``tokens`` (B,), log-softmax-normalised by the search in
        place: a new tensor each call, which the search owns."""

    def parameters(self) -> Iterator[nn.Parameter]: ...

    def eval(self) -> Any: ...

    def train(self, mode: bool = True) -> Any: ...
