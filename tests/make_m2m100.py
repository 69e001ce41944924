"""Build a transformers M2M-100 folder locally (random weights, a sentencepiece model learned on toy
text), shaped as facebook/m2m100_418M's files are, without a network.

    python tests/make_m2m100.py DIR      # DIR/m2m100-toy: pre-norm, d_model 256, 2+2 layers
    python tests/make_m2m100.py DIR --nllb  # DIR/nllb-toy: the same model with NLLB's tokenizer files

The tokenizer is M2M100Tokenizer with the "wmt21" language codes (en, ha, is, ja, cs, ru, zh, de),
numbered after ``vocab.json`` as in the real models; tests use three of them.
"""

from __future__ import annotations

import argparse
import io
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from helpers import synthetic_pairs  # noqa: E402

SHAPE = dict(layers=2, d_model=256, heads=4, d_ff=512)
MADEUP = 8


def czech(sentence: str) -> str:
    """A third toy language for the spm: German words with their vowels doubled."""
    return "".join(c * 2 if c in "aeiou" else c for c in sentence)


def toy_spm(out: Path, seed: int) -> io.BytesIO:
    """A 300-piece BPE sentencepiece model of the toy languages, written as ``out``'s
    sentencepiece.bpe.model (the name both tokenizers read)."""
    import sentencepiece as spm

    out.mkdir(parents=True, exist_ok=True)
    pairs = synthetic_pairs(2000, seed)
    lines = [a for a, _ in pairs] + [b for _, b in pairs] + [czech(b) for _, b in pairs[:500]]
    stream = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(lines), model_writer=stream, vocab_size=300,
                                   model_type="bpe", hard_vocab_limit=False, minloglevel=2)
    (out / "sentencepiece.bpe.model").write_bytes(stream.getvalue())
    return stream


def write_model(out: Path, vocab_size: int, *, layers: int, d_model: int, heads: int, d_ff: int, seed: int) -> Path:
    """A random pre-norm M2M-100 model of ``vocab_size`` rows saved in ``out``, as facebook's are configured."""
    import torch
    from transformers import M2M100Config, M2M100ForConditionalGeneration

    config = M2M100Config(
        vocab_size=vocab_size, d_model=d_model, encoder_layers=layers, decoder_layers=layers,
        encoder_attention_heads=heads, decoder_attention_heads=heads, encoder_ffn_dim=d_ff, decoder_ffn_dim=d_ff,
        max_position_embeddings=256, scale_embedding=True, pad_token_id=1, bos_token_id=0, eos_token_id=2,
        decoder_start_token_id=2, activation_function="relu", dropout=0.1, init_std=0.05)
    torch.manual_seed(seed)
    M2M100ForConditionalGeneration(config).save_pretrained(out)
    return out


def build(out: Path, *, layers: int, d_model: int, heads: int, d_ff: int, seed: int = 0,
          language_codes: str = "wmt21") -> Path:
    """An M2M-100 folder in ``out``: config.json, model.safetensors, vocab.json, sentencepiece.bpe.model,
    tokenizer_config.json (and what M2M100Tokenizer.save_pretrained writes beside it), with the codes of
    M2M100Tokenizer's ``language_codes`` list ("wmt21": 8 languages; "m2m100": 100)."""
    import sentencepiece as spm
    from transformers import M2M100Tokenizer
    from transformers.models.m2m_100.tokenization_m2m_100 import FAIRSEQ_LANGUAGE_CODES

    stream = toy_spm(out, seed)
    sp = spm.SentencePieceProcessor(model_proto=stream.getvalue())
    pieces = [sp.id_to_piece(i) for i in range(sp.get_piece_size()) if not (sp.is_control(i) or sp.is_unknown(i))]
    vocab = {piece: i for i, piece in enumerate(["<s>", "<pad>", "</s>", "<unk>", *pieces])}
    (out / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False))
    tokenizer = M2M100Tokenizer(str(out / "vocab.json"), str(out / "sentencepiece.bpe.model"),
                                language_codes=language_codes, src_lang="en", tgt_lang="de", num_madeup_words=MADEUP)
    tokenizer.save_pretrained(out)
    codes = FAIRSEQ_LANGUAGE_CODES[language_codes]
    return write_model(out, len(vocab) + len(codes) + MADEUP, layers=layers, d_model=d_model, heads=heads, d_ff=d_ff,
                       seed=seed)


def build_nllb(out: Path, *, layers: int, d_model: int, heads: int, d_ff: int, seed: int = 0) -> Path:
    """An NLLB folder in ``out``, shaped as facebook/nllb-200's: the same model class, with NllbTokenizer's
    files (tokenizer.json numbering the pieces and the 202 language codes, no vocab.json)."""
    from transformers import NllbTokenizer
    from transformers.models.nllb.tokenization_nllb import FAIRSEQ_LANGUAGE_CODES

    toy_spm(out, seed)
    (out / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "NllbTokenizer"}))
    # Said explicitly: built from a sentencepiece model, transformers 5 leaves the codes out otherwise.
    # They follow <mask> here, where NLLB's own file has them before it: nmtk reads the ids either way.
    tokenizer = NllbTokenizer.from_pretrained(out, src_lang="eng_Latn", tgt_lang="deu_Latn",
                                              additional_special_tokens=FAIRSEQ_LANGUAGE_CODES)
    tokenizer.save_pretrained(out)
    return write_model(out, len(tokenizer) + 2, layers=layers, d_model=d_model, heads=heads, d_ff=d_ff, seed=seed)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dir", type=Path)
    parser.add_argument("--nllb", action="store_true", help="NLLB's tokenizer files instead of M2M100Tokenizer's")
    args = parser.parse_args()
    print(build_nllb(args.dir / "nllb-toy", **SHAPE) if args.nllb else build(args.dir / "m2m100-toy", **SHAPE))


if __name__ == "__main__":
    main()
