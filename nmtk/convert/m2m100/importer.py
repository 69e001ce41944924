"""`nmtk import` of an M2M-100 or NLLB folder (`nmtk.convert.m2m100.folder`) as a multilingual run
between the languages asked for, keeping what the export needs to write the original's files back."""

from __future__ import annotations

from pathlib import Path

from nmtk.convert.importing import ImportResult, placeholder_recipe, read_json, write_imported_run
from nmtk.convert.m2m100.folder import M2M100, M2M100_FILES, TOKENIZER_JSON, choose_languages, read_m2m100
from nmtk.convert.m2m100.weights import TIED_KEYS, nmtk_m2m100
from nmtk.convert.marian.weights import write_json
from nmtk.errors import NmtkError
from nmtk.files import copy_atomic
from nmtk.manifest import Manifest
from nmtk.pair import Pair
from nmtk.rundir import M2M100_ORIGIN, M2M100_TOKENIZER
from nmtk.text.subword import MAPPED_SUFFIX, MappedSentencePiece


def import_m2m100(folder: Path, out: Path, languages: list[str] | None = None) -> ImportResult:
    """An M2M-100 folder as an nmtk run in ``out``, translating between ``languages`` (every ordered pair)."""
    from nmtk.data.binarized import id_dtype
    from nmtk.data.fetch import sha256_file

    m = read_m2m100(folder)
    langs = choose_languages(m.codes, languages, folder)
    if len(langs) < 2:
        raise NmtkError(f"--languages {','.join(langs)}: name at least two languages to translate between")
    model = nmtk_m2m100(m)
    pairs = [Pair(a, b) for a in langs for b in langs if a != b]
    recipe = placeholder_recipe(out, folder, model, pairs, multilingual=True, joint=True)
    name = f"m2m100{MAPPED_SUFFIX}"

    def write_files(run: Path) -> Manifest:
        MappedSentencePiece.write(run / name, m.side.spm_bytes, m.side.pieces, m.side.hf_vocab, m.side.hf_ids)
        _keep_origin(folder, run, m)
        size = model.cfg.src_vocab
        return Manifest(format=1, source_lang="+".join(langs), target_lang="+".join(langs), dtype=str(id_dtype(size)),
                        vocab={"joint": True, "models": dict.fromkeys(langs, name), "size": dict.fromkeys(langs, size),
                               "sha256": {name: sha256_file(run / name)}},
                        recipe=recipe.name, pairs=[p.name for p in pairs], tags={lang: m.codes[lang] for lang in langs},
                        tag_style="m2m-100")

    return write_imported_run(out, folder, model, recipe, write_files)


def _keep_origin(folder: Path, run: Path, m: M2M100) -> None:
    """What the export needs to write the original's files back: `M2M100_ORIGIN` (configuration,
    tokenizer settings, how many pieces ``vocab.json`` held, the tied matrix's names), and NLLB's
    tokenizer.json."""
    special = folder / "special_tokens_map.json"
    if m.nllb:
        copy_atomic(folder / TOKENIZER_JSON, run / M2M100_TOKENIZER)
    write_json(run / M2M100_ORIGIN, {
        "config": m.config, "tokenizer_config": m.tokenizer_config,
        "special_tokens_map": read_json(special, M2M100_FILES) if special.is_file() else None,
        "vocab_size": None if m.nllb else len(read_json(folder / "vocab.json", M2M100_FILES)),
        "embedding_keys": [key for key in TIED_KEYS if key in m.weights]})  # the names the original saved it under
