"""Ensembles of checkpoints of one run: log-probabilities averaged at every decoding step."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from nmtk.model import DecoderCache, Transformer


class _EnsembleCache:
    def __init__(self, caches: list[DecoderCache]) -> None:
        self.caches = caches

    def reorder(self, index: Tensor, memory: bool = True) -> None:
        for cache in self.caches:
            cache.reorder(index, memory)


class Ensemble(nn.Module):
    """Looks like a `Transformer` to the search: `encode`, `start_cache`, `decode_step`."""

    def __init__(self, models: list[Transformer]) -> None:
        super().__init__()
        self.models = nn.ModuleList(models)
        self.cfg = models[0].cfg

    def encode(self, src: Tensor):  # noqa: ANN201 - list of (memory, mask), one per model
        return [m.encode(src) for m in self.models], None

    def start_cache(self, encoded, _mask) -> _EnsembleCache:  # noqa: ANN001
        return _EnsembleCache([m.start_cache(mem, mask) for m, (mem, mask) in zip(self.models, encoded, strict=True)])

    def decode_step(self, tokens: Tensor, cache: _EnsembleCache) -> Tensor:
        lprobs = [torch.log_softmax(m.decode_step(tokens, c).float(), dim=-1)
                  for m, c in zip(self.models, cache.caches, strict=True)]
        return torch.stack(lprobs).mean(dim=0)
