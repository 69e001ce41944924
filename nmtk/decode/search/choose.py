"""The one place a batch's search is chosen: sampling, lexically constrained beam search, greedy
search or beam search, by the `SearchConfig` and the batch's line controls.

Every caller searches through `search` (or takes the function from `search_for`): the translators'
batches (`decode_ids`), validation, tests. How many rows a source takes in a batch is the config's
to say (`SearchConfig.rows`), never inferred from the function chosen.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial

import torch
from torch import Tensor

from nmtk.decode.search.beam import beam_search, greedy_search
from nmtk.decode.search.config import Hypothesis, LineControls, SearchConfig
from nmtk.decode.search.constrained import constrained_beam_search
from nmtk.decode.search.contract import Decoder
from nmtk.decode.search.sampling import sample_search

#: A search over one padded batch of sources and their line controls (None: none).
SearchFn = Callable[[Decoder, Tensor, SearchConfig, "Sequence[LineControls | None] | None"], list[list[Hypothesis]]]


def search_for(cfg: SearchConfig, controls: Sequence[LineControls | None] | None = None,
               generator: torch.Generator | None = None) -> SearchFn:
    """The search ``cfg`` asks for, for a batch whose lines carry ``controls``: sampling (with
    ``generator``: its random stream), constrained beam search where a line has terms, greedy search at
    beam 1, else beam search."""
    if cfg.sampling is not None:
        return partial(sample_search, sampling=cfg.sampling, generator=generator)
    if controls is not None and any(c and c.constraints for c in controls):
        return constrained_beam_search
    return greedy_search if cfg.beam == 1 else beam_search


@torch.inference_mode()
def search(model: Decoder, src: Tensor, cfg: SearchConfig, controls: Sequence[LineControls | None] | None = None,
           generator: torch.Generator | None = None,
           watch: Callable[[], Tensor | None] | None = None) -> list[list[Hypothesis]]:
    """The ``cfg.nbest`` best hypotheses of each source row of ``src``, best first, searched as `search_for`
    chooses. Without autograd, whichever search it is: beam search (beam > 1) ran with it until issue 64's
    review, recording every step's graph (the memory of decoding) and missing the CPU's decoding paths
    (`nmtk.model.attention`'s plain attention, `Transformer.project`'s column copy). ``watch``: the
    watched cross-attention, which beam search keeps for each hypothesis (`Hypothesis.attention`); the
    other searches leave it None."""
    chosen = search_for(cfg, controls, generator)
    if watch is not None and chosen is beam_search:
        return beam_search(model, src, cfg, controls, watch)
    return chosen(model, src, cfg, controls)
