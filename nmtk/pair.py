"""A language pair: one type (source, target), its name (``en-de``) and parser, and the one rule that
chooses one of a model's pairs.

The name is how a pair appears in files: a multilingual manifest's ``pairs``, its splits
(``train.en-de``), a recipe's ``[[data.pairs]]``. `Pair.parse` is the only place such a name is cut.
`choose_pair` is the only place a pair is chosen: the command line's ``--target-lang``/``--source-lang``
and the server's ``source``/``target`` (which also takes ``auto``) ask it alike, and word its refusals
each for their users (`PairError`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, NamedTuple

from nmtk.errors import NmtkError


class Pair(NamedTuple):
    """A direction: a source and a target language code (equal to the tuple ``(source, target)``)."""

    source: str
    target: str

    @property
    def name(self) -> str:
        """``en-de``: in split names, manifests and reports."""
        return f"{self.source}-{self.target}"

    @property
    def arrow(self) -> str:
        """``en → de``: in messages."""
        return f"{self.source} → {self.target}"

    @classmethod
    def parse(cls, name: str) -> Pair:
        """The pair a name (``en-de``) means; one line for anything else."""
        source, sep, target = name.partition("-")
        if not sep or not source or not target or "-" in target:
            raise NmtkError(f"{name!r}: not a language pair name (SOURCE-TARGET, e.g. en-de)")
        return cls(source, target)


def pairs_text(pairs: Sequence[Pair]) -> str:
    """``en → de, en → fr``: what a model translates, in messages."""
    return ", ".join(p.arrow for p in pairs)


class PairError(NmtkError):
    """`choose_pair` found no single pair: ``kind`` says why (``no-target``: a multilingual model was not
    told its target; ``none``: no pair fits; ``several``: the target comes from several sources, listed
    in ``sources``), for each caller to word for its users."""

    def __init__(self, kind: Literal["no-target", "none", "several"], message: str, sources: tuple[str, ...] = ()):
        super().__init__(message)
        self.kind, self.sources = kind, sources


def choose_pair(pairs: Sequence[Pair], target: str | None, source: str | None = None, *,
                auto_source: bool = False) -> Pair:
    """The one of ``pairs`` (a model's; one pair for a one-pair model) that ``target`` and ``source`` ask for.
    Codes match in any case (``FR``); None leaves a side open, except a multilingual model's target;
    with ``auto_source``, ``auto`` is an open source too (LibreTranslate's): where several sources have
    the target, the first of them (its callers detect each text's own: `sources_of`). Refusals are
    `PairError`s worded for the command line."""
    def same(asked: str | None, code: str) -> bool:
        open_ = asked is None or (auto_source and asked.lower() == "auto")
        return open_ or asked.lower() == code.lower()

    known = pairs_text(pairs)
    if len(pairs) > 1 and target is None:
        raise PairError("no-target", f"this model translates {known}: say which target with --target-lang")
    fits = [p for p in pairs if same(target, p.target) and same(source, p.source)]
    if not fits:
        asked = f"{source + ' ' if source else ''}→ {target or '?'}"
        raise PairError("none", f"{asked}: not a pair of this model, which translates {known}")
    if len(fits) > 1 and not (auto_source and source is not None and source.lower() == "auto"):
        sources = tuple(p.source for p in fits)
        raise PairError("several", f"→ {target}: this model has it from {', '.join(sources)}: say which with "
                                   "--source-lang", sources)
    return fits[0]


def sources_of(pairs: Sequence[Pair], target: str) -> list[str]:
    """The sources ``pairs`` have ``target`` from: where there are several, ``auto`` detects which."""
    return [p.source for p in pairs if p.target == target]
