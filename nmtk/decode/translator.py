"""Text in, text out: a run's text pipelines around batched search, results in input order."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import torch

from nmtk.checkpoint import load_checkpoint
from nmtk.decode.alignment import align, word_starts
from nmtk.decode.beam import Hypothesis, SearchConfig
from nmtk.decode.ensemble import Ensemble
from nmtk.decode.long_input import Segments, boundary_strengths, warn_split
from nmtk.decode.sampling import SamplingConfig, sample_search
from nmtk.decode.search import SearchFn, decode_ids
from nmtk.errors import NmtkError
from nmtk.model import ModelConfig, Transformer
from nmtk.text import TextPipeline


def load_model(path: Path, device: torch.device, expected_vocab: dict[str, str] | None = None) -> Transformer:
    """A checkpoint's model in eval mode on ``device``; refuses one trained with another vocabulary."""
    checkpoint = load_checkpoint(path)
    if "model_config" not in checkpoint or "model" not in checkpoint:
        raise NmtkError(f"{path}: not an nmtk checkpoint (no model)")
    if expected_vocab is not None and checkpoint.get("vocab") not in (None, expected_vocab):
        raise NmtkError(f"{path}: trained with another vocabulary than this run's subword model")
    model = Transformer(ModelConfig(**checkpoint["model_config"]))
    model.load_state_dict(checkpoint["model"])
    return model.to(device).eval()


@dataclass
class Translator:
    """Translates sentences with a pair of text pipelines (source, target) and a model or ensemble."""

    pipelines: tuple[TextPipeline, TextPipeline]
    model: Transformer | Ensemble
    search: SearchConfig
    device: torch.device
    precision: str = "fp32"
    max_tokens: int = 8192
    sampling: SamplingConfig | None = None
    align_layer: int | None = None  # decoder layer (0-based, negative from the end) for word alignments
    _search_fn: SearchFn | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        self.src_pipe, self.tgt_pipe = self.pipelines
        self.boundaries = boundary_strengths(self.src_pipe.subwords.pieces())
        if self.align_layer is not None:
            self.word_starts = tuple(word_starts(p.subwords.pieces()) for p in (self.src_pipe, self.tgt_pipe))
        if self.sampling is not None:  # one generator for the whole input: batches continue its stream
            generator = torch.Generator(device=self.device).manual_seed(self.sampling.seed)
            self._search_fn = partial(sample_search, sampling=self.sampling, generator=generator)

    def hypotheses(self, sentences: list[str], first_line: int = 1) -> list[list[Hypothesis]]:
        """N-best hypotheses per sentence; an empty (or blank) sentence gets none.

        A sentence longer than the model's input is translated in pieces (`nmtk.decode.long_input`),
        with one warning naming its line (``first_line`` is the number of ``sentences[0]``).
        """
        ids = [self.src_pipe.encode(s) if s.strip() else None for s in sentences]
        todo = [i for i, x in enumerate(ids) if x is not None]
        results: list[list[Hypothesis]] = [[] for _ in sentences]
        if not todo:
            return results
        segments = Segments.of([ids[i] for i in todo], self.model.cfg.max_positions - 1, self.boundaries)
        hyps = decode_ids(self.model, segments.pieces, self.search, max_tokens=self.max_tokens, device=self.device,
                          precision=self.precision, search_fn=self._search_fn)
        if self.align_layer is not None:
            self._align(segments.pieces, hyps)
        found = segments.join(hyps)
        for i, hyps, n in zip(todo, found, segments.count, strict=True):
            results[i] = hyps
            if n > 1:
                warn_split(first_line + i, len(ids[i]), self.model.cfg.max_positions, n)
        return results

    def _align(self, sources: list[list[int]], hyps: list[list[Hypothesis]]) -> None:
        """Attach a word alignment to every hypothesis (the first model's, for an ensemble)."""
        model = self.model.models[0] if isinstance(self.model, Ensemble) else self.model
        pairs = [(src, h) for src, group in zip(sources, hyps, strict=True) for h in group]
        for start in range(0, len(pairs), 64):
            chunk = pairs[start : start + 64]
            found = align(model, [s for s, _ in chunk], [h.tokens for _, h in chunk], *self.word_starts,
                          self.align_layer, self.device, self.precision)
            for (_, h), alignment in zip(chunk, found, strict=True):
                h.alignment = alignment

    def detokenize(self, hyp: Hypothesis) -> str:
        return self.tgt_pipe.decode(hyp.tokens)

    def translate(self, sentences: list[str]) -> list[str]:
        return [self.detokenize(h[0]) if h else "" for h in self.hypotheses(sentences)]
