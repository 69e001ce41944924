"""What every `nmtk export` does the same way, mirroring `nmtk.convert.importing`: take a run (never an
export), build the folder beside its destination, add the run's text pipeline, ``nmtk-export.json``
and a README, mark it as nmtk's (so that ``--force`` may replace it later), and rename it into place
only once it is complete (`write_export`). Which exporter a run needs:
`nmtk.convert.formats.export_model`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from nmtk import __version__
from nmtk.errors import NmtkError
from nmtk.files import built_beside
from nmtk.manifest import Manifest
from nmtk.model_source import ModelSource
from nmtk.recipe import Recipe
from nmtk.rundir import ExportDir, RunDir, check_replaceable, mark_written

#: What an export holds: CTranslate2's model, or transformers' MarianMT or M2M-100 folder.
ExportKind = Literal["ctranslate2", "marian", "m2m100"]


@dataclass(frozen=True)
class ExportSource:
    """The run, checkpoint, recipe and manifest an export is made from."""

    run: RunDir
    checkpoint: Path
    recipe: Recipe
    manifest: Manifest


@dataclass(frozen=True)
class ExportResult:
    """What `nmtk export` made, for its summary line."""

    out: Path
    kind: ExportKind
    checkpoint: Path
    quantization: str  # CTranslate2's weight type; "float32" for transformers' folders
    meta: dict[str, Any]  # nmtk-export.json


def export_source(source: ModelSource, out: Path, force: bool) -> ExportSource:
    """``source`` as something to export to ``out``: refused (one line) when ``out`` holds anything but an
    earlier nmtk export and ``force`` is not given, or when ``source`` is an export itself."""
    check_replaceable(out, force, "export")
    if source.is_export or source.checkpoint is None or source.manifest is None:
        raise NmtkError(f"{source.path}: an export already; export the run directory it was made from")
    return ExportSource(RunDir(source.path), source.checkpoint, source.recipe, source.manifest)


def write_export(out: Path, kind: ExportKind, source: ExportSource, fill: Callable[[Path], None],
                 meta: dict[str, Any], readme: Callable[[dict[str, Any]], str]) -> ExportResult:
    """Build the folder: ``fill(folder)`` writes the format's own files; then the text pipeline, the
    metadata (``meta`` after the common fields), the marker and ``readme(meta)``."""
    fmt = "ctranslate2" if kind == "ctranslate2" else "hf"
    run = source.run
    meta = {"format": fmt, "nmtk": __version__, "checkpoint": source.checkpoint.name, "run": str(run.path),
            "models": source.manifest.vocab.models, **meta}
    with built_beside(out) as folder:
        tmp = ExportDir(folder)
        fill(tmp.path)
        tmp.write_text_pipeline(run, source.recipe, source.manifest)
        tmp.write_meta(meta)
        (tmp.path / "README.md").write_text(readme(meta), encoding="utf-8")
        mark_written(tmp.path, f"nmtk export {run.path} --format {fmt}", "export")
    return ExportResult(out, kind, source.checkpoint, meta.get("quantization", "float32"), meta)
