"""Learning sentencepiece models (BPE or unigram) with nmtk's fixed special-symbol ids."""

from __future__ import annotations

import io
import logging
from pathlib import Path

import sentencepiece as spm

from nmtk.vocab import BOS_ID, EOS_ID, PAD_ID, SPECIAL_SYMBOLS, UNK_ID

log = logging.getLogger(__name__)


def learn_subwords(
    inputs: list[Path],
    model_path: Path,
    *,
    model_type: str,
    vocab_size: int,
    character_coverage: float,
    input_sentence_size: int,
    seed: int,
    threads: int = 2,
) -> None:
    """Learn a sentencepiece model on already Moses-tokenised text files, write it to ``model_path``.

    Ids 0-3 are <pad>, <unk>, <s>, </s> in every model, so the model core needs no vocabulary lookups.
    Input is sampled to ``input_sentence_size`` sentences (shuffled with ``seed``) to bound memory.
    """
    spm.set_random_generator_seed(seed)
    stream = io.BytesIO()
    try:
        spm.SentencePieceTrainer.train(
            input=[str(p) for p in inputs],
            model_writer=stream,
            model_type=model_type,
            vocab_size=vocab_size,
            character_coverage=character_coverage,
            input_sentence_size=input_sentence_size,
            shuffle_input_sentence=True,
            pad_id=PAD_ID, unk_id=UNK_ID, bos_id=BOS_ID, eos_id=EOS_ID,
            pad_piece=SPECIAL_SYMBOLS[PAD_ID], unk_piece=SPECIAL_SYMBOLS[UNK_ID],
            bos_piece=SPECIAL_SYMBOLS[BOS_ID], eos_piece=SPECIAL_SYMBOLS[EOS_ID],
            num_threads=threads,
            max_sentence_length=16384,
            train_extremely_large_corpus=False,
            hard_vocab_limit=True,
            minloglevel=2,
        )
    except RuntimeError as exc:
        raise ValueError(f"sentencepiece could not learn a {model_type} model of {vocab_size} pieces: {exc}") from exc
    model_path.write_bytes(stream.getvalue())
