"""Word alignments of the training pairs, computed once at `prepare` time (eflomal), read by the ``terms``
modifier (`nmtk.data.modifiers`) to put a target word beside its source word as a hint.

Words are the Moses tokens of each side: the subword model decodes a pair's ids back to exactly that
text, so the alignment needs no text of its own on disk. eflomal aligns in both directions; the links
kept are those both directions agree on (their intersection: few, and precise, which is what a hint
wants). Stored like a side of a split (``train.align.bin``/``.idx``): per pair the flat
``s0 t0 s1 t1 …`` word indices.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np

from nmtk.data.binarized import SideReader, SideWriter
from nmtk.errors import NmtkError


def _links(line: str) -> set[tuple[int, int]]:
    return {(int(s), int(t)) for s, t in (link.split("-") for link in line.split())}


def align(sources: list[str], targets: list[str]) -> list[list[tuple[int, int]]]:
    """Each pair's links (source word, target word) that eflomal finds in both directions. eflomal's
    sampler takes no seed: two `prepare` runs may differ in a few links (a run trains on one of them)."""
    try:
        import eflomal
    except ImportError:  # pragma: no cover - installed with nmtk's "terms" extra
        raise NmtkError("the terms modifier needs the eflomal word aligner: pip install 'nmtk[terms]'") from None
    with tempfile.TemporaryDirectory(prefix="nmtk-align-") as tmp:
        forward, reverse = Path(tmp) / "forward", Path(tmp) / "reverse"
        eflomal.Aligner().align(sources, targets, links_filename_fwd=str(forward), links_filename_rev=str(reverse),
                                quiet=True)
        with open(forward, encoding="utf-8") as f, open(reverse, encoding="utf-8") as r:
            return [sorted(_links(a) & _links(b)) for a, b in zip(f, r, strict=True)]


def write_alignments(prefix: Path, links: list[list[tuple[int, int]]]) -> None:
    writer = SideWriter(prefix, np.dtype(np.uint16))
    writer.add([[i for link in pair for i in link] for pair in links])
    writer.close()


class Alignments:
    """The stored links of every training pair, as OpusTrainer's ``i-j`` text."""

    def __init__(self, prefix: Path) -> None:
        self.side = SideReader(prefix, np.dtype(np.uint16))

    def __len__(self) -> int:
        return len(self.side)

    def text(self, i: int) -> str:
        flat = self.side[i]
        return " ".join(f"{flat[k]}-{flat[k + 1]}" for k in range(0, len(flat), 2))
