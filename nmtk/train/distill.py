"""Sequence-level knowledge distillation (Kim & Rush 2016): a student learns the teacher's translations.

A large teacher translates the sources of the student recipe's training corpora with beam search; the
student trains on those sources paired with the teacher's outputs instead of the human references. The
teacher's outputs are simpler and more consistent than the references, which is what lets a much smaller
student (a shallow decoder: decoding cost is the decoder's) come close to the teacher.

The steps, each resumable, all in one folder (`DistillDir`, default ``distilled/<student recipe name>``):

1. each corpus's sources are copied there as plain text (``<corpus>.<src>``);
2. the teacher translates them as `nmtk translate --print-scores -o` does (``<corpus>.scored.<tgt>``:
   ``SCORE<TAB>TRANSLATION``, line for line): an interrupted pass goes on where it stopped;
3. empty translations and the ``drop`` share with the lowest teacher score are left out, the rest written
   as a line-aligned pair of files (``<corpus>.kept.<src|tgt>``), and the student recipe with those
   corpora in place of its training corpora as ``recipe.toml``;
4. `nmtk.train.run.train` prepares and trains that recipe (resuming a run it already started).

``distill.json`` records the teacher and settings the folder was made with: a second run with another
teacher is refused (``force`` starts over, removing only the files this module names).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from nmtk.console import console
from nmtk.data.corpus import read_lines
from nmtk.data.fetch import default_data_root, ensure_file
from nmtk.decode.load import LoadOptions
from nmtk.decode.stream import TranslateOptions, count_lines, finished_inputs, translate
from nmtk.errors import Interrupted, NmtkError
from nmtk.files import atomic_write, write_text_atomic
from nmtk.model_source import ModelSource, resolve_model
from nmtk.pair import Pair, pairs_text
from nmtk.recipe import Corpus, Recipe, recipe_from_dict, recipe_to_toml
from nmtk.rundir import DistillDir, default_run_dir


@dataclass(frozen=True)
class DistillOptions:
    """What `nmtk distill` was asked: the teacher (any `-m` model: a run, a checkpoint, an export), how it
    searches, what is kept, and where things go."""

    teacher: Path
    load: LoadOptions = field(default_factory=LoadOptions)  # device, threads, precision, ensemble of the teacher
    beam: int | None = None  # None: the teacher recipe's decode.beam
    drop: float = 0.05  # share of the teacher's translations left out, lowest score first
    with_original: bool = False  # the original pairs train the student too (beside the teacher's)
    out: Path | None = None  # None: distilled/<student recipe name>
    data_root: Path | None = None
    run_dir: Path | None = None  # the student's run (None: runs/<student recipe name>)
    translate_only: bool = False  # stop once the distilled data and its recipe are written
    force: bool = False  # start over: the teacher's translations are made again
    buffer_size: int = 1000  # lines sorted by length together and kept at once (translate's --buffer-size)
    again: str = ""  # the command that goes on after an interruption (the caller's own, less --force)


@dataclass(frozen=True)
class CorpusReport:
    name: str
    pairs: int
    kept: int
    empty: int  # translations left out for being empty
    low_score: int  # left out for their teacher score
    threshold: float | None  # the lowest score kept (None: nothing dropped by score)


@dataclass(frozen=True)
class DistillReport:
    folder: Path
    recipe: Path  # the student recipe over the distilled data (what `nmtk train` was given)
    corpora: list[CorpusReport]
    run: Path | None  # the student's run; None with translate_only


def distill(recipe: Recipe, options: DistillOptions) -> DistillReport:
    """Distil ``options.teacher`` into the student ``recipe``: translate, filter, write, train."""
    if recipe.data.pairs:
        raise NmtkError(f"recipe {recipe.name}: distill is for one language pair (data.source_lang/target_lang); "
                        "distil a multilingual recipe one direction at a time")
    if not 0.0 <= options.drop < 1.0:
        raise NmtkError(f"--drop {options.drop}: must be at least 0 and below 1 (the share of pairs left out)")
    teacher = resolve_model(options.teacher, options.load.checkpoint)
    _check_teacher(recipe, teacher, options.teacher)
    folder = DistillDir(options.out or Path("distilled") / recipe.name, recipe.data.source_lang,
                        recipe.data.target_lang)
    corpora = recipe.data.train
    _claim(folder, [c.name for c in corpora], _settings(recipe, options, teacher), options.force)
    root = default_data_root(options.data_root)
    reports = []
    for corpus in corpora:
        _copy_sources(corpus, root, folder)
        _teacher_pass(folder, corpus.name, options)
        reports.append(_keep(folder, corpus.name, options.drop))
    student = _student_recipe(recipe, folder, options.with_original)
    write_text_atomic(folder.path / folder.RECIPE, recipe_to_toml(student))
    if options.translate_only:
        return DistillReport(folder.path, folder.path / folder.RECIPE, reports, None)
    from nmtk.train.run import train

    run = options.run_dir or default_run_dir(student)
    train(student, data_root=options.data_root, run_dir=run, device_name=options.load.device,
          threads=options.load.threads)
    return DistillReport(folder.path, folder.path / folder.RECIPE, reports, run)


def _check_teacher(recipe: Recipe, teacher: ModelSource, where: Path) -> None:
    """The teacher translates the student recipe's pair (a multilingual teacher: among its pairs), said
    before anything is read, fetched or written (an en→de teacher given an en→fr recipe went on to fetch
    the recipe's corpora)."""
    if teacher.manifest is None:
        return
    wanted, pairs = Pair(recipe.data.source_lang, recipe.data.target_lang), teacher.manifest.language_pairs()
    if wanted not in pairs:
        raise NmtkError(f"{where}: translates {pairs_text(pairs)}, not {wanted.arrow} as the student "
                        f"recipe {recipe.name} asks: distil with a teacher of that direction")


def _settings(recipe: Recipe, options: DistillOptions, source: ModelSource) -> dict:
    """What the teacher's translations depend on: the model (``source``: its file, size and time), its
    search, and the corpora it translates."""
    model = source.checkpoint if source.checkpoint is not None else source.path / "model.bin"
    stat = model.stat()
    ensemble = [str(Path(p).resolve()) for p in options.load.ensemble]
    return {"teacher": str(model.resolve()), "size": stat.st_size, "mtime_ns": stat.st_mtime_ns,
            "ensemble": ensemble, "beam": options.beam, "precision": options.load.precision.value,
            "corpora": {c.name: c.source.path if c.source.column is None else [c.source.path, c.source.column]
                        for c in recipe.data.train}}


def _claim(folder: DistillDir, corpora: list[str], settings: dict, force: bool) -> None:
    """Make the folder this run's: new, or made with the same teacher and search (then it goes on);
    with ``force``, the files of an earlier distillation are removed first (nothing else in it)."""
    path = folder.path / folder.SETTINGS
    if path.is_file():
        made = json.loads(path.read_text(encoding="utf-8"))
        if force:
            for named in folder.named(corpora):
                named.unlink(missing_ok=True)
        elif made != settings:
            changed = next(k for k in [*settings, *made] if made.get(k) != settings.get(k))
            raise NmtkError(f"{folder.path}: distilled with another {changed} ({made.get(changed)} there, "
                            f"{settings.get(changed)} now): start over with --force, or choose another --out")
    elif any(p.exists() for p in folder.named(corpora)):
        raise NmtkError(f"{folder.path}: holds files nmtk distill did not record ({folder.SETTINGS} is missing): "
                        "choose another --out")
    folder.path.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, json.dumps(settings, indent=2))


def _copy_sources(corpus: Corpus, root: Path, folder: DistillDir) -> None:
    """The corpus's sources as plain text lines (the teacher's input; a ``.gz`` or ``.sgm`` read as
    `prepare` reads it), once."""
    out = folder.sources(corpus.name)
    if out.is_file():
        return
    with atomic_write(out, "w") as sink:
        for line in read_lines(ensure_file(corpus.source, root), column=corpus.source.column):
            sink.write(line.replace("\r", " ") + "\n")


def _teacher_pass(folder: DistillDir, corpus: str, options: DistillOptions) -> None:
    """The teacher's translation of the corpus's sources with scores; going on from an interrupted pass."""
    sources, scored = folder.sources(corpus), folder.scored(corpus)
    if scored.is_file() and count_lines(scored) == count_lines(sources):
        console.print(f"{scored}: the teacher's translations are there")
        return
    partial = folder.partial(corpus)
    skip = finished_inputs(partial) if partial.is_file() else 0
    load = replace(options.load, model=options.teacher)
    search = {"beam": options.beam} if options.beam else {}
    try:
        translate(TranslateOptions(load=load, search=search, input=sources, output=scored, skip=skip,
                                   print_scores=True, buffer_size=options.buffer_size, force=scored.is_file()))
    except Interrupted as exc:
        done = finished_inputs(partial) if partial.is_file() else 0
        how = f"go on with: {options.again}" if options.again else "the same command without --force goes on from there"
        raise Interrupted(f"interrupted: the teacher has translated {done:,} of {corpus}'s {count_lines(sources):,} "
                          f"lines ({partial}); {how}", exc.exit_code) from None


def _keep(folder: DistillDir, corpus: str, drop: float) -> CorpusReport:
    """Write the pairs kept: non-empty translations, less the ``drop`` share with the lowest scores."""
    scored = folder.scored(corpus)
    scores, empty = [], 0
    for number, line in enumerate(read_lines(scored), start=1):
        score, sep, text = line.partition("\t")
        if sep and not score and not text.strip():  # an empty source's line: "<TAB>" and nothing
            empty += 1
            scores.append(-np.inf)
            continue
        try:
            value = float(score)
        except ValueError:
            raise NmtkError(f"{scored}:{number}: not 'SCORE<TAB>TRANSLATION' (a file of nmtk translate "
                            "--print-scores): remove it, or start over with --force") from None
        empty += not text.strip()
        scores.append(value if sep and text.strip() else -np.inf)
    values = np.asarray(scores, dtype=np.float64)
    nonempty = np.flatnonzero(np.isfinite(values))
    cut = int(len(nonempty) * drop)
    order = nonempty[np.argsort(values[nonempty], kind="stable")]
    keep = np.zeros(len(values), dtype=bool)
    keep[order[cut:]] = True
    _write_kept(folder, corpus, keep)
    threshold = float(values[order[cut]]) if cut and cut < len(order) else None
    return CorpusReport(corpus, len(values), int(keep.sum()), empty, cut, threshold)


def _write_kept(folder: DistillDir, corpus: str, keep: np.ndarray) -> None:
    src_out, tgt_out = folder.kept(corpus)
    with atomic_write(src_out, "w") as src, atomic_write(tgt_out, "w") as tgt:
        pairs = zip(read_lines(folder.sources(corpus)), read_lines(folder.scored(corpus)), strict=True)
        for kept, (source, line) in zip(keep, pairs, strict=True):
            if kept:
                src.write(source + "\n")
                tgt.write(line.partition("\t")[2] + "\n")


def _student_recipe(recipe: Recipe, folder: DistillDir, with_original: bool) -> Recipe:
    """The student recipe with each training corpus's distilled pairs in its place (its weight and tag
    kept); with ``with_original``, the original corpora too."""
    data = recipe.model_dump(mode="json", exclude_none=True)
    originals = data["data"]["train"]
    distilled = []
    for corpus in originals:
        src, tgt = (str(p.resolve()) for p in folder.kept(corpus["name"]))
        distilled.append({**corpus, "name": f"{corpus['name']}-distilled", "source": {"path": src},
                          "target": {"path": tgt}})
    data["data"]["train"] = distilled + (originals if with_original else [])
    return recipe_from_dict(data, str(folder.path / folder.RECIPE))
