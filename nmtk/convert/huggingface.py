"""nmtk runs to and from Hugging Face transformers' MarianMT: ``nmtk export --format hf`` and ``nmtk import``.

MarianMT (every Helsinki-NLP opus-mt model) is the paper's post-norm Transformer with sinusoidal
positions, embeddings scaled by √d_model and tied matrices, so the weights map one to one, with four
differences that this module owns:

* **Positions.** transformers' sinusoidal table puts all the sines first, then all the cosines; nmtk
  interleaves them as the paper does. The two tables differ by a permutation of the model's width, and
  a Transformer is unchanged when its residual stream is permuted consistently: every matrix that
  reads the stream gets its columns permuted, every matrix (and bias, and LayerNorm gain and shift)
  that writes it gets its rows permuted, embeddings their columns. Attention heads and the
  feed-forward inner width are untouched. So the conversion is exact both ways, not an approximation.
* **Fused projections.** nmtk computes Q·K·V (and the encoder's K·V) with one matrix; MarianMT has one
  per projection. They are row blocks of nmtk's.
* **Vocabulary.** nmtk numbers the subword model's pieces with ``<pad> <unk> <s> </s>`` at 0-3 and
  starts decoding from ``<s>``; Marian numbers them by ``vocab.json`` (``</s>`` = 0, ``<pad>`` last)
  and starts from ``<pad>``. An nmtk model is exported with its own ids (the config names the start
  id); an imported model's rows are reordered so that its start symbol lands on ``<s>`` and nmtk's
  padding gets a row of its own (the one row an opus-mt model gains). ``hf_ids`` in the imported
  vocabulary (`nmtk.text.subword.MappedSentencePiece`) records the original order, so exporting an
  imported run gives the original tensors back.
* **Output bias.** Marian's ``final_logits_bias`` is nmtk's ``model.output_bias`` (zero when the
  recipe has none).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nmtk import __version__
from nmtk.errors import NmtkError
from nmtk.files import built_beside
from nmtk.manifest import Manifest
from nmtk.recipe import Recipe, recipe_from_dict, recipe_to_toml
from nmtk.rundir import (
    EXPORT_MARKER,
    MANIFEST,
    RECIPE,
    ExportDir,
    ModelSource,
    RunDir,
    check_replaceable,
    mark_written,
)
from nmtk.text.subword import MAPPED_SUFFIX, MappedSentencePiece, SentencePieceModel, load_subword_model
from nmtk.vocab import BOS, EOS, PAD, SPECIAL_SYMBOLS, UNK

if TYPE_CHECKING:
    import torch

    from nmtk.model import Transformer

HF_WEIGHTS = ("model.safetensors", "pytorch_model.bin")
HF_ACTIVATIONS = {"relu": "relu", "swish": "swish", "silu": "swish", "gelu": "gelu"}
NO_ROW = -1  # in ``hf_ids``: an nmtk row the Hugging Face model has not (nmtk's own padding row)


# ------------------------------------------------------------------------------------ weight map


def residual_order(d_model: int) -> torch.Tensor:
    """transformers' width order in nmtk's terms: column k of a MarianMT state is nmtk's column order[k]
    (the sine of frequency i sits at 2i in nmtk, at i in MarianMT; its cosine at 2i+1 and d/2+i)."""
    import torch

    return torch.cat([torch.arange(0, d_model, 2), torch.arange(1, d_model, 2)])


@dataclass(frozen=True)
class _Entry:
    """One MarianMT tensor: the nmtk tensor (rows ``rows`` of it) and how it touches the residual stream:
    ``in`` reads it (columns permuted), ``out`` writes it (rows permuted), ``plain`` neither."""

    hf: str
    nmtk: str
    kind: str
    rows: tuple[int, int] | None = None


def _projections(hf: str, nmtk: str, d: int, fused: str, names: str) -> list[_Entry]:
    """MarianMT's separate ``{q,k,v}_proj`` as row blocks of nmtk's fused ``fused`` projection."""
    blocks = [(n, (i * d, (i + 1) * d)) for i, n in enumerate(names)]
    return [_Entry(f"{hf}.{n}_proj.weight", f"{nmtk}.{fused}.weight", "in", rows) for n, rows in blocks] + \
        [_Entry(f"{hf}.{n}_proj.bias", f"{nmtk}.{fused}.bias", "plain", rows) for n, rows in blocks]


def _out(hf: str, nmtk: str) -> list[_Entry]:
    return [_Entry(f"{hf}.out_proj.weight", f"{nmtk}.out.weight", "out"),
            _Entry(f"{hf}.out_proj.bias", f"{nmtk}.out.bias", "out")]


def _block(hf: str, nmtk: str, kind_fc: str) -> list[_Entry]:
    """A LayerNorm (``hf`` norm, ``nmtk`` residual) or the feed-forward pair."""
    if kind_fc == "norm":
        return [_Entry(f"{hf}.weight", f"{nmtk}.norm.weight", "out"), _Entry(f"{hf}.bias", f"{nmtk}.norm.bias", "out")]
    return [_Entry(f"{hf}.fc1.weight", f"{nmtk}.ffn.w1.weight", "in"),
            _Entry(f"{hf}.fc1.bias", f"{nmtk}.ffn.w1.bias", "plain"),
            _Entry(f"{hf}.fc2.weight", f"{nmtk}.ffn.w2.weight", "out"),
            _Entry(f"{hf}.fc2.bias", f"{nmtk}.ffn.w2.bias", "out")]


def layer_entries(encoder_layers: int, decoder_layers: int, d: int) -> list[_Entry]:
    """Every layer tensor of a MarianMT model and its nmtk counterpart."""
    entries: list[_Entry] = []
    for i in range(encoder_layers):
        hf, nm = f"model.encoder.layers.{i}", f"encoder.{i}"
        entries += _projections(f"{hf}.self_attn", f"{nm}.self_attn", d, "qkv", "qkv")
        entries += _out(f"{hf}.self_attn", f"{nm}.self_attn")
        entries += _block(f"{hf}.self_attn_layer_norm", f"{nm}.res_attn", "norm")
        entries += _block(hf, nm, "ffn") + _block(f"{hf}.final_layer_norm", f"{nm}.res_ffn", "norm")
    for i in range(decoder_layers):
        hf, nm = f"model.decoder.layers.{i}", f"decoder.{i}"
        entries += _projections(f"{hf}.self_attn", f"{nm}.self_attn", d, "qkv", "qkv")
        entries += _out(f"{hf}.self_attn", f"{nm}.self_attn")
        entries += _block(f"{hf}.self_attn_layer_norm", f"{nm}.res_self", "norm")
        entries += _projections(f"{hf}.encoder_attn", f"{nm}.cross_attn", d, "q", "q")
        entries += _projections(f"{hf}.encoder_attn", f"{nm}.cross_attn", d, "kv", "kv")
        entries += _out(f"{hf}.encoder_attn", f"{nm}.cross_attn")
        entries += _block(f"{hf}.encoder_attn_layer_norm", f"{nm}.res_cross", "norm")
        entries += _block(hf, nm, "ffn") + _block(f"{hf}.final_layer_norm", f"{nm}.res_ffn", "norm")
    return entries


def _to_hf(t: torch.Tensor, kind: str, order: torch.Tensor) -> torch.Tensor:
    if kind == "in":
        return t[:, order]
    if kind == "out":
        return t[order]
    return t


def _from_hf(t: torch.Tensor, kind: str, inverse: torch.Tensor) -> torch.Tensor:
    return _to_hf(t, kind, inverse)


def marian_positions(n: int, d_model: int) -> torch.Tensor:
    """transformers' sinusoidal table for MarianMT (sines, then cosines): nmtk's table, reordered."""
    from nmtk.model.transformer import sinusoidal_positions

    return sinusoidal_positions(n, d_model)[:, residual_order(d_model)]


# ------------------------------------------------------------------------------------ vocabulary


@dataclass
class SideVocab:
    """One side's vocabulary in both numberings: ``hf_ids[i]`` is the Hugging Face id of nmtk id i."""

    pieces: list[str]  # nmtk id order
    hf_ids: list[int]
    hf_vocab: dict[str, int]
    spm_bytes: bytes

    @property
    def hf_size(self) -> int:
        return len(self.hf_vocab)

    def hf_order(self) -> list[int]:
        """nmtk id of every Hugging Face id, in Hugging Face order."""
        order = [NO_ROW] * self.hf_size
        for nmtk_id, hf_id in enumerate(self.hf_ids):
            if hf_id != NO_ROW:
                order[hf_id] = nmtk_id
        return order


def side_vocab_of_run(model_file: Path) -> SideVocab:
    """A run's subword model as a Hugging Face vocabulary: nmtk's own ids (a plain sentencepiece model),
    or the original numbering kept by `nmtk import`."""
    model = load_subword_model(model_file)
    if isinstance(model, MappedSentencePiece):
        return SideVocab(model.pieces(), model.hf_ids, model.hf_vocab, model.spm_bytes)
    if not isinstance(model, SentencePieceModel):
        raise NmtkError(f"{model_file}: a WordPiece vocabulary; MarianTokenizer reads sentencepiece models only "
                        '(train with tokenizer.type = "bpe" or "unigram")')
    pieces = model.pieces()
    if len(set(pieces)) != len(pieces):
        raise NmtkError(f"{model_file}: two ids share a piece; vocab.json cannot number them")
    return SideVocab(pieces, list(range(len(pieces))), {p: i for i, p in enumerate(pieces)},
                     model_file.read_bytes())


def nmtk_order(hf_vocab: dict[str, int], start: int | None, where: Path) -> list[int]:
    """Hugging Face ids in nmtk's order: pad (or a new row), unk, the decoder's start, eos, the rest."""
    for symbol in (PAD, UNK, EOS):
        if symbol not in hf_vocab:
            raise NmtkError(f"{where}: no {symbol} entry; a MarianMT vocabulary has {PAD}, {UNK} and {EOS}")
    pad, unk, eos = hf_vocab[PAD], hf_vocab[UNK], hf_vocab[EOS]
    if start is None or start == pad:
        head = [NO_ROW, unk, pad, eos] if start == pad else [pad, unk, NO_ROW, eos]
    else:
        head = [pad, unk, start, eos]
    taken = set(head)
    return head + [i for i in sorted(hf_vocab.values()) if i not in taken]


def mapped_side(hf_vocab: dict[str, int], order: list[int], spm_bytes: bytes) -> SideVocab:
    names = {i: p for p, i in hf_vocab.items()}
    pieces = [SPECIAL_SYMBOLS[k] if k < len(SPECIAL_SYMBOLS) else names[i] for k, i in enumerate(order)]
    return SideVocab(pieces, order, hf_vocab, spm_bytes)


# ------------------------------------------------------------------------------------ export


def check_exportable(recipe: Recipe) -> None:
    """MarianTokenizer runs sentencepiece on raw text and nothing else: a run with Moses is refused."""
    tok = recipe.tokenizer
    if tok.moses != "none" or tok.normalize_punctuation != "none":
        raise NmtkError(f"{recipe.name}: its text pipeline uses Moses (tokenizer.moses = {tok.moses!r}, "
                        f"normalize_punctuation = {tok.normalize_punctuation!r}), which MarianTokenizer does not "
                        "run; export it with --format ctranslate2, or train a sentencepiece-only recipe "
                        "(recipes/multi30k-en-de-spm.toml) for Hugging Face")
    if recipe.model.norm != "post":
        raise NmtkError(f'{recipe.name}: model.norm = "pre"; MarianMT is post-norm (export with --format ctranslate2)')


def hf_state_dict(model: Transformer, src: SideVocab, tgt: SideVocab, shared: bool) -> dict[str, torch.Tensor]:
    """MarianMTModel's tensors for ``model`` (fp32, contiguous, each its own storage)."""
    import torch

    cfg = model.cfg
    order = residual_order(cfg.d_model)
    own = model.state_dict()
    out: dict[str, torch.Tensor] = {}
    for e in layer_entries(cfg.encoder_layers, cfg.decoder_layers, cfg.d_model):
        t = own[e.nmtk]
        if e.rows:
            t = t[e.rows[0] : e.rows[1]]
        out[e.hf] = _to_hf(t.float(), e.kind, order)

    def rows(table: torch.Tensor, side: SideVocab) -> torch.Tensor:
        return table.float()[torch.tensor(side.hf_order())][:, order]

    src_table = rows(model.src_embed.table.weight.detach(), src)
    if shared:
        out["model.shared.weight"] = src_table
    else:
        out["model.encoder.embed_tokens.weight"] = src_table
        out["model.decoder.embed_tokens.weight"] = rows(model.tgt_embed.table.weight.detach(), tgt)
    if model.output is not None:
        out["lm_head.weight"] = rows(model.output.weight.detach(), tgt)
    bias = torch.zeros(tgt.hf_size)
    if model.output_bias is not None:
        bias = model.output_bias.detach().float()[torch.tensor(tgt.hf_order())]
    out["final_logits_bias"] = bias[None]
    # No position tables: transformers computes them (and saves none itself); `nmtk import` checks any it finds.
    return {k: v.contiguous().clone() for k, v in out.items()}


def hf_config(model: Transformer, recipe: Recipe, src: SideVocab, tgt: SideVocab, shared: bool) -> dict[str, Any]:
    cfg = model.cfg
    start = tgt.hf_ids[SPECIAL_SYMBOLS.index(BOS)]
    return {
        "architectures": ["MarianMTModel"], "model_type": "marian", "is_encoder_decoder": True,
        "vocab_size": src.hf_size, "decoder_vocab_size": tgt.hf_size,
        "share_encoder_decoder_embeddings": shared, "tie_word_embeddings": model.output is None,
        "d_model": cfg.d_model, "encoder_layers": cfg.encoder_layers, "decoder_layers": cfg.decoder_layers,
        "encoder_attention_heads": cfg.heads, "decoder_attention_heads": cfg.heads,
        "encoder_ffn_dim": cfg.d_ff, "decoder_ffn_dim": cfg.d_ff, "activation_function": cfg.activation,
        "dropout": cfg.dropout, "attention_dropout": cfg.attention_dropout, "activation_dropout": cfg.relu_dropout,
        "max_position_embeddings": cfg.max_positions, "scale_embedding": True,
        "pad_token_id": tgt.hf_vocab[PAD], "eos_token_id": tgt.hf_vocab[EOS], "forced_eos_token_id": tgt.hf_vocab[EOS],
        "decoder_start_token_id": start, "bos_token_id": None,
        "nmtk": {"version": __version__, "recipe": recipe.name},
    }


def generation_config(recipe: Recipe, config: dict[str, Any], target_mean_len: float | None = None) -> dict[str, Any]:
    """The run's ``[decode]`` for `generate`. nmtk's length limit a·|source| + b has no per-source
    counterpart in transformers: ``max_length`` is the largest it can reach (a·max_positions + b, capped).

    Length penalties differ in form: nmtk divides a hypothesis's log-probability by GNMT's
    ((5 + |y|)/6)^α (|y| counting EOS), transformers by g^α' (g: tokens before EOS). Beam search
    compares hypotheses of nearby lengths, so what must agree is how fast the penalty grows with
    length, α/(5 + |y|) against α'/g: equal at the training data's mean target length L (g = L) when
    α' = α·L/(L + 6). Without that length (a run with no training data, an imported model), α' = α.
    On the Multi30k spm model (L 14.8, α 0.6 → 0.43) the mapping raised beam-4 outputs identical to
    nmtk's from 934 to 971 of 1,000 (before empty translations were barred; with that too, 992)."""
    d = recipe.decode
    alpha = d.length_penalty if not target_mean_len else round(d.length_penalty * target_mean_len
                                                                  / (target_mean_len + 6), 4)
    banned = sorted({config["pad_token_id"], config["decoder_start_token_id"]})  # nmtk's search never emits them
    generation = {"decoder_start_token_id": config["decoder_start_token_id"], "eos_token_id": config["eos_token_id"],
                  "pad_token_id": config["pad_token_id"], "forced_eos_token_id": config["eos_token_id"],
                  "bad_words_ids": [[i] for i in banned], "num_beams": d.beam, "length_penalty": alpha,
                  "min_new_tokens": 1,  # nmtk never ends a sentence before its first token (`step_log_probs`)
                  "max_length": min(config["max_position_embeddings"],
                                    math.ceil(d.max_len_a * config["max_position_embeddings"] + d.max_len_b)),
                  "early_stopping": False}
    if d.no_repeat_ngram_size:  # transformers' processors of the same names and rules (`nmtk.decode.steering`)
        generation["no_repeat_ngram_size"] = d.no_repeat_ngram_size
    if d.repetition_penalty != 1.0:
        generation["repetition_penalty"] = d.repetition_penalty
    return generation


def _mean_len(manifest: Any, lang: str) -> float | None:
    """Mean target length in subwords of the run's training data, as `prepare` counted it."""
    return manifest.splits.get("train", {}).get("sides", {}).get(lang, {}).get("mean_len") or None


def export_hf(source: ModelSource, out: Path, force: bool, decode: dict[str, Any] | None = None) -> dict[str, Any]:
    """The run's model ``source`` names as a transformers MarianMT folder in ``out``; ``decode``: fields
    of the recipe's ``[decode]`` to write into ``generation_config.json`` instead (None: the recipe's)."""
    import torch
    from safetensors.torch import save_file

    from nmtk.checkpoint import load_model
    from nmtk.convert.ctranslate2 import _run_source

    check_replaceable(out, force)
    run, checkpoint, recipe, manifest = _run_source(source)
    check_exportable(recipe)
    chosen = {k: v for k, v in (decode or {}).items() if v is not None}
    if chosen:
        recipe = recipe.model_copy(update={"decode": recipe.decode.model_copy(update=chosen)})
    src_lang, tgt_lang = recipe.data.source_lang, recipe.data.target_lang
    paths = manifest.model_paths(run.path)
    src, tgt = side_vocab_of_run(paths[src_lang]), side_vocab_of_run(paths[tgt_lang])
    model = load_model(checkpoint, torch.device("cpu"), manifest.vocab.sha256)
    shared = model.cfg.share_embeddings == "all"
    separate = src.hf_vocab != tgt.hf_vocab
    config = hf_config(model, recipe, src, tgt, shared)
    with built_beside(out) as folder:
        tmp = ExportDir(folder)
        save_file(hf_state_dict(model, src, tgt, shared), str(tmp.path / "model.safetensors"),
                  metadata={"format": "pt"})
        _write_json(tmp.path / "config.json", config)
        generation = generation_config(recipe, config, _mean_len(manifest, tgt_lang))
        _write_json(tmp.path / "generation_config.json", generation)
        (tmp.path / "source.spm").write_bytes(src.spm_bytes)
        (tmp.path / "target.spm").write_bytes(tgt.spm_bytes)
        _write_json(tmp.path / "vocab.json", src.hf_vocab)
        if separate:
            _write_json(tmp.path / "target_vocab.json", tgt.hf_vocab)
        _write_json(tmp.path / "tokenizer_config.json", {
            "tokenizer_class": "MarianTokenizer", "source_lang": src_lang, "target_lang": tgt_lang,
            "separate_vocabs": separate, "model_max_length": model.cfg.max_positions,
            "unk_token": UNK, "eos_token": EOS, "pad_token": PAD})
        tmp.write_text_pipeline(run, recipe, manifest)
        meta = {"format": "hf", "nmtk": __version__, "checkpoint": checkpoint.name, "run": str(run.path),
                "models": manifest.vocab.models}
        tmp.write_meta(meta)
        mark_written(tmp.path, f"nmtk export {run.path} --format hf")
        (tmp.path / "README.md").write_text(_model_card(run, recipe, manifest, meta), encoding="utf-8")
    return meta


def _write_json(path: Path, data: Any) -> None:
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def _best_validation(run: RunDir) -> str:
    best = None
    if run.log_path.is_file():
        for line in run.log_path.read_text(encoding="utf-8").splitlines():
            try:
                entry = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(entry, dict) and entry.get("valid_bleu") is not None:
                if best is None or entry["valid_bleu"] > best[1]:
                    best = (entry.get("update"), entry["valid_bleu"])
    return f"{best[1]:.2f} sacreBLEU on the validation set at update {best[0]}" if best else "no validation recorded"


def _model_card(run: RunDir, recipe: Recipe, manifest: Manifest, meta: dict[str, Any]) -> str:
    src, tgt = recipe.data.source_lang, recipe.data.target_lang
    corpora = ", ".join(c.name for c in recipe.data.train)
    m = recipe.model
    return f"""---
language: [{src}, {tgt}]
tags: [translation, marian, nmtk]
pipeline_tag: translation
---

# {recipe.name} ({src} → {tgt})

A Transformer trained with [nmtk](https://github.com/) {meta["nmtk"]} and exported as a transformers
`MarianMTModel` (`nmtk export --format hf`), from `{meta["checkpoint"]}` of `{meta["run"]}`.

- **Data:** {corpora} (recipe `{recipe.name}`; `recipe.toml` in this folder is the whole recipe).
- **Model:** {m.n_encoder_layers}+{m.n_decoder_layers} layers, d_model {m.d_model}, {m.heads} heads, d_ff {m.d_ff},
  {m.activation} feed-forward, post-norm, sinusoidal positions, embeddings shared: {m.share_embeddings}.
- **Validation:** {_best_validation(run)}.
- **Text:** sentencepiece on raw text (`source.spm`, `target.spm`), no other pre-processing.

```python
from transformers import MarianMTModel, MarianTokenizer
tokenizer = MarianTokenizer.from_pretrained("THIS_FOLDER")
model = MarianMTModel.from_pretrained("THIS_FOLDER")
batch = tokenizer(["A sentence to translate."], return_tensors="pt", padding=True)
print(tokenizer.batch_decode(model.generate(**batch), skip_special_tokens=True))
```

`generation_config.json` holds the recipe's beam ({recipe.decode.beam}) and length penalty
({recipe.decode.length_penalty}; nmtk's is GNMT's ((5+|y|)/6)^α, transformers' |y|^α). nmtk limits each
output to {recipe.decode.max_len_a}·|source| + {recipe.decode.max_len_b} tokens; transformers has one limit for all.
`nmtk import THIS_FOLDER -o RUN` turns the folder back into an nmtk run.
"""


# ------------------------------------------------------------------------------------ import


def _missing(path: Path) -> NmtkError:
    return NmtkError(f"{path}: missing; a MarianMT folder has config.json, source.spm, target.spm and vocab.json")


def _read_json(path: Path) -> Any:
    if not path.is_file():
        raise _missing(path)
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise NmtkError(f"{path}: not readable JSON ({type(exc).__name__})") from None


def _read_weights(folder: Path) -> dict[str, torch.Tensor]:
    import torch

    for name in HF_WEIGHTS:
        path = folder / name
        if path.is_file():
            try:
                if name.endswith(".safetensors"):
                    from safetensors.torch import load_file

                    return load_file(str(path))
                return torch.load(path, map_location="cpu", weights_only=True)
            except Exception as exc:  # safetensors and torch raise their own kinds
                detail = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:120]
                raise NmtkError(f"{path}: not readable weights ({detail})") from None
    raise NmtkError(f"{folder}: no {' or '.join(HF_WEIGHTS)}")


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


def _languages(folder: Path, tokenizer_config: dict[str, Any], source: str | None, target: str | None
               ) -> tuple[str, str]:
    guess = re.search(r"opus-mt-([a-z]{2,3})-([a-z]{2,3})$", folder.resolve().name)
    src = source or tokenizer_config.get("source_lang") or (guess and guess.group(1))
    tgt = target or tokenizer_config.get("target_lang") or (guess and guess.group(2))
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
    config = _read_json(folder / "config.json")
    activation = _check_config(config, folder / "config.json")
    tok_config_path = folder / "tokenizer_config.json"
    tok_config = _read_json(tok_config_path) if tok_config_path.is_file() else {}
    spm = {}
    for name in ("source.spm", "target.spm"):
        path = folder / name
        if not path.is_file():
            raise _missing(path)
        load_subword_model(path)  # a garbage file is one line here, not a sentencepiece error later
        spm[name] = path.read_bytes()
    src_vocab = _read_json(folder / "vocab.json")
    separate = bool(tok_config.get("separate_vocabs", False))
    tgt_vocab = _read_json(folder / "target_vocab.json") if separate else src_vocab
    weights = _read_weights(folder)
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


def _nmtk_rows(table: torch.Tensor, side: SideVocab, inverse: torch.Tensor) -> torch.Tensor:
    import torch

    rows = torch.zeros(len(side.hf_ids), table.shape[1], dtype=torch.float32)
    present = torch.tensor([i for i, h in enumerate(side.hf_ids) if h != NO_ROW])
    rows[present] = table.float()[torch.tensor([h for h in side.hf_ids if h != NO_ROW])][:, inverse]
    return rows


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
        target.copy_(_from_hf(w[e.hf].float(), e.kind, inverse))
    _check_positions(w, cfg.max_positions, d)
    src = w["model.shared.weight" if checked.shared else "model.encoder.embed_tokens.weight"]
    state["src_embed.table.weight"] = _nmtk_rows(src, checked.src, inverse)
    if not checked.shared:
        state["tgt_embed.table.weight"] = _nmtk_rows(w["model.decoder.embed_tokens.weight"], checked.tgt, inverse)
    else:
        state["tgt_embed.table.weight"] = state["src_embed.table.weight"]
    if not checked.tied:
        state["output.weight"] = _nmtk_rows(w["lm_head.weight"], checked.tgt, inverse)
    if cfg.output_bias:
        state["output_bias"] = _nmtk_rows(bias.reshape(-1, 1), checked.tgt, torch.tensor([0]))[:, 0]
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


@dataclass(frozen=True)
class ImportResult:
    """What `import_marian` made: the run, its language pair, its shape and size."""

    run: Path
    source_lang: str
    target_lang: str
    encoder_layers: int
    decoder_layers: int
    d_model: int
    parameters: int


def import_marian(folder: Path, out: Path, source_lang: str | None = None, target_lang: str | None = None,
                  force: bool = False) -> ImportResult:
    """A transformers MarianMT folder as an nmtk run directory in ``out`` (recipe, manifest, vocabularies,
    ``checkpoint_last.pt``); built beside ``out`` and renamed into place, so nothing is half-written."""
    from nmtk.checkpoint import save_atomic
    from nmtk.data.binarized import id_dtype
    from nmtk.data.fetch import sha256_file

    folder, out = Path(folder), Path(out)
    tok_config_path = folder / "tokenizer_config.json"
    tok_config = _read_json(tok_config_path) if tok_config_path.is_file() else {}
    src_lang, tgt_lang = _languages(folder, tok_config if isinstance(tok_config, dict) else {}, source_lang,
                                    target_lang)
    check_replaceable(out, force)
    checked = read_marian(folder)
    model = nmtk_model(checked)
    with built_beside(out) as build:
        tmp = RunDir(build)
        names = {src_lang: f"{src_lang}{MAPPED_SUFFIX}", tgt_lang: f"{tgt_lang}{MAPPED_SUFFIX}"}
        for lang, side in ((src_lang, checked.src), (tgt_lang, checked.tgt)):
            MappedSentencePiece.write(tmp.path / names[lang], side.spm_bytes, side.pieces, side.hf_vocab, side.hf_ids)
        sha = {name: sha256_file(tmp.path / name) for name in names.values()}
        recipe = _imported_recipe(out, folder, src_lang, tgt_lang, model)
        manifest = Manifest(format=1, source_lang=src_lang, target_lang=tgt_lang,
                            dtype=str(id_dtype(max(model.cfg.src_vocab, model.cfg.tgt_vocab))),
                            vocab={"joint": False, "models": names,
                                   "size": {src_lang: model.cfg.src_vocab, tgt_lang: model.cfg.tgt_vocab},
                                   "sha256": sha},
                            recipe=recipe.name)
        manifest.write(tmp.path / MANIFEST)
        (tmp.path / RECIPE).write_text(IMPORT_HEADER.format(folder=folder) + recipe_to_toml(recipe), encoding="utf-8")
        save_atomic({"model": model.state_dict(), "model_config": model.cfg.to_dict(), "vocab": sha,
                     "recipe": recipe.model_dump(mode="json"), "recipe_hash": recipe.hash(), "nmtk": __version__,
                     "imported_from": str(folder), "full": False,
                     "state": {"update": 0}}, tmp.last)
        mark_written(tmp.path, f"nmtk import {folder}")
    cfg = model.cfg
    return ImportResult(out, src_lang, tgt_lang, cfg.encoder_layers, cfg.decoder_layers, cfg.d_model,
                        sum(p.numel() for p in model.parameters()))


IMPORT_HEADER = """\
# Written by `nmtk import {folder}`. [model] and [tokenizer] describe the imported model; [data] names
# placeholder corpora. To fine-tune: copy this file, point [data] at your corpora, keep
# tokenizer.reuse (prepare then uses this run's vocabulary), and run
#   nmtk train YOUR_RECIPE.toml --init-from THIS_RUN
"""


def _imported_recipe(out: Path, folder: Path, src: str, tgt: str, model: Transformer) -> Recipe:
    cfg = model.cfg
    name = re.sub(r"[^A-Za-z0-9._-]", "-", out.name).lstrip("._-") or "imported"
    data = {
        "name": name,
        "data": {"source_lang": src, "target_lang": tgt,
                 "train": [{"name": "train", "source": f"train.{src}", "target": f"train.{tgt}"}],
                 "valid": {"name": "valid", "source": f"valid.{src}", "target": f"valid.{tgt}"}},
        "tokenizer": {"reuse": str(out), "vocab_size": cfg.tgt_vocab, "joint": False},
        "model": {"encoder_layers": cfg.encoder_layers, "decoder_layers": cfg.decoder_layers,
                  "layers": cfg.encoder_layers, "d_model": cfg.d_model, "heads": cfg.heads, "d_ff": cfg.d_ff,
                  "dropout": cfg.dropout, "attention_dropout": cfg.attention_dropout,
                  "relu_dropout": cfg.relu_dropout, "share_embeddings": cfg.share_embeddings, "norm": "post",
                  "max_positions": cfg.max_positions, "activation": cfg.activation, "output_bias": cfg.output_bias},
    }
    return recipe_from_dict(data, f"nmtk import {folder}")


__all__ = ["EXPORT_MARKER", "ImportResult", "export_hf", "import_marian"]
