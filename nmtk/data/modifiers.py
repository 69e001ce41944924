"""On-the-fly modifiers: a share of the training pairs changed as they are fed, drawn afresh each epoch.

A model trained only on clean, sentence-cased text breaks on what people type (capitals, typos, words it
cannot translate). OpusTrainer (HPLT; what Firefox's translation models train through) changes a share
of the pairs as they are fed: capitals, title case, typos, noise to copy, several lines as one, and
terminology hints learned from word alignments. nmtk takes those modifiers from OpusTrainer itself, and
does itself what OpusTrainer leaves to its caller: which pairs each epoch changes (numpy, seeded by the
run's seed and the epoch, so the same run twice trains on the same batches and a resume is exact), the
pair's text (its ids decoded: the subword model gives back the exact Moses tokens it was encoded from,
so neither Moses nor the subword learner runs again), and the modified text encoded back into ids.

Only the chosen pairs are decoded and encoded: the cost is proportional to the share modified. A
modified pair replaces the original for that epoch (OpusTrainer's noise adds its pair beside the
original; here it takes the chosen pair's place), and one longer than ``limit`` (``data.max_len``;
capitals split into two to three times the pieces) keeps its original.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import numpy as np

from nmtk.data.alignment import Alignments
from nmtk.errors import NmtkError
from nmtk.text.subword import word_starts
from nmtk.vocab import UNK_ID

if TYPE_CHECKING:
    from nmtk.recipe import Modifier
    from nmtk.text.subword import SubwordModel


def _opustrainer() -> Any:
    """OpusTrainer's modifier classes (imported when a recipe asks for modifiers)."""
    try:
        from opustrainer.modifiers import merge, noise, placeholders, surface, typos
    except ImportError:
        raise NmtkError("train.modifiers need OpusTrainer: pip install --no-deps opustrainer==0.5 (its pin of "
                        "sentencepiece 0.1.99 would replace nmtk's; `make install` does this)") from None
    return surface, typos, noise, merge, placeholders


@contextmanager
def seeded_random(seed: int) -> Iterator[None]:
    """Python's `random` (OpusTrainer's modifiers draw from it) seeded, and put back afterwards."""
    state = random.getstate()
    random.seed(seed)
    try:
        yield
    finally:
        random.setstate(state)


def apply(modifier: Modifier, lines: list[str], partners: list[list[str]], words: Sequence[str] = (),
          alphabet: Sequence[str] = ()) -> list[str]:
    """``lines`` (``source<TAB>target[<TAB>alignment]``, Moses tokens) changed by one of OpusTrainer's
    modifiers; ``partners``: for ``merge``, the lines joined to each one; ``words``: target words a ``terms``
    hint's ``replace`` draws from; ``alphabet``: the characters ``noise`` draws from (`spelled_alike`).
    Returns one line per line."""
    surface, typos, noise, merge, placeholders = _opustrainer()
    name = modifier.name
    if name == "uppercase":
        return list(surface.UpperCaseModifier(1.0)(lines))
    if name == "titlecase":
        return list(surface.TitleCaseModifier(1.0)(lines))
    if name == "typos":
        errors = typos.TypoModifier(1.0)
        return [_kept(errors.apply, line) for line in lines]
    if name == "noise":
        with _noise_from(noise, alphabet):
            return list(noise.NoiseModifier(1.0)(lines))[::2]  # each fake pair first, then the original
    if name == "merge":
        return [merge.merge_sents([line, *more]) for line, more in zip(lines, partners, strict=True)]
    tags = placeholders.PlaceholderTagModifier(modifier.words, replace=modifier.replace, tag=1.0 - modifier.replace)
    with _replacing_with(placeholders, words, modifier.max_words):
        return [_kept(tags.apply, line) for line in lines]


@contextmanager
def _replacing_with(placeholders: Any, words: Sequence[str], most: int = 1) -> Iterator[None]:
    """OpusTrainer's ``replace`` mode draws 1–3 random Unicode words (letters of a dozen scripts: unknown
    pieces to a vocabulary learned on the corpus); here it draws 1 to ``most`` of ``words`` instead
    (`epoch_words`; the modifier's ``max_words``: a glossary's terms of several words need several)."""
    draw = placeholders.get_random_unicode_words
    if words:
        # One string of 1–``most`` words, not a list of them: OpusTrainer counts the target's tokens after
        # a replaced word as if the replacement were one token (a second hint in the line then overwrote
        # the earlier hint's second word), and a string with spaces is one token to it.
        # With ``most`` 1 no count is drawn: a run trained before ``max_words`` existed resumes exactly.
        placeholders.get_random_unicode_words = lambda *_, **__: [
            " ".join(random.choice(words) for _ in range(random.randint(1, most) if most > 1 else 1))]
    try:
        yield
    finally:
        placeholders.get_random_unicode_words = draw


@contextmanager
def _noise_from(noise: Any, alphabet: Sequence[str]) -> Iterator[None]:
    """OpusTrainer's noise is words of one Unicode script drawn at random (Greek, Arabic, Thai, CJK…): a
    vocabulary learned on the corpus spells most of them as ``<unk>``, and the pair taught the model to
    answer unknown pieces with unknown pieces (a Multi30k vocabulary: " ⁇  ⁇ ß ⁇  ⁇ " on both sides).
    Here its words are drawn from ``alphabet``, characters both vocabularies spell, at OpusTrainer's
    lengths: the model learns to copy strings it cannot translate, as the modifier means it to."""
    draw = noise.get_random_unicode_words
    if alphabet:
        def drawn(min_length: int = 2, max_length: int = 10, max_words: int = 3) -> list[str]:
            length = random.randint(min_length, max_length)
            words = random.randint(1, max_words)
            return ["".join(random.choice(alphabet) for _ in range(length)) for _ in range(words)]

        noise.get_random_unicode_words = drawn
    try:
        yield
    finally:
        noise.get_random_unicode_words = draw


def spelled_alike(models: tuple[SubwordModel, SubwordModel]) -> list[str]:
    """The letters and digits of the source vocabulary's pieces that both vocabularies spell without
    ``<unk>``, sorted: what ``noise`` draws from. No punctuation: the noise is written into the text as
    Moses left it, and Moses, which reads every line before translation, would split it apart."""
    chars = {c for piece in models[0].pieces() for c in piece.removeprefix("\u2581") if c.isalnum()}
    return sorted(c for c in chars if all(UNK_ID not in m.encode(c) for m in models))


def _kept(change: Callable[[str], str], line: str) -> str:
    """``change(line)``; a line OpusTrainer cannot change (an alignment it cannot use, a typo that would
    break one: it asserts, or logs and drops the line) stays as it was."""
    try:
        return change(line)
    except Exception:  # noqa: BLE001 - whatever the modifier raised, the pair is still a good pair
        return line


def target_words(pieces: list[str]) -> list[str]:
    """Whole words of a vocabulary (a piece that begins a word, then only letters, 3 or more): what a
    ``replace`` hint puts in place of the target word when the epoch's pairs have none (`epoch_words`)."""
    starts = word_starts(pieces)
    words = [p.removeprefix("\u2581") for p, start in zip(pieces, starts, strict=True) if start]
    return sorted({w for w in words if len(w) >= 3 and w.isalpha()})


def epoch_words(lines: Iterable[str]) -> list[str]:
    """The words of letters (3 or more) of the target sides of ``lines`` (``source<TAB>target…``): what a
    ``replace`` hint puts in place of the target word. Words of the corpus, not of the vocabulary: a term
    a glossary asks for is mostly several pieces ("Schneemobilen"), and a model that learned to copy only
    one-piece words breaks the others (10-minute Multi30k runs wrote "Iglu" as "Ichchuuuu"). Sorted: the
    same lines give the same draws."""
    words = {w for line in lines for w in line.split("\t")[1].split() if len(w) >= 3 and w.isalpha()}
    return sorted(words)


class _Side:
    """One side of a `ModifiedSplit`: the epoch's changed pairs, else the prepared ones."""

    def __init__(self, base: Any, changed: dict[int, np.ndarray]) -> None:
        self.base, self.changed = base, changed

    def __len__(self) -> int:
        return len(self.base)

    def __getitem__(self, i: int) -> np.ndarray:
        ids = self.changed.get(int(i))
        return self.base[i] if ids is None else ids


class ModifiedSplit:
    """A training split whose pairs may change from epoch to epoch (`set_epoch`).

    ``lengths``: the (source, target) token counts batching reads (with EOS/BOS, `split_lengths`), updated
    in place for the epoch's changed pairs, so the batching plan and micro-batches see them. ``limit``: the
    most tokens a side of a changed pair may have (with EOS). ``keep``: ids a source begins with that are
    no text (a corpus tag, a target-language tag): kept as they are.
    """

    def __init__(self, split: Any, subwords: tuple[SubwordModel, SubwordModel], lengths: tuple[np.ndarray, np.ndarray],
                 seed: int, limit: int, keep: frozenset[int] = frozenset(), alignments: Alignments | None = None
                 ) -> None:
        self.base, self.subwords, self.seed, self.keep, self.alignments = split, subwords, seed, keep, alignments
        self.src_lengths, self.tgt_lengths = lengths
        self.original = (lengths[0].copy(), lengths[1].copy())
        self.limit = limit
        self.changed_src: dict[int, np.ndarray] = {}
        self.changed_tgt: dict[int, np.ndarray] = {}
        self.src, self.tgt = _Side(split.src, self.changed_src), _Side(split.tgt, self.changed_tgt)
        self.words = target_words(subwords[1].pieces())
        self._alphabet: list[str] | None = None  # `spelled_alike`, when noise first needs it

    def __len__(self) -> int:
        return len(self.base)

    def set_epoch(self, epoch: int, modifiers: Sequence[Modifier]) -> Counter:
        """Change this epoch's pairs; returns how many each modifier changed (and ``too long``: kept)."""
        for i in self.changed_src:
            self.src_lengths[i], self.tgt_lengths[i] = self.original[0][i], self.original[1][i]
        self.changed_src.clear()
        self.changed_tgt.clear()
        if not modifiers or not len(self):
            return Counter()
        rng = np.random.default_rng([self.seed, epoch, 5])
        ordered = sorted(modifiers, key=lambda m: m.name == "terms")  # hints last: nothing changes them after
        chosen = [np.flatnonzero(rng.random(len(self)) < m.p) for m in ordered]
        partners = [self._partners(m, c, rng) for m, c in zip(ordered, chosen, strict=True)]
        wanted = {int(i) for c in chosen for i in c} | {int(i) for p in partners for more in p for i in more}
        text = {i: self._line(i, align=any(m.name == "terms" for m in ordered)) for i in sorted(wanted)}
        lines = {i: line for i, (_, line) in text.items()}
        counts: Counter = Counter()
        replacing = any(m.name == "terms" and m.replace for m in ordered)
        words = (replacing and epoch_words(line for _, line in text.values())) or self.words
        with seeded_random(int(rng.integers(2**63))):
            for modifier, indices, more in zip(ordered, chosen, partners, strict=True):
                joined = [[text[int(j)][1] for j in m] for m in more]
                changed = apply(modifier, [lines[int(i)] for i in indices], joined, words,
                                self._noise_alphabet(modifier))
                for i, line in zip(indices, changed, strict=True):
                    lines[int(i)] = line
                counts[modifier.name] += len(indices)
        counts["too long"] = self._encode({i: (text[i][0], lines[i]) for c in chosen for i in map(int, c)})
        return counts

    def _noise_alphabet(self, modifier: Modifier) -> list[str]:
        """The characters ``noise`` draws from (`spelled_alike`), found once; none for other modifiers."""
        if modifier.name != "noise":
            return []
        if self._alphabet is None:
            self._alphabet = spelled_alike((self.subwords[0], self.subwords[1]))
        return self._alphabet

    def _partners(self, modifier: Modifier, chosen: np.ndarray, rng: np.random.Generator) -> list[np.ndarray]:
        """``merge``: the 1 to ``max_lines - 1`` other pairs each chosen pair is joined with."""
        if modifier.name != "merge":
            return [np.zeros(0, dtype=np.int64)] * len(chosen)
        sizes = rng.integers(1, modifier.max_lines, size=len(chosen))
        return [rng.integers(0, len(self), size=int(k)) for k in sizes]

    def _line(self, i: int, align: bool) -> tuple[list[int], str]:
        """Pair ``i`` as OpusTrainer reads it (Moses tokens, tab-separated; with its word alignment), and the
        ids its source begins with that are no text."""
        src = self.base.src[i].tolist()
        at = 0
        while at < len(src) and src[at] in self.keep:
            at += 1
        line = f"{self.subwords[0].decode(src[at:])}\t{self.subwords[1].decode(self.base.tgt[i].tolist())}"
        if align and self.alignments is not None:
            line += "\t" + self.alignments.text(i)
        return src[:at], line

    def _encode(self, lines: dict[int, tuple[list[int], str]]) -> int:
        """The changed lines' ids, where they fit; returns how many did not (they keep their original)."""
        order = sorted(lines)
        fields = [lines[i][1].split("\t") for i in order]
        sources = self.subwords[0].encode_batch([f[0] for f in fields])
        targets = self.subwords[1].encode_batch([f[1] if len(f) > 1 else "" for f in fields])
        too_long = 0
        for i, src, tgt in zip(order, sources, targets, strict=True):
            src = lines[i][0] + src
            if not src or not tgt or max(len(src), len(tgt)) + 1 > self.limit:
                too_long += 1
                continue
            self.changed_src[i], self.changed_tgt[i] = np.asarray(src), np.asarray(tgt)
            self.src_lengths[i], self.tgt_lengths[i] = len(src) + 1, len(tgt) + 1
        return too_long
