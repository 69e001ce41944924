"""`nmtk export --format hf` of a run (any but an imported M2M-100): a transformers MarianMT folder
(the weight map: `nmtk.convert.marian.weights`), with its generation config and model card."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nmtk import __version__
from nmtk.convert.exporting import ExportResult, export_source, write_export
from nmtk.convert.marian.weights import SideVocab, layer_entries, residual_order, side_vocab_of_run, to_hf, write_json
from nmtk.errors import NmtkError
from nmtk.manifest import Manifest
from nmtk.model_source import ModelSource
from nmtk.recipe import Recipe
from nmtk.rundir import RunDir
from nmtk.vocab import BOS, EOS, PAD, SPECIAL_SYMBOLS, UNK

if TYPE_CHECKING:
    import torch

    from nmtk.model import Transformer


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
    if recipe.model.output_vocab != "all":
        raise NmtkError(f'{recipe.name}: model.output_vocab = "per-target"; MarianMT has one softmax over the whole '
                        "vocabulary for every target (export with --format ctranslate2, whose vocabulary map keeps "
                        'each target\'s pieces, or train with model.output_vocab = "all")')


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
        out[e.hf] = to_hf(t.float(), e.kind, order)

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
    nmtk's from 934 to 971 of 1,000 (before empty translations were barred; with that too, 992).
    With ``length_penalty_form = "power"`` nmtk divides by |y|^α: α/(g + 1) against α'/g gives
    α' = α·L/(L + 1)."""
    d = recipe.decode
    offset = 1 if d.length_penalty_form == "power" else 6
    alpha = d.length_penalty if not target_mean_len else round(d.length_penalty * target_mean_len
                                                                  / (target_mean_len + offset), 4)
    banned = sorted({config["pad_token_id"], config["decoder_start_token_id"]})  # nmtk's search never emits them
    generation = {"decoder_start_token_id": config["decoder_start_token_id"], "eos_token_id": config["eos_token_id"],
                  "pad_token_id": config["pad_token_id"], "forced_eos_token_id": config["eos_token_id"],
                  "bad_words_ids": [[i] for i in banned], "num_beams": d.beam, "length_penalty": alpha,
                  "min_new_tokens": 1,  # nmtk never ends a sentence before its first token (`step_log_probs`)
                  "max_length": min(config["max_position_embeddings"],
                                    math.ceil(d.max_len_a * config["max_position_embeddings"] + d.max_len_b)),
                  "early_stopping": False}
    if d.no_repeat_ngram_size:  # transformers' processors of the same names and rules (`nmtk.decode.search.steering`)
        generation["no_repeat_ngram_size"] = d.no_repeat_ngram_size
    if d.repetition_penalty != 1.0:
        generation["repetition_penalty"] = d.repetition_penalty
    return generation


def _mean_len(manifest: Any, lang: str) -> float | None:
    """Mean target length in subwords of the run's training data, as `prepare` counted it (a multilingual
    model's: of its first pair)."""
    train = f"train.{manifest.pairs[0]}" if manifest.pairs else "train"
    return manifest.splits.get(train, {}).get("sides", {}).get(lang, {}).get("mean_len") or None


def export_marian(source: ModelSource, out: Path, force: bool, decode: dict[str, Any] | None = None) -> ExportResult:
    """The run's model ``source`` names as a transformers MarianMT folder in ``out`` (`nmtk.convert.exporting`);
    ``decode``: fields of the recipe's ``[decode]`` to write into ``generation_config.json`` instead
    (None: the recipe's)."""
    import torch
    from safetensors.torch import save_file

    from nmtk.checkpoint import load_model

    run = export_source(source, out, force)
    check_exportable(run.recipe)
    chosen = {k: v for k, v in (decode or {}).items() if v is not None}
    recipe = run.recipe
    if chosen:
        recipe = recipe.model_copy(update={"decode": recipe.decode.model_copy(update=chosen)})
    first = recipe.data.language_pairs()[0]  # a multilingual model's: one vocabulary, tags in it
    src_lang, tgt_lang = first.source_lang, first.target_lang
    paths = run.manifest.model_paths(run.run.path)
    src, tgt = side_vocab_of_run(paths[src_lang]), side_vocab_of_run(paths[tgt_lang])
    model = load_model(run.checkpoint, torch.device("cpu"), run.manifest.vocab.sha256)
    shared = model.cfg.share_embeddings == "all"
    separate = src.hf_vocab != tgt.hf_vocab
    config = hf_config(model, recipe, src, tgt, shared)

    def fill(folder: Path) -> None:
        save_file(hf_state_dict(model, src, tgt, shared), str(folder / "model.safetensors"), metadata={"format": "pt"})
        write_json(folder / "config.json", config)
        write_json(folder / "generation_config.json", generation_config(recipe, config,
                                                                        _mean_len(run.manifest, tgt_lang)))
        (folder / "source.spm").write_bytes(src.spm_bytes)
        (folder / "target.spm").write_bytes(tgt.spm_bytes)
        write_json(folder / "vocab.json", src.hf_vocab)
        if separate:
            write_json(folder / "target_vocab.json", tgt.hf_vocab)
        write_json(folder / "tokenizer_config.json", {
            "tokenizer_class": "MarianTokenizer", "source_lang": src_lang,
            "target_lang": "+".join(recipe.data.targets()),
            "separate_vocabs": separate, "model_max_length": model.cfg.max_positions,
            "unk_token": UNK, "eos_token": EOS, "pad_token": PAD})

    return write_export(out, "marian", run, fill, {}, lambda meta: _model_card(run.run, recipe, run.manifest, meta))


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


def _tag_example(recipe: Recipe) -> str:
    """A multilingual model's input starts with the target's tag, as opus-mt's do."""
    return f">>{recipe.data.targets()[0]}<< " if recipe.data.multilingual else ""


def _model_card(run: RunDir, recipe: Recipe, manifest: Manifest, meta: dict[str, Any]) -> str:
    pairs = recipe.data.language_pairs()
    src, tgt = "+".join(dict.fromkeys(p.source_lang for p in pairs)), "+".join(recipe.data.targets())
    corpora = ", ".join(dict.fromkeys(c.name for p in pairs for c in p.train))
    m = recipe.model
    return f"""---
language: [{", ".join(recipe.data.languages())}]
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
batch = tokenizer(["{_tag_example(recipe)}A sentence to translate."], return_tensors="pt", padding=True)
print(tokenizer.batch_decode(model.generate(**batch), skip_special_tokens=True))
```

`generation_config.json` holds the recipe's beam ({recipe.decode.beam}) and length penalty
({recipe.decode.length_penalty}, in nmtk's form {recipe.decode.length_penalty_form!r}: GNMT's ((5+|y|)/6)^α or
|y|^α; transformers' is |y|^α over the tokens before EOS, α mapped to it). nmtk limits each
output to {recipe.decode.max_len_a}·|source| + {recipe.decode.max_len_b} tokens; transformers has one limit for all.
`nmtk import THIS_FOLDER -o RUN` turns the folder back into an nmtk run.
"""
