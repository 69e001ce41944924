"""`nmtk import` of a transformers MarianMT folder (an opus-mt download) as an nmtk run: read and check
it (`read_marian`), build the Transformer holding its weights (`nmtk_model`, by the map in
`nmtk.convert.marian.weights`), and write the run (`nmtk.convert.importing.write_imported_run`)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nmtk.convert.importing import ImportResult, placeholder_recipe, read_json, read_weights, write_imported_run
from nmtk.convert.marian.weights import (
    HF_ACTIVATIONS,
    SideVocab,
    from_hf,
    layer_entries,
    mapped_side,
    marian_positions,
    nmtk_order,
    nmtk_rows,
    residual_order,
)
from nmtk.errors import NmtkError
from nmtk.manifest import Manifest
from nmtk.pair import Pair
from nmtk.text.subword import MAPPED_SUFFIX, MappedSentencePiece, load_subword_model

if TYPE_CHECKING:
    import torch

    from nmtk.model import Transformer

#: What a MarianMT folder holds, for the line naming a missing file.
MARIAN_FILES = "a MarianMT folder has config.json, source.spm, target.spm and vocab.json"


def _check_config(config: dict[str, Any], where: Path) -> str:
    """The activation in nmtk's terms; one line naming the field for what nmtk's core cannot be."""
    if not isinstance(config, dict) or config.get("model_type") != "marian":
        found = config.get("model_type") if isinstance(config, dict) else None
        raise NmtkError(f"{where}: model_type {found!r}; nmtk imports MarianMT models (model_type \"marian\")")
    activation = config.get("activation_function", "gelu")
    if activation not in HF_ACTIVATIONS:
        raise NmtkError(f"{where}: activation_function {activation!r} is not one nmtk implements "
                        f"({', '.join(sorted(HF_ACTIVATIONS))})")
    unsupported = {"normalize_before": True, "add_final_layer_norm": True, "normalize_embedding": True,
                   "scale_embedding": False, "static_position_embeddings": False, "add_bias_logits": True}
    for field, bad in unsupported.items():
        if field in config and config[field] == bad:
            raise NmtkError(f"{where}: {field} = {json.dumps(bad)}: nmtk's Transformer is post-norm with scaled "
                            "embeddings and sinusoidal positions, as MarianMT is by default")
    pairs = (("encoder_attention_heads", "decoder_attention_heads"), ("encoder_ffn_dim", "decoder_ffn_dim"))
    for a, b in pairs:
        if config.get(a) != config.get(b):
            raise NmtkError(f"{where}: {a} ({config.get(a)}) differs from {b} ({config.get(b)}); nmtk uses one value")
    if config["d_model"] % config["encoder_attention_heads"]:
        raise NmtkError(f"{where}: d_model is not divisible by encoder_attention_heads")
    return HF_ACTIVATIONS[activation]

#: A multilingual opus-mt model's target-language tag in its vocabulary: ``>>fr<<``, ``>>pt_BR<<``.
TAG_PIECE = re.compile(r">>([A-Za-z][A-Za-z0-9_]*)<<")

def marian_tags(side: SideVocab) -> dict[str, int]:
    """A multilingual MarianMT model's target tags, as nmtk ids by language (empty: one target)."""
    return {m.group(1): i for i, piece in enumerate(side.pieces) if (m := TAG_PIECE.fullmatch(piece))}

def _languages(folder: Path, tokenizer_config: dict[str, Any], source: str | None, target: str | None,
               multilingual: bool = False) -> tuple[str, str]:
    guess = re.search(r"opus-mt-([a-z]{2,3})-([A-Za-z]{2,})$", folder.resolve().name)
    src = source or tokenizer_config.get("source_lang") or (guess and guess.group(1))
    tgt = target or tokenizer_config.get("target_lang") or (guess and guess.group(2))
    tgt = tgt or ("many" if multilingual else None)  # a multilingual model's targets are its tags
    if not src or not tgt:
        raise NmtkError(f"{folder}: the languages are not recorded (tokenizer_config.json source_lang/target_lang); "
                        "give them with --source-lang and --target-lang")
    return src, tgt

@dataclass
class _Checked:
    """A MarianMT folder, read and checked."""

    config: dict[str, Any]
    weights: dict[str, torch.Tensor]
    src: SideVocab
    tgt: SideVocab
    activation: str
    shared: bool
    tied: bool

def read_marian(folder: Path) -> _Checked:
    """Read and check a MarianMT folder; one line naming the file or field for anything nmtk cannot hold."""
    if not folder.is_dir():
        raise NmtkError(f"{folder}: not a folder")
    config = read_json(folder / "config.json", MARIAN_FILES)
    activation = _check_config(config, folder / "config.json")
    tok_config_path = folder / "tokenizer_config.json"
    tok_config = read_json(tok_config_path, MARIAN_FILES) if tok_config_path.is_file() else {}
    spm = {}
    for name in ("source.spm", "target.spm"):
        path = folder / name
        if not path.is_file():
            raise NmtkError(f"{path}: missing; {MARIAN_FILES}")
        load_subword_model(path)  # a garbage file is one line here, not a sentencepiece error later
        spm[name] = path.read_bytes()
    src_vocab = read_json(folder / "vocab.json", MARIAN_FILES)
    separate = bool(tok_config.get("separate_vocabs", False))
    tgt_vocab = read_json(folder / "target_vocab.json", MARIAN_FILES) if separate else src_vocab
    weights = read_weights(folder)
    shared = bool(config.get("share_encoder_decoder_embeddings", True))
    tied = bool(config.get("tie_word_embeddings", True))
    if shared and not tied:
        raise NmtkError(f"{folder / 'config.json'}: share_encoder_decoder_embeddings with tie_word_embeddings = false "
                        "(one input matrix, another output matrix) is not a weight tying nmtk implements")
    if shared and separate:
        raise NmtkError(f"{tok_config_path}: separate_vocabs with share_encoder_decoder_embeddings: one matrix "
                        "cannot hold two vocabularies")
    start = config.get("decoder_start_token_id", config.get("pad_token_id"))
    src_table = weights.get("model.shared.weight" if shared else "model.encoder.embed_tokens.weight")
    tgt_table = weights.get("model.shared.weight" if shared else "model.decoder.embed_tokens.weight")
    for name, vocab, table in (("vocab.json", src_vocab, src_table),
                               ("target_vocab.json" if separate else "vocab.json", tgt_vocab, tgt_table)):
        if table is None:
            raise NmtkError(f"{folder}: the weights have no embedding matrix (model.shared.weight)")
        if not isinstance(vocab, dict) or len(vocab) != table.shape[0] or sorted(vocab.values()) != list(
                range(len(vocab))):
            size = len(vocab) if isinstance(vocab, dict) else "no"
            raise NmtkError(f"{folder / name}: {size} entries numbered 0..{size}, but the weights have "
                            f"{table.shape[0]} rows; the vocabulary is not this model's")
    src_order = nmtk_order(src_vocab, start if shared else None, folder / "vocab.json")
    tgt_order = nmtk_order(tgt_vocab, start, folder / ("target_vocab.json" if separate else "vocab.json"))
    return _Checked(config, weights, mapped_side(src_vocab, src_order, spm["source.spm"]),
                    mapped_side(tgt_vocab, tgt_order, spm["target.spm"]), activation, shared, tied)

def nmtk_model(checked: _Checked) -> Transformer:
    """The nmtk Transformer holding a checked MarianMT model's weights."""
    import torch

    from nmtk.model import ModelConfig, Transformer
    from nmtk.vocab import PAD_ID

    c, w = checked.config, checked.weights
    d = c["d_model"]
    bias = w.get("final_logits_bias")
    cfg = ModelConfig(
        src_vocab=len(checked.src.pieces), tgt_vocab=len(checked.tgt.pieces), d_model=d,
        heads=c["encoder_attention_heads"], d_ff=c["encoder_ffn_dim"], encoder_layers=c["encoder_layers"],
        decoder_layers=c["decoder_layers"], dropout=float(c.get("dropout", 0.1)),
        attention_dropout=float(c.get("attention_dropout", 0.0)), relu_dropout=float(c.get("activation_dropout", 0.0)),
        share_embeddings="all" if checked.shared else "decoder" if checked.tied else "none", norm="post",
        pad_id=PAD_ID, max_positions=c.get("max_position_embeddings", 512), activation=checked.activation,
        output_bias=bias is not None and bool(bias.any()))
    with torch.device("meta"):
        model = Transformer(cfg)
    inverse = torch.argsort(residual_order(d))
    state = {k: torch.zeros(v.shape, dtype=torch.float32) for k, v in model.state_dict().items()}
    for e in layer_entries(cfg.encoder_layers, cfg.decoder_layers, d):
        if e.hf not in w:
            raise NmtkError(f"the weights lack {e.hf}: not a MarianMT model of this configuration")
        target = state[e.nmtk] if e.rows is None else state[e.nmtk][e.rows[0] : e.rows[1]]
        target.copy_(from_hf(w[e.hf].float(), e.kind, inverse))
    _check_positions(w, cfg.max_positions, d)
    src = w["model.shared.weight" if checked.shared else "model.encoder.embed_tokens.weight"]
    state["src_embed.table.weight"] = nmtk_rows(src, checked.src, inverse)
    if not checked.shared:
        state["tgt_embed.table.weight"] = nmtk_rows(w["model.decoder.embed_tokens.weight"], checked.tgt, inverse)
    else:
        state["tgt_embed.table.weight"] = state["src_embed.table.weight"]
    if not checked.tied:
        state["output.weight"] = nmtk_rows(w["lm_head.weight"], checked.tgt, inverse)
    if cfg.output_bias:
        state["output_bias"] = nmtk_rows(bias.reshape(-1, 1), checked.tgt, torch.tensor([0]))[:, 0]
    model = Transformer.empty(cfg, torch.device("cpu"))
    model.load_state_dict(state)
    return model.eval()

def _check_positions(w: dict[str, torch.Tensor], n: int, d: int) -> None:
    """Stored position tables must be transformers' sinusoids: a learned or other table is refused."""
    expected = marian_positions(n, d)
    for key in ("model.encoder.embed_positions.weight", "model.decoder.embed_positions.weight"):
        table = w.get(key)
        if table is not None and (table.shape != expected.shape or (table.float() - expected).abs().max() > 1e-3):
            raise NmtkError(f"{key}: not the sinusoidal position table nmtk computes; other position schemes "
                            "cannot be imported")


def import_marian(folder: Path, out: Path, source_lang: str | None = None,
                  target_lang: str | None = None) -> ImportResult:
    """A MarianMT folder as an nmtk run in ``out``: one pair, or (a multilingual opus-mt model, whose
    source begins with the target's ``>>fr<<`` tag) one pair per tag."""
    from nmtk.data.binarized import id_dtype
    from nmtk.data.fetch import sha256_file

    tok_config_path = folder / "tokenizer_config.json"
    tok_config = read_json(tok_config_path, MARIAN_FILES) if tok_config_path.is_file() else {}
    checked = read_marian(folder)
    tags = marian_tags(checked.src)  # a multilingual model's: the target's tag begins the source
    src_lang, tgt_lang = _languages(folder, tok_config if isinstance(tok_config, dict) else {}, source_lang,
                                    target_lang, bool(tags))
    model = nmtk_model(checked)
    targets = list(tags) or [tgt_lang]
    recipe = placeholder_recipe(out, folder, model, [Pair(src_lang, t) for t in targets], bool(tags), joint=False)

    def write_files(run: Path) -> Manifest:
        files = {src_lang: f"{src_lang}{MAPPED_SUFFIX}", "": f"{'target' if tags else tgt_lang}{MAPPED_SUFFIX}"}
        for key, side in ((src_lang, checked.src), ("", checked.tgt)):
            MappedSentencePiece.write(run / files[key], side.spm_bytes, side.pieces, side.hf_vocab, side.hf_ids)
        names = {src_lang: files[src_lang], **dict.fromkeys(targets, files[""])}
        sha = {name: sha256_file(run / name) for name in names.values()}
        sizes = {src_lang: model.cfg.src_vocab, **dict.fromkeys(targets, model.cfg.tgt_vocab)}
        return Manifest(format=1, source_lang=src_lang, target_lang="+".join(targets),
                        dtype=str(id_dtype(max(model.cfg.src_vocab, model.cfg.tgt_vocab))),
                        vocab={"joint": False, "models": names, "size": sizes, "sha256": sha},
                        recipe=recipe.name, pairs=[Pair(src_lang, t).name for t in tags], tags=tags)

    return write_imported_run(out, folder, model, recipe, write_files)
