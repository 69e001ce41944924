"""Ensembles of models of one vocabulary (checkpoints of a run, runs of several seeds): log-probabilities
averaged at every decoding step."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from nmtk.model import DecoderCache, Encoded, Transformer


class EnsembleCache:
    """One `DecoderCache` per member model, reordered together."""

    def __init__(self, caches: list[DecoderCache]) -> None:
        self.caches = caches

    def expand(self, beams: int) -> None:
        for cache in self.caches:
            cache.expand(beams)

    def reorder(self, index: Tensor, memory: bool = True) -> None:
        for cache in self.caches:
            cache.reorder(index, memory)


class Ensemble(nn.Module):
    """Several models of one vocabulary behind the decoding contract (`nmtk.decode.search.contract.Decoder`).

    The step scores are the mean of the members' log-probabilities (the search renormalises them).
    """

    def __init__(self, models: list[Transformer]) -> None:
        super().__init__()
        self.models = nn.ModuleList(models)
        self.cfg = models[0].cfg

    def encode(self, src: Tensor) -> list[Encoded]:
        return [m.encode(src) for m in self.models]

    def start_cache(self, encoded: list[Encoded]) -> EnsembleCache:
        return EnsembleCache([m.start_cache(e) for m, e in zip(self.models, encoded, strict=True)])

    @property
    def output_ids(self) -> Tensor | None:
        """The members' shortlist candidates (`Transformer.output_ids`; restricted together), else None."""
        return self.models[0].output_ids

    def decode_step(self, tokens: Tensor, cache: EnsembleCache) -> Tensor:
        lprobs = [torch.log_softmax(m.decode_step(tokens, c).float(), dim=-1)
                  for m, c in zip(self.models, cache.caches, strict=True)]
        return torch.stack(lprobs).mean(dim=0)
