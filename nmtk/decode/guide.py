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

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from nmtk.errors import NmtkError
from nmtk.files import read_lines
from nmtk.recipe import Recipe


@dataclass(frozen=True)
class Guidance:
    """One line's controls as text (casing as given)."""

    prefix: str = ""
    constraints: tuple[str, ...] = ()
    bans: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.prefix or self.constraints or self.bans)


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
        return cls(tuple(pairs), ignore_case, tuple(origins))

    @classmethod
    def of(cls, pairs: Iterable[Sequence[str]], ignore_case: bool = False, where: str = "glossary") -> Glossary:
        """Pairs given as lists (a server request's ``glossary``)."""
        pairs = list(pairs)
        origins = tuple(f"{where}[{i}]" for i in range(len(pairs)))
        return cls(tuple(_pair(list(p), origin) for p, origin in zip(pairs, origins, strict=True)), ignore_case,
                   origins)

    def __add__(self, other: Glossary) -> Glossary:
        return Glossary(self.pairs + other.pairs, self.ignore_case or other.ignore_case,
                        self.where_each() + other.where_each())

    def where_each(self) -> tuple[str, ...]:
        """Where each pair was read, for errors about it (``glossary[i]`` where nothing was said)."""
        return self.origins if len(self.origins) == len(self.pairs) else tuple(
            f"glossary[{i}]" for i in range(len(self.pairs)))

    def terms(self, source: str, tokenize: Callable[[str], str]) -> tuple[str, ...]:
        """Target terms of the pairs whose source term occurs in ``source`` (``tokenize``: the source
        side's Moses), in the order they occur, each once."""
        if not self.pairs:
            return ()
        if not self._index:
            for src, tgt in self.pairs:
                words = tuple(self._norm(tokenize(src)).split())
                self._index.setdefault(words[0], []).append((words, tgt))
        words = self._norm(tokenize(source)).split()
        found: list[str] = []
        for i, word in enumerate(words):
            for term, target in self._index.get(word, ()):
                if tuple(words[i : i + len(term)]) == term and target not in found:
                    found.append(target)
        return tuple(found)

    def _norm(self, text: str) -> str:
        return text.casefold() if self.ignore_case else text

    def guide(self, source: str, guidance: Guidance, tokenize: Callable[[str], str]) -> Guidance:
        """``guidance`` with this glossary's terms for ``source`` added as constraints."""
        extra = tuple(t for t in self.terms(source, tokenize) if t not in guidance.constraints)
        return replace(guidance, constraints=guidance.constraints + extra) if extra else guidance


def guided(source: str, guide: Guidance, glossary: Glossary | None, bans: tuple[str, ...],
           tokenize: Callable[[str], str]) -> Guidance | None:
    """``guide`` with the glossary's terms that ``source`` holds and the banned phrases added (what
    `translate` and the server ask of every line); None when it asks nothing."""
    if glossary is not None and source.strip():
        guide = glossary.guide(source, guide, tokenize)
    if bans:
        guide = replace(guide, bans=bans)
    return guide or None


def _pair(fields: list[str], where: str) -> tuple[str, str]:
    if len(fields) != 2:
        raise NmtkError(f"{where}: expected 'source term<TAB>target term', found {len(fields)} field(s)")
    src, tgt = (f.strip() for f in fields)
    if not src or not tgt:
        raise NmtkError(f"{where}: an empty {'source' if not src else 'target'} term")
    return src, tgt


def read_phrases(path: Path) -> tuple[str, ...]:
    """Banned phrases: one a line (blank lines and ``#`` comments skipped)."""
    lines = read_lines(Path(path), "banned phrases")
    phrases = tuple(x.strip() for x in lines if x.strip() and not x.lstrip().startswith("#"))
    if not phrases:
        raise NmtkError(f"{path}: holds no phrases (one phrase a line)")
    return phrases


@dataclass(frozen=True)
class GuideOptions:
    """What lines ask of their translations besides the model (`nmtk.decode.guide`): which fields
    follow the source on a line, a glossary and banned phrases for every line."""

    format: InputFormat = InputFormat()
    glossary: Path | None = None  # None: the recipe's decode.glossary, if any
    ignore_case: bool | None = None  # None: the recipe's decode.glossary_ignore_case
    bans: Path | None = None


def read_guides(guide: GuideOptions, recipe: Recipe) -> tuple[Glossary | None, tuple[str, ...]]:
    """The glossary (``--glossary``, else the recipe's) and banned phrases, read before any model loads:
    a bad file is one error naming it (and its line) before anything is translated."""
    path = guide.glossary or recipe.decode.glossary
    ignore_case = recipe.decode.glossary_ignore_case if guide.ignore_case is None else guide.ignore_case
    glossary = Glossary.read(path, ignore_case) if path is not None else None
    return glossary, read_phrases(guide.bans) if guide.bans is not None else ()
