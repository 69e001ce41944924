"""Text in, text out: the run's Moses + sentencepiece pipeline around batched search, in input order."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import torch

from nmtk.checkpoint import load_checkpoint
from nmtk.decode.beam import Hypothesis, SearchConfig
from nmtk.decode.ensemble import Ensemble
from nmtk.decode.sampling import SamplingConfig, sample_search
from nmtk.decode.search import decode_ids
from nmtk.device import autocast_for
from nmtk.errors import NmtkError
from nmtk.model import ModelConfig, Transformer
from nmtk.rundir import RunDir
from nmtk.vocab import EOS_ID


def load_model(path: Path, device: torch.device, expected_vocab: dict[str, str] | None = None) -> Transformer:
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
    """Translates sentences with a run's pipeline and model(s)."""

    run: RunDir
    model: Transformer | Ensemble
    search: SearchConfig
    device: torch.device
    precision: str = "fp32"
    max_tokens: int = 8192
    sampling: SamplingConfig | None = None

    def __post_init__(self) -> None:
        self.src_pipe, self.tgt_pipe = self.run.pipelines()

    def hypotheses(self, sentences: list[str]) -> list[list[Hypothesis]]:
        """N-best hypotheses per sentence; an empty (or blank) sentence gets none."""
        ids = [self.src_pipe.encode(s) if s.strip() else None for s in sentences]
        todo = [i for i, x in enumerate(ids) if x is not None]
        results: list[list[Hypothesis]] = [[] for _ in sentences]
        if not todo:
            return results
        sources = [ids[i] for i in todo]
        if self.sampling is not None:
            found = self._sample(sources)
        else:
            found = decode_ids(self.model, sources, self.search, max_tokens=self.max_tokens,
                               device=self.device, precision=self.precision)
        for i, hyps in zip(todo, found, strict=True):
            results[i] = hyps
        return results

    def _sample(self, sources: list[list[int]]) -> list[list[Hypothesis]]:
        import numpy as np

        from nmtk.data.dataset import pad_sequences

        out = []
        for start in range(0, len(sources), 64):
            chunk = sources[start : start + 64]
            src = pad_sequences([np.asarray(s, dtype=np.int64) for s in chunk], suffix=EOS_ID).to(self.device)
            with autocast_for(self.device, self.precision):
                out.extend(sample_search(self.model, src, self.search, self.sampling))
        return out

    def detokenize(self, hyp: Hypothesis) -> str:
        return self.tgt_pipe.decode(hyp.tokens)

    def translate(self, sentences: list[str]) -> list[str]:
        return [self.detokenize(h[0]) if h else "" for h in self.hypotheses(sentences)]


def read_lines(stream: BinaryIO, errors: str, name: str) -> Iterator[str]:
    """Decode input line by line; invalid UTF-8 is an error naming the line unless ``errors='replace'``."""
    for lineno, raw in enumerate(stream, start=1):
        try:
            text = raw.decode("utf-8", errors="strict" if errors == "error" else "replace")
        except UnicodeDecodeError as exc:
            raise NmtkError(f"{name}:{lineno}: invalid UTF-8 ({exc.reason} at byte {exc.start}); "
                            "use --errors replace to substitute U+FFFD") from None
        yield text.rstrip("\r\n")


def buffered(lines: Iterable[str], size: int) -> Iterator[list[str]]:
    buffer: list[str] = []
    for line in lines:
        buffer.append(line)
        if len(buffer) >= size:
            yield buffer
            buffer = []
    if buffer:
        yield buffer
