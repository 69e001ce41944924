"""`nmtk import`: a transformers MarianMT folder (opus-mt) as an nmtk run (the weight map:
`nmtk.convert.marian`)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nmtk import __version__
from nmtk.convert.marian import (
    NO_ROW,
    SideVocab,
    from_hf,
    layer_entries,
    mapped_side,
    marian_positions,
    nmtk_order,
    residual_order,
)
from nmtk.errors import NmtkError
from nmtk.files import built_beside
from nmtk.manifest import Manifest
from nmtk.recipe import Recipe, recipe_from_dict, recipe_to_toml
from nmtk.rundir import (
    EXPORT_MARKER,
    MANIFEST,
    RECIPE,
    RunDir,
    check_replaceable,
    mark_written,
)
from nmtk.text.subword import MAPPED_SUFFIX, MappedSentencePiece, load_subword_model

if TYPE_CHECKING:
    import torch

    from nmtk.model import Transformer

HF_WEIGHTS = ("model.safetensors", "pytorch_model.bin")
HF_ACTIVATIONS = {"relu": "relu", "swish": "swish", "silu": "swish", "gelu": "gelu"}


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
        target.copy_(from_hf(w[e.hf].float(), e.kind, inverse))
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

    @property
    def target_hint(self) -> str:
        """What `translate` needs besides the run: a multilingual model's target."""
        sources, targets = self.source_lang.split(", "), self.target_lang.split(", ")
        if len(targets) == 1:
            return ""
        target = next(t for t in targets if t != sources[0])
        return (f" --source-lang {sources[0]}" if len(sources) > 1 else "") + f" --target-lang {target}"


def import_marian(folder: Path, out: Path, source_lang: str | None = None, target_lang: str | None = None,
                  force: bool = False) -> ImportResult:
    """A transformers MarianMT folder as an nmtk run directory in ``out`` (recipe, manifest, vocabularies,
    ``checkpoint_last.pt``); built beside ``out`` and renamed into place, so nothing is half-written."""
    from nmtk.checkpoint import Checkpoint
    from nmtk.data.binarized import id_dtype
    from nmtk.data.fetch import sha256_file

    folder, out = Path(folder), Path(out)
    tok_config_path = folder / "tokenizer_config.json"
    tok_config = _read_json(tok_config_path) if tok_config_path.is_file() else {}
    check_replaceable(out, force, "import")
    checked = read_marian(folder)
    tags = marian_tags(checked.src)  # a multilingual model's: the target's tag begins the source
    src_lang, tgt_lang = _languages(folder, tok_config if isinstance(tok_config, dict) else {}, source_lang,
                                    target_lang, bool(tags))
    model = nmtk_model(checked)
    targets = list(tags) or [tgt_lang]
    with built_beside(out) as build:
        tmp = RunDir(build)
        files = {src_lang: f"{src_lang}{MAPPED_SUFFIX}", "": f"{'target' if tags else tgt_lang}{MAPPED_SUFFIX}"}
        for key, side in ((src_lang, checked.src), ("", checked.tgt)):
            MappedSentencePiece.write(tmp.path / files[key], side.spm_bytes, side.pieces, side.hf_vocab, side.hf_ids)
        names = {src_lang: files[src_lang], **dict.fromkeys(targets, files[""])}
        sha = {name: sha256_file(tmp.path / name) for name in names.values()}
        recipe = _imported_recipe(out, folder, src_lang, targets, model, bool(tags))
        sizes = {src_lang: model.cfg.src_vocab, **dict.fromkeys(targets, model.cfg.tgt_vocab)}
        manifest = Manifest(format=1, source_lang=src_lang, target_lang="+".join(targets),
                            dtype=str(id_dtype(max(model.cfg.src_vocab, model.cfg.tgt_vocab))),
                            vocab={"joint": False, "models": names, "size": sizes, "sha256": sha},
                            recipe=recipe.name, pairs=[f"{src_lang}-{t}" for t in tags], tags=tags)
        manifest.write(tmp.path / MANIFEST)
        (tmp.path / RECIPE).write_text(IMPORT_HEADER.format(folder=folder) + recipe_to_toml(recipe), encoding="utf-8")
        Checkpoint(model=model.state_dict(), model_config=model.cfg.to_dict(), vocab=sha,
                   recipe=recipe.model_dump(mode="json"), recipe_hash=recipe.hash(), nmtk=__version__,
                   state={"update": 0}, imported_from=str(folder)).save(tmp.last)
        mark_written(tmp.path, f"nmtk import {folder}", "import")
    cfg = model.cfg
    return ImportResult(out, src_lang, ", ".join(targets), cfg.encoder_layers, cfg.decoder_layers, cfg.d_model,
                        sum(p.numel() for p in model.parameters()))


IMPORT_HEADER = """\
# Written by `nmtk import {folder}`. [model] and [tokenizer] describe the imported model; [data] names
# placeholder corpora. To fine-tune: copy this file, point [data] at your corpora, keep
# tokenizer.reuse (prepare then uses this run's vocabulary), and run
#   nmtk train YOUR_RECIPE.toml --init-from THIS_RUN
"""


def _imported_recipe(out: Path, folder: Path, src: str, targets: list[str], model: Transformer,
                     multilingual: bool) -> Recipe:
    """The imported run's recipe: the model as it is, placeholder corpora (one pair per target of a
    multilingual model)."""
    cfg = model.cfg
    name = re.sub(r"[^A-Za-z0-9._-]", "-", out.name).lstrip("._-") or "imported"
    pairs = [{"source_lang": src, "target_lang": tgt,
              "train": [{"name": "train", "source": f"train.{src}-{tgt}.{src}", "target": f"train.{src}-{tgt}.{tgt}"}],
              "valid": {"name": "valid", "source": f"valid.{src}-{tgt}.{src}", "target": f"valid.{src}-{tgt}.{tgt}"}}
             for tgt in targets]
    one = {"source_lang": src, "target_lang": targets[0],
           "train": [{"name": "train", "source": f"train.{src}", "target": f"train.{targets[0]}"}],
           "valid": {"name": "valid", "source": f"valid.{src}", "target": f"valid.{targets[0]}"}}
    data = {
        "name": name,
        "data": {"pairs": pairs} if multilingual else one,
        "tokenizer": {"reuse": str(out), "vocab_size": cfg.tgt_vocab, "joint": False},
        "model": {"encoder_layers": cfg.encoder_layers, "decoder_layers": cfg.decoder_layers,
                  "layers": cfg.encoder_layers, "d_model": cfg.d_model, "heads": cfg.heads, "d_ff": cfg.d_ff,
                  "dropout": cfg.dropout, "attention_dropout": cfg.attention_dropout,
                  "relu_dropout": cfg.relu_dropout, "share_embeddings": cfg.share_embeddings, "norm": "post",
                  "max_positions": cfg.max_positions, "activation": cfg.activation, "output_bias": cfg.output_bias},
    }
    return recipe_from_dict(data, f"nmtk import {folder}")


__all__ = ["EXPORT_MARKER", "ImportResult", "import_marian"]
