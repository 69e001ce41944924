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
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import cached_property, partial
from typing import TYPE_CHECKING, ClassVar

from nmtk.decode.guide import Glossary, Guidance, preferring
from nmtk.decode.long_input import (
    Segments,
    boundary_strengths,
    bracket_steps,
    sentence_kinds,
    sentences_of,
    warn_split,
)
from nmtk.decode.search.config import Hypothesis, LineControls, SearchConfig
from nmtk.errors import NmtkError
from nmtk.model_source import NOT_ALIGNED
from nmtk.pair import Pair, sources_of
from nmtk.precision import Precision
from nmtk.text import TextPipeline, langid
from nmtk.text.casing import recased
from nmtk.text.reading import Reading
from nmtk.text.spellings import Speller
from nmtk.text.subword import word_starts
from nmtk.vocab import SPECIAL_SYMBOLS, UNK_ID, hint_targets, unhinted_length

if TYPE_CHECKING:
    import numpy as np


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


def each_line(controls: list[LineControls | None] | None, lines: int) -> list[LineControls]:
    """Each of ``lines`` lines' controls, an empty one where it has none."""
    return [LineControls() if c is None else c for c in controls or [None] * lines]


def piece_terms(segments: Segments, asked: list[tuple[str, ...]], src: TextPipeline, tgt: TextPipeline
                ) -> list[tuple[str, ...]]:
    """Per piece of ``segments``, the target terms it asks for where its line asks for hinted terms
    (``asked``: per source), as the target's words are written (Moses tokens): those of the piece's own
    hints, one per hint, read from its ids — a sentence asks for its terms, not its line's, and for a term
    hinted twice twice. Without hint symbols (a vocabulary learned without them) the line's terms ask of
    every piece."""
    per_line = [terms for terms, n in zip(asked, segments.count, strict=True) for _ in range(n)]
    markers = src.hint_markers
    if markers is None:
        return [tuple(tgt.moses.tokenize(t) for t in terms) for terms in per_line]
    return [tuple(src.tokens_text(span) for span in hint_targets(piece, markers)) if terms else ()
            for terms, piece in zip(per_line, segments.pieces, strict=True)]


def preferring_pieces(decode: Callable[[list[list[int]]], list[list[Hypothesis]]], pipe: TextPipeline,
                      hinted: list[tuple[str, ...]], keep: int, pieces: list[list[int]]) -> list[list[Hypothesis]]:
    """``decode(pieces)``, each piece's hypotheses `preferring` those holding its hinted terms (`piece_terms`),
    compared as the model writes them: the subword model's text, no detokenizing."""
    return [preferring(hyps, terms, lambda h: pipe.tokens_text(h.tokens), keep)
            for hyps, terms in zip(decode(pieces), hinted, strict=True)]


def writes_nothing(hyps: list[Hypothesis], pipe: TextPipeline) -> bool:
    """Whether a line's search found no translation that writes anything (in ``pipe``'s target)."""
    return not hyps or all(t in pipe.hidden for t in hyps[0].tokens)


def first_sentences(line: LineControls, target_kinds: np.ndarray) -> int:
    """How many of a line's leading sentences are searched as its first piece (`Segments.of`): as many
    as its prefix has (``target_kinds``: `sentence_kinds` of the target's pieces; a prefix is the start
    of their translation), else one; 0 (the line whole) where it has constraints given as such: no
    source words say which sentence asks for them."""
    if line.constraints and not line.anchored:
        return 0
    return len(sentences_of(line.prefix, target_kinds)) if line.prefix else 1


def piece_controls(controls: list[LineControls | None] | None, todo: list[int], segments: Segments,
                   starts: tuple[int, ...]) -> list[LineControls | None] | None:
    """Per piece of the lines ``todo``: its line's prefix on the first piece, its constraints on the
    pieces holding their source words (`LineControls.anchors`; the first piece where they are not
    known or not found), its bans and doubled terms on every piece, and ``starts`` (M2M-100's target
    code) forced first on every piece."""
    pieces: list[LineControls | None] | None = None
    if controls is not None and any(controls[i] for i in todo):
        pieces, at = [], 0
        for i, n in zip(todo, segments.count, strict=True):
            line, at = controls[i], at + n
            pieces += [line] * n if line is None or n == 1 else _pieces_of(line, segments.pieces[at - n : at])
    return forced_start(starts, pieces, len(segments.pieces)) if starts else pieces


def _pieces_of(line: LineControls, pieces: list[list[int]]) -> list[LineControls | None]:
    """One line's controls over its several ``pieces`` (`piece_controls`): a glossary's term goes to
    every sentence holding its source words ("dog" in two sentences: "Hund" in both)."""
    where = ([[j for j, piece in enumerate(pieces) if contains(piece, anchor)] or [0] for anchor in line.anchors]
             if line.anchored else [[0]] * len(line.constraints))
    out: list[LineControls | None] = []
    for j in range(len(pieces)):
        mine = [k for k, homes in enumerate(where) if j in homes]
        constraints = tuple(line.constraints[k] for k in mine)
        out.append(replace(line, prefix=line.prefix if j == 0 else (), constraints=constraints, anchors=(),
                           glue=line.glue if constraints else frozenset()) or None)  # anchors served: placed
    return out


def forced_start(starts: tuple[int, ...], controls: list[LineControls | None] | None,
                 lines: int) -> list[LineControls | None]:
    """Every line's controls with ``starts`` before its prefix: the tokens its translation must begin with."""
    return [replace(c, prefix=starts + c.prefix) if c else LineControls(prefix=starts)
            for c in (controls or [None] * lines)]


def with_bans(controls: list[LineControls | None] | None, barred: list[tuple[tuple[int, ...], ...]] | None
              ) -> list[LineControls | None] | None:
    """Each line's ``controls`` (None: none has any) with its ``barred`` phrases barred too."""
    if not barred or not any(barred):
        return controls
    return [replace(c, bans=c.bans + bans) if c else LineControls(bans=bans) if bans else None
            for c, bans in zip(controls or [None] * len(barred), barred, strict=True)]


#: What a translator computes from its target pipeline once (cached properties): a `for_pair` view of
#: another target computes its own.
TARGET_DERIVED = ("glue", "speller", "_bans")

#: A target-language tag (``>>de<<``) at the start of a line of text.
TAG_IN_TEXT = re.compile(r"\s*>>[^<>\s]+<<")


#: A line whose translation ran to its length limit is searched again with no n-gram of this many target
#: pieces twice (`unrepeated`; fairseq's and CTranslate2's ``no_repeat_ngram_size``). The
#: demo model's 6 such lines of Multi30k's test and validation sets all end with 3 (with 4, one still
#: repeats "der Nummer der Nummer"; with 2, words lose their own doubled pieces).
REPEATS_BARRED = 3


#: How many times back to back a span of 1, 2 or 3 pieces with a letter repeats in a stuttering
#: translation (`stutter`). The demo model's test_2016_flickr output holds 18 such lines at 4 times a
#: piece ("Wachmann mann mann mann", "Rututututututzt", "grünen grünen grünen grünen") and 16 more at 3
#: ("Wachmannmannmann", "grünen grünen grünen", "Zug Zug Zug"); Multi30k's 29,000 German training sentences
#: hold a piece 3 times twice ("Roooaaaarrrr", "eXXXotica"), its 1,000 test references never.
STUTTERS = {1: 3, 2: 4, 3: 3}


#: A target word (its pieces, however many) written this many times back to back is a stutter too
#: ("Anhänger Anhänger Anhänger", "es es es"): Multi30k's 29,000 German training sentences never do it;
#: twice, where it has this many letters ("Nummer Nummer", "gezogen gezogen"): they never do that either
#: (their doubled words are "die die", "und und", "einem einem", "steht steht").
WORD_STUTTERS, DOUBLED_LETTERS = 3, 6


def stutter(tokens: list[int], lettered: frozenset[int], starts: np.ndarray | None = None,
            letters: np.ndarray | None = None) -> tuple[int, ...] | None:
    """The span of pieces ``tokens`` repeat back to back as often as `STUTTERS` says, or the word
    (``starts``: per target id, whether it begins one) they repeat `WORD_STUTTERS` times (twice, one of
    `DOUBLED_LETTERS` ``letters``), one holding a letter (``lettered``): a model that lost its way and
    ended anyway, short of its length limit; None if none."""
    for n, times in STUTTERS.items():
        need, run = n * (times - 1), 0
        for i in range(len(tokens) - n):
            run = run + 1 if tokens[i] == tokens[i + n] else 0
            span = tokens[i + 1 - need : i + 1 - need + n]
            if run >= need and any(t in lettered for t in span):
                return tuple(span)
    return None if starts is None else _repeated_word(tokens, lettered, starts, letters)


def _repeated_word(tokens: list[int], lettered: frozenset[int], starts: np.ndarray, letters: np.ndarray | None
                   ) -> tuple[int, ...] | None:
    """The word of pieces with a letter ``tokens`` write `WORD_STUTTERS` times back to back (twice, a
    long one: `DOUBLED_LETTERS`), if any."""
    words: list[tuple[int, ...]] = []
    for t in tokens:
        if starts[t] or not words:
            words.append((t,))
        else:
            words[-1] += (t,)
    run = 1
    for before, word in zip(words, words[1:], strict=False):
        run = run + 1 if word == before else 1
        long = letters is not None and sum(int(letters[t]) for t in word) >= DOUBLED_LETTERS
        if (run >= WORD_STUTTERS or run == 2 and long) and any(t in lettered for t in word):
            return word
    return None


def stutters(tokens: list[int], lettered: frozenset[int], starts: np.ndarray | None = None,
             letters: np.ndarray | None = None) -> bool:
    """Whether ``tokens`` stutter (`stutter`)."""
    return stutter(tokens, lettered, starts, letters) is not None


def unrepeated(searched: Callable[[list[int], SearchConfig, list[tuple[tuple[int, ...], ...]]], list[list[Hypothesis]]],
               search: SearchConfig, results: list[list[Hypothesis]], lettered: frozenset[int] = frozenset(),
               starts: np.ndarray | None = None, letters: np.ndarray | None = None) -> list[list[Hypothesis]]:
    """``results`` (a sentence's hypotheses each, as ``search`` found them) with each sentence whose best
    translation ran to its length limit (``cut``: a model repeating itself, "Kartoffffatatatat…") or
    stutters (`stutter`: ``lettered``, the target pieces with a letter; ``starts``, those that begin a
    word; ``letters``, each one's letters) searched again (``searched(indices, search, barred)``,
    ``barred`` per index: the phrases it must not write besides, the span it stuttered twice) with no
    n-gram of `REPEATS_BARRED` pieces twice, and that translation taken (marked ``retried``) where it
    ends before the limit, once (a second search where it stutters again measured no better). Sentence by sentence:
    a line's other sentences keep theirs. A search that samples, or bars repeats as asked already, is
    left as it is: the first is random by design, the second what the user chose; so is one told not
    to (``retry_cut``: validation, which measures the model alone and is timed with training)."""
    if not search.retry_cut or search.sampling is not None or search.no_repeat_ngram_size:
        return results
    # a stuttered span is barred twice in a row too: barring `REPEATS_BARRED`-grams repeated does not bar
    # one piece thrice ("Zug Zug Zug" is one 3-gram), and barring 2-grams would bar a word's own pieces
    spans = {i: stutter(hyps[0].tokens, lettered, starts, letters) for i, hyps in enumerate(results)
             if hyps and not hyps[0].cut}
    again = [i for i, hyps in enumerate(results) if hyps and (hyps[0].cut or spans[i] is not None)]
    if not again:
        return results
    barred = [(span + span,) if (span := spans.get(i)) is not None else () for i in again]
    for i, hyps in zip(again, searched(again, replace(search, no_repeat_ngram_size=REPEATS_BARRED), barred),
                       strict=True):
        if hyps and not hyps[0].cut:
            for h in hyps:
                h.retried = True
            results[i] = hyps
    return results


def marking_cut(decode: Callable[[list[list[int]]], list[list[Hypothesis]]], search: SearchConfig,
                max_positions: int, markers: tuple[int, int, int] | None, controls: list[LineControls | None] | None,
                pieces: list[list[int]]) -> list[list[Hypothesis]]:
    """``decode(pieces)``, each hypothesis marked ``cut`` where it is as long as its source's length
    limit allows (a·|x| + b, as either engine counts it): the model never ended it, most often
    because it repeats itself (``Kartoffffatatatat…``), which `translate` reports."""
    found = decode(pieces)
    for k, (piece, hyps) in enumerate(zip(pieces, found, strict=True)):
        prefix = controls[k].prefix if controls and controls[k] else ()
        limit = search.output_limit(unhinted_length(piece, markers), max_positions, len(prefix))
        for h in hyps:
            h.cut = len(h.tokens) >= limit
    return found


@dataclass(kw_only=True)
class TranslatorBase:
    """Sentences through the (source, target) text pipelines around one engine's `decode_pieces`.

    A translator holds a model and its text, never a search: each call says how to search
    (`SearchConfig`), so one translator serves requests of different beams side by side. What an
    engine can do is declared here (``engine``, ``can_align``), not probed by its callers."""

    engine: ClassVar[str] = "?"
    can_align: ClassVar[bool] = False  # word alignments (`SearchConfig.align`)
    can_constrain: ClassVar[bool] = False  # lexical constraints (and so glossaries)

    pipelines: tuple[TextPipeline, TextPipeline]
    # A multilingual model's pipelines of every pair it translates (`for_pair`); empty for one pair.
    pairs: dict[Pair, tuple[TextPipeline, TextPipeline]] = field(default_factory=dict)
    max_positions: int = 1024  # source tokens the model accepts, EOS included
    longest_trained: int | None = None  # subwords of the longest training source (the run's manifest)
    precision: Precision = Precision.fp32
    reading: Reading = Reading()  # capitals and title case folded, typos corrected (`nmtk.text.reading`)

    def __post_init__(self) -> None:
        self.src_pipe, self.tgt_pipe = self.pipelines
        pieces, targets = self.src_pipe.subwords.pieces(), self.tgt_pipe.subwords.pieces()
        self.word_starts = (word_starts(pieces), word_starts(targets))  # (source, target)
        self.boundaries, self.sentence_kinds = boundary_strengths(pieces), sentence_kinds(pieces, self.word_starts[0])
        self.target_kinds = (self.sentence_kinds if targets == pieces  # of prefixes; a joint vocabulary's are one
                             else sentence_kinds(targets, self.word_starts[1]))
        self.brackets = bracket_steps(pieces)  # no sentence ends before a number in brackets closed later

    def for_pair(self, pair: Pair | None) -> TranslatorBase:
        """This translator speaking another of its multilingual model's pairs: the same model and
        weights, that pair's text pipelines (the source's with the target's tag). Sources encoded by
        views of several targets are searched in one batch: the tag in their ids is all that differs."""
        if pair is None or not self.pairs or pair == self.language_pair:
            return self
        view = copy.copy(self)
        view.pipelines = self.pairs[pair]
        view.src_pipe, view.tgt_pipe = view.pipelines
        for derived in TARGET_DERIVED:  # computed from the target pipeline: the view's own, when asked
            view.__dict__.pop(derived, None)
        return view

    @property
    def language_pair(self) -> Pair | None:
        """The pair this translator's pipelines speak, where the model has several."""
        return next((pair for pair, pipes in self.pairs.items() if pipes == self.pipelines), None)

    def for_text(self, text: str) -> TranslatorBase:
        """This translator speaking the pair of ``text``'s detected language (`nmtk.text.langid`) among the
        sources its model has this target from (``--source-lang auto``); itself for a model of one pair."""
        pair = self.language_pair
        if pair is None:
            return self
        return self.for_pair(Pair(langid.detect(text, sources_of(self.pairs, pair.target))[0][0], pair.target))

    def decode_pieces(self, pieces: list[list[int]], search: SearchConfig,
                      controls: list[LineControls | None] | None = None) -> list[list[Hypothesis]]:
        """Hypotheses for each source (ids without EOS, at most ``max_positions - 1``), in input order;
        ``controls``: per source, its prefix, constraints and banned phrases (None: none)."""
        raise NotImplementedError

    @property
    def arithmetic(self) -> str:
        """What the search computes in, as ``/models`` reports it: the precision (an export: the compute type)."""
        return str(self.precision.value)

    def output_pieces(self) -> frozenset[int] | None:
        """The target ids this translator's target language may produce (a multilingual model with
        per-target output vocabularies: `nmtk.model.languages`); None: every one."""
        return None

    def encode(self, sentences: list[str], first_line: int = 1, hints: Glossary | None = None
               ) -> list[list[int] | None]:
        """Source ids per sentence (None for an empty or blank one), as `hypotheses` takes them. A
        multilingual model's pipeline puts the target's tag first; a line that brings a tag of its own
        is refused, naming the line: which target it meant would be a guess. ``hints``: a glossary whose
        terms go into the source as hints (`Glossary.hinted`, ``--terms inline``)."""
        refuse_tags(self, sentences, first_line)
        if hints is not None:
            src, tgt = self.src_pipe, self.tgt_pipe.moses.tokenize  # the hints go into the text as the model reads it
            return [src.encode_tokenized([hints.hinted(self.reading.read(s), src.moses.tokenize, tgt)])[0] if s.strip()
                    else None for s in sentences]
        return [self.src_pipe.encode(self.reading.read(s)) if s.strip() else None for s in sentences]

    def hypotheses(self, sentences: list[str], search: SearchConfig, first_line: int = 1,
                   ids: list[list[int] | None] | None = None,
                   guides: list[Guidance | None] | None = None) -> list[list[Hypothesis]]:
        """N-best hypotheses per sentence, searched as ``search`` says; an empty (or blank) sentence gets
        none. ``ids``: the sentences already `encode`d (the server counts tokens with them), else here.
        ``guides``: per sentence, its prefix, constraints and banned phrases as text."""
        ids = self.encode(sentences, first_line) if ids is None else ids
        controls = self.controls(guides, ids, search, first_line) if guides is not None else None
        return self.reading.marked(sentences, self.hypotheses_of_ids(ids, search, first_line, controls))

    def hypotheses_of_ids(self, ids: list[list[int] | None], search: SearchConfig, first_line: int = 1,
                          controls: list[LineControls | None] | None = None) -> list[list[Hypothesis]]:
        """`hypotheses` of encoded sources (None: an empty line, which gets none).

        A line of several sentences is translated sentence by sentence, one too long in pieces
        (`nmtk.decode.long_input`; one warning naming the line, ``first_line`` the number of ``ids[0]``):
        its prefix starts the first piece (of as many sentences as the prefix holds: `first_sentences`),
        a glossary's constraints go to the pieces holding their source words, its bans to every piece
        (`piece_controls`); a line with constraints given as such is cut for length alone. Every piece
        keeps a multilingual model's source tag and forced first token; hinted terms: `preferring_pieces`."""
        if search.align and not self.can_align:
            raise NmtkError(f"alignments: {NOT_ALIGNED}")
        results = self._searched(ids, search, first_line, controls)
        for i, hyps in enumerate(results):
            if controls is not None and controls[i] and ids[i] is not None and writes_nothing(hyps, self.tgt_pipe):
                results[i] = hyps = self._rescued(ids[i], search, first_line + i, controls[i])
            if controls is not None and controls[i] and controls[i].constraints and hyps:
                warn_unmet(first_line + i, hyps[0].tokens, controls[i].constraints)
        return results

    def _searched(self, ids: list[list[int] | None], search: SearchConfig, first_line: int,
                  controls: list[LineControls | None] | None) -> list[list[Hypothesis]]:
        """The search of `hypotheses_of_ids`, each line as its controls ask, long lines in pieces."""
        todo = [i for i, x in enumerate(ids) if x is not None]
        results: list[list[Hypothesis]] = [[] for _ in ids]
        if not todo:
            return results
        markers, line = self.src_pipe.hint_markers, each_line(controls, len(ids))
        first = [first_sentences(line[i], self.target_kinds) if self.reading.split else 0 for i in todo]
        segments = Segments.of([ids[i] for i in todo], self.max_positions - 1, self.boundaries, self.longest_trained,
                               self.src_pipe.prefix, markers, self.sentence_kinds, first, self.brackets)
        pieces = piece_controls(controls, todo, segments, self.tgt_pipe.starts)
        hinted = piece_terms(segments, [line[i].hinted for i in todo], self.src_pipe, self.tgt_pipe)
        wide = replace(search, alternatives=search.alternatives or any(hinted))  # for `preferring` to choose

        def decode(chosen: list[int], how: SearchConfig, barred: list | None = None) -> list[list[Hypothesis]]:
            """The pieces ``chosen`` (of ``segments.pieces``) searched as ``how`` says, each ``barred``'s too."""
            own = with_bans(None if pieces is None else [pieces[j] for j in chosen], barred)
            run = partial(marking_cut, partial(self.decode_pieces, search=how, controls=own), how, self.max_positions,
                          markers, own)
            if any(hinted):
                run = partial(preferring_pieces, run, self.tgt_pipe, [hinted[j] for j in chosen], search.returned)
            return run([segments.pieces[j] for j in chosen])

        found = unrepeated(decode, wide, decode(list(range(len(segments.pieces))), wide), *self.tgt_pipe.word_marks)
        for i, hyps, n, lengthy in zip(todo, segments.join(found), segments.count, segments.lengthy, strict=True):
            results[i] = hyps
            if lengthy:
                warn_split(first_line + i, ids[i], self.max_positions, n, self.longest_trained, markers)
        return results

    def _rescued(self, source: list[int], search: SearchConfig, line: int, controls: LineControls
                 ) -> list[Hypothesis]:
        """A line whose controls no translation could meet all together (its search found none, e.g. a
        term the repetition limit bars a second time): searched again with the weakest of them dropped,
        one warning naming the line and what was dropped: first its terms, then its banned phrases and
        the repetition limits. Its prefix is kept (it is forced, so it always can be). A non-empty line
        never translates to nothing."""
        from nmtk.console import console

        steps = [("its terms", replace(controls, constraints=(), anchors=()), search),
                 ("its banned phrases and repetition limits", LineControls(prefix=controls.prefix),
                  replace(search, no_repeat_ngram_size=0, repetition_penalty=1.0))]
        dropped: list[str] = []
        hyps: list[Hypothesis] = []
        for what, fewer, easier in steps:
            if fewer == controls and easier == search:
                continue
            dropped.append(what)
            hyps = self._searched([source], easier, line, [fewer or None])[0]
            if not writes_nothing(hyps, self.tgt_pipe):
                break
        console.print(f"warning: line {line}: no translation meets all its controls together; translated without "
                      f"{' and '.join(dropped)}")
        return hyps

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
            prefix = (self._checked(guide.prefix, f"line {line}: the prefix", self.max_positions - 2)
                      if guide.prefix else ())
            constraints = tuple(self._checked(c, f"line {line}: the constraint", limit) for c in guide.constraints)
            bans = tuple(spelling for b in guide.bans for spelling in self._ban(b, line))
            self._check_together(line, guide, prefix, constraints, search)
            doubled = tuple(ids for ids in map(tuple, map(self.tgt_pipe.encode, guide.hinted)) if ids)
            anchors = tuple(tuple(self.src_pipe.subwords.encode(words)) if words else () for words in guide.anchors)
            out.append(LineControls(prefix=prefix, constraints=constraints, bans=bans, hinted=guide.hinted,
                                    doubled=doubled, anchors=anchors, glue=self.glue if constraints else frozenset()))
        return out

    def check_hints(self, glossary: Glossary) -> None:
        """A glossary that goes into the source as hints (``--terms inline``): each target term must be
        spelled by the source vocabulary (the hint is source text), one line naming its file and line."""
        moses = self.tgt_pipe.moses.tokenize
        for (_, target), where in zip(glossary.pairs, glossary.where_each(), strict=True):
            if UNK_ID in self.src_pipe.subwords.encode(moses(target)):
                raise NmtkError(f"{where}: the target term {target!r} has characters the model's source vocabulary "
                                "cannot spell (<unk>): as a hint in the source it would be lost")

    def check_guides(self, glossary: Glossary | None, bans: tuple[str, ...], constraints: bool,
                     search: SearchConfig, bans_from: str = "--ban") -> None:
        """What the options of a run (`translate`'s, a server's) ask, checked once the model is loaded and
        before any line is read: constraints and glossaries on an engine or search that cannot honour
        them, a glossary target or banned phrase the target vocabulary cannot write; each one line
        naming the option, or the glossary's file and line."""
        if (constraints or glossary is not None) and not self.can_constrain:
            what = "--constraints" if glossary is None else f"the glossary {glossary.where_each()[0].split(': ')[0]}"
            raise NmtkError(f"{what}: constraints (and glossaries) need nmtk's own engine: the {self.engine} "
                            "engine has no constrained search; translate with the run directory instead")
        if (constraints or glossary is not None) and search.sampling is not None:
            raise NmtkError("constraints (and glossaries) need beam search; leave out --sampling")
        for (_, target), where in zip(glossary.pairs if glossary else (), glossary.where_each() if glossary else (),
                                      strict=True):
            self._checked(target, f"{where}: the target term", None)
        for ban in bans:
            self._ban(ban, where=f"{bans_from}: the")

    def _check_together(self, line: int, guide: Guidance, prefix: tuple[int, ...],
                        constraints: tuple[tuple[int, ...], ...], search: SearchConfig) -> None:
        """One error naming the line for controls that no translation can meet: a prefix or term its
        target language never produces (per-target vocabularies hold for forced pieces too), a term
        holding a banned phrase, or a term the repetition limit forbids (a repeated n-gram in it, or
        the same term asked for twice). What only the search can find out, it does (`_rescued`)."""
        allowed = self.output_pieces()
        for text, ids, what in [(guide.prefix, prefix, "prefix"),
                                *((t, c, "term") for t, c in zip(guide.constraints, constraints, strict=True))]:
            if allowed is not None and not allowed.issuperset(ids):
                raise NmtkError(f"line {line}: the {what} {text!r} has pieces this model never writes in "
                                f"{self.language_pair.target if self.language_pair else 'this target'}: it cannot be "
                                "part of such a translation")
        for text, ids in zip(guide.constraints, constraints, strict=True):
            for ban in guide.bans:
                if any(contains(list(ids), spelling) for spelling in self._bans.get(ban, ())):
                    raise NmtkError(f"line {line}: the term {text!r} holds the banned phrase {ban!r}: no translation "
                                    "can have both")
        n = search.no_repeat_ngram_size
        for text, ids in zip(guide.constraints, constraints, strict=True):
            grams = [tuple(ids[i : i + n]) for i in range(len(ids) - n + 1)] if n else []
            if len(set(grams)) < len(grams) or (grams and constraints.count(ids) > 1):
                raise NmtkError(f"line {line}: the term {text!r} repeats a {n}-gram of subwords"
                                f"{'' if len(set(grams)) < len(grams) else ' (it is asked for twice)'}, which "
                                f"no_repeat_ngram_size {n} forbids: drop the repetition limit or the repetition")

    @cached_property
    def glue(self) -> frozenset[int]:
        """Target ids that continue a word (`LineControls.glue`)."""
        starts = word_starts(self.tgt_pipe.subwords.pieces())
        return frozenset(int(i) for i in range(len(starts)) if i >= len(SPECIAL_SYMBOLS) and not starts[i])

    @cached_property
    def speller(self) -> Speller:
        """The target vocabulary's pieces by the text they write (`nmtk.text.spellings`)."""
        return Speller(self.tgt_pipe.subwords.pieces(), first_id=len(SPECIAL_SYMBOLS))

    def _ban(self, text: str, line: int | None = None, where: str = "") -> tuple[tuple[int, ...], ...]:
        """A banned phrase as every piece sequence that writes it (`Speller.spellings`: its case forms,
        starting a word or glued to the one before), the target encoder's own first; cached per
        translator, since every line of a run has the same bans. A form the vocabulary cannot write
        ("CAT" in a lower-case vocabulary) is banned trivially: only its other forms are searched for.
        One error (naming ``line``, or starting with ``where``) for a phrase that is empty as text."""
        cached = self._bans.get(text)
        if cached is None:
            own = tuple(self.tgt_pipe.encode(text))
            if not own:
                raise NmtkError(f"{where or f'line {line}: the'} banned phrase {text!r} is empty after tokenisation")
            spelt = self.speller.spellings(self.tgt_pipe.moses.tokenize(text))
            cached = self._bans[text] = tuple(dict.fromkeys([own] * (UNK_ID not in own) + spelt))
        return cached

    @cached_property
    def _bans(self) -> dict[str, tuple[tuple[int, ...], ...]]:
        return {}

    def _checked(self, text: str, what: str, limit: int | None) -> tuple[int, ...]:
        """``text`` as target ids; one error starting with ``what`` where it encodes to nothing, to
        unknown pieces, or to more than ``limit`` (the line's output limit)."""
        ids = tuple(self.tgt_pipe.encode(text))
        if not ids:
            raise NmtkError(f"{what} {text!r} is empty after tokenisation")
        if UNK_ID in ids:
            raise NmtkError(f"{what} {text!r} has characters the target vocabulary cannot write")
        if limit is not None and len(ids) > limit:
            raise NmtkError(f"{what} {text!r} is {len(ids)} subwords, longer than the line's "
                            f"output limit of {limit} (max_len_a·|source| + max_len_b)")
        return ids

    def detokenize(self, hyp: Hypothesis) -> str:
        return recased(self.tgt_pipe.decode(hyp.tokens), hyp.case, self.tgt_pipe.moses.lang)

    def keep_text_only(self) -> None:
        """Free what only a search needs, keeping the text pipelines: for a translator that encodes and
        detokenizes while other processes search (`nmtk serve`'s decoding processes). Here: nothing."""


def refuse_tags(translator: TranslatorBase, sentences: list[str], first_line: int = 1) -> None:
    """A multilingual model's lines may not bring a language tag of their own (`TranslatorBase.encode`):
    which target it meant would be a guess. One error naming the line."""
    if translator.src_pipe.prefix:
        for number, sentence in enumerate(sentences, first_line):
            if tag := TAG_IN_TEXT.match(sentence):
                raise NmtkError(f"input line {number}: starts with the tag {tag.group(0).strip()!r}: the target "
                                "language is chosen with --target-lang (a request's target), not in the text")
