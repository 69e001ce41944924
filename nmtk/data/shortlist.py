"""Lexical shortlists: the target pieces a sentence's translation can need, from the training data.

A translation of a sentence uses few of the target vocabulary's pieces: mostly the translations of its
own source pieces, and frequent function pieces. A shortlist lists, for every source piece, the ``k``
target pieces that co-occur with it most distinctively in the training pairs (the Dice coefficient of
the sentences holding each: 2·both / (source + target), so that pieces found in every sentence do not
crowd out real translations), and the ``frequent`` target pieces that go with every sentence. Decoding
with it projects each step's states onto the union of those lists for the batch's sources (Marian's
``--shortlist``, Sockeye's ``--restrict-lexicon``, CTranslate2's ``use_vmap``): the output projection is
most of a small model's decoding step.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from nmtk.vocab import SPECIAL_SYMBOLS

#: A co-occurrence count is kept for pairs of pieces; the training pairs are read in chunks of this many.
CHUNK = 20_000


@dataclass(frozen=True)
class Shortlist:
    """``frequent``: target ids every sentence may produce; ``table``: per source id, its ``k`` target ids
    (``-1`` where it has fewer), best first."""

    frequent: np.ndarray
    table: np.ndarray

    @property
    def per_source(self) -> int:
        return int(self.table.shape[1])

    def candidates(self, sources: Iterable[Sequence[int]], extra: Iterable[int] = ()) -> np.ndarray:
        """The sorted target ids the translations of ``sources`` may use: the frequent ones, each source
        piece's list, the special ids, and ``extra`` (a prefix's or a constraint's pieces)."""
        rows = np.unique(np.concatenate([np.asarray(s, dtype=np.int64) for s in sources] or [np.zeros(0, np.int64)]))
        rows = rows[(rows >= 0) & (rows < len(self.table))]
        found = self.table[rows].ravel()
        return np.unique(np.concatenate([found[found >= 0], self.frequent, np.arange(len(SPECIAL_SYMBOLS)),
                                         np.fromiter(extra, dtype=np.int64)]).astype(np.int64))

    def save(self, path: Path) -> None:
        tmp = path.with_name(path.name + ".tmp.npz")
        np.savez(tmp, frequent=self.frequent, table=self.table)
        tmp.replace(path)

    @classmethod
    def load(cls, path: Path) -> Shortlist:
        with np.load(path, allow_pickle=False) as data:
            return cls(data["frequent"].astype(np.int64), data["table"].astype(np.int64))


def _sentence_pieces(side, start: int, end: int) -> list[np.ndarray]:  # noqa: ANN001 - a SideReader
    return [np.unique(np.asarray(side[i], dtype=np.int64)) for i in range(start, end)]


def cooccurrences(src_side, tgt_side, sentences: int, src_vocab: int,  # noqa: ANN001 - SideReaders
                  tgt_vocab: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Over the first ``sentences`` pairs, read once: each (source piece, target piece) pair found
    together in a sentence pair, as ``code = source · tgt_vocab + target``, and in how many pairs
    (sorted by code); and in how many sentences each source and each target piece is found."""
    codes, counts = np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    src_df, tgt_df = np.zeros(src_vocab, dtype=np.int64), np.zeros(tgt_vocab, dtype=np.int64)
    for start in range(0, sentences, CHUNK):
        end = min(sentences, start + CHUNK)
        sources, targets = _sentence_pieces(src_side, start, end), _sentence_pieces(tgt_side, start, end)
        src_df += np.bincount(np.concatenate(sources), minlength=src_vocab)[:src_vocab]
        tgt_df += np.bincount(np.concatenate(targets), minlength=tgt_vocab)[:tgt_vocab]
        chunk = [(s[:, None] * tgt_vocab + t[None, :]).ravel() for s, t in zip(sources, targets, strict=True)]
        new, new_counts = np.unique(np.concatenate(chunk), return_counts=True)
        merged, where = np.unique(np.concatenate([codes, new]), return_inverse=True)
        weights = np.concatenate([counts, new_counts])
        counts = np.bincount(where, weights=weights, minlength=len(merged)).astype(np.int64)
        codes = merged
    return codes, counts, src_df, tgt_df


def build(src_side, tgt_side, src_vocab: int, tgt_vocab: int, per_source: int = 50,  # noqa: ANN001
          frequent: int = 100, max_sentences: int = 2_000_000, joint: bool = False) -> Shortlist:
    """A shortlist from the aligned training sides (at most their first ``max_sentences`` pairs).
    ``joint``: one vocabulary for both sides, where a target piece found in a source can be copied
    (`copyable`)."""
    sentences = min(len(src_side), max_sentences)
    codes, both, src_df, tgt_df = cooccurrences(src_side, tgt_side, sentences, src_vocab, tgt_vocab)
    source, target = codes // tgt_vocab, codes % tgt_vocab
    dice = 2.0 * both / (src_df[source] + tgt_df[target])
    special = target < len(SPECIAL_SYMBOLS)
    source, target, dice = source[~special], target[~special], dice[~special]
    order = np.lexsort((-dice, source))  # by source, then best first
    source, target = source[order], target[order]
    starts = np.searchsorted(source, np.arange(src_vocab))
    rank = np.arange(len(source)) - starts[source]
    keep = rank < per_source
    table = np.full((src_vocab, per_source), -1, dtype=np.int64)
    table[source[keep], rank[keep]] = target[keep]
    if joint:
        copyable(table, src_df, tgt_df)
    ranked = np.argsort(-tgt_df[len(SPECIAL_SYMBOLS):], kind="stable")[:frequent] + len(SPECIAL_SYMBOLS)
    return Shortlist(np.sort(ranked[tgt_df[ranked] > 0]), table)


def copyable(table: np.ndarray, src_df: np.ndarray, tgt_df: np.ndarray) -> None:
    """In a joint vocabulary, a piece the targets hold at least as often as the sources (a target-language
    piece, a name's, a number's) lists itself, first, in place of its last candidate: a source that
    carries it means it to be copied. That is how terminology hints spell their target terms
    (``__target__ Pudelmütze __done__``, pieces the English sources never hold, so none lists them) and
    how names pass through; English's own pieces, far more frequent in the sources, are not added."""
    n = min(len(table), len(tgt_df))
    pieces = np.arange(len(SPECIAL_SYMBOLS), n)
    listed = (table[pieces] == pieces[:, None]).any(axis=1)
    pieces = pieces[(tgt_df[pieces] > 0) & (tgt_df[pieces] >= src_df[pieces]) & ~listed]
    table[pieces, 1:] = table[pieces, :-1]
    table[pieces, 0] = pieces
