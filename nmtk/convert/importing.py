"""`nmtk import`: which importer a folder needs, by what its config.json says it is."""

from __future__ import annotations

from pathlib import Path

from nmtk.convert.hf_import import ImportResult, import_marian
from nmtk.convert.m2m100 import import_m2m100, is_m2m100
from nmtk.errors import NmtkError


def import_model(folder: Path, out: Path, source_lang: str | None = None, target_lang: str | None = None,
                 languages: list[str] | None = None, force: bool = False) -> ImportResult:
    """`nmtk import`: a MarianMT folder (`import_marian`), or an M2M-100 one (`nmtk.convert.m2m100`)."""
    if is_m2m100(Path(folder)):
        if source_lang or target_lang:
            raise NmtkError(f"{folder}: an M2M-100 model translates between its languages: choose them with "
                            "--languages, not --source-lang/--target-lang")
        return import_m2m100(Path(folder), Path(out), languages, force)
    if languages:
        raise NmtkError(f"--languages: for M2M-100 models; {folder} is a MarianMT model")
    return import_marian(folder, out, source_lang, target_lang, force)
