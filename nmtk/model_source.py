"""What a command means by "the model": ``-m``, ``--checkpoint``, ``$NMTK_MODEL`` or nothing (the newest run),
resolved once to a run and its checkpoint, or an export (`ModelSource`).

The one place a run's recipe is read to choose its checkpoint (`default_checkpoint`): translate,
attention, export, serve (start, ``/models``, reload) and the benchmarks load what `resolve_model`
names, so a server that resolves once names one file even while training writes a newer default.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from nmtk.errors import NmtkError
from nmtk.manifest import Manifest
from nmtk.recipe import Recipe
from nmtk.rundir import LAST, NUMBERED, RUNS, ExportDir, RunDir


def default_checkpoint(run: RunDir, recipe: Recipe | None = None) -> tuple[Path, str]:
    """The checkpoint translate, export and attention use without ``--checkpoint``, and why: the
    average the recipe's ``[average]`` names (``checkpoint_avg_last<N>.pt``, what ``nmtk average RUN``
    writes), else ``checkpoint_best.pt`` (best validation BLEU), else ``checkpoint_last.pt``, else the
    newest numbered checkpoint (a run stopped by a crash at its first save has no
    ``checkpoint_last.pt``: `RunDir.resume_checkpoint`). Other averaged files are used only when named:
    a stray average never becomes the model. ``recipe``: the run's, when the caller has read it already."""
    last = (recipe or run.recipe()).average.last
    for path, why in ((run.averaged(last), f"the recipe's average of the last {last}"),
                      (run.best, "best validation BLEU"), (run.last, "the newest"),
                      (run.resume_checkpoint(), "the newest numbered")):
        if path.is_file():
            return path, why
    raise NmtkError(f"{run.path}: no checkpoint to translate with (train first, or pass --checkpoint)")


def latest_run(runs_root: Path = RUNS) -> RunDir | None:
    """The run under ``runs_root`` whose newest training checkpoint (``checkpoint_last.pt`` or a numbered
    one: a run stopped at its first save has only those) is newest; averages made later do not count."""
    candidates = [p for p in runs_root.glob("*/checkpoint_*.pt") if p.name == LAST or NUMBERED.match(p.name)
                  ] if runs_root.is_dir() else []
    if not candidates:
        return None
    return RunDir(max(candidates, key=lambda p: p.stat().st_mtime).parent)


#: Why a model gives no word alignments (`ModelSource.aligns`), as every refusal of alignments, markup
#: and a server's ``alignment`` says it.
NOT_ALIGNED = ("the model is an export made before nmtk exported the attention that aligns: export the run again, "
               "or use the run directory")


@dataclass(frozen=True)
class ModelSource:
    """A model as the user named it (``-m``, ``--checkpoint``, ``$NMTK_MODEL``, or nothing: the newest
    run), resolved once: the one place a run's recipe is read to choose its checkpoint. translate,
    attention, export, serve (start, ``/models``, reload) and benchmarks load what it names; a server
    that resolves once names one file even while training writes a newer default."""

    kind: Literal["run", "export"]
    path: Path  # the run directory or the export folder
    checkpoint: Path | None  # the run's checkpoint file (None: an export holds its own)
    why: str  # why this checkpoint ("asked for", "best validation BLEU", …; an export: how it was exported)
    recipe: Recipe
    manifest: Manifest | None
    found: str = ""  # how the model was found when none was named ("the most recently trained run …")
    export_meta: dict[str, Any] | None = None  # an export's nmtk-export.json, read once here

    @property
    def is_export(self) -> bool:
        return self.kind == "export"

    @property
    def aligns(self) -> bool:  # where not, the refusals say NOT_ALIGNED
        """Whether the model gives word alignments: a run, or an export whose attention averages the heads
        of its last decoder layer (`nmtk.convert.ctranslate2`; exports made before that do not)."""
        return not self.is_export or bool((self.export_meta or {}).get("alignment_heads"))

    @property
    def checkpoint_name(self) -> str:
        """What ``/models`` and messages call the weights: the checkpoint file, or the export's source."""
        if self.checkpoint is not None:
            return str(self.checkpoint)
        return str((self.export_meta or {}).get("checkpoint", "?"))

    def again(self) -> ModelSource:
        """The same model resolved anew with its default checkpoint (a server's reload: a newer average,
        best or last may exist now); an export is itself."""
        return self if self.is_export else resolve_model(self.path)


def resolve_model(model: Path | None = None, checkpoint: Path | None = None) -> ModelSource:
    """What ``-m`` (else ``$NMTK_MODEL``, else the newest run under ``runs/``) and ``--checkpoint``
    name. ``-m`` may be a run directory, a checkpoint file inside one (fairseq's habit), or an
    `nmtk export` folder; anything else is one error naming it."""
    found = ""
    if model is None and os.environ.get("NMTK_MODEL"):
        model = Path(os.environ["NMTK_MODEL"])
    if model is None:
        run = latest_run()
        if run is None:
            raise NmtkError("no model: pass -m RUN_DIR, set NMTK_MODEL, or train one (nmtk train) so runs/ has a run")
        model, found = run.path, "the most recently trained run under runs/"
    model = Path(model)
    export = ExportDir(model)
    if export.is_export():
        return _export_source(export, checkpoint)
    if model.is_file():
        if checkpoint is not None:
            raise NmtkError(f"-m {model} is a checkpoint file and --checkpoint {checkpoint} another: give one")
        if not RunDir(model.parent).is_run():
            raise NmtkError(f"{model}: a file outside a run directory; -m takes a run directory (or a checkpoint "
                            "inside one), or an nmtk export")
        model, checkpoint = model.parent, model
    run = RunDir(model).require()
    manifest = run.manifest()  # first: a manifest of another version says more than the recipe could
    recipe = run.recipe()
    chosen, why = (checkpoint, "asked for") if checkpoint is not None else default_checkpoint(run, recipe)
    return ModelSource("run", run.path, Path(chosen), why, recipe, manifest, found)


def ensemble_member(path: Path) -> tuple[Path, str]:
    """The checkpoint ``--ensemble PATH`` names, and why: a checkpoint file as it is, a run directory's
    default checkpoint (as ``-m`` chooses it: `default_checkpoint`), so that runs of several seeds on one
    prepared vocabulary ensemble as they are named; an export holds one model in CTranslate2's format,
    which nmtk's engine cannot read."""
    path = Path(path)
    if ExportDir(path).is_export():
        raise NmtkError(f"--ensemble {path}: an export (CTranslate2) cannot join an ensemble: name the run it was "
                        "exported from, or one of that run's checkpoints")
    if path.is_file():
        return path, "asked for"
    if not path.is_dir():
        raise NmtkError(f"--ensemble {path}: no such checkpoint file or run directory")
    return default_checkpoint(RunDir(path).require())


def _export_source(export: ExportDir, checkpoint: Path | None) -> ModelSource:
    try:
        meta = export.meta()
        if meta.get("format") == "hf":
            raise NmtkError(f"{export.path}: a Hugging Face (transformers) export; translate with transformers, or "
                            f"make it a run again: nmtk import {export.path} -o RUN")
        recipe, manifest = export.recipe(), export.manifest()
    except (OSError, ValueError, KeyError) as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise NmtkError(f"{export.path}: not a complete nmtk export ({first}); run nmtk export again") from None
    if checkpoint is not None:
        raise NmtkError(f"--checkpoint: not available with an exported CTranslate2 model ({export.path}): an export "
                        "holds the checkpoint it was made from: pass the run directory, or export that checkpoint "
                        "(nmtk export --checkpoint)")
    return ModelSource("export", export.path, None, f"CTranslate2, {meta.get('quantization', '?')}", recipe, manifest,
                       export_meta=meta)
