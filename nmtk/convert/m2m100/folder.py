"""An M2M-100 or NLLB folder, read and checked (`read_m2m100`): its configuration, weights, vocabulary
and language codes, in every tokenizer format transformers has written.

Three numberings are read. M2M100Tokenizer's: language codes numbered after ``vocab.json``, in the
order its files list them (``additional_special_tokens``), or, as transformers 5 saves it, in the
order of the named list its ``language_codes`` setting gives (`NAMED_CODES`: M2M100Tokenizer's own
lists, which nmtk carries as data). NLLB's (the same model class, with NllbTokenizer): ``tokenizer.json``
numbers the pieces and its added tokens hold the codes (``eng_Latn``, which become the run's language
names).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nmtk.convert.importing import read_json, read_weights
from nmtk.convert.marian.weights import HF_ACTIVATIONS, SideVocab, mapped_side, nmtk_order
from nmtk.errors import NmtkError

if TYPE_CHECKING:
    import torch

SPM_FILE = "sentencepiece.bpe.model"
TOKENIZER_JSON = "tokenizer.json"
#: What an M2M-100 folder holds, for the line naming a missing file.
M2M100_FILES = f"an M2M-100 folder has config.json, vocab.json (NLLB's: tokenizer.json) and {SPM_FILE}"
CODE = re.compile(r"__([A-Za-z][A-Za-z0-9_]*)__")
#: NLLB's language codes: ISO 639-3 and the script (``eng_Latn``), which nmtk uses as the languages' names.
NLLB_CODE = re.compile(r"[a-z]{3}_[A-Z][a-z]{3}")

#: M2M100Tokenizer's language lists, by the name its ``language_codes`` setting gives them (transformers
#: 5 writes the name, not the list): the 100 languages of M2M-100 and the 8 of WMT21's models, in
#: M2M100Tokenizer's order (which numbers their codes after ``vocab.json``).
NAMED_CODES = {
    "m2m100": [
        "af", "am", "ar", "ast", "az", "ba", "be", "bg", "bn", "br", "bs", "ca", "ceb", "cs", "cy", "da", "de", "el",
        "en", "es", "et", "fa", "ff", "fi", "fr", "fy", "ga", "gd", "gl", "gu", "ha", "he", "hi", "hr", "ht", "hu",
        "hy", "id", "ig", "ilo", "is", "it", "ja", "jv", "ka", "kk", "km", "kn", "ko", "lb", "lg", "ln", "lo", "lt",
        "lv", "mg", "mk", "ml", "mn", "mr", "ms", "my", "ne", "nl", "no", "ns", "oc", "or", "pa", "pl", "ps", "pt",
        "ro", "ru", "sd", "si", "sk", "sl", "so", "sq", "sr", "ss", "su", "sv", "sw", "ta", "th", "tl", "tn", "tr",
        "uk", "ur", "uz", "vi", "wo", "xh", "yi", "yo", "zh", "zu"],
    "wmt21": ["en", "ha", "is", "ja", "cs", "ru", "zh", "de"],
}


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


def _check_config(c: dict[str, Any], where: Path) -> None:
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
    """M2M100Tokenizer's numbering: ``vocab.json``, then the language codes (``__en__``) after it, in the
    order of the list its ``language_codes`` names (`NAMED_CODES`), else of the list its files hold."""
    vocab = read_json(folder / "vocab.json", M2M100_FILES)
    if not isinstance(vocab, dict) or sorted(vocab.values()) != list(range(len(vocab))):
        raise NmtkError(f"{folder / 'vocab.json'}: not a vocabulary numbered 0..{len(vocab) - 1 if vocab else 0}")
    # M2M100Tokenizer numbers the codes in the order of its named list; a list in the files is read where
    # the name is not one nmtk knows
    named = tok_config.get("language_codes") if isinstance(tok_config.get("language_codes"), str) else ""
    codes = NAMED_CODES.get(named) or _listed_codes(folder, tok_config)
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
    data = read_json(path, M2M100_FILES)
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


def _listed_codes(folder: Path, tok_config: dict[str, Any]) -> list[str]:
    """The language codes a tokenizer's files list (``__en__``, ...), in their order: in
    tokenizer_config.json's or special_tokens_map.json's ``additional_special_tokens`` (transformers 4),
    or ``extra_special_tokens`` (transformers 5, where it lists them at all)."""
    special_map = folder / "special_tokens_map.json"
    for source in (tok_config, read_json(special_map, M2M100_FILES) if special_map.is_file() else {}):
        if not isinstance(source, dict):
            continue
        for key in ("additional_special_tokens", "extra_special_tokens"):
            special = source.get(key) or []
            special = list(special.values()) if isinstance(special, dict) else special
            tokens = [t.get("content") if isinstance(t, dict) else t for t in special]
            codes = [m.group(1) for t in tokens if isinstance(t, str) and (m := CODE.fullmatch(t))]
            if codes:
                return codes
    return []


def read_m2m100(folder: Path) -> M2M100:
    """Read and check an M2M-100 folder; one line naming the file or field for anything nmtk cannot hold."""
    from nmtk.text.subword import load_subword_model

    config = read_json(folder / "config.json", M2M100_FILES)
    _check_config(config, folder / "config.json")
    tok_path = folder / "tokenizer_config.json"
    tok_config = read_json(tok_path, M2M100_FILES) if tok_path.is_file() else {}
    spm = folder / SPM_FILE
    if not spm.is_file():
        raise NmtkError(f"{spm}: missing; {M2M100_FILES}")
    load_subword_model(spm)  # a garbage file is one line here
    weights = read_weights(folder)
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
