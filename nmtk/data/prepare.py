"""`nmtk prepare`: corpora -> Moses -> sentencepiece -> cleaned, binarised splits and a manifest.

Everything is built in a temporary folder next to the output and swapped in by rename at the end,
so a failure (a bad line, a mismatched file, Ctrl-C) leaves the previous output, or nothing, never
half of one. Text streams through in chunks: memory stays bounded whatever the corpus size.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import time
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nmtk.console import console
from nmtk.data.fetch import root_path, sha256_file
from nmtk.data.multilingual import MultilingualPreparer
from nmtk.data.preparer import FORMAT_VERSION, Preparer
from nmtk.data.stages import Stages
from nmtk.errors import Interrupted, NmtkError
from nmtk.files import os_lock, swap_in, temp_dir_beside
from nmtk.interrupts import deferred, exit_code, interruptible
from nmtk.manifest import MANIFEST, Manifest, PreparedData
from nmtk.recipe import CorpusFile, Recipe, first_difference


@dataclass
class PrepareResult:
    out_dir: Path
    manifest: Manifest
    up_to_date: bool
    inputs_checked: bool = True  # False: reused without its inputs at hand (see `prepare`)

    @property
    def data(self) -> PreparedData:
        """The prepared data's handle: its folder and manifest, read once (here: given)."""
        return PreparedData(self.out_dir, self.manifest)


def default_out_dir(recipe: Recipe) -> Path:
    return Path("data-bin") / recipe.name


def data_settings(recipe: Recipe) -> dict[str, Any]:
    """Everything of a recipe that shapes the prepared data (file paths, not download addresses)."""
    data = recipe.data.model_dump(mode="json")
    for key in ("source_lang", "target_lang", "valid", "pairs", "temperature"):  # absent in the other kind of
        if data[key] is None:                                                     # recipe: the hash stays as it was
            del data[key]
    pairs = data.get("pairs") or [data]
    for corpus in [c for p in pairs for c in [*p["train"], p["valid"], *p["test"]]]:
        for side in ("source", "target"):  # the path alone, as before columns (its column where it has one)
            spec = corpus[side]
            corpus[side] = spec["path"] if spec["column"] is None else {"path": spec["path"], "column": spec["column"]}
        del corpus["weight"]  # how often training draws a corpus: the prepared data is the same
        if corpus["tag"] is None:
            del corpus["tag"]
    if not any(data["clean"][rule] for rule in ("duplicates", "copies", "language", "numbers")) and \
            data["clean"]["scripts"] >= 1.0:
        del data["clean"]  # every rule off: the data of the nmtk before cleaning, and its hash
    # exclude_none: a field added later with None as its default (tokenizer.reuse) leaves data prepared
    # before it valid.
    tokenizer = recipe.tokenizer.model_dump(mode="json", exclude_none=True)
    if not tokenizer["correct_typos"]:  # a field added later: off, the hash of data prepared before it
        del tokenizer["correct_typos"]
    settings = {"format": FORMAT_VERSION, "data": data, "tokenizer": tokenizer}
    if recipe.uses_terms:  # hint symbols in the vocabulary, alignments beside (absent: the hash as before)
        settings["hints"] = True
    if recipe.casing:  # the subword learner also sees lines in capitals / title case
        settings["casing"] = recipe.casing
    return settings


def settings_hash(recipe: Recipe) -> str:
    return hashlib.sha256(json.dumps(data_settings(recipe), sort_keys=True).encode()).hexdigest()


def settings_difference(manifest: Manifest, recipe: Recipe) -> str | None:
    """The first recipe field whose value differs from what ``manifest``'s data was prepared with, as
    ``field = old``, ``new``; None when the settings are the same."""
    if manifest.settings_hash == settings_hash(recipe):
        return None
    if manifest.settings is None:
        return "other settings (an older nmtk did not record which)"
    difference = first_difference(manifest.settings, data_settings(recipe), skip=lambda key: key == "format")
    if difference is None:
        return "another format of prepared data"
    key, old, new = difference
    return f"{key} = {old!r}, the recipe has {new!r}"


def _fingerprints(paths: list[Path], old: dict[str, Any]) -> dict[str, Any]:
    """sha256 of every input; reused from the previous manifest when size and mtime are unchanged."""
    result = {}
    for path in paths:
        stat = path.stat()
        key = str(path.resolve())
        previous = old.get(key, {})
        if previous.get("size") == stat.st_size and previous.get("mtime_ns") == stat.st_mtime_ns:
            digest = previous["sha256"]
        else:
            digest = sha256_file(path)
        result[key] = {"sha256": digest, "size": stat.st_size, "mtime_ns": stat.st_mtime_ns}
    return result


def _same_inputs(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return {k: v["sha256"] for k, v in a.items()} == {k: v["sha256"] for k, v in b.items()}


def _refuse_other_settings(old: Manifest, recipe: Recipe, out_dir: Path, rebuild: bool) -> None:
    """Prepared data with other settings is never rebuilt in place unasked: runs trained on it would lose
    the data they resume on. `prepare` names those runs where it can know (``runs/*`` holding its
    vocabulary); `train` (``rebuild=False``) says how to prepare the new settings."""
    difference = settings_difference(old, recipe)
    if difference is None:
        return
    if not rebuild:
        raise NmtkError(f"{out_dir}: prepared with {difference}; give --data a new folder, or rebuild this one "
                        "with `nmtk prepare --force` and this recipe")
    users = runs_trained_on(old)
    trained = f"; {', '.join(map(str, users))} {'was' if len(users) == 1 else 'were'} trained on it" if users else ""
    raise NmtkError(f"{out_dir}: prepared with {difference}{trained}: give --out a new folder, or --force to "
                    "rebuild it in place")


def runs_trained_on(manifest: Manifest, runs: Path = Path("runs")) -> list[Path]:
    """Run directories under ``runs`` whose frozen vocabulary is this prepared data's."""
    found = []
    for path in sorted(runs.glob(f"*/{MANIFEST}")) if runs.is_dir() else []:
        try:
            if Manifest.read(path).vocab.sha256 == manifest.vocab.sha256:
                found.append(path.parent)
        except (NmtkError, OSError, ValueError):
            continue
    return found


def input_specs(recipe: Recipe) -> list[CorpusFile]:
    return [side for corpus in recipe.data.corpora() for side in (corpus.source, corpus.target)]


def input_files(preparer: Preparer | MultilingualPreparer) -> list[Path]:
    paths: list[Path] = []
    for corpus in preparer.recipe.data.corpora():
        paths.extend(preparer.corpus_paths(corpus))
    return paths


def prepare(recipe: Recipe, root: Path, out_dir: Path | None = None, force: bool = False,
            workers: int | None = None, rebuild: bool = True, show_stages: bool = False) -> PrepareResult:
    """Prepare the recipe's data into ``out_dir`` unless it is already up to date.

    Prepared data whose settings match the recipe is up to date when its inputs are unchanged. Prepared
    data with other settings is an error naming the differing field, never rebuilt over, unless
    ``force`` (`_refuse_other_settings`). ``rebuild=False`` is what `train` asks: data with the same
    settings is then used even when its inputs are not under ``root`` at all (prepared elsewhere and
    copied here: nothing is downloaded to re-check it; ``inputs_checked`` is then False).
    ``show_stages`` reports each stage on stderr with its counts and rates (`Stages`).

    One process at a time checks or builds a folder (`PreparedData.lock_path`): several `nmtk train`
    jobs started together over missing data wait for the first to prepare it, then find it up to date.
    """
    out_dir = Path(out_dir or default_out_dir(recipe))
    try:
        with ExitStack() as stack, interruptible():
            try:
                stack.enter_context(os_lock(PreparedData(out_dir).lock_path, waiting=lambda holder: console.print(
                    f"prepare: {out_dir} is being prepared by {holder}; waiting for it")))
                _remove_leftovers(out_dir)
            except PermissionError:
                pass  # data in a read-only place is only read (nothing could be built there either: that fails below)
            return _prepare(recipe, root, out_dir, force, workers, rebuild, show_stages)
    except KeyboardInterrupt as exc:  # Ctrl-C or SIGTERM: the temporary folder is gone by now
        before = "its data is as it was" if Manifest.in_folder_or_none(out_dir) else "nothing was written there"
        raise Interrupted(f"interrupted: {out_dir} was not prepared ({before}); run the same command to "
                          "prepare it", exit_code(exc)) from None


def _remove_leftovers(out_dir: Path) -> None:
    """Remove the temporary folders beside ``out_dir`` that a killed `prepare` left (``.NAME.tmp-*``,
    and ``.NAME.old-*`` from a swap cut short): the caller holds the folder's lock, so no other process
    is building in them."""
    beside = out_dir.parent
    for stale in sorted([*beside.glob(f".{out_dir.name}.tmp-*"), *beside.glob(f".{out_dir.name}.old-*")]):
        if stale.is_dir() and not stale.is_symlink():
            shutil.rmtree(stale, ignore_errors=True)
            console.print(f"prepare: removed {stale}, left by a prepare that was stopped")


def _prepare(recipe: Recipe, root: Path, out_dir: Path, force: bool, workers: int | None, rebuild: bool,
             show_stages: bool) -> PrepareResult:
    kind = MultilingualPreparer if recipe.data.multilingual else Preparer
    preparer = kind(recipe, root, workers, Stages(show_stages))
    old = Manifest.in_folder_or_none(out_dir)
    old_inputs = old.inputs if old else {}
    digest = settings_hash(recipe)
    if old is not None and not force:
        _refuse_other_settings(old, recipe, out_dir, rebuild)
        if not rebuild and not all(root_path(spec, root).is_file() for spec in input_specs(recipe)):
            return PrepareResult(out_dir, old, up_to_date=True, inputs_checked=False)
    inputs = _fingerprints(input_files(preparer), old_inputs)
    if not force and old is not None and old.settings_hash == digest and _same_inputs(old_inputs, inputs):
        return PrepareResult(out_dir, old, up_to_date=True)

    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_dir_beside(out_dir)
    try:
        start = time.perf_counter()
        manifest = Manifest(**preparer.build(tmp), settings_hash=digest, settings=data_settings(recipe),
                            inputs=inputs, recipe=recipe.name, seconds=round(time.perf_counter() - start, 2))
        manifest.write(tmp / MANIFEST)
        with deferred():  # the old folder and the new one swap whole
            swap_in(tmp, out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return PrepareResult(out_dir, manifest, up_to_date=False)
