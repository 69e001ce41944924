"""The translator contract, once for every engine: text in, n-best hypotheses out, in input order.

`Translator` (nmtk's own model, torch) and `Ct2Translator` (an exported model, CTranslate2 alone)
differ in one thing only: how a list of source pieces (subword ids, each short enough for the model)
becomes hypotheses. Everything around that — blank lines, encoding, cutting lines longer than the
model into pieces and joining their translations, the warning that names such a line, detokenising —
lives here, torch-free, so a fix to any of it is made once for both engines.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass, field, replace
from functools import cached_property, partial
from typing import ClassVar

from nmtk.decode.guide import Guidance
from nmtk.decode.long_input import Segments, boundary_strengths, warn_split
from nmtk.decode.search.config import Hypothesis, LineControls, SearchConfig
from nmtk.errors import NmtkError
from nmtk.precision import Precision
from nmtk.text import TextPipeline
from nmtk.text.subword import word_starts
from nmtk.vocab import SPECIAL_SYMBOLS, UNK_ID


def contains(tokens: list[int], phrase: tuple[int, ...]) -> bool:
    """Whether ``phrase`` occurs in ``tokens`` as a run."""
    n = len(phrase)
    return any(tuple(tokens[i : i + n]) == phrase for i in range(len(tokens) - n + 1))


def warn_unmet(line: int, tokens: list[int], constraints: tuple[tuple[int, ...], ...]) -> None:
    """The one warning a line gets whose translation lacks some of its constraints (they did not fit
    in its length limit)."""
    missing = sum(not contains(tokens, c) for c in constraints)
    if missing:
        from nmtk.console import console

        console.print(f"warning: line {line}: {missing} of its {len(constraints)} constraints did not fit in its "
                      "length limit (max_len_a·|source| + max_len_b): translated with as many as fit")


def forced_start(starts: tuple[int, ...], controls: list[LineControls | None] | None,
                 lines: int) -> list[LineControls | None]:
    """Every line's controls with ``starts`` before its prefix: the tokens its translation must begin with."""
    return [replace(c, prefix=starts + c.prefix) if c else LineControls(prefix=starts)
            for c in (controls or [None] * lines)]


#: A target-language tag (``>>de<<``) at the start of a line of text.
TAG_IN_TEXT = re.compile(r"\s*>>[^<>\s]+<<")


@dataclass(kw_only=True)
class TranslatorBase:
    """Sentences through the (source, target) text pipelines around one engine's `decode_pieces`.

    A translator holds a model and its text, never a search: each call says how to search
    (`SearchConfig`), so one translator serves requests of different beams side by side. What an
    engine can do is declared here (``engine``, ``can_align``), not probed by its callers.
    """

    engine: ClassVar[str] = "?"
    can_align: ClassVar[bool] = False  # word alignments (`SearchConfig.align`)
    can_constrain: ClassVar[bool] = False  # lexical constraints (and so glossaries)

    pipelines: tuple[TextPipeline, TextPipeline]
    # A multilingual model's pipelines of every (source, target) pair it translates (`for_pair`); empty for one pair.
    pairs: dict[tuple[str, str], tuple[TextPipeline, TextPipeline]] = field(default_factory=dict)
    max_positions: int = 1024  # source tokens the model accepts, EOS included
    longest_trained: int | None = None  # subwords of the longest training source (the run's manifest)
    precision: Precision = Precision.fp32

    def __post_init__(self) -> None:
        self.src_pipe, self.tgt_pipe = self.pipelines
        self.boundaries = boundary_strengths(self.src_pipe.subwords.pieces())

    def for_pair(self, pair: tuple[str, str] | None) -> TranslatorBase:
        """This translator speaking another of its multilingual model's pairs: the same model and
        weights, that pair's text pipelines (the source's with the target's tag). Sources encoded by
        views of several targets are searched in one batch: the tag in their ids is all that differs."""
        if pair is None or not self.pairs or pair == self.language_pair:
            return self
        view = copy.copy(self)
        view.pipelines = self.pairs[pair]
        view.src_pipe, view.tgt_pipe = view.pipelines
        return view

    @property
    def language_pair(self) -> tuple[str, str] | None:
        """The (source, target) this translator's pipelines speak, where the model has several."""
        return next((pair for pair, pipes in self.pairs.items() if pipes == self.pipelines), None)

    def decode_pieces(self, pieces: list[list[int]], search: SearchConfig,
                      controls: list[LineControls | None] | None = None) -> list[list[Hypothesis]]:
        """Hypotheses for each source (ids without EOS, at most ``max_positions - 1``), in input order;
        ``controls``: per source, its prefix, constraints and banned phrases (None: none)."""
        raise NotImplementedError

    def encode(self, sentences: list[str], first_line: int = 1) -> list[list[int] | None]:
        """Source ids per sentence (None for an empty or blank one), as `hypotheses` takes them. A
        multilingual model's pipeline puts the target's tag first; a line that brings a tag of its own
        is refused, naming the line: which target it meant would be a guess."""
        if self.src_pipe.prefix:
            for number, sentence in enumerate(sentences, first_line):
                if tag := TAG_IN_TEXT.match(sentence):
                    raise NmtkError(f"input line {number}: starts with the tag {tag.group(0).strip()!r}: the target "
                                    "language is chosen with --target-lang (a request's target), not in the text")
        return [self.src_pipe.encode(s) if s.strip() else None for s in sentences]

    def hypotheses(self, sentences: list[str], search: SearchConfig, first_line: int = 1,
                   ids: list[list[int] | None] | None = None,
                   guides: list[Guidance | None] | None = None) -> list[list[Hypothesis]]:
        """N-best hypotheses per sentence, searched as ``search`` says; an empty (or blank) sentence gets
        none. ``ids``: the sentences already `encode`d (the server counts tokens with them), else here.
        ``guides``: per sentence, its prefix, constraints and banned phrases as text."""
        ids = self.encode(sentences, first_line) if ids is None else ids
        controls = self.controls(guides, ids, search, first_line) if guides is not None else None
        return self.hypotheses_of_ids(ids, search, first_line, controls)

    def hypotheses_of_ids(self, ids: list[list[int] | None], search: SearchConfig, first_line: int = 1,
                          controls: list[LineControls | None] | None = None) -> list[list[Hypothesis]]:
        """`hypotheses` of encoded sources (None: an empty line, which gets none).

        A line longer than the model's input, or far longer than its training data's, is translated in
        pieces (`nmtk.decode.long_input`), with one warning naming its line (``first_line`` is the
        number of ``ids[0]``); its prefix and constraints are asked of its first piece, its banned
        phrases of every piece. Every piece keeps what a multilingual model needs of its line: the
        source's tag (or code) and the target's forced first token.
        """
        if search.align and not self.can_align:
            raise NmtkError("alignments come from nmtk's own model: use the run directory, not an export")
        todo = [i for i, x in enumerate(ids) if x is not None]
        results: list[list[Hypothesis]] = [[] for _ in ids]
        if not todo:
            return results
        segments = Segments.of([ids[i] for i in todo], self.max_positions - 1, self.boundaries, self.longest_trained,
                               head=self.src_pipe.prefix)
        decode = partial(self.decode_pieces, search=search, controls=self._piece_controls(controls, todo, segments))
        for i, hyps, n in zip(todo, segments.decode(decode), segments.count, strict=True):
            results[i] = hyps
            if n > 1:
                warn_split(first_line + i, len(ids[i]), self.max_positions, n, self.longest_trained)
            if controls is not None and controls[i] and controls[i].constraints and hyps:
                warn_unmet(first_line + i, hyps[0].tokens, controls[i].constraints)
        return results

    def _piece_controls(self, controls: list[LineControls | None] | None, todo: list[int],
                        segments: Segments) -> list[LineControls | None] | None:
        """Per piece of the lines ``todo``: its line's prefix and constraints on the first piece, its
        bans on every piece, and M2M-100's target code forced first on every piece."""
        pieces = None
        if controls is not None and any(controls[i] for i in todo):
            pieces = [c if j == 0 else (LineControls(bans=c.bans) if c else None)
                      for c, n in zip((controls[i] for i in todo), segments.count, strict=True) for j in range(n)]
        if self.tgt_pipe.starts:
            pieces = forced_start(self.tgt_pipe.starts, pieces, len(segments.pieces))
        return pieces

    def controls(self, guides: list[Guidance | None], ids: list[list[int] | None], search: SearchConfig,
                 first_line: int = 1) -> list[LineControls | None]:
        """Each line's `Guidance` as target ids through the target pipeline, checked: a phrase that
        encodes to nothing or to unknown pieces, a prefix or constraint longer than the line's output
        limit, and a control this engine or search cannot honour are each one error naming the line."""
        out: list[LineControls | None] = []
        for k, (guide, src) in enumerate(zip(guides, ids, strict=True)):
            line = first_line + k
            if not guide or src is None:
                out.append(None)
                continue
            if guide.constraints and not self.can_constrain:
                raise NmtkError(f"line {line}: constraints (and glossaries) need nmtk's own engine: the {self.engine} "
                                "engine has no constrained search; translate with the run directory instead")
            if guide.constraints and search.sampling is not None:
                raise NmtkError(f"line {line}: constraints need beam search; leave out --sampling")
            limit = search.output_limit(len(src), self.max_positions)
            prefix = self._phrase(guide.prefix, "prefix", line, self.max_positions - 2) if guide.prefix else ()
            constraints = tuple(self._phrase(c, "constraint", line, limit) for c in guide.constraints)
            bans = tuple(self._phrase(b, "banned phrase", line, None) for b in guide.bans)
            out.append(LineControls(prefix=prefix, constraints=constraints, bans=bans,
                                    glue=self.glue if constraints else frozenset()))
        return out

    @cached_property
    def glue(self) -> frozenset[int]:
        """Target ids that continue a word (`LineControls.glue`)."""
        starts = word_starts(self.tgt_pipe.subwords.pieces())
        return frozenset(int(i) for i in range(len(starts)) if i >= len(SPECIAL_SYMBOLS) and not starts[i])

    def _phrase(self, text: str, what: str, line: int, limit: int | None) -> tuple[int, ...]:
        ids = tuple(self.tgt_pipe.encode(text))
        if not ids:
            raise NmtkError(f"line {line}: the {what} {text!r} is empty after tokenisation")
        if UNK_ID in ids:
            raise NmtkError(f"line {line}: the {what} {text!r} has characters the target vocabulary cannot write")
        if limit is not None and len(ids) > limit:
            raise NmtkError(f"line {line}: the {what} {text!r} is {len(ids)} subwords, longer than the line's "
                            f"output limit of {limit} (max_len_a·|source| + max_len_b)")
        return ids

    def detokenize(self, hyp: Hypothesis) -> str:
        return self.tgt_pipe.decode(hyp.tokens)

    def keep_text_only(self) -> None:
        """Free what only a search needs, keeping the text pipelines: for a translator that encodes and
        detokenizes while other processes search (`nmtk serve`'s decoding processes). Here: nothing."""
