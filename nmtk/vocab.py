"""The special symbols every nmtk vocabulary reserves, and their fixed ids.

Every subword model nmtk learns puts ``<pad> <unk> <s> </s>`` at ids 0-3, so the model core, the
search and the data pipeline agree on them without a vocabulary lookup. This module is the one place
that says so; everything else imports these names.
"""

from __future__ import annotations

SPECIAL_SYMBOLS = ("<pad>", "<unk>", "<s>", "</s>")
PAD_ID, UNK_ID, BOS_ID, EOS_ID = range(len(SPECIAL_SYMBOLS))
PAD, UNK, BOS, EOS = SPECIAL_SYMBOLS
