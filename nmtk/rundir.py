"""The self-contained run directory, and the exported-model folder: the one place for their file names.

    runs/<name>/recipe.toml          the resolved recipe the run trains with (frozen)
    runs/<name>/manifest.json        the prepared data's manifest (`nmtk.manifest.Manifest`)
    runs/<name>/spm*.model, wordpiece*.json   the subword model(s)
    runs/<name>/checkpoint_<N>.pt    numbered checkpoints; checkpoint_last.pt, checkpoint_best.pt
    runs/<name>/checkpoint_avg_*.pt  averaged checkpoints (`nmtk average`)
    runs/<name>/train.jsonl          one JSON object of metrics per log interval
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from nmtk.errors import NmtkError
from nmtk.files import copy_atomic, write_text_atomic
from nmtk.manifest import MANIFEST, Manifest
from nmtk.recipe import Recipe, load_recipe, recipe_to_toml
from nmtk.text import TextPipeline, text_pipelines

RECIPE = "recipe.toml"
TRAIN_LOG = "train.jsonl"
LAST, BEST = "checkpoint_last.pt", "checkpoint_best.pt"
EXPORT_MARKER = "nmtk-export.json"
#: CTranslate2's vocabulary map in an export of a model with per-target output vocabularies.
CT2_VOCAB_MAP = "vmap.txt"
#: In every folder an nmtk command writes whole (an export of either format, an imported run): what
#: `check_replaceable` looks for, the one rule of what ``--force`` may replace.
WRITTEN_BY = "nmtk-written.json"
#: Beside a run imported from M2M-100: its original configuration and tokenizer settings, which nmtk's
#: model has no name for and `export --format hf` writes back. A run started from it with --init-from
#: keeps a copy, so that the fine-tuned model exports to the same format.
M2M100_ORIGIN = "m2m100.json"
#: Beside a run imported from NLLB (an M2M-100 model with NllbTokenizer): its tokenizer.json, as it came.
M2M100_TOKENIZER = "m2m100-tokenizer.json"


NUMBERED = re.compile(r"^checkpoint_(\d+)(\.params)?\.pt$")


def numbered_checkpoints(run_dir: Path, full_only: bool = False) -> list[tuple[int, Path]]:
    """``checkpoint_<update>.pt`` (full training state) and ``checkpoint_<update>.params.pt`` (the
    parameters only, for averaging: ``train.save_full_every_updates``) files of a run, oldest first."""
    found = []
    for path in run_dir.glob("checkpoint_*.pt"):
        match = NUMBERED.match(path.name)
        if match and not (full_only and match.group(2)):
            found.append((int(match.group(1)), path))
    return sorted(found)


class RunDir:
    """A training run's folder."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    def __str__(self) -> str:
        return str(self.path)

    @property
    def last(self) -> Path:
        return self.path / LAST

    @property
    def best(self) -> Path:
        return self.path / BEST

    @property
    def log_path(self) -> Path:
        return self.path / TRAIN_LOG

    def checkpoint(self, update: int, full: bool = True) -> Path:
        return self.path / f"checkpoint_{update}{'' if full else '.params'}.pt"

    def numbered(self) -> list[tuple[int, Path]]:
        return numbered_checkpoints(self.path)

    def has_checkpoints(self) -> bool:
        return self.last.is_file() or bool(self.numbered())

    def resume_checkpoint(self) -> Path:
        """The checkpoint to resume from: the newest numbered full state, else ``checkpoint_last.pt``.

        ``checkpoint_last.pt`` is re-linked after each numbered checkpoint is written; a crash between
        the two leaves it one save behind, or (at the very first save) missing.
        """
        numbered = numbered_checkpoints(self.path, full_only=True)
        return numbered[-1][1] if numbered else self.last

    # ----------------------------------------------------------------- contents

    def freeze(self, recipe: Recipe, data_dir: Path, manifest: Manifest) -> None:
        """Write the recipe, manifest and subword models that make the run self-contained."""
        self.path.mkdir(parents=True, exist_ok=True)
        write_text_atomic(self.path / RECIPE, recipe_to_toml(recipe))
        manifest.write(self.path / MANIFEST)
        for name in set(manifest.vocab.models.values()):
            copy_atomic(data_dir / name, self.path / name)

    def inherit_origin(self, source: Path) -> None:
        """The original format's files of the run ``source`` (an imported one), copied into this run."""
        for name in (M2M100_ORIGIN, M2M100_TOKENIZER):
            if (source / name).is_file():
                copy_atomic(source / name, self.path / name)

    @property
    def lock_path(self) -> Path:
        """Beside the run, not in it: ``--restart`` moves the run aside while its lock is held."""
        return self.path.with_name(f".{self.path.name}.lock")

    @contextmanager
    def training_lock(self) -> Iterator[None]:
        """Held while a training job writes this run: an OS lock (``flock``), so a run that was killed,
        even by SIGKILL, leaves no stale lock behind. A second ``nmtk train`` is refused with one line
        naming the process that holds it. Reading commands (translate, average, export) never take it."""
        import fcntl
        import socket
        import time

        self.path.parent.mkdir(parents=True, exist_ok=True)
        handle = open(self.lock_path, "a+", encoding="utf-8")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            handle.seek(0)
            holder = handle.read().strip() or "another process"
            handle.close()
            raise NmtkError(f"{self.path}: already being trained by {holder}; wait for it to finish, or stop it "
                            "(it saves and exits on Ctrl-C / SIGTERM)") from None
        try:
            handle.seek(0)
            handle.truncate()
            handle.write(f"process {os.getpid()} on {socket.gethostname()} since {time.strftime('%Y-%m-%d %H:%M:%S')}")
            handle.flush()
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
            handle.close()

    def is_run(self) -> bool:
        return (self.path / RECIPE).is_file()

    def require(self) -> RunDir:
        if not self.path.is_dir():
            raise NmtkError(f"{self.path}: run directory not found")
        if not (self.path / RECIPE).is_file():
            raise NmtkError(f"{self.path}: not an nmtk run directory (no {RECIPE})")
        return self

    def recipe(self) -> Recipe:
        return load_recipe(self.path / RECIPE)

    def manifest(self) -> Manifest:
        return Manifest.read(self.path / MANIFEST)

    def pipelines(self, recipe: Recipe, manifest: Manifest | None = None) -> tuple[TextPipeline, TextPipeline]:
        """The run's own text pipelines (source, target), with the subword model(s) it holds."""
        return pipelines_in(self.path, recipe, manifest or self.manifest())

    def averaged(self, last: int) -> Path:
        """The file ``nmtk average RUN --last N`` writes by default."""
        return self.path / f"checkpoint_avg_last{last}.pt"

    def default_checkpoint(self, recipe: Recipe | None = None) -> tuple[Path, str]:
        """The checkpoint translate, export and attention use without ``--checkpoint``, and why: the
        average the recipe's ``[average]`` names (``checkpoint_avg_last<N>.pt``, what ``nmtk average RUN``
        writes), else ``checkpoint_best.pt`` (best validation BLEU), else ``checkpoint_last.pt``. Other
        averaged files are used only when named: a stray average never becomes the model. ``recipe``:
        the run's, when the caller has read it already."""
        last = (recipe or self.recipe()).average.last
        for path, why in ((self.averaged(last), f"the recipe's average of the last {last}"),
                          (self.best, "best validation BLEU"), (self.last, "the newest")):
            if path.is_file():
                return path, why
        raise NmtkError(f"{self.path}: no checkpoint to translate with (train first, or pass --checkpoint)")


#: A pair's (source, target) text pipelines.
Pipes = tuple[TextPipeline, TextPipeline]


def pipelines_in(folder: Path, recipe: Recipe, manifest: Manifest, target_lang: str | None = None,
                 source_lang: str | None = None) -> tuple[TextPipeline, TextPipeline]:
    """The (source, target) text pipelines with the subword model(s) ``manifest`` names, inside ``folder``.

    A multilingual model's are those of one of its pairs, chosen by ``target_lang`` (and ``source_lang``
    where several pairs have that target); its source pipeline puts the target's tag first. A language
    the model does not translate is one line naming the pairs it does."""
    src, tgt = pick_pair(manifest, target_lang, source_lang)
    models = manifest.model_paths(folder)
    for lang in (src, tgt):
        if lang not in models or not models[lang].is_file():
            raise NmtkError(f"{models.get(lang, folder / '?')}: subword model missing from {folder}")
    if manifest.pairs and manifest.tag_style == "m2m-100":  # the source's code first, the target's forced
        return text_pipelines(recipe.tokenizer, (src, tgt), models, manifest.tags[src], (manifest.tags[tgt],),
                              frozenset(manifest.tags.values()))
    return text_pipelines(recipe.tokenizer, (src, tgt), models, manifest.tags.get(tgt) if manifest.pairs else None)


def pick_pair(manifest: Manifest, target_lang: str | None, source_lang: str | None) -> tuple[str, str]:
    """The (source, target) languages of the pair asked for; one line when the model has no such pair,
    or (multilingual) when the target is not said."""
    pairs = [tuple(p.split("-")) for p in manifest.pairs] or [(manifest.source_lang, manifest.target_lang)]
    known = ", ".join(f"{s} → {t}" for s, t in pairs)
    if manifest.pairs and target_lang is None:
        raise NmtkError(f"this model translates {known}: say which target with --target-lang")
    def same(asked: str | None, code: str) -> bool:  # codes in any case (``FR``), as the server takes them
        return asked is None or asked.lower() == code.lower()

    fits = [(s, t) for s, t in pairs if same(target_lang, t) and same(source_lang, s)]
    if not fits:
        asked = f"{source_lang + ' ' if source_lang else ''}→ {target_lang or '?'}"
        raise NmtkError(f"{asked}: not a pair of this model, which translates {known}")
    if len(fits) > 1:
        raise NmtkError(f"→ {target_lang}: this model has it from {', '.join(s for s, _ in fits)}: say which with "
                        "--source-lang")
    return fits[0]


def model_pipelines(folder: Path, recipe: Recipe, manifest: Manifest | None, target_lang: str | None = None,
                    source_lang: str | None = None, any_pair: bool = False
                    ) -> tuple[Pipes, dict[tuple[str, str], Pipes]]:
    """What a translator of the model in ``folder`` (a run, or an export with its manifest) speaks: the
    pipelines of the pair asked for, and a multilingual model's pipelines of every pair (empty for one
    pair). ``any_pair``: with no target given, a multilingual model's first pair (a server's requests
    each say theirs) instead of an error."""
    if manifest is None:  # an export written before manifests were copied beside the model
        langs = (recipe.data.source_lang or "", recipe.data.target_lang or "")
        models = {lang: folder / name for lang, name in ExportDir(folder).meta()["models"].items()}
        return text_pipelines(recipe.tokenizer, langs, models), {}
    if not manifest.pairs:
        return pipelines_in(folder, recipe, manifest, target_lang, source_lang), {}
    pairs = {(s, t): pipelines_in(folder, recipe, manifest, t, s) for s, t in (p.split("-") for p in manifest.pairs)}
    first = tuple(manifest.pairs[0].split("-"))
    chosen = first if target_lang is None and source_lang is None and any_pair else pick_pair(
        manifest, target_lang, source_lang)
    return pairs[chosen], pairs


def training_pipelines(folder: Path, recipe: Recipe, manifest: Manifest
                       ) -> tuple[TextPipeline, TextPipeline] | dict[str, tuple[TextPipeline, TextPipeline]]:
    """What validation translates with: the pipelines of the pair, or of every pair (multilingual)."""
    if not manifest.pairs:
        return pipelines_in(folder, recipe, manifest)
    return {f"{s}-{t}": pipes for (s, t), pipes in model_pipelines(folder, recipe, manifest, any_pair=True)[1].items()}


class ExportDir:
    """A folder `nmtk export` wrote: the engine's files, the run's recipe, manifest and subword model(s),
    and ``nmtk-export.json`` (what was exported, how) that marks it as nmtk's."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    @property
    def marker(self) -> Path:
        return self.path / EXPORT_MARKER

    def is_export(self) -> bool:
        return self.marker.is_file()

    def meta(self) -> dict[str, Any]:
        return json.loads(self.marker.read_text(encoding="utf-8"))

    def recipe(self) -> Recipe:
        return load_recipe(self.path / RECIPE)

    @property
    def vocab_map(self) -> Path:
        """CTranslate2's vocabulary map: each target tag's pieces (`nmtk.convert.ctranslate2.vocab_map`)."""
        return self.path / CT2_VOCAB_MAP

    def manifest(self) -> Manifest | None:
        """The run's manifest, copied beside the model (None in an export that has none)."""
        return Manifest.read(self.path / MANIFEST) if (self.path / MANIFEST).is_file() else None

    def write_text_pipeline(self, run: RunDir, recipe: Recipe, manifest: Manifest) -> None:
        """The run's recipe, manifest and subword model(s): what the text pipeline needs."""
        write_text_atomic(self.path / RECIPE, recipe_to_toml(recipe))
        manifest.write(self.path / MANIFEST)
        for name in set(manifest.vocab.models.values()):
            copy_atomic(run.path / name, self.path / name)

    def write_meta(self, meta: dict[str, Any]) -> None:
        write_text_atomic(self.marker, json.dumps(meta, indent=2))


def latest_run(runs_root: Path = Path("runs")) -> RunDir | None:
    """The run under ``runs_root`` whose last checkpoint is newest."""
    candidates = [p for p in runs_root.glob("*/checkpoint_last.pt")] if runs_root.is_dir() else []
    if not candidates:
        return None
    return RunDir(max(candidates, key=lambda p: p.stat().st_mtime).parent)


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
    chosen, why = (checkpoint, "asked for") if checkpoint is not None else run.default_checkpoint(recipe)
    return ModelSource("run", run.path, Path(chosen), why, recipe, manifest, found)


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


#: The commands that write a whole folder `check_replaceable` may let ``--force`` replace, by kind.
WRITERS = {"export": "nmtk export", "import": "nmtk import"}
#: A folder marked by an nmtk that did not list its files: what is no newer than its marker by this many
#: seconds is what that nmtk wrote (its README came a moment after the marker).
UNLISTED_SLACK_S = 60.0


def check_replaceable(out: Path, force: bool, kind: Literal["export", "import"]) -> None:
    """``out`` may be written by the command that builds a whole folder of ``kind`` (`nmtk export`, `nmtk
    import`): it does not exist, or is an empty folder, or (with ``force``) it is a folder of that kind
    which nmtk wrote whole and which holds nothing else: every file and folder in it is one its marker
    (`WRITTEN_BY`) lists, at the size it was written (a marker of an older nmtk lists none: then
    nothing in it may be newer than the marker). Anything else is one line naming the first thing in
    the way: ``--force`` never deletes what nmtk did not write."""
    if not out.exists():
        return
    writer = WRITERS[kind]
    if not out.is_dir():
        raise NmtkError(f"{out}: is a file; {writer} writes a folder: choose another -o")
    if not any(out.iterdir()):
        return
    marker, meta = _marker(out)
    if marker is None:
        raise NmtkError(f"{out}: exists and nmtk did not write it (no {WRITTEN_BY}); --force replaces only a "
                        f"folder {writer} wrote: choose another -o")
    theirs = meta.get("kind") or ("export" if str(meta.get("command", "")).startswith("nmtk export") else "import")
    if theirs != kind:
        raise NmtkError(f"{out}: written by {WRITERS[theirs]}, not {writer}; --force replaces only a folder {writer} "
                        "wrote: choose another -o")
    written = meta.get("files")
    foreign = (_first_foreign(out, written) if isinstance(written, dict)
               else _first_newer(out, marker.stat().st_mtime + UNLISTED_SLACK_S))
    if foreign is not None:
        raise NmtkError(f"{out / foreign}: {writer} did not write it (or it changed since); --force replaces only "
                        f"what {writer} wrote: move it, or choose another -o")
    if not force:
        raise NmtkError(f"{out}: exists; use --force to replace it")


def _marker(out: Path) -> tuple[Path | None, dict[str, Any]]:
    """The folder's marker and what it says: `WRITTEN_BY`, or an older export's `EXPORT_MARKER`."""
    for name in (WRITTEN_BY, EXPORT_MARKER):
        path = out / name
        if path.is_file():
            try:
                meta = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                meta = {}
            return path, meta if name == WRITTEN_BY else {"kind": "export", **(meta if isinstance(meta, dict) else {})}
    return None, {}


def _first_foreign(out: Path, written: dict[str, int]) -> str | None:
    """The first path under ``out`` (sorted) that is not one of the ``written`` files at its size, nor a
    folder holding one of them."""
    folders = {str(Path(name).parent) for name in written}
    for path in sorted(out.rglob("*")):
        name = str(path.relative_to(out))
        if path.is_dir() and not path.is_symlink():
            if not any(f == name or f.startswith(name + "/") for f in folders):
                return name
        elif name != WRITTEN_BY and written.get(name) != path.lstat().st_size:
            return name
    return None


def _first_newer(out: Path, limit: float) -> str | None:
    """The first path under ``out`` (sorted) changed after ``limit`` (a time)."""
    return next((str(p.relative_to(out)) for p in sorted(out.rglob("*")) if p.lstat().st_mtime > limit), None)


def mark_written(folder: Path, command: str, kind: Literal["export", "import"]) -> None:
    """Mark ``folder`` (built, complete) as written whole by nmtk's ``command``: every file in it, listed
    with its size (`check_replaceable`). Called last, once nothing more is written into it."""
    from nmtk import __version__

    files = {str(p.relative_to(folder)): p.stat().st_size for p in sorted(folder.rglob("*")) if p.is_file()}
    write_text_atomic(folder / WRITTEN_BY, json.dumps({"command": command, "kind": kind, "nmtk": __version__,
                                                       "files": files}, indent=2))
