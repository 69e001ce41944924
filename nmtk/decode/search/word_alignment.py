"""Hard word alignments from attention weights, in numpy alone: nmtk's engine (`nmtk.decode.search.alignment`
computes its weights with torch) and CTranslate2's (its ``return_attention``, where torch is not loaded)
align a translation the same way."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class Alignment:
    """Hard word alignment of one translation: (source word, target word) pairs, and the word counts."""

    pairs: list[tuple[int, int]]
    source_words: int
    target_words: int

    def __str__(self) -> str:
        return " ".join(f"{s}-{t}" for s, t in self.pairs)

    def shifted(self, source: int, target: int) -> Alignment:
        return Alignment([(s + source, t + target) for s, t in self.pairs], self.source_words, self.target_words)


def hard_alignment(weights: np.ndarray, src_words: list[int], tgt_words: list[int]) -> Alignment:
    """Target word → the source word whose pieces draw most of its pieces' attention.

    ``weights`` (T, S): cross-attention of the rows producing target tokens, over source tokens.
    """
    n_src, n_tgt = (max(src_words) + 1 if src_words else 0), (max(tgt_words) + 1 if tgt_words else 0)
    if not n_src or not n_tgt:
        return Alignment([], n_src, n_tgt)
    by_word = np.zeros((n_tgt, n_src))
    np.add.at(by_word, (np.asarray(tgt_words)[:, None], np.asarray(src_words)[None, :]), weights)
    return Alignment([(int(s), t) for t, s in enumerate(by_word.argmax(axis=1))], n_src, n_tgt)
