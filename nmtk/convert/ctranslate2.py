"""`nmtk export` to CTranslate2: nmtk's weights onto CTranslate2's own Transformer specification.

The converter maps nmtk's weights onto ``ctranslate2.specs.TransformerSpec``, which writes the model
files: nothing here writes a binary format. The mapping is one to one, because nmtk's model is the
architecture CTranslate2 was built for: post-norm (or pre-norm) layers, fused Q·K·V (self-attention)
and K·V (encoder-decoder attention) projections in that order, ReLU feed-forward, embeddings scaled
by √d_model, the sinusoidal table given as the position encodings (so that both engines add the very
same numbers), tied matrices given as one array (CTranslate2 stores it once), and the vocabulary as
the subword model's pieces in id order. Sources get ``</s>`` appended and decoding starts from
``<s>``, as in nmtk.

An exported folder (`nmtk.rundir.ExportDir`) holds, besides CTranslate2's files, everything the text
pipeline needs (the run's frozen recipe, manifest and subword model(s)) and ``nmtk-export.json``, so
it is a complete artefact: ``nmtk translate -m DIR`` runs it with `nmtk.decode.ct2.Ct2Translator`.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from nmtk.convert.exporting import ExportResult, export_source, write_export
from nmtk.data.shortlist import Shortlist
from nmtk.errors import NmtkError
from nmtk.files import write_text_atomic
from nmtk.model_source import ModelSource
from nmtk.recipe import Recipe
from nmtk.rundir import EXPORT_MARKER, SHORTLIST, ExportDir
from nmtk.text.pairs import model_pipelines
from nmtk.vocab import BOS, EOS, UNK

if TYPE_CHECKING:
    from nmtk.model import Transformer

CT2_ACTIVATIONS = {"relu": "RELU", "swish": "SWISH", "gelu": "GELU"}


def _linear(spec: Any, linear: Any) -> None:
    spec.weight = linear.weight.detach().float().numpy()
    if linear.bias is not None:
        spec.bias = linear.bias.detach().float().numpy()


def _norm(spec: Any, norm: Any) -> None:
    spec.gamma = norm.weight.detach().float().numpy()
    spec.beta = norm.bias.detach().float().numpy()


def _ffn(spec: Any, ffn: Any, residual: Any) -> None:
    _linear(spec.linear_0, ffn.w1)
    _linear(spec.linear_1, ffn.w2)
    _norm(spec.layer_norm, residual.norm)


def model_spec(model: Transformer, source_pieces: list[str], target_pieces: list[str]) -> Any:
    """CTranslate2's specification of ``model``, weights set (fp32), vocabularies registered."""
    import ctranslate2

    cfg = model.cfg
    spec = ctranslate2.specs.TransformerSpec.from_config(
        (cfg.encoder_layers, cfg.decoder_layers), cfg.heads, pre_norm=cfg.norm == "pre",
        activation=getattr(ctranslate2.specs.Activation, CT2_ACTIVATIONS[cfg.activation]),
        alignment_layer=-1, alignment_heads=cfg.heads)  # word alignments as nmtk's: the last layer, every head
    arrays: dict[int, np.ndarray] = {}  # one numpy array per tensor, so tied weights stay one array

    def array(tensor: Any) -> np.ndarray:
        return arrays.setdefault(tensor.data_ptr(), tensor.detach().float().numpy())

    positions = model.src_embed.pe.detach().float().numpy()
    for side, embed in ((spec.encoder, model.src_embed), (spec.decoder, model.tgt_embed)):
        table = side.embeddings[0] if isinstance(side.embeddings, list) else side.embeddings
        table.weight = array(embed.table.weight)
        side.scale_embeddings = True  # × √d_model, paper §3.4
        side.position_encodings.encodings = positions
    for layer_spec, layer in zip(spec.encoder.layer, model.encoder, strict=True):
        _linear(layer_spec.self_attention.linear[0], layer.self_attn.qkv)
        _linear(layer_spec.self_attention.linear[1], layer.self_attn.out)
        _norm(layer_spec.self_attention.layer_norm, layer.res_attn.norm)
        _ffn(layer_spec.ffn, layer.ffn, layer.res_ffn)
    for layer_spec, layer in zip(spec.decoder.layer, model.decoder, strict=True):
        _linear(layer_spec.self_attention.linear[0], layer.self_attn.qkv)
        _linear(layer_spec.self_attention.linear[1], layer.self_attn.out)
        _norm(layer_spec.self_attention.layer_norm, layer.res_self.norm)
        _linear(layer_spec.attention.linear[0], layer.cross_attn.q)
        _linear(layer_spec.attention.linear[1], layer.cross_attn.kv)
        _linear(layer_spec.attention.linear[2], layer.cross_attn.out)
        _norm(layer_spec.attention.layer_norm, layer.res_cross.norm)
        _ffn(layer_spec.ffn, layer.ffn, layer.res_ffn)
    if cfg.norm == "pre":
        _norm(spec.encoder.layer_norm, model.encoder_norm)
        _norm(spec.decoder.layer_norm, model.decoder_norm)
    spec.decoder.projection.weight = array(model.output_weight)
    if model.output_bias is not None:
        spec.decoder.projection.bias = model.output_bias.detach().float().numpy()
    spec.register_source_vocabulary(source_pieces)
    spec.register_target_vocabulary(target_pieces)
    spec.config.unk_token, spec.config.bos_token, spec.config.eos_token = UNK, BOS, EOS
    spec.config.decoder_start_token = BOS
    spec.config.add_source_eos = True
    spec.config.layer_norm_epsilon = model.encoder[0].res_attn.norm.eps
    return spec


def export_ctranslate2(source: ModelSource, out: Path, quantization: str, force: bool) -> ExportResult:
    """Write the run's model ``source`` names (`nmtk.model_source.resolve_model`) to ``out`` as a CTranslate2
    model with its text pipeline (`nmtk.convert.exporting`: built beside ``out``, an existing ``out`` kept
    unless ``force`` and an earlier export, never left half replaced)."""
    import torch

    from nmtk.checkpoint import load_model

    run = export_source(source, out, force)
    (src_pipe, tgt_pipe), _ = model_pipelines(run.run.path, run.recipe, run.manifest, any_pair=True)  # joint: any pair
    model = load_model(run.checkpoint, torch.device("cpu"), run.manifest.vocab.sha256)
    if model.cfg.positions != "paper":
        raise NmtkError(f"{source.path}: an imported M2M-100 model (fairseq's positions): nmtk's CTranslate2 export "
                        "does not write those; convert the original folder with CTranslate2's own converter")
    source_pieces, target_pieces = src_pipe.subwords.pieces(), tgt_pipe.subwords.pieces()
    spec = model_spec(model, source_pieces, target_pieces)

    kept = run.run.path / SHORTLIST  # a run's shortlist goes with it (a per-target model has its own map)
    shortlist = Shortlist.load(kept) if kept.is_file() and model.language_table is None else None

    def fill(folder: Path) -> None:
        spec.validate()
        spec.optimize(quantization=quantization)
        spec.save(str(folder))
        if model.language_table is not None:
            write_text_atomic(ExportDir(folder).vocab_map, vocab_map(model, source_pieces, target_pieces))
        elif shortlist is not None:
            write_text_atomic(ExportDir(folder).vocab_map, shortlist_map(shortlist, source_pieces, target_pieces))

    return write_export(out, "ctranslate2", run, fill, {"quantization": quantization,
                                                         "max_positions": model.cfg.max_positions,
                                                         "vocab_map": model.language_table is not None,
                                                         "shortlist": shortlist is not None,
                                                         "alignment_heads": model.cfg.heads},
                        lambda meta: _readme(run.recipe, meta))


def vocab_map(model: Transformer, source_pieces: list[str], target_pieces: list[str]) -> str:
    """CTranslate2's vocabulary map of a model with per-target output vocabularies: one line per target,
    its tag's piece, a tab, the pieces it may produce. Translated with ``use_vmap``, a batch of one
    target's sources searches over that target's pieces, as nmtk does; a batch that mixes targets,
    over the union of theirs (`nmtk.decode.ct2` never makes one)."""
    lines = []
    for tag, allowed in zip(model.output_tags.tolist(), model.output_allowed, strict=True):
        pieces = " ".join(target_pieces[i] for i in allowed.nonzero().flatten().tolist())
        lines.append(f"{source_pieces[tag]}\t{pieces}\n")
    return "".join(lines)


def shortlist_map(shortlist: Shortlist, source_pieces: list[str], target_pieces: list[str]) -> str:
    """CTranslate2's vocabulary map of a run's lexical shortlist (`nmtk shortlist`): a line per source
    piece (the piece, a tab, its candidate target pieces), and one with no source: the pieces every
    sentence may produce. Translated with ``use_vmap``, as `translate --shortlist` searches."""
    lines = ["\t" + " ".join(target_pieces[i] for i in shortlist.frequent)]
    for source, row in enumerate(shortlist.table[: len(source_pieces)]):
        if (targets := [target_pieces[i] for i in row if i >= 0]):
            lines.append(f"{source_pieces[source]}\t{' '.join(targets)}")
    return "\n".join(lines) + "\n"


def _readme(recipe: Recipe, meta: dict[str, Any]) -> str:
    pairs = recipe.data.language_pairs()
    src, tgt = pairs[0].source_lang, pairs[0].target_lang
    tags = "" if not recipe.data.multilingual else (
        " Each source begins with its target language's tag (`>>de<<`, a vocabulary item): `nmtk translate "
        "--target-lang` puts it there; with CTranslate2 alone, put the tag's piece first.")
    if meta.get("vocab_map"):
        tags += (" Each target language produces only its own pieces (`vmap.txt`): with CTranslate2 alone, "
                 "translate with `use_vmap=True` and one target language per call.")
    if meta.get("shortlist"):
        tags += (" The run's lexical shortlist is `vmap.txt`: `nmtk translate --shortlist`, or CTranslate2's "
                 "`use_vmap=True`, projects each batch onto its sources' candidate pieces.")
    return f"""# {recipe.name}: a CTranslate2 model exported by nmtk {meta["nmtk"]}

{", ".join(f"{p.source_lang} → {p.target_lang}" for p in pairs)}.{tags}
From `{meta["checkpoint"]}` of `{meta["run"]}`, weights stored as {meta["quantization"]}.
This folder is complete: CTranslate2's model (`model.bin`, `config.json`, vocabularies), the run's
recipe (`recipe.toml`) and subword model(s), and `{EXPORT_MARKER}`.

With nmtk (its text pipeline, the recipe's beam settings; `--device cuda` on a GPU):

```bash
nmtk translate -m THIS_FOLDER{" --target-lang " + tgt if tags else ""} < input.{src} > output.{tgt}
nmtk translate -m THIS_FOLDER --beam 5 --nbest 3 --print-scores -i input.{src}
```

With CTranslate2 alone, the input must be the subword pieces of the recipe's text pipeline
(`recipe.toml`, `[tokenizer]`), and the output joined back by the same subword model:

```python
import ctranslate2
translator = ctranslate2.Translator("THIS_FOLDER", device="cpu")
translator.translate_batch([pieces], beam_size={recipe.decode.beam}, min_decoding_length=1)
```
"""
