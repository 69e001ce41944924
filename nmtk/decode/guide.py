"""What a line asks of its translation besides the model, as text: a target prefix, terms it must
contain (lexical constraints, by hand or from a glossary) and phrases it must not contain.

Torch-free: `translate`, the server and the CTranslate2 engine read these the same way. A line's
`Guidance` becomes target subword ids (`LineControls`) through the run's own target pipeline
(Moses and the subword model) in `TranslatorBase.controls`.

Input convention (fairseq's ``--constraints``, extended by the prefix): with ``--prefix`` a line is
``SOURCE<TAB>PREFIX``; with ``--constraints`` it is ``SOURCE<TAB>TERM<TAB>TERM…``; with both,
``SOURCE<TAB>PREFIX<TAB>TERM…``.
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from nmtk.errors import NmtkError
from nmtk.files import read_lines
from nmtk.manifest import Manifest
from nmtk.recipe import Recipe
from nmtk.text.casing import shouted
from nmtk.text.reading import normalized, terms_pattern
from nmtk.vocab import HINT_SYMBOLS, hinted

if TYPE_CHECKING:
    from nmtk.decode.search.config import Hypothesis


@dataclass(frozen=True)
class Guidance:
    """One line's controls as text (casing as given)."""

    prefix: str = ""
    constraints: tuple[str, ...] = ()
    bans: tuple[str, ...] = ()
    hinted: tuple[str, ...] = ()  # target terms its source holds as hints (``--terms inline``): preferred
    # per constraint, the source words (the line's Moses tokens) a glossary found it for, "" for one given
    # as such: a line of several sentences asks each sentence for the terms found in it
    anchors: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.prefix or self.constraints or self.bans or self.hinted)


@dataclass(frozen=True)
class InputFormat:
    """Which tab-separated fields follow the source on an input line."""

    prefix: bool = False
    constraints: bool = False

    @property
    def plain(self) -> bool:
        return not (self.prefix or self.constraints)

    def split(self, line: str, number: int, where: str = "input") -> tuple[str, Guidance]:
        """The source of input line ``number`` and what its other fields ask."""
        if self.plain:
            return line, Guidance()
        fields = line.split("\t")
        source = fields[0]
        if len(fields) == 1:  # a line may carry nothing: it is translated as it is
            return source, Guidance()
        if not source.strip():
            raise NmtkError(f"{where} line {number}: no source text before the tab")
        prefix = fields[1].strip() if self.prefix else ""
        terms = tuple(fields[2 if self.prefix else 1 :]) if self.constraints else ()
        if not self.constraints and len(fields) > 2:
            raise NmtkError(f"{where} line {number}: {len(fields) - 2} more tab-separated fields than "
                            "SOURCE<TAB>PREFIX (constraints follow only with --constraints)")
        if any(not t.strip() for t in terms):
            raise NmtkError(f"{where} line {number}: an empty constraint (two tabs in a row, or a tab at the end)")
        return source, Guidance(prefix=prefix, constraints=tuple(t.strip() for t in terms))


@dataclass(frozen=True)
class Glossary:
    """Term pairs (source term, target term): a line whose source holds a source term (as a run of
    whole words, after the source's Moses tokenisation) gets the target term as a constraint."""

    pairs: tuple[tuple[str, str], ...] = ()
    ignore_case: bool = False
    origins: tuple[str, ...] = field(default=(), compare=False)  # where each pair was read ("FILE: line N")
    _index: dict[str, list[tuple[tuple[str, ...], str]]] = field(default_factory=dict, compare=False, repr=False)
    _hints: dict[str, str] = field(default_factory=dict, compare=False, repr=False)  # target term -> its tokens
    # source term -> its Moses tokens: kept across `__add__`, so that a server's glossary of thousands of
    # terms is not tokenized again for every request that brings its own (130 ms for 5,000 terms)
    _tokenized: dict[str, str] = field(default_factory=dict, compare=False, repr=False)
    # its translated terms compiled (`translated_patterns`), and the glossaries `__add__` joined into it
    _patterns: dict[str, tuple[re.Pattern[str], ...]] = field(default_factory=dict, compare=False, repr=False)
    _parts: tuple[Glossary, ...] = field(default=(), compare=False, repr=False)

    @classmethod
    def read(cls, path: Path, ignore_case: bool = False) -> Glossary:
        """A TSV file, one ``source term<TAB>target term`` a line; blank lines and ``#`` comments are
        skipped. A bad line is one error naming the file and line."""
        pairs, origins = [], []
        for number, line in enumerate(read_lines(Path(path), "glossary"), start=1):
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            origins.append(f"{path}: line {number}")
            pairs.append(_pair(line.split("\t"), origins[-1]))
        if not pairs:
            raise NmtkError(f"{path}: holds no term pairs (one 'source term<TAB>target term' a line)")
        kept, where = _distinct(pairs, origins, ignore_case)
        return cls(kept, ignore_case, where)

    @classmethod
    def of(cls, pairs: Iterable[Sequence[str]], ignore_case: bool = False, where: str = "glossary") -> Glossary:
        """Pairs given as lists (a server request's ``glossary``)."""
        pairs = list(pairs)
        origins = [f"{where}[{i}]" for i in range(len(pairs))]
        checked = [_pair(list(p), origin) for p, origin in zip(pairs, origins, strict=True)]
        kept, where = _distinct(checked, origins, ignore_case)
        return cls(kept, ignore_case, where)

    def __add__(self, other: Glossary) -> Glossary:
        """This glossary with ``other``'s pairs; where both translate a source term, ``other``'s target
        (a request's glossary over the server's: the more particular one)."""
        ignore_case = self.ignore_case or other.ignore_case
        theirs = {_key(src, ignore_case) for src, _ in other.pairs}
        kept = [(pair, where) for pair, where in zip(self.pairs, self.where_each(), strict=True)
                if _key(pair[0], ignore_case) not in theirs]
        return Glossary(tuple(p for p, _ in kept) + other.pairs, ignore_case,
                        tuple(w for _, w in kept) + other.where_each(), _hints={**self._hints, **other._hints},
                        _tokenized={**self._tokenized, **other._tokenized}, _parts=(self, other))

    def cased(self) -> frozenset[str]:
        """The words in capitals of its source terms ("WHO", "ACME"; `shouted`, as reading tells them),
        where it matches case: a translator given the glossary reads them as typed
        (`LoadOptions.keep_case`), or folding a line, sentence or word in capitals to sentence case would
        hide them from it (and a name's meaning from the model)."""
        if self.ignore_case:
            return frozenset()
        return frozenset(w for src, _ in self.pairs for w in src.split() if shouted(w))

    def untranslated(self) -> tuple[str, ...]:
        """Its source terms whose target is the term itself (names, brands, acronyms: ``NASA``,
        ``iPhone``): a model trained with hints copies some of them poorly from a hint ("Ein
        NASASASASA…", "McDonald s s s"), so where a line's translation lost one
        (`nmtk.decode.unknown.lost_terms`), `translate`/`serve` make it again with them carried through
        untranslated, as links are (`LoadOptions.carry_terms`)."""
        return tuple(src for src, tgt in self.pairs if src.strip() == tgt.strip())

    def translated(self) -> tuple[str, ...]:
        """Its source terms whose target is another (``MP3`` → ``Musikdatei``): what the line holds there
        is the glossary's to translate, not carried through though it be a code, a link or a handle
        (`nmtk.decode.unknown.kept_spans`)."""
        return tuple(src for src, tgt in self.pairs if src.strip() != tgt.strip())

    def translated_patterns(self) -> tuple[re.Pattern[str], ...]:
        """Its `translated` terms as whole-word patterns (`nmtk.text.reading.terms_pattern`), compiled once:
        a server's glossary of 5,000 terms took 47 ms to compile, again for every request that brought a
        glossary of its own (140 ms a request). A glossary `__add__` joined reuses its parts' where they
        say what it says (one case rule, and no term of the first that the second keeps as it is)."""
        if "translated" not in self._patterns:  # (two threads may both compile it: the same patterns)
            self._patterns["translated"] = self._compiled()
        return self._patterns["translated"]

    def _compiled(self) -> tuple[re.Pattern[str], ...]:
        if len(self._parts) == 2 and self._parts_agree():
            return self._parts[0].translated_patterns() + self._parts[1].translated_patterns()
        pattern = terms_pattern(self.translated(), self.ignore_case)
        return () if pattern is None else (pattern,)

    def _parts_agree(self) -> bool:
        first, second = self._parts
        if first.ignore_case != self.ignore_case or second.ignore_case != self.ignore_case:
            return False
        kept = {_key(src, self.ignore_case) for src in second.untranslated()}
        return not any(_key(src, self.ignore_case) in kept for src in first.translated())

    def where_each(self) -> tuple[str, ...]:
        """Where each pair was read, for errors about it (``glossary[i]`` where nothing was said)."""
        return self.origins if len(self.origins) == len(self.pairs) else tuple(
            f"glossary[{i}]" for i in range(len(self.pairs)))

    def terms(self, source: str, tokenize: Callable[[str], str]) -> tuple[str, ...]:
        """Target terms of the pairs whose source term occurs in ``source`` (``tokenize``: the source
        side's Moses), in the order they occur, each once."""
        return tuple(self.found(source, tokenize))

    def found(self, source: str, tokenize: Callable[[str], str]) -> dict[str, str]:
        """`terms`, each with the source words it was first found for (as Moses tokens of ``source``)."""
        words = tokenize(source).split()
        found: dict[str, str] = {}
        for start, end, target in self._chosen(words, tokenize):
            found.setdefault(target, " ".join(words[start:end]))
        return found

    def _chosen(self, words: list[str], tokenize: Callable[[str], str]) -> list[tuple[int, int, str]]:
        """The matches a line gets, left to right: the longest term where several start at one word,
        none inside or across another ("running dog" → "Rennhund", not that and "dog" → "Hund" too)."""
        chosen, at = [], 0
        for start, end, target in sorted(self._matches(words, tokenize), key=lambda m: (m[0], m[0] - m[1])):
            if start >= at:
                chosen.append((start, end, target))
                at = end
        return chosen

    def index(self, tokenize: Callable[[str], str]) -> Glossary:
        """Tokenize every source term now (once: a server does it at its start, so that the glossaries
        its requests add to it copy the tokens instead of making them again); this glossary."""
        if not self._index:
            for src, tgt in self.pairs:
                if src not in self._tokenized:
                    self._tokenized[src] = tokenize(src)
                term = tuple(self._norm(self._tokenized[src]).split())
                self._index.setdefault(term[0], []).append((term, tgt))
        return self

    def _matches(self, words: list[str], tokenize: Callable[[str], str]) -> Iterator[tuple[int, int, str]]:
        """(start, end, target term) of each source term in ``words`` (Moses tokens), left to right.

        A term's first word may follow punctuation and its last word may carry some (``street.``,
        ``(man``, ``ice cream,``): without Moses (a recipe's default) the words are the line's
        space-separated ones, and a term ending a sentence or a clause never stood alone; the match is
        the whole word, punctuation and all, as the ``terms`` modifier hints such words in training."""
        if not self.pairs:
            return
        self.index(tokenize)
        normed = [self._norm(w) for w in words]
        for i, word in enumerate(normed):
            for first in dict.fromkeys((word, _edged(word, left=True), _edged(word, left=True, right=True))):
                for term, target in self._index.get(first, ()):
                    if _fits(normed[i : i + len(term)], term):
                        yield i, i + len(term), target

    def hinted(self, source: str, tokenize: Callable[[str], str], tokenize_target: Callable[[str], str],
               tokenized: bool = False) -> str:
        """``source`` as Moses tokens with each source term followed by its target term as a hint
        (``__source__ term __target__ Term __done__``: what a model trained with the ``terms`` modifier
        reads; the longest term where several start at one word, none inside another). ``tokenized``:
        ``source`` is Moses tokens already (a marked-up sentence's, `nmtk.decode.markup`)."""
        words = (source if tokenized else tokenize(source)).split()
        out, at = [], 0
        for start, end, target in self._chosen(words, tokenize):
            if target not in self._hints:
                self._hints[target] = tokenize_target(target)
            out += words[at:start] + [hinted(" ".join(words[start:end]), self._hints[target])]
            at = end
        return " ".join(out + words[at:])

    def _norm(self, text: str) -> str:
        return text.casefold() if self.ignore_case else text

    def guide(self, source: str, guidance: Guidance, tokenize: Callable[[str], str]) -> Guidance:
        """``guidance`` with this glossary's terms for ``source`` added as constraints, each anchored to
        the source words it was found for (`Guidance.anchors`)."""
        extra = {t: words for t, words in self.found(source, tokenize).items() if t not in guidance.constraints}
        if not extra:
            return guidance
        given = guidance.anchors + ("",) * (len(guidance.constraints) - len(guidance.anchors))
        return replace(guidance, constraints=guidance.constraints + tuple(extra), anchors=given + tuple(extra.values()))


def guided(source: str, guide: Guidance, glossary: Glossary | None, bans: tuple[str, ...],
           tokenize: Callable[[str], str], hints: bool = False) -> Guidance | None:
    """``guide`` with the glossary's terms that ``source`` holds and the banned phrases added (what
    `translate` and the server ask of every line); None when it asks nothing. ``hints``: the terms are
    hints in the source (``--terms inline``), preferred among the finished hypotheses (`preferring`),
    not constraints. Its texts are read as the source is (`normalized`: accents composed, soft hyphens dropped)."""
    if guide.prefix or guide.constraints:
        guide = replace(guide, prefix=normalized(guide.prefix),
                        constraints=tuple(normalized(t) for t in guide.constraints))
    bans = tuple(normalized(b) for b in bans)
    if glossary is not None and source.strip():
        if hints:
            guide = replace(guide, hinted=glossary.terms(source, tokenize))
        else:
            guide = glossary.guide(source, guide, tokenize)
    if bans:
        guide = replace(guide, bans=bans)
    return guide or None


def _edged(word: str, left: bool = False, right: bool = False) -> str:
    """``word`` without the punctuation at its left and/or right edge (``"(street."`` → ``"street."``,
    ``"street"``); a word of punctuation alone stays as it is (no term matches it emptied)."""
    start, end = 0, len(word)
    while left and start < end and unicodedata.category(word[start]).startswith("P"):
        start += 1
    while right and end > start and unicodedata.category(word[end - 1]).startswith("P"):
        end -= 1
    return word[start:end] or word


def _fits(words: list[str], term: tuple[str, ...]) -> bool:
    """Whether ``words`` are ``term``'s, punctuation allowed before its first and after its last word
    (`Glossary._matches`); inside it ("ice, cream") they must be as the term has them."""
    if len(words) != len(term):
        return False
    last = len(term) - 1
    return all(w == t or _edged(w, left=k == 0, right=k == last) == t
               for k, (w, t) in enumerate(zip(words, term, strict=True)))


@lru_cache(maxsize=8192)
def _whole(term: str) -> re.Pattern[str]:
    """``term`` as whole words (as written; punctuation around it aside). Compiled once per term: `re`'s
    own cache holds 512 patterns, fewer than a glossary's terms (test_2016_flickr's 1,230 terms were
    compiled again for nearly every line that holds one)."""
    return re.compile(rf"(?<!\w){re.escape(term)}(?!\w)")


def held(text: str, term: str) -> bool:
    """Whether ``term`` occurs in ``text`` as whole words."""
    return _whole(term).search(text) is not None


def occurrences(text: str, term: str) -> int:
    """How often ``term`` occurs in ``text`` as whole words."""
    return len(_whole(term).findall(text))


def preferring(hyps: list[Hypothesis], terms: tuple[str, ...], words: Callable[[Hypothesis], str],
               keep: int) -> list[Hypothesis]:
    """A line's hypotheses (best first) reordered for the target terms its source holds as hints (one
    entry per hint: a term hinted twice is asked twice): those holding more of them (as whole words in
    ``words``, a hypothesis's text as the terms are written) first, then those writing fewer of them
    beyond their hints' count, by score among equals; the first ``keep``.

    Why: hints ask, they do not force. A model trained with them (the ``terms`` modifier) sometimes
    writes another word while its beam holds a translation with the term a little lower (the terms
    recipe's model, test_2016_flickr with 1–2 terms a line: a tenth of the terms), and sometimes copies
    the term again ("in der gelben Hose Hose Hose": 169 of its 1,230 terms written more often than the
    reference has them; 139 with this choice, 36 with the search barring a term twice in a row too,
    `LineControls.doubled`). Choosing among the hypotheses the search finished anyway costs no search in
    either engine (CTranslate2 returns its beam's as nmtk's search does: `SearchConfig.alternatives`)."""
    if not terms or not hyps:
        return hyps[:keep]
    asked = Counter(terms)
    keys: dict[int, tuple[int, int]] = {}

    def key(i: int) -> tuple[int, int]:
        if i not in keys:
            text = words(hyps[i])
            found = Counter({t: occurrences(text, t) for t in asked})
            keys[i] = (sum((asked - found).values()), sum((found - asked).values()))  # too few, too many
        return keys[i]

    if key(0) == (0, 0):  # the best holds each term as often as it is hinted: nothing else is read
        return hyps[:keep]
    return [hyps[i] for i in sorted(range(len(hyps)), key=key)][:keep]


def _key(source: str, ignore_case: bool) -> str:
    """A source term as the glossary matches it: its words, in any case where it ignores case."""
    words = " ".join(source.split())
    return words.casefold() if ignore_case else words


def _distinct(pairs: list[tuple[str, str]], origins: list[str], ignore_case: bool
              ) -> tuple[tuple[tuple[str, str], ...], tuple[str, ...]]:
    """The pairs and where each was read, a pair given twice once; a source term given two targets is
    one error naming both places (which of them a line should get would be a guess)."""
    seen: dict[str, tuple[str, str]] = {}
    kept, where = [], []
    for (src, tgt), origin in zip(pairs, origins, strict=True):
        first = seen.setdefault(_key(src, ignore_case), (tgt, origin))
        if first[1] != origin and first[0] != tgt:
            raise NmtkError(f"{origin}: the source term {src!r} has another target term at {first[1]} "
                            f"({first[0]!r} there, {tgt!r} here): one source term, one target")
        if first[1] == origin:
            kept.append((src, tgt))
            where.append(origin)
    return tuple(kept), tuple(where)


def _pair(fields: list[str], where: str) -> tuple[str, str]:
    if len(fields) != 2:
        raise NmtkError(f"{where}: expected 'source term<TAB>target term', found {len(fields)} field(s)")
    src, tgt = (normalized(f.strip()) for f in fields)  # as lines are read (`Reading.read`): found either way
    if not src or not tgt:
        raise NmtkError(f"{where}: an empty {'source' if not src else 'target'} term")
    for side, term in (("source", src), ("target", tgt)):
        # a term holding the hints' markup would end or open a hint inside another and garble the line
        if reserved := next((s for s in HINT_SYMBOLS if s in term), None):
            raise NmtkError(f"{where}: the {side} term {term!r} holds {reserved!r}, a symbol reserved for "
                            f"terminology hints' markup")
    return src, tgt


def read_phrases(path: Path) -> tuple[str, ...]:
    """Banned phrases: one a line (blank lines and ``#`` comments skipped)."""
    lines = read_lines(Path(path), "banned phrases")
    phrases = tuple(x.strip() for x in lines if x.strip() and not x.lstrip().startswith("#"))
    if not phrases:
        raise NmtkError(f"{path}: holds no phrases (one phrase a line)")
    return phrases


#: How a glossary's terms reach the translation: ``constrained`` (the search must produce them, nmtk's engine),
#: ``inline`` (hints in the source, for a model trained with the ``terms`` modifier: any engine), ``auto``
#: (inline where the model's vocabulary has the hint symbols, else constrained).
TermsMode = Literal["auto", "inline", "constrained"]


def inline_terms(mode: TermsMode, manifest: Manifest | None, where: str) -> bool:
    """Whether a glossary goes into the source as hints (``--terms``, resolved for a model whose data
    ``manifest`` says whether its vocabulary has the hint symbols): decided before the model loads;
    ``inline`` for a model trained without hints is one line naming it."""
    has = manifest is not None and manifest.hints
    if mode == "inline" and not has:
        raise NmtkError(f"--terms inline: {where} was not trained with terminology hints (train.modifiers "
                        "with terms): its vocabulary has no __source__/__target__/__done__; use --terms constrained")
    return has if mode == "auto" else mode == "inline"


@dataclass(frozen=True)
class GuideOptions:
    """What lines ask of their translations besides the model (`nmtk.decode.guide`): which fields
    follow the source on a line, a glossary and banned phrases for every line."""

    format: InputFormat = InputFormat()
    glossary: Path | None = None  # None: the recipe's decode.glossary, if any
    ignore_case: bool | None = None  # None: the recipe's decode.glossary_ignore_case
    bans: Path | None = None
    terms: TermsMode = "auto"


def read_guides(guide: GuideOptions, recipe: Recipe, requests: bool = False
                ) -> tuple[Glossary | None, tuple[str, ...]]:
    """The glossary (``--glossary``, else the recipe's) and banned phrases, read before any model loads:
    a bad file is one error naming it (and its line) before anything is translated. An option about a
    glossary where there is none is one line too (``--terms inline`` without one translated as if it
    were not there); ``requests``: a server, whose requests bring glossaries of their own."""
    path = guide.glossary or recipe.decode.glossary
    asked = [name for name, given in (("--glossary-ignore-case", guide.ignore_case),
                                      (f"--terms {guide.terms}", guide.terms != "auto" and not requests)) if given]
    if path is None and asked:
        raise NmtkError(f"{', '.join(asked)}: there is no glossary to apply (--glossary FILE, or decode.glossary "
                        f"in the recipe {recipe.name})")
    ignore_case = recipe.decode.glossary_ignore_case if guide.ignore_case is None else guide.ignore_case
    glossary = Glossary.read(path, ignore_case) if path is not None else None
    return glossary, read_phrases(guide.bans) if guide.bans is not None else ()
