"""The self-contained run directory, and the exported-model folder: the one place for their file names.

    runs/<name>/recipe.toml          the resolved recipe the run trains with (frozen)
    runs/<name>/manifest.json        the prepared data's manifest (`nmtk.manifest.Manifest`)
    runs/<name>/spm*.model, wordpiece*.json   the subword model(s); words.<lang>.tsv (correct_typos)
    runs/<name>/checkpoint_<N>.pt    numbered checkpoints; checkpoint_last.pt, checkpoint_best.pt
    runs/<name>/checkpoint_avg_*.pt  averaged checkpoints (`nmtk average`)
    runs/<name>/train.jsonl          one JSON object of metrics per log interval
    runs/<name>/data.json            where the prepared data it was trained on was (`RunDir.trained_on`)
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

from nmtk.errors import NmtkError
from nmtk.files import copy_atomic, partial_path, write_text_atomic
from nmtk.manifest import MANIFEST, Manifest, PreparedData
from nmtk.recipe import Recipe, load_recipe, recipe_to_toml

#: Where runs go when no ``--run-dir`` is given, one folder per recipe name.
RUNS = Path("runs")
RECIPE = "recipe.toml"
TRAIN_LOG = "train.jsonl"
#: Where the run's prepared data was when it trained: what `nmtk shortlist` reads again without --data.
TRAINED_ON = "data.json"
LAST, BEST = "checkpoint_last.pt", "checkpoint_best.pt"
EXPORT_MARKER = "nmtk-export.json"
#: CTranslate2's vocabulary map in an export of a model with per-target output vocabularies, or of a run
#: with a lexical shortlist.
CT2_VOCAB_MAP = "vmap.txt"
#: A run's lexical shortlist (`nmtk shortlist`: `nmtk.data.shortlist`).
SHORTLIST = "shortlist.npz"
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


def default_run_dir(recipe: Recipe) -> Path:
    """Where a recipe's run goes when no ``--run-dir`` is given."""
    return RUNS / recipe.name


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

    def freeze(self, recipe: Recipe, data: PreparedData) -> None:
        """Write the recipe, manifest and subword models that make the run self-contained."""
        self.path.mkdir(parents=True, exist_ok=True)
        write_text_atomic(self.path / RECIPE, recipe_to_toml(recipe))
        manifest = data.manifest()
        manifest.write(self.path / MANIFEST)
        for name in manifest.text_files:
            copy_atomic(data.path / name, self.path / name)
        write_text_atomic(self.path / TRAINED_ON, json.dumps({"prepared": str(data.path.resolve())}, indent=2))

    def trained_on(self) -> Path | None:
        """The folder of prepared data the run last trained on, as it was then (it may since have moved or
        been rebuilt: callers check its vocabulary); None for a run from before nmtk recorded it."""
        path = self.path / TRAINED_ON
        if not path.is_file():
            return None
        try:
            return Path(json.loads(path.read_text(encoding="utf-8"))["prepared"])
        except (ValueError, KeyError, TypeError):
            raise NmtkError(f"{path}: not the JSON nmtk writes there ({{\"prepared\": PATH}})") from None

    def inherit_origin(self, source: Path) -> None:
        """The original format's files of the run ``source`` (an imported one), copied into this run."""
        for name in (M2M100_ORIGIN, M2M100_TOKENIZER):
            if (source / name).is_file():
                copy_atomic(source / name, self.path / name)

    @property
    def lock_path(self) -> Path:
        """Beside the run, not in it: ``--restart`` moves the run aside while its lock is held."""
        return self.path.with_name(f".{self.path.name}.lock")

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

    def averaged(self, last: int) -> Path:
        """The file ``nmtk average RUN --last N`` writes by default."""
        return self.path / f"checkpoint_avg_last{last}.pt"


class DistillDir:
    """`nmtk distill`'s folder (`nmtk.train.distill`; default ``distilled/<student recipe name>``): per training
    corpus its sources, the teacher's scored translations and the pairs kept; the settings; the student recipe."""

    SETTINGS, RECIPE = "distill.json", "recipe.toml"

    def __init__(self, path: Path, source_lang: str, target_lang: str) -> None:
        self.path, self.src, self.tgt = path, source_lang, target_lang

    def sources(self, corpus: str) -> Path:
        return self.path / f"{corpus}.{self.src}"

    def scored(self, corpus: str) -> Path:
        return self.path / f"{corpus}.scored.{self.tgt}"

    def partial(self, corpus: str) -> Path:
        """The teacher's translations so far, while they are made (`nmtk.files.partial_path`)."""
        return partial_path(self.scored(corpus))

    def kept(self, corpus: str) -> tuple[Path, Path]:
        return self.path / f"{corpus}.kept.{self.src}", self.path / f"{corpus}.kept.{self.tgt}"

    def named(self, corpora: list[str]) -> Iterator[Path]:
        """Every file this module writes for ``corpora`` (what ``force`` may remove)."""
        yield self.path / self.SETTINGS
        yield self.path / self.RECIPE
        for name in corpora:
            yield from (self.sources(name), self.scored(name), self.partial(name), *self.kept(name))


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
        for name in manifest.text_files:
            copy_atomic(run.path / name, self.path / name)

    def write_meta(self, meta: dict[str, Any]) -> None:
        write_text_atomic(self.marker, json.dumps(meta, indent=2))


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
    written, since = meta.get("files"), marker.stat().st_mtime + UNLISTED_SLACK_S
    foreign = (_first_foreign(out, written) if isinstance(written, dict) else  # an older nmtk's folder: by time
               next((str(p.relative_to(out)) for p in sorted(out.rglob("*")) if p.lstat().st_mtime > since), None))
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


def mark_written(folder: Path, command: str, kind: Literal["export", "import"]) -> None:
    """Mark ``folder`` (built, complete) as written whole by nmtk's ``command``: every file in it, listed
    with its size (`check_replaceable`). Called last, once nothing more is written into it."""
    from nmtk import __version__

    files = {str(p.relative_to(folder)): p.stat().st_size for p in sorted(folder.rglob("*")) if p.is_file()}
    write_text_atomic(folder / WRITTEN_BY, json.dumps({"command": command, "kind": kind, "nmtk": __version__,
                                                       "files": files}, indent=2))
