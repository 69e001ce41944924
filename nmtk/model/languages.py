"""Per-language output vocabularies: a multilingual model whose softmax for each target language runs
over that language's pieces only (`ModelConfig.output_languages`).

A joint vocabulary for four languages has ~16,000 pieces, of which each target language uses ~6,000
(Multi30k: de 5,735, fr 5,446, cs 6,502). Over all 16,000, the output projection was the largest cost
of a training step on a CPU (299-310 against 219-232 ms per update at the demo
recipe's shape, 2-core AMD EPYC Zen 4, bf16); over the target's own
pieces it costs what a one-pair model's does, and no probability goes to another language's pieces.

The model holds, as buffers (so checkpoints carry them), each target language's tag id (the first
token of its sources, ``>>de<<``) and the pieces it may produce. A source that begins with no known
tag may produce every piece. Pieces that a language never produced in training are unknown to it:
a reference that holds one is scored as ``<unk>`` there, and no search produces one.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import torch
from torch import Tensor

from nmtk.vocab import SPECIAL_SYMBOLS, UNK_ID

#: The model's buffers that hold them (`Transformer.set_output_languages`).
LANGUAGE_BUFFERS = ("output_tags", "output_allowed")

#: Every language may produce the special symbols (``<pad>`` keeps local id 0, so padding is padding).
ALWAYS_ALLOWED = tuple(range(len(SPECIAL_SYMBOLS)))


class OutputGroup(NamedTuple):
    """The sentences of a batch that share a target language, and that language's output columns."""

    rows: Tensor  # (b,) sentence indices in the batch
    columns: Tensor  # (V_l,) vocabulary ids, ascending, starting with the special symbols
    local: Tensor  # (V,) each vocabulary id's column in ``columns`` (<unk>'s where it has none)


class LanguageTable:
    """Tags and allowed pieces as tensors for lookups: made from the model's buffers, remade when
    they change (`Transformer.language_table`)."""

    def __init__(self, tags: Tensor, allowed: Tensor) -> None:
        vocab = allowed.size(1)
        self.tags = tags
        self.host_tags = np.array(tags.tolist(), dtype=np.int64)  # read from the device once per table
        # one row more than there are languages: a source without a tag may produce every piece
        self.allowed = torch.cat([allowed, torch.ones(1, vocab, dtype=torch.bool, device=allowed.device)])
        self.columns = [row.nonzero().flatten() for row in self.allowed]
        self.local = []
        for columns in self.columns:
            local = torch.full((vocab,), int(torch.searchsorted(columns, UNK_ID)), dtype=torch.long,
                               device=allowed.device)
            local[columns] = torch.arange(columns.numel(), device=allowed.device)
            self.local.append(local)

    def language(self, src: Tensor) -> Tensor:
        """(B,) each source's target language: its index in the tags, or len(tags) for none."""
        match = src[:, :1].eq(self.tags)  # (B, L)
        untagged = torch.full_like(src[:, 0], self.tags.numel())
        return torch.where(match.any(1), match.long().argmax(1), untagged)

    def host_language(self, first: np.ndarray) -> np.ndarray:
        """`language` from each source's first token (B,) held on the host: what training's batches know
        before their copy to the device (`Batch.src_first`). numpy, not tensors, so that nothing here is
        a device op (nor moved to one by DDP, which moves every tensor argument)."""
        match = first[:, None] == self.host_tags[None, :]
        return np.where(match.any(1), match.argmax(1), len(self.host_tags))

    def groups(self, language: Tensor | np.ndarray) -> list[OutputGroup]:
        """The batch's sentences by target language (its index per sentence). From a host ``language``
        (`host_language`) they are found on the host and their rows copied to the device without
        waiting; from a device one (`Encoded.language`), finding which languages the batch holds reads
        them back: one wait per batch on a GPU."""
        if isinstance(language, np.ndarray):
            device = self.allowed.device
            return [OutputGroup(torch.from_numpy(np.flatnonzero(language == i)).to(device, non_blocking=True),
                                self.columns[i], self.local[i]) for i in np.unique(language).tolist()]
        present = torch.unique(language).tolist()
        return [OutputGroup(language.eq(i).nonzero().flatten(), self.columns[i], self.local[i]) for i in present]


def allowed_pieces(vocab: int, produced: list[Tensor]) -> Tensor:
    """(L, V) bool: per target language, the ids its training targets hold, and the special symbols."""
    allowed = torch.zeros(len(produced), vocab, dtype=torch.bool)
    for row, ids in zip(allowed, produced, strict=True):
        row[ids.long()] = True
        row[list(ALWAYS_ALLOWED)] = True
    return allowed


def merge_allowed(tags: Tensor, allowed: Tensor, other_tags: Tensor, other_allowed: Tensor) -> Tensor:
    """``allowed`` with, for each tag that ``other_tags`` has too, the other model's pieces added:
    fine-tuning data may lack pieces that the original model produced, and should not take them away."""
    merged = allowed.clone()
    for row, tag in enumerate(tags.tolist()):
        match = (other_tags == tag).nonzero().flatten().tolist()
        if match:
            merged[row] |= other_allowed[match[0]].to(merged.device)
    return merged
