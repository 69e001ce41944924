"""The translator contract, once for every engine: text in, n-best hypotheses out, in input order.

`Translator` (nmtk's own model, torch) and `Ct2Translator` (an exported model, CTranslate2 alone)
differ in one thing only: how a list of source pieces (subword ids, each short enough for the model)
becomes hypotheses. Everything around that — blank lines, encoding, cutting lines longer than the
model into pieces and joining their translations, the warning that names such a line, detokenising —
lives here, torch-free, so a fix to any of it is made once for both engines.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import ClassVar

from nmtk.decode.config import Hypothesis, SearchConfig
from nmtk.decode.long_input import Segments, boundary_strengths, warn_split
from nmtk.errors import NmtkError
from nmtk.precision import Precision
from nmtk.text import TextPipeline


@dataclass(kw_only=True)
class TranslatorBase:
    """Sentences through the (source, target) text pipelines around one engine's `decode_pieces`.

    A translator holds a model and its text, never a search: each call says how to search
    (`SearchConfig`), so one translator serves requests of different beams side by side. What an
    engine can do is declared here (``engine``, ``can_align``), not probed by its callers.
    """

    engine: ClassVar[str] = "?"
    can_align: ClassVar[bool] = False  # word alignments (`SearchConfig.align`)

    pipelines: tuple[TextPipeline, TextPipeline]
    max_positions: int = 1024  # source tokens the model accepts, EOS included
    longest_trained: int | None = None  # subwords of the longest training source (the run's manifest)
    precision: Precision = Precision.fp32

    def __post_init__(self) -> None:
        self.src_pipe, self.tgt_pipe = self.pipelines
        self.boundaries = boundary_strengths(self.src_pipe.subwords.pieces())

    def decode_pieces(self, pieces: list[list[int]], search: SearchConfig) -> list[list[Hypothesis]]:
        """Hypotheses for each source (ids without EOS, at most ``max_positions - 1``), in input order."""
        raise NotImplementedError

    def encode(self, sentences: list[str]) -> list[list[int] | None]:
        """Source ids per sentence (None for an empty or blank one), as `hypotheses` takes them."""
        return [self.src_pipe.encode(s) if s.strip() else None for s in sentences]

    def hypotheses(self, sentences: list[str], search: SearchConfig, first_line: int = 1,
                   ids: list[list[int] | None] | None = None) -> list[list[Hypothesis]]:
        """N-best hypotheses per sentence, searched as ``search`` says; an empty (or blank) sentence gets
        none. ``ids``: the sentences already `encode`d (the server counts tokens with them), else here."""
        return self.hypotheses_of_ids(self.encode(sentences) if ids is None else ids, search, first_line)

    def hypotheses_of_ids(self, ids: list[list[int] | None], search: SearchConfig,
                          first_line: int = 1) -> list[list[Hypothesis]]:
        """`hypotheses` of encoded sources (None: an empty line, which gets none).

        A line longer than the model's input, or far longer than its training data's, is translated in
        pieces (`nmtk.decode.long_input`), with one warning naming its line (``first_line`` is the
        number of ``ids[0]``).
        """
        if search.align and not self.can_align:
            raise NmtkError("alignments come from nmtk's own model: use the run directory, not an export")
        todo = [i for i, x in enumerate(ids) if x is not None]
        results: list[list[Hypothesis]] = [[] for _ in ids]
        if not todo:
            return results
        segments = Segments.of([ids[i] for i in todo], self.max_positions - 1, self.boundaries, self.longest_trained)
        decode = partial(self.decode_pieces, search=search)
        for i, hyps, n in zip(todo, segments.decode(decode), segments.count, strict=True):
            results[i] = hyps
            if n > 1:
                warn_split(first_line + i, len(ids[i]), self.max_positions, n, self.longest_trained)
        return results

    def detokenize(self, hyp: Hypothesis) -> str:
        return self.tgt_pipe.decode(hyp.tokens)

    def keep_text_only(self) -> None:
        """Free what only a search needs, keeping the text pipelines: for a translator that encodes and
        detokenizes while other processes search (`nmtk serve`'s decoding processes). Here: nothing."""
