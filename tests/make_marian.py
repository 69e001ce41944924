"""Build a transformers MarianMT folder locally, shaped as an opus-mt download is, without a network.

    python tests/make_marian.py DIR            # DIR/opus-mt-en-de: a small model (2+2 layers, d_model 64)
    python tests/make_marian.py DIR --opus     # opus-mt's configuration: 6+6 layers, d_model 512, 8 heads

Besides the model (random weights; sentencepiece models learned on toy text; ``vocab.json`` in Marian's
order: ``</s>`` 0, ``<unk>`` 1, ``<pad>`` last), DIR gets toy corpora (``DIR/data/toy``) and
``DIR/finetune.toml``: the imported run's recipe with [data] pointed at them, which is what a user
writes to fine-tune (docs/huggingface.md runs these steps against it).
"""

from __future__ import annotations

import argparse
import io
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from helpers import synthetic_pairs, write_corpus  # noqa: E402

SMALL = dict(layers=2, d_model=64, heads=4, d_ff=128)
OPUS = dict(layers=6, d_model=512, heads=8, d_ff=2048)


def _spm(lines: list[str], vocab_size: int) -> bytes:
    import sentencepiece as spm

    out = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(lines), model_writer=out, vocab_size=vocab_size,
                                   model_type="unigram", hard_vocab_limit=False, minloglevel=2)
    return out.getvalue()


def marian_vocab(spm_models: list[bytes], tags: tuple[str, ...] = ()) -> dict[str, int]:
    """Marian's numbering: ``</s>`` 0, ``<unk>`` 1, a multilingual model's target tags (``>>fr<<``), the
    pieces of the given models, ``<pad>`` last."""
    import sentencepiece as spm

    pieces: list[str] = []
    for proto in spm_models:
        sp = spm.SentencePieceProcessor(model_proto=proto)
        pieces += [sp.id_to_piece(i) for i in range(sp.get_piece_size())
                   if not sp.is_control(i) and not sp.is_unknown(i)]
    ordered = ["</s>", "<unk>", *(f">>{t}<<" for t in tags), *dict.fromkeys(pieces), "<pad>"]
    return {piece: i for i, piece in enumerate(ordered)}


def build(out: Path, *, layers: int, d_model: int, heads: int, d_ff: int, separate: bool = False,
          activation: str = "swish", seed: int = 0, extra_config: dict | None = None,
          tags: tuple[str, ...] = ()) -> Path:
    """A MarianMT folder in ``out``: config.json, model.safetensors, source.spm, target.spm, vocab.json
    (+ target_vocab.json when ``separate``), tokenizer_config.json. ``tags``: a multilingual model's
    target languages, whose tags (``>>fr<<``) begin its sources, as in opus-mt-en-ROMANCE."""
    import torch
    from transformers import MarianConfig, MarianMTModel

    out.mkdir(parents=True, exist_ok=True)
    pairs = synthetic_pairs(2000, seed)
    # Separate vocabularies: the target's is the smaller, as the config's one pad id must fit both.
    source, target = _spm([a for a, _ in pairs], 120), _spm([b for _, b in pairs], 40 if separate else 100)
    (out / "source.spm").write_bytes(source)
    (out / "target.spm").write_bytes(target)
    src_vocab = marian_vocab([source] if separate else [source, target], tags)
    tgt_vocab = marian_vocab([target]) if separate else src_vocab
    (out / "vocab.json").write_text(json.dumps(src_vocab, ensure_ascii=False))
    if separate:
        (out / "target_vocab.json").write_text(json.dumps(tgt_vocab, ensure_ascii=False))
    pad = tgt_vocab["<pad>"]
    config = MarianConfig(
        vocab_size=len(src_vocab), decoder_vocab_size=len(tgt_vocab), d_model=d_model, encoder_layers=layers,
        decoder_layers=layers, encoder_attention_heads=heads, decoder_attention_heads=heads, encoder_ffn_dim=d_ff,
        decoder_ffn_dim=d_ff, activation_function=activation, max_position_embeddings=512, scale_embedding=True,
        pad_token_id=pad, decoder_start_token_id=pad, eos_token_id=0, forced_eos_token_id=0,
        share_encoder_decoder_embeddings=not separate, dropout=0.1, init_std=0.05, **(extra_config or {}))
    torch.manual_seed(seed)
    model = MarianMTModel(config)
    with torch.no_grad():  # Marian's output bias is trained: give it values, not transformers' zeros
        model.final_logits_bias.normal_(0.0, 0.5)
    model.save_pretrained(out)
    (out / "tokenizer_config.json").write_text(json.dumps(
        {"source_lang": "en", "target_lang": "+".join(tags) or "de", "separate_vocabs": separate,
         "tokenizer_class": "MarianTokenizer"}))
    return out


FINETUNE = """\
# What a user writes to fine-tune an imported model: the imported run's recipe.toml with [data] pointed
# at their corpora (here the toy corpora beside this file) and a short training.
name = "opus-mt-en-de-toy"

[data]
source_lang = "en"
target_lang = "de"
[[data.train]]
name = "train"
source = "toy/train.en.gz"
target = "toy/train.de.gz"
[data.valid]
name = "valid"
source = "toy/valid.en.gz"
target = "toy/valid.de.gz"
[[data.test]]
name = "test"
source = "toy/test.en.gz"
target = "toy/test.de.gz"

[tokenizer]
reuse = "{run}"

[batching]
batch_tokens = 512

[model]
layers = {layers}
d_model = {d_model}
heads = {heads}
d_ff = {d_ff}
activation = "swish"
output_bias = true
max_positions = 512

[optim]
warmup = 20
lr = 0.001

[train]
max_updates = 30
validate_every_updates = 30
save_every_updates = 10
keep_last = 5

[average]
last = 1
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dir", type=Path)
    parser.add_argument("--opus", action="store_true", help="opus-mt's configuration (6+6 layers, d_model 512)")
    args = parser.parse_args()
    shape = OPUS if args.opus else SMALL
    build(args.dir / "opus-mt-en-de", **shape)
    root = args.dir / "data"
    write_corpus(root, "train", synthetic_pairs(300, 1))
    write_corpus(root, "valid", synthetic_pairs(20, 2))
    write_corpus(root, "test", synthetic_pairs(20, 3))
    (args.dir / "finetune.toml").write_text(
        FINETUNE.format(run=args.dir.resolve() / "runs" / "opus-mt-en-de", **shape))
    print(f"{args.dir}/opus-mt-en-de: a MarianMT folder; {root}: toy corpora; {args.dir}/finetune.toml")


if __name__ == "__main__":
    main()
