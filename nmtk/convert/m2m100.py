"""M2M-100 models (transformers' ``M2M100ForConditionalGeneration``) and nmtk: `nmtk import` of one as a
multilingual run, and `nmtk export --format hf` of that run back to the same files.

An M2M-100 model is the paper's Transformer with four differences, each of which nmtk's core holds:

* **Pre-norm** with a final LayerNorm after each stack (``model.norm = "pre"``).
* **fairseq's sinusoids**, counted from position 2 (``model.positions = "fairseq"``): not the paper's
  table under any reordering, so nmtk computes that table itself (`sinusoidal_positions`), and the
  weights map one to one, without the reordering MarianMT's need (`nmtk.convert.marian`).
* **Language codes**: the source begins with its own language's code (``__en__``), the translation
  with the target's, forced as its first token. The run's manifest says so (``tag_style =
  "m2m-100"``): the source pipeline puts the code first, the search forces the target's, and the
  detokenizer leaves it out (`TextPipeline.starts`).
* **Vocabulary**: ``vocab.json`` numbers the sentencepiece pieces (``<s>`` 0, ``<pad>`` 1, ``</s>`` 2,
  ``<unk>`` 3), the language codes follow it, then a few unused "made-up" words. Decoding starts
  from ``</s>``, so nmtk's ``<s>`` row is a copy of that row; a bias of -10,000 on it keeps it out of
  the softmax, where transformers has the one ``</s>``.

Two tokenizers' numberings are read. M2M100Tokenizer's: language codes numbered after ``vocab.json``,
in the order of ``additional_special_tokens``. NLLB's (the same model class, with NllbTokenizer):
``tokenizer.json`` numbers the pieces and its added tokens hold the codes (``eng_Latn``, which become
the run's language names). NLLB's tokenizer.json is kept in the run as it came, and written back.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nmtk.convert.marian import NO_ROW, SideVocab, from_hf, layer_entries, mapped_side, nmtk_order, to_hf, write_json
from nmtk.errors import NmtkError
from nmtk.files import copy_atomic
from nmtk.rundir import M2M100_ORIGIN, M2M100_TOKENIZER
from nmtk.vocab import BOS_ID

if TYPE_CHECKING:
    import torch

    from nmtk.model import Transformer

SPM_FILE = "sentencepiece.bpe.model"
TOKENIZER_JSON = "tokenizer.json"
CODE = re.compile(r"__([A-Za-z][A-Za-z0-9_]*)__")
#: NLLB's language codes: ISO 639-3 and the script (``eng_Latn``), which nmtk uses as the languages' names.
NLLB_CODE = re.compile(r"[a-z]{3}_[A-Z][a-z]{3}")
#: What keeps nmtk's ``<s>`` (a copy of ``</s>``'s row, where decoding starts) out of the softmax.
START_BIAS = -1e4
TIED_KEYS = ("model.shared.weight", "model.encoder.embed_tokens.weight", "model.decoder.embed_tokens.weight",
             "lm_head.weight")
FINAL_NORMS = (("model.encoder.layer_norm", "encoder_norm"), ("model.decoder.layer_norm", "decoder_norm"))


def is_m2m100(folder: Path) -> bool:
    path = folder / "config.json"
    try:
        return json.loads(path.read_text(encoding="utf-8")).get("model_type") == "m2m_100"
    except (OSError, ValueError, AttributeError):
        return False


@dataclass
class M2M100:
    """An M2M-100 folder, read and checked: its configuration, weights, vocabulary and language codes."""

    config: dict[str, Any]
    weights: dict[str, torch.Tensor]
    side: SideVocab
    codes: dict[str, int]  # language -> nmtk id of its code
    tokenizer_config: dict[str, Any]
    nllb: bool  # NLLB's files (tokenizer.json numbers the pieces), else M2M100Tokenizer's (vocab.json)


def _read_json(path: Path) -> Any:
    if not path.is_file():
        raise NmtkError(f"{path}: missing; an M2M-100 folder has config.json, vocab.json (NLLB's: tokenizer.json) "
                       f"and {SPM_FILE}")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise NmtkError(f"{path}: not readable JSON ({type(exc).__name__})") from None


def _check_config(c: dict[str, Any], where: Path) -> None:
    from nmtk.convert.hf_import import HF_ACTIVATIONS

    if c.get("activation_function", "relu") not in HF_ACTIVATIONS:
        raise NmtkError(f"{where}: activation_function {c.get('activation_function')!r} is not one nmtk implements")
    if not c.get("scale_embedding", False):
        raise NmtkError(f"{where}: scale_embedding = false; nmtk scales embeddings by √d_model (M2M-100's default)")
    if not c.get("tie_word_embeddings", True):
        raise NmtkError(f"{where}: tie_word_embeddings = false; nmtk imports M2M-100 models with tied embeddings")
    for a, b in (("encoder_attention_heads", "decoder_attention_heads"), ("encoder_ffn_dim", "decoder_ffn_dim")):
        if c.get(a) != c.get(b):
            raise NmtkError(f"{where}: {a} ({c.get(a)}) differs from {b} ({c.get(b)}); nmtk uses one value")
    if c["d_model"] % c["encoder_attention_heads"]:
        raise NmtkError(f"{where}: d_model is not divisible by encoder_attention_heads")
    if c.get("pad_token_id", 1) != 1:  # fairseq counts positions from the padding id + 1
        raise NmtkError(f"{where}: pad_token_id = {c.get('pad_token_id')}; M2M-100 models pad with id 1, and their "
                        "positions start after it")


def is_nllb(folder: Path) -> bool:
    """NLLB's files: the numbering is in tokenizer.json (NllbTokenizer), there is no vocab.json."""
    return not (folder / "vocab.json").is_file() and (folder / TOKENIZER_JSON).is_file()


def _vocabulary(folder: Path, rows: int, tok_config: dict[str, Any], nllb: bool) -> tuple[dict[str, int],
                                                                                        dict[str, str]]:
    """Every row's piece as the model's tokenizer numbers it (M2M100Tokenizer's or NLLB's), made-up
    words up to the embedding's rows; and each language's code, in the tokenizer's order."""
    full, codes = _nllb_vocabulary(folder) if nllb else _m2m100_vocabulary(folder, tok_config)
    if sorted(full.values()) != list(range(len(full))):
        raise NmtkError(f"{folder}: the tokenizer's ids are not numbered 0..{len(full) - 1}")
    pieces = len(full)
    for k in range(rows - len(full)):
        full[f"madeupword{k:04d}"] = len(full)
    if len(full) != rows:
        raise NmtkError(f"{folder}: the tokenizer numbers {pieces} pieces and language codes, but the weights have "
                        f"{rows} rows; the tokenizer files are not this model's")
    return full, codes


def _m2m100_vocabulary(folder: Path, tok_config: dict[str, Any]) -> tuple[dict[str, int], dict[str, str]]:
    """M2M100Tokenizer's numbering: ``vocab.json``, then the language codes (``__en__``) after it."""
    vocab = _read_json(folder / "vocab.json")
    if not isinstance(vocab, dict) or sorted(vocab.values()) != list(range(len(vocab))):
        raise NmtkError(f"{folder / 'vocab.json'}: not a vocabulary numbered 0..{len(vocab) - 1 if vocab else 0}")
    codes = _listed_codes(folder, tok_config) or NAMED_CODES.get(tok_config.get("language_codes", ""), [])
    if not codes:
        raise NmtkError(f"{folder / 'tokenizer_config.json'}: no language codes (__en__, ...) listed in "
                        "additional_special_tokens, and language_codes is not one nmtk knows "
                        f"({', '.join(NAMED_CODES)}); nmtk reads M2M100Tokenizer's files")
    full = dict(vocab)
    for i, lang in enumerate(codes):
        full[f"__{lang}__"] = len(vocab) + i
    return full, {lang: f"__{lang}__" for lang in codes}


def _nllb_vocabulary(folder: Path) -> tuple[dict[str, int], dict[str, str]]:
    """NLLB's numbering, as its tokenizer.json gives it: fairseq's four specials, the sentencepiece
    pieces one place on, then the language codes (``eng_Latn``) and ``<mask>`` as added tokens."""
    path = folder / TOKENIZER_JSON
    data = _read_json(path)
    model = data.get("model") if isinstance(data, dict) else None
    vocab = model.get("vocab") if isinstance(model, dict) else None
    if isinstance(vocab, list):  # a Unigram model lists [piece, score] in id order
        vocab = {entry[0]: i for i, entry in enumerate(vocab)}
    if not isinstance(vocab, dict):
        raise NmtkError(f"{path}: no model.vocab; nmtk reads the tokenizer.json NllbTokenizer writes")
    full = dict(vocab)
    for token in data.get("added_tokens") or []:
        full[token["content"]] = int(token["id"])
    codes = [t for t in sorted(full, key=full.__getitem__) if NLLB_CODE.fullmatch(t)]
    if not codes:
        raise NmtkError(f"{path}: no language codes (eng_Latn, ...) among its tokens; nmtk reads NLLB's tokenizer")
    return full, {code: code for code in codes}


#: M2M100Tokenizer's short language list, by the name its ``language_codes`` setting gives it (newer
#: transformers write the name, not the list). The 100-language "m2m100" list is read from the files.
NAMED_CODES = {"wmt21": ["en", "ha", "is", "ja", "cs", "ru", "zh", "de"]}


def _listed_codes(folder: Path, tok_config: dict[str, Any]) -> list[str]:
    """The language codes a tokenizer's files list (``__en__``, ...), in their order: in
    tokenizer_config.json's or special_tokens_map.json's ``additional_special_tokens``."""
    for source in (tok_config, _read_json(folder / "special_tokens_map.json")
                   if (folder / "special_tokens_map.json").is_file() else {}):
        special = source.get("additional_special_tokens") or [] if isinstance(source, dict) else []
        tokens = [t.get("content") if isinstance(t, dict) else t for t in special]
        codes = [m.group(1) for t in tokens if isinstance(t, str) and (m := CODE.fullmatch(t))]
        if codes:
            return codes
    return []


def read_m2m100(folder: Path) -> M2M100:
    """Read and check an M2M-100 folder; one line naming the file or field for anything nmtk cannot hold."""
    from nmtk.convert.hf_import import _read_weights
    from nmtk.text.subword import load_subword_model

    config = _read_json(folder / "config.json")
    _check_config(config, folder / "config.json")
    tok_path = folder / "tokenizer_config.json"
    tok_config = _read_json(tok_path) if tok_path.is_file() else {}
    spm = folder / SPM_FILE
    if not spm.is_file():
        raise NmtkError(f"{spm}: missing; an M2M-100 folder has config.json, vocab.json (NLLB's: tokenizer.json) "
                       f"and {SPM_FILE}")
    load_subword_model(spm)  # a garbage file is one line here
    weights = _read_weights(folder)
    table = weights.get("model.shared.weight")
    if table is None:
        raise NmtkError(f"{folder}: the weights have no model.shared.weight")
    nllb = is_nllb(folder)
    full, codes = _vocabulary(folder, table.shape[0], tok_config, nllb)
    start = int(config.get("decoder_start_token_id", full["</s>"]))
    side = mapped_side(full, nmtk_order(full, start, folder / (TOKENIZER_JSON if nllb else "vocab.json")),
                       spm.read_bytes())
    ids = {piece: i for i, piece in enumerate(side.pieces)}
    return M2M100(config, weights, side, {lang: ids[code] for lang, code in codes.items()}, tok_config, nllb)


def nmtk_m2m100(m: M2M100) -> Transformer:
    """The nmtk Transformer holding an M2M-100 model's weights (pre-norm, fairseq positions)."""
    import torch

    from nmtk.convert.hf_import import HF_ACTIVATIONS, _nmtk_rows
    from nmtk.model import ModelConfig, Transformer
    from nmtk.vocab import PAD_ID

    c, w = m.config, m.weights
    d = c["d_model"]
    cfg = ModelConfig(
        src_vocab=len(m.side.pieces), tgt_vocab=len(m.side.pieces), d_model=d, heads=c["encoder_attention_heads"],
        d_ff=c["encoder_ffn_dim"], encoder_layers=c["encoder_layers"], decoder_layers=c["decoder_layers"],
        dropout=float(c.get("dropout", 0.1)), attention_dropout=float(c.get("attention_dropout", 0.0)),
        relu_dropout=float(c.get("activation_dropout", 0.0)), share_embeddings="all", norm="pre", pad_id=PAD_ID,
        max_positions=int(c.get("max_position_embeddings", 1024)),
        activation=HF_ACTIVATIONS[c.get("activation_function", "relu")], output_bias=True, positions="fairseq")
    with torch.device("meta"):
        shapes = Transformer(cfg).state_dict()
    same = torch.arange(d)
    state = {k: torch.zeros(v.shape, dtype=torch.float32) for k, v in shapes.items()}
    for e in _entries(cfg):
        if e.hf not in w:
            raise NmtkError(f"the weights lack {e.hf}: not an M2M-100 model of this configuration")
        target = state[e.nmtk] if e.rows is None else state[e.nmtk][e.rows[0] : e.rows[1]]
        target.copy_(from_hf(w[e.hf].float(), e.kind, same))
    state["src_embed.table.weight"] = _nmtk_rows(w["model.shared.weight"], m.side, same)
    state["tgt_embed.table.weight"] = state["src_embed.table.weight"]
    state["output_bias"][BOS_ID] = START_BIAS
    model = Transformer.empty(cfg, torch.device("cpu"))
    model.load_state_dict(state)
    return model.eval()


def _entries(cfg: Any) -> list[Any]:
    from nmtk.convert.marian import Entry

    finals = [Entry(f"{hf}.{p}", f"{nm}.{p}", "out") for hf, nm in FINAL_NORMS for p in ("weight", "bias")]
    return layer_entries(cfg.encoder_layers, cfg.decoder_layers, cfg.d_model) + finals


def m2m100_state_dict(model: Transformer, side: SideVocab, embedding_keys: tuple[str, ...] = ("model.shared.weight",)
                      ) -> dict[str, torch.Tensor]:
    """The nmtk model's tensors under M2M-100's names, in its vocabulary's order: what
    ``save_pretrained`` writes (the tied matrix under ``embedding_keys``, the names the original used)."""
    import torch

    state = model.state_dict()
    same = torch.arange(model.cfg.d_model)
    out: dict[str, torch.Tensor] = {}
    for e in _entries(model.cfg):
        tensor = to_hf(state[e.nmtk], e.kind, same)
        part = tensor if e.rows is None else tensor[e.rows[0] : e.rows[1]]
        out[e.hf] = part.contiguous().clone()
    order = side.hf_order()
    if NO_ROW in order:
        raise NmtkError("the vocabulary has a row the M2M-100 model has not")
    table = state["src_embed.table.weight"][torch.tensor(order)].contiguous()
    for key in embedding_keys:
        out[key] = table.clone()
    return out


def write_m2m100(folder: Path, model: Transformer, side: SideVocab, origin: dict[str, Any],
                 tokenizer_json: Path | None = None) -> None:
    """An imported M2M-100 run back as transformers' files: weights, config, vocabulary (``vocab.json``,
    or NLLB's ``tokenizer_json`` as it came), tokenizer settings."""
    from safetensors.torch import save_file

    warn_dropped_bias(model)
    state = m2m100_state_dict(model, side, tuple(origin.get("embedding_keys") or ("model.shared.weight",)))
    save_file(state, str(folder / "model.safetensors"), metadata={"format": "pt"})
    write_json(folder / "config.json", origin["config"])
    (folder / SPM_FILE).write_bytes(side.spm_bytes)
    if origin.get("vocab_size") is None:
        if tokenizer_json is None or not tokenizer_json.is_file():
            raise NmtkError(f"{tokenizer_json}: missing; an NLLB run keeps the model's tokenizer.json there")
        copy_atomic(tokenizer_json, folder / TOKENIZER_JSON)
    else:
        write_json(folder / "vocab.json", {p: i for p, i in side.hf_vocab.items() if i < origin["vocab_size"]})
    write_json(folder / "tokenizer_config.json", origin["tokenizer_config"])
    if origin.get("special_tokens_map") is not None:
        write_json(folder / "special_tokens_map.json", origin["special_tokens_map"])


def warn_dropped_bias(model: Transformer) -> None:
    """M2M-100 has no output bias: nmtk's carries only `START_BIAS` on ``<s>`` after an import, but
    fine-tuning trains all of it, and what it learnt cannot be written back. Said once, with its size,
    so that a changed output of the export is not a mystery."""
    from nmtk.console import console

    learnt = model.output_bias.detach().float().clone()
    learnt[BOS_ID] = 0.0
    largest = float(learnt.abs().max())
    if largest > 0:
        console.print(f"warning: M2M-100 has no output bias: the one fine-tuning learnt (largest |b| {largest:.3g}) "
                      "is left out of the export, whose outputs may differ slightly from the run's")


def choose_languages(codes: dict[str, int], languages: list[str] | None, where: Path) -> list[str]:
    """The languages the run is to translate between: those asked for (each one the model's), else all
    of the model's when they are few; M2M-100's 100 make 9,900 pairs, so those are asked for."""
    if languages:
        unknown = [lang for lang in languages if lang not in codes]
        if unknown:
            raise NmtkError(f"--languages {unknown[0]}: not a language of {where} (it has {', '.join(codes)})")
        return list(dict.fromkeys(languages))
    if len(codes) > 10:
        raise NmtkError(f"{where}: {len(codes)} languages; name the ones to translate between with --languages "
                        "(e.g. --languages en,de,fr)")
    return list(codes)


def import_m2m100(folder: Path, out: Path, languages: list[str] | None = None, force: bool = False) -> Any:
    """An M2M-100 folder as an nmtk run directory in ``out``, translating between ``languages`` (every
    ordered pair); built beside ``out`` and renamed into place, so nothing is half-written."""
    from nmtk import __version__
    from nmtk.checkpoint import Checkpoint
    from nmtk.convert.hf_import import IMPORT_HEADER, ImportResult
    from nmtk.data.binarized import id_dtype
    from nmtk.data.fetch import sha256_file
    from nmtk.files import built_beside
    from nmtk.manifest import Manifest
    from nmtk.recipe import recipe_to_toml
    from nmtk.rundir import MANIFEST, RECIPE, RunDir, check_replaceable, mark_written
    from nmtk.text.subword import MAPPED_SUFFIX, MappedSentencePiece

    folder, out = Path(folder), Path(out)
    check_replaceable(out, force, "import")
    m = read_m2m100(folder)
    langs = choose_languages(m.codes, languages, folder)
    if len(langs) < 2:
        raise NmtkError(f"--languages {','.join(langs)}: name at least two languages to translate between")
    model = nmtk_m2m100(m)
    pairs = [(a, b) for a in langs for b in langs if a != b]
    name = f"m2m100{MAPPED_SUFFIX}"
    with built_beside(out) as build:
        tmp = RunDir(build)
        MappedSentencePiece.write(tmp.path / name, m.side.spm_bytes, m.side.pieces, m.side.hf_vocab, m.side.hf_ids)
        sha = {name: sha256_file(tmp.path / name)}
        recipe = _recipe(out, folder, pairs, model)
        size = model.cfg.src_vocab
        Manifest(format=1, source_lang="+".join(langs), target_lang="+".join(langs), dtype=str(id_dtype(size)),
                 vocab={"joint": True, "models": dict.fromkeys(langs, name), "size": dict.fromkeys(langs, size),
                        "sha256": sha},
                 recipe=recipe.name, pairs=[f"{a}-{b}" for a, b in pairs], tags={lang: m.codes[lang] for lang in langs},
                 tag_style="m2m-100").write(tmp.path / MANIFEST)
        (tmp.path / RECIPE).write_text(IMPORT_HEADER.format(folder=folder) + recipe_to_toml(recipe), encoding="utf-8")
        _keep_origin(folder, tmp.path, m)
        Checkpoint(model=model.state_dict(), model_config=model.cfg.to_dict(), vocab=sha,
                   recipe=recipe.model_dump(mode="json"), recipe_hash=recipe.hash(), nmtk=__version__,
                   state={"update": 0}, imported_from=str(folder)).save(tmp.last)
        mark_written(tmp.path, f"nmtk import {folder}", "import")
    cfg = model.cfg
    return ImportResult(out, ", ".join(langs), ", ".join(langs), cfg.encoder_layers, cfg.decoder_layers, cfg.d_model,
                        sum(p.numel() for p in model.parameters()))


def _keep_origin(folder: Path, run: Path, m: M2M100) -> None:
    """What the export needs to write the original's files back: `M2M100_ORIGIN` (configuration,
    tokenizer settings, how many pieces ``vocab.json`` held, the tied matrix's names), and NLLB's
    tokenizer.json."""
    special = folder / "special_tokens_map.json"
    if m.nllb:
        copy_atomic(folder / TOKENIZER_JSON, run / M2M100_TOKENIZER)
    write_json(run / M2M100_ORIGIN, {
        "config": m.config, "tokenizer_config": m.tokenizer_config,
        "special_tokens_map": _read_json(special) if special.is_file() else None,
        "vocab_size": None if m.nllb else len(_read_json(folder / "vocab.json")),
        "embedding_keys": [key for key in TIED_KEYS if key in m.weights]})  # the names the original saved it under


def _recipe(out: Path, folder: Path, pairs: list[tuple[str, str]], model: Transformer) -> Any:
    from nmtk.recipe import recipe_from_dict

    cfg = model.cfg
    name = re.sub(r"[^A-Za-z0-9._-]", "-", out.name).lstrip("._-") or "imported"
    data = {"pairs": [{"source_lang": a, "target_lang": b,
                       "train": [{"name": "train", "source": f"train.{a}-{b}.{a}", "target": f"train.{a}-{b}.{b}"}],
                       "valid": {"name": "valid", "source": f"valid.{a}-{b}.{a}", "target": f"valid.{a}-{b}.{b}"}}
                      for a, b in pairs]}
    return recipe_from_dict({
        "name": name, "data": data, "tokenizer": {"reuse": str(out), "vocab_size": cfg.tgt_vocab},
        "model": {"encoder_layers": cfg.encoder_layers, "decoder_layers": cfg.decoder_layers,
                  "layers": cfg.encoder_layers, "d_model": cfg.d_model, "heads": cfg.heads, "d_ff": cfg.d_ff,
                  "dropout": cfg.dropout, "attention_dropout": cfg.attention_dropout, "relu_dropout": cfg.relu_dropout,
                  "share_embeddings": "all", "norm": "pre", "max_positions": cfg.max_positions,
                  "activation": cfg.activation, "output_bias": True, "positions": "fairseq"},
    }, f"nmtk import {folder}")


def export_m2m100(run_path: Path, model: Transformer, folder: Path) -> None:
    """An imported M2M-100 run's model (as trained since, or not) back as transformers' files in ``folder``."""
    from nmtk.convert.marian import side_vocab_of_run
    from nmtk.manifest import Manifest

    origin = _read_json(run_path / M2M100_ORIGIN)
    manifest = Manifest.read(run_path / "manifest.json")
    side = side_vocab_of_run(next(iter(manifest.model_paths(run_path).values())))
    write_m2m100(folder, model, side, origin, run_path / M2M100_TOKENIZER)
