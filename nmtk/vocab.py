"""The special symbols every nmtk vocabulary reserves, and their fixed ids.

Every subword model nmtk learns puts ``<pad> <unk> <s> </s>`` at ids 0-3, so the model core, the
search and the data pipeline agree on them without a vocabulary lookup. This module is the one place
that says so; everything else imports these names.
"""

from __future__ import annotations

from collections.abc import Sequence

SPECIAL_SYMBOLS = ("<pad>", "<unk>", "<s>", "</s>")
PAD_ID, UNK_ID, BOS_ID, EOS_ID = range(len(SPECIAL_SYMBOLS))
PAD, UNK, BOS, EOS = SPECIAL_SYMBOLS

#: Terminology hints (Dinu et al. 2019, OpusTrainer's ``Tags``): a source word followed by the target word it
#: must become, ``__source__ word __target__ Wort __done__``. Each marker is one vocabulary item, segmented
#: from text like any word (so CTranslate2 and other runtimes given the text see the same pieces).
HINT_SYMBOLS = ("__source__", "__target__", "__done__")
HINT_TEMPLATE = "__source__ {src} __target__ {trg} __done__"


def hinted(source: str, target: str) -> str:
    """``source`` (tokens, space-separated) followed by its ``target`` as a hint."""
    return HINT_TEMPLATE.format(src=source, trg=target)


def hint_targets(ids: Sequence[int], markers: tuple[int, int, int] | None) -> list[list[int]]:
    """The target term of each hint in ``ids`` (the ids between ``__target__`` and ``__done__``), in order,
    one per hint: what the model was asked to write (``markers``: as `unhinted_length` takes them)."""
    if markers is None or markers[1] not in ids:
        return []
    _, target, done = markers
    spans: list[list[int]] = []
    inside = False
    for i in ids:
        if i == target or i == done:
            inside = i == target
            if inside:
                spans.append([])
        elif inside:
            spans[-1].append(i)
    return spans


def unhinted_length(ids: Sequence[int], markers: tuple[int, int, int] | None) -> int:
    """How many of ``ids`` are the source's own words: hints' markup left out (``__source__``, and
    ``__target__ Wort __done__`` whole). ``markers``: the ids of `HINT_SYMBOLS` (None: a vocabulary
    without them, every id counts: `TextPipeline.hint_markers`). A translation is about as long as the
    source's words, however many hints they carry, so both engines cut decoding batches and the output
    limit a·|x| + b by this length: counted whole, a hinted line took the room of a third more source
    words (43 batches instead of 31 for Multi30k's test set with a glossary; docs/training.md)."""
    if markers is None or markers[1] not in ids:
        return len(ids)
    source, target, done = markers
    count, inside = 0, False
    for i in ids:
        if i == target or i == done:
            inside = i == target
        elif not inside and i != source:
            count += 1
    return count
