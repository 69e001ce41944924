"""Binarised splits: token ids in flat numpy memmap files plus an offsets index.

For split ``train`` and language ``en`` the files are ``train.en.bin`` (all sentences' ids, one after
the other, in the smallest unsigned dtype that holds the vocabulary) and ``train.en.idx`` (int64
offsets, one more than sentences: sentence i is ``bin[idx[i]:idx[i+1]]``). Neither BOS nor EOS is
stored; batching adds them. Writing streams; reading maps the files, so RAM does not grow with data.
"""

from __future__ import annotations

from itertools import chain
from pathlib import Path

import numpy as np

from nmtk.files import read_array, write_array
from nmtk.manifest import PreparedData
from nmtk.pair import Pair


def id_dtype(vocab_size: int) -> np.dtype:
    """Smallest integer dtype that holds every id of the vocabulary."""
    for dtype in (np.uint8, np.uint16, np.uint32):
        if vocab_size - 1 <= np.iinfo(dtype).max:
            return np.dtype(dtype)
    return np.dtype(np.int64)


def _with(prefix: Path, suffix: str) -> Path:
    """``train.en`` + ``.bin`` (Path.with_suffix would replace ``.en``)."""
    return prefix.with_name(prefix.name + suffix)


class SideWriter:
    """Appends sentences' ids to ``<prefix>.bin`` and, at `close`, writes ``<prefix>.idx``."""

    def __init__(self, prefix: Path, dtype: np.dtype) -> None:
        self.prefix = prefix
        self.dtype = dtype
        self._bin = open(_with(prefix, ".bin"), "wb")
        self._lengths = open(_with(prefix, ".len.tmp"), "wb")
        self.sentences = 0
        self.tokens = 0
        self.max_len = 0

    def add(self, sentences: list[list[int]]) -> None:
        if not sentences:
            return
        lengths = np.fromiter(map(len, sentences), dtype=np.int64, count=len(sentences))
        flat = np.fromiter(chain.from_iterable(sentences), dtype=self.dtype, count=int(lengths.sum()))
        write_array(self._bin, flat)
        write_array(self._lengths, lengths)
        self.sentences += len(sentences)
        self.tokens += int(lengths.sum())
        self.max_len = max(self.max_len, int(lengths.max()))

    def close(self) -> None:
        self._bin.close()
        self._lengths.close()
        tmp = _with(self.prefix, ".len.tmp")
        lengths = read_array(tmp, np.int64)
        offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        with open(_with(self.prefix, ".idx"), "wb") as handle:
            write_array(handle, offsets)
        tmp.unlink()

    def stats(self) -> dict[str, float]:
        return {"tokens": self.tokens, "max_len": self.max_len,
                "mean_len": round(self.tokens / self.sentences, 2) if self.sentences else 0.0}


class SideReader:
    """Memory-mapped ids of one side of a split."""

    def __init__(self, prefix: Path, dtype: np.dtype) -> None:
        self.offsets = read_array(_with(prefix, ".idx"), np.int64)
        bin_path = _with(prefix, ".bin")
        if self.offsets[-1] == 0:
            self.ids = np.zeros(0, dtype=dtype)
        else:
            self.ids = np.memmap(bin_path, dtype=dtype, mode="r")

    @property
    def lengths(self) -> np.ndarray:
        """Tokens per sentence (int32), computed from the offsets when asked: not kept in memory."""
        return np.diff(self.offsets).astype(np.int32)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, i: int) -> np.ndarray:
        return self.ids[self.offsets[i] : self.offsets[i + 1]]


class BinarizedSplit:
    """A prepared split of ``pair``: aligned source and target ids."""

    def __init__(self, data: PreparedData, split: str, pair: Pair) -> None:
        dtype = np.dtype(data.manifest().dtype)
        self.src = SideReader(data.prefix(split, pair.source), dtype)
        self.tgt = SideReader(data.prefix(split, pair.target), dtype)
        if len(self.src) != len(self.tgt):
            raise ValueError(f"{data.path}/{split}: {len(self.src)} source but {len(self.tgt)} target sentences")

    def __len__(self) -> int:
        return len(self.src)


class ConcatSide:
    """Sides of several splits read as one: sentence i of the whole is sentence i - start of its part."""

    def __init__(self, parts: list[SideReader]) -> None:
        self.parts = parts
        self.starts = np.cumsum([0] + [len(p) for p in parts])

    @property
    def lengths(self) -> np.ndarray:
        return np.concatenate([p.lengths for p in self.parts])

    def __len__(self) -> int:
        return int(self.starts[-1])

    def __getitem__(self, i: int) -> np.ndarray:
        part = int(np.searchsorted(self.starts, i, side="right")) - 1
        return self.parts[part][i - int(self.starts[part])]


class PairSplits:
    """A multilingual model's training data: every pair's split (``train.en-de``, ...) as one, and each
    sentence's pair (``pair_ids``), which the batching plan samples pairs by."""

    def __init__(self, data: PreparedData, split: str, pairs: list[Pair]) -> None:
        parts = [BinarizedSplit(data, f"{split}.{pair.name}", pair) for pair in pairs]
        self.src = ConcatSide([p.src for p in parts])
        self.tgt = ConcatSide([p.tgt for p in parts])
        self.pair_ids = np.repeat(np.arange(len(parts), dtype=np.int32), [len(p) for p in parts])

    def __len__(self) -> int:
        return len(self.src)
