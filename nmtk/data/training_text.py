"""The first pass of `prepare` over a pair's corpora: read, clean, Moses-tokenise, in worker processes.

Training corpora come out as one tokenised text file per side (the subword model learns on them),
beside each line's corpus and 1-based line number in it (``train.meta``, 6 bytes a line, read back by
`TrainingText.chunks`) and each pair's 64-bit hash (in memory, 8 bytes a pair: duplicates are found
once every pair has been seen). What the raw-text rules drop is counted per corpus and listed in
``dropped.tsv`` as it happens (`nmtk.data.cleaning`). Validation and test sets only pass through
Moses (`tokenize_chunk`): every line counts for BLEU.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path
from typing import TextIO

import numpy as np

from nmtk.data.cleaning import Cleaner, CorpusCounts, DropLog, first_occurrences, pair_hash
from nmtk.files import read_array, write_array
from nmtk.text.moses import Moses
from nmtk.workers import Workers

PAIRS_PER_CHUNK = 4000  # sentence pairs per unit of work of the worker processes
#: Each training line's corpus (index into the split's corpora) and line number in it, on disk.
META = np.dtype([("corpus", "<u2"), ("line", "<u4")])


def chunked(items: Iterable, size: int) -> Iterator[list]:
    it = iter(items)
    while chunk := list(islice(it, size)):
        yield chunk


def text_file(path: Path, mode: str) -> TextIO:
    """A UTF-8 text file whose only line break is ``\\n``."""
    return open(path, mode, encoding="utf-8", newline="\n")


# Worker-side state for the process pool: Moses objects and the cleaner are built once per process.
_WORKER: dict = {}


def _init_worker(src: Moses, tgt: Moses, cleaner: Cleaner | None) -> None:
    _WORKER["src"], _WORKER["tgt"], _WORKER["cleaner"] = src, tgt, cleaner


def tokenize_chunk(chunk: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """Moses on both sides of every pair (validation and test sets: nothing dropped)."""
    src, tgt = _WORKER["src"], _WORKER["tgt"]
    return [(src.tokenize(a), tgt.tokenize(b)) for a, b in chunk]


#: A training pair after the first pass: corpus, line, the rule that dropped it (None: kept), its tokenised
#: sides (None where Moses does nothing: the text as read) and its hash.
Judged = tuple[int, int, str | None, str | None, str | None, int]


def clean_and_tokenize_chunk(chunk: list[tuple[int, int, str, str]]) -> list[Judged]:
    """Training pairs ``(corpus, line, source, target)`` judged by the raw-text rules: a dropped pair
    comes back as ``(corpus, line, rule, None, None, 0)``, a kept one tokenised with its hash. A side
    Moses leaves alone comes back as None: sending the text back would cost more than judging it."""
    src, tgt, cleaner = _WORKER["src"], _WORKER["tgt"], _WORKER["cleaner"]
    out = []
    for corpus, line, a, b in chunk:
        rule = cleaner.verdict(a, b) if cleaner else ("empty" if not a.strip() or not b.strip() else None)
        if rule is not None:
            out.append((corpus, line, rule, None, None, 0))
        else:
            out.append((corpus, line, None, src.tokenize(a) if src.enabled else None,
                        tgt.tokenize(b) if tgt.enabled else None, pair_hash(a, b)))
    return out


class WorkerPool:
    """Moses and the cleaning rules in worker processes (sacremoses and language identification are
    per-sentence Python calls, so one process per core); in this process when ``workers`` is 1."""

    def __init__(self, src: Moses, tgt: Moses, cleaner: Cleaner | None, workers: int) -> None:
        self.pool = None
        if workers > 1:
            self.pool = Workers(workers, _init_worker, (src, tgt, cleaner))
        else:
            _init_worker(src, tgt, cleaner)

    def map(self, function, chunks: Iterable[list]) -> Iterator[list]:
        if self.pool is None:
            return map(function, chunks)
        return self.pool.imap(function, chunks)

    def map_beside(self, function, chunks: Iterable[list]) -> Iterator[tuple[list, list]]:
        """``(chunk, function(chunk))`` in order: the results beside what they were computed from, which
        stays in this process (each worker holds a chunk ahead: those wait in ``sent``)."""
        sent: deque[list] = deque()

        def sending() -> Iterator[list]:
            for chunk in chunks:
                sent.append(chunk)
                yield chunk

        for result in self.map(function, sending()):
            yield sent.popleft(), result

    def close(self) -> None:
        if self.pool is not None:
            self.pool.close()


@dataclass
class TrainingText:
    """A pair's training corpora after the first pass: tokenised text per side, each line's corpus and
    line number, each pair's hash, and what was dropped per corpus."""

    src_path: Path
    tgt_path: Path
    meta_path: Path
    corpora: list[CorpusCounts]
    hashes: list[np.ndarray] = field(default_factory=list)  # per chunk; `first` joins them once

    @property
    def lines(self) -> int:
        return sum(len(h) for h in self.hashes)

    def first(self, dedup: bool) -> np.ndarray:
        """Per line: whether it is kept by the duplicate rule (all True when the rule is off)."""
        hashes = np.concatenate(self.hashes) if self.hashes else np.zeros(0, dtype=np.int64)
        return first_occurrences(hashes) if dedup else np.ones(len(hashes), dtype=bool)

    def chunks(self, dedup: bool) -> Iterator[list[tuple[str, str, int, int, bool]]]:
        """The tokenised pairs, in order, as ``(source, target, corpus, line, first)`` chunks."""
        first = self.first(dedup)
        meta = read_array(self.meta_path, META) if self.lines else np.zeros(0, dtype=META)
        with text_file(self.src_path, "r") as fs, text_file(self.tgt_path, "r") as ft:
            pairs = ((a.rstrip("\n"), b.rstrip("\n")) for a, b in zip(fs, ft, strict=True))
            start = 0
            for chunk in chunked(pairs, 4000):
                end = start + len(chunk)
                rows = meta[start:end]
                yield [(a, b, int(m["corpus"]), int(m["line"]), bool(f))
                       for (a, b), m, f in zip(chunk, rows, first[start:end], strict=True)]
                start = end

    def write(self, results: Iterable[tuple[list[tuple[int, int, str, str]], list[Judged]]], drops: DropLog,
              advance) -> None:
        """Write a pass's results (each chunk of pairs beside `clean_and_tokenize_chunk`'s judgement of it,
        in order)."""
        with (text_file(self.src_path, "w") as fs, text_file(self.tgt_path, "w") as ft,
              open(self.meta_path, "wb") as fm):
            for pairs, judged in results:
                advance(len(judged))
                kept = []
                for (corpus, line, rule, a, b, digest), (_, _, raw_a, raw_b) in zip(judged, pairs, strict=True):
                    counts = self.corpora[corpus]
                    if rule is not None:
                        counts.dropped[rule] += 1
                        drops.add(counts.name, line, rule)
                        continue
                    a, b = raw_a if a is None else a, raw_b if b is None else b
                    fs.write(a + "\n")
                    ft.write(b + "\n")
                    kept.append((corpus, line, digest))
                if kept:
                    rows = np.array([(c, n) for c, n, _ in kept], dtype=META)
                    write_array(fm, rows)
                    self.hashes.append(np.fromiter((d for _, _, d in kept), dtype=np.int64, count=len(kept)))
