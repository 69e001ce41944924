"""nmtk's own engine: a run's model (or ensemble) behind the translator contract of `nmtk.decode.base`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import ClassVar

import torch

from nmtk.data.shortlist import Shortlist
from nmtk.decode.base import TranslatorBase
from nmtk.decode.search.alignment import encoded_cross_attention
from nmtk.decode.search.batches import decode_ids
from nmtk.decode.search.config import Hypothesis, LineControls, SamplingConfig, SearchConfig
from nmtk.decode.search.ensemble import Ensemble
from nmtk.decode.search.word_alignment import Alignment, hard_alignment
from nmtk.device import give_back_freed_memory
from nmtk.errors import NmtkError
from nmtk.model import Encoded, Transformer
from nmtk.text.subword import word_index


@dataclass(kw_only=True)
class Translator(TranslatorBase):
    """nmtk's own engine: a model or ensemble on a torch device, searched in length-sorted batches."""

    engine: ClassVar[str] = "torch"
    can_align: ClassVar[bool] = True
    can_constrain: ClassVar[bool] = True

    model: Transformer | Ensemble
    device: torch.device
    align_layer: int = -1  # decoder layer (0-based, negative from the end) whose cross-attention aligns
    shortlist: Shortlist | None = None  # each batch projects onto its sources' candidates (`nmtk shortlist`)
    searches: int = 1  # on a CPU, one-thread searches taking a call's batches side by side (`side_by_side`)
    # One generator per sampling setting, made at its first call: the batches of one input, and the
    # calls of one server, continue its stream instead of repeating it.
    _generators: dict[SamplingConfig, torch.Generator] = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        self.max_positions = self.model.cfg.max_positions
        super().__post_init__()
        model = self.first_model  # per-target output vocabularies, read while the weights are here
        self.pieces_by_tag = {} if model.language_table is None else {
            int(tag): frozenset(allowed.nonzero().flatten().tolist())
            for tag, allowed in zip(model.output_tags, model.output_allowed, strict=True)}

    def output_pieces(self) -> frozenset[int] | None:
        return self.pieces_by_tag.get(self.src_pipe.prefix[0]) if self.src_pipe.prefix else None

    def decode_pieces(self, pieces: list[list[int]], search: SearchConfig,
                      controls: list[LineControls | None] | None = None) -> list[list[Hypothesis]]:
        if self.text_only:
            raise NmtkError("this translator's weights were freed (keep_text_only): it cannot search")
        if self.src_pipe.hint_markers is not None:
            search = replace(search, hint_markers=self.src_pipe.hint_markers)
        return decode_ids(self.model, pieces, search, device=self.device, precision=self.precision,
                          generator=self._generator(search.sampling), controls=controls, shortlist=self.shortlist,
                          aligner=(self.align_layer, self._align) if search.align else None, searches=self.searches)

    def _generator(self, sampling: SamplingConfig | None) -> torch.Generator | None:
        """Sampling's random stream, one per setting, made at its first call (None: no sampling)."""
        if sampling is None:
            return None
        if sampling not in self._generators:
            self._generators[sampling] = torch.Generator(device=self.device).manual_seed(sampling.seed)
        return self._generators[sampling]

    def _align(self, sources: list[Sequence[int]], hyps: list[list[Hypothesis]], encoded: Encoded | list[Encoded]
               ) -> None:
        """Attach a word alignment to every hypothesis of a searched batch (the first model's, for an
        ensemble): from the cross-attention beam search kept for it, else (greedy, sampling, terms) from a
        pass over the encoder output the search made (``encoded``), 64 hypotheses at a time."""
        first = encoded[0] if isinstance(encoded, list) else encoded
        pairs = [(row, src, h) for row, (src, group) in enumerate(zip(sources, hyps, strict=True)) for h in group]
        source_starts, target_starts = self.word_starts
        markers = self.src_pipe.hint_markers  # a hinted source's words are the line's own (`word_index`)
        for _, src, h in pairs:
            h.alignment = Alignment([], 0, 0)
            if h.attention is not None and src and h.tokens:
                h.alignment = hard_alignment(h.attention[:, : len(src)], word_index(source_starts, src, markers),
                                             word_index(target_starts, h.tokens))
            h.attention = None  # kept for this only: a hypothesis in a server's answer stays small
        pairs = [(row, src, h) for row, src, h in pairs if src and h.tokens and not h.alignment.pairs]
        for start in range(0, len(pairs), 64):
            chunk = pairs[start : start + 64]
            matrices = encoded_cross_attention(self.first_model, first, [row for row, _, _ in chunk],
                                               [list(src) for _, src, _ in chunk], [h.tokens for _, _, h in chunk],
                                               self.align_layer, self.device, self.precision)
            for (_, src, h), matrix in zip(chunk, matrices, strict=True):
                h.alignment = hard_alignment(matrix, word_index(source_starts, src, markers),
                                             word_index(target_starts, h.tokens))

    def keep_text_only(self) -> None:
        """Move the weights to torch's meta device: their memory is freed, the model keeps its shapes.
        A server whose decoding processes each load the model then holds one copy per process, not one
        more in the server (about 0.85 GB for a transformer-big in fp32)."""
        self.model.to(torch.device("meta"))
        give_back_freed_memory()

    @property
    def text_only(self) -> bool:
        """Whether `keep_text_only` freed the weights (they are on the meta device)."""
        return next(self.model.parameters()).is_meta

    @property
    def first_model(self) -> Transformer:
        """The model (an ensemble's first): whose attention alignments and pictures show."""
        return self.model.models[0] if isinstance(self.model, Ensemble) else self.model
