"""`nmtk import` and `nmtk export`: which converter a folder or a run needs. A folder's config.json says
whether it is MarianMT (`nmtk.convert.marian.importer`) or M2M-100/NLLB (`nmtk.convert.m2m100.importer`);
an export goes to CTranslate2 (`nmtk.convert.ctranslate2`) or to Hugging Face, where an imported
M2M-100 run goes back to its own format (`nmtk.convert.m2m100.exporter`) and any other run becomes
MarianMT (`nmtk.convert.marian.exporter`). The converters share `nmtk.convert.importing` and
`nmtk.convert.exporting`; each is imported only when its format is asked for.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from nmtk.convert.exporting import ExportResult
from nmtk.convert.importing import ImportResult
from nmtk.errors import NmtkError
from nmtk.model_source import ModelSource
from nmtk.precision import Quantization
from nmtk.rundir import M2M100_ORIGIN, check_replaceable


def import_model(folder: Path, out: Path, source_lang: str | None = None, target_lang: str | None = None,
                 languages: list[str] | None = None, force: bool = False) -> ImportResult:
    """`nmtk import`: a MarianMT folder (`nmtk.convert.marian.importer`), or an M2M-100 or NLLB one
    (`nmtk.convert.m2m100.importer`), as an nmtk run in ``out``."""
    from nmtk.convert.m2m100.folder import is_m2m100
    from nmtk.convert.m2m100.importer import import_m2m100
    from nmtk.convert.marian.importer import import_marian

    folder, out = Path(folder), Path(out)
    m2m100 = is_m2m100(folder)
    if m2m100 and (source_lang or target_lang):
        raise NmtkError(f"{folder}: an M2M-100 model translates between its languages: choose them with "
                        "--languages, not --source-lang/--target-lang")
    if not m2m100 and languages:
        raise NmtkError(f"--languages: for M2M-100 models; {folder} is a MarianMT model")
    check_replaceable(out, force, "import")
    if m2m100:
        return import_m2m100(folder, out, languages)
    return import_marian(folder, out, source_lang, target_lang)



def export_model(source: ModelSource, out: Path, fmt: Literal["ctranslate2", "hf"], quantization: str = "float32",
                 force: bool = False, decode: dict[str, Any] | None = None) -> ExportResult:
    """`nmtk export`: the model ``source`` names (`nmtk.model_source.resolve_model`) as a CTranslate2 folder
    (`nmtk.convert.ctranslate2`), or a Hugging Face one: an imported M2M-100 or NLLB run back in its own
    format (`nmtk.convert.m2m100.exporter`), any other run as MarianMT (`nmtk.convert.marian.exporter`).
    ``decode``: fields of the recipe's ``[decode]`` that MarianMT's generation_config.json takes instead."""
    if quantization not in {q.value for q in Quantization}:
        raise NmtkError(f"--quantization {quantization}: choose one of {', '.join(q.value for q in Quantization)}")
    chosen = {k: v for k, v in (decode or {}).items() if v is not None}
    if fmt == "hf" and quantization != "float32":
        raise NmtkError(f"--quantization {quantization}: --format hf writes float32 weights")
    if fmt != "hf" and chosen:
        raise NmtkError(f"--{', --'.join(k.replace('_', '-') for k in chosen)}: written only by --format hf "
                        "(CTranslate2 takes them per call: nmtk translate -m EXPORT --no-repeat-ngram-size N)")
    if fmt == "ctranslate2":
        from nmtk.convert.ctranslate2 import export_ctranslate2

        return export_ctranslate2(source, out, quantization, force)
    if (source.path / M2M100_ORIGIN).is_file() and not source.is_export:
        from nmtk.convert.m2m100.exporter import export_m2m100

        return export_m2m100(source, out, force)
    from nmtk.convert.marian.exporter import export_marian

    return export_marian(source, out, force, chosen)
