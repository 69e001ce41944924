"""The curriculum: which corpus weights and modifiers each epoch trains with (``[[train.stages]]``,
``[[train.modifiers]]``), and when a stage ends.

A stage's weights are corpus weights (`nmtk.data.batching.weighted_sample`) for as long as it lasts; it
ends after a number of its updates (mid-epoch: the next epoch starts the next stage) or once a corpus
has been seen a number of times (at the end of an epoch, which sees corpus c ``weight_c`` times). The
stage, the update it began at and its finished epochs are part of the training state, so a resume
inside a stage, or across stages, continues where the uninterrupted run would be: an epoch's batches
and modified pairs are functions of the seed, the epoch and the stage alone.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TypeVar

import numpy as np

from nmtk.console import console
from nmtk.data.alignment import Alignments
from nmtk.data.batching import BatchingPlan, CorpusDraws
from nmtk.data.cleaning import dropped_text
from nmtk.data.dataset import corpus_ids, split_lengths, training_split
from nmtk.data.modifiers import ModifiedSplit
from nmtk.errors import NmtkError
from nmtk.manifest import DROPPED, PreparedData
from nmtk.recipe import Modifier, Recipe, Stage
from nmtk.text.subword import load_subword_model
from nmtk.train.metrics import MetricsLog
from nmtk.train.state import TrainState
from nmtk.train.stopping import StopReason

T = TypeVar("T")


class Curriculum:
    """Stages and modifiers over the epochs of one run: the split and batching plan of each epoch."""

    def __init__(self, recipe: Recipe, data: PreparedData, split: object, lengths: tuple[np.ndarray, np.ndarray],
                 show: bool = True) -> None:
        t = recipe.train
        self.stages, self.modifiers, self.show, self.finished = list(t.stages), list(t.modifiers), show, True
        self.corpora = [c for pair in recipe.data.language_pairs() for c in pair.train]
        names = [c.name for c in self.corpora]
        self.ids = corpus_ids(data, names, len(lengths[0]), "train in stages") if self.stages else None
        self.split = self._modified(recipe, data, split, lengths) if recipe.all_modifiers else split

    def _modified(self, recipe: Recipe, data: PreparedData, split: object,
                  lengths: tuple[np.ndarray, np.ndarray]) -> ModifiedSplit:
        manifest = data.manifest()
        pair = manifest.language_pairs()[0]
        models = [load_subword_model(data.path / manifest.vocab.models[lang]) for lang in (pair.source, pair.target)]
        if recipe.uses_terms and not manifest.hints:
            raise NmtkError(f"train.modifiers: terms needs data prepared with it (hint symbols and word alignments): "
                            f"nmtk prepare --force (the data in {data.path} has neither)")
        alignments = Alignments(data.alignments()) if manifest.hints else None
        pieces = {p: i for i, p in enumerate(models[0].pieces())}
        tags = [c.tag for c in self.corpora if c.tag] + list(manifest.tags)
        keep = frozenset(pieces[t] for t in tags if t in pieces) | frozenset(manifest.tags.values())
        limit = min(recipe.data.max_len + 1, recipe.batching.batch_tokens)  # what prepare and batching allow
        return ModifiedSplit(split, (models[0], models[1]), lengths, recipe.train.seed, limit, keep, alignments)

    def stage(self, state: TrainState) -> Stage | None:
        return self.stages[state.stage] if self.stages else None

    def plan(self, base: BatchingPlan, state: TrainState, log: MetricsLog | None = None) -> BatchingPlan:
        """The epoch ``state.epoch``'s batching plan: ``base`` with the stage's corpus weights, its pairs
        modified (the split's lengths changed in place first). A stage's first epoch is said (and
        written to ``log``, train.jsonl)."""
        self.finished = True
        stage = self.stage(state)
        if isinstance(self.split, ModifiedSplit):
            modifiers: list[Modifier] = self.modifiers if stage is None or stage.modifiers is None else stage.modifiers
            self.split.set_epoch(state.epoch, modifiers)
        if stage is None:
            return replace(base) if isinstance(self.split, ModifiedSplit) else base
        if self.begins(state):
            self._announce(stage, state)
            if log is not None:
                log.write(self.record(state), "stage", ())
        weights = tuple(stage.weights.get(c.name, c.weight) for c in self.corpora)
        return replace(base, draws=CorpusDraws(self.ids, weights))

    def _announce(self, stage: Stage, state: TrainState) -> None:
        if self.show:
            weights = ", ".join(f"{c.name} ×{stage.weights.get(c.name, c.weight):g}" for c in self.corpora)
            console.print(f"stage {state.stage + 1}/{len(self.stages)} {stage.name} from update {state.update} "
                          f"(epoch {state.epoch + 1}): {weights}; until {self._end(stage)}")

    @staticmethod
    def _end(stage: Stage) -> str:
        if stage.updates is not None:
            return f"{stage.updates:,} updates"
        if stage.epochs is None:
            return "training stops"
        return f"{stage.corpus} is seen {stage.epochs:g} time{'' if stage.epochs == 1 else 's'}"

    def begins(self, state: TrainState) -> bool:
        """Whether the epoch about to run is the first of its stage, from its start."""
        return bool(self.stages) and state.batch == 0 and state.stage_epochs == 0

    def label(self, state: TrainState) -> dict[str, object]:
        """What each train.jsonl line says of the curriculum: the stage's name (nothing without stages)."""
        return {"stage": self.stages[state.stage].name} if self.stages else {}

    def describe(self) -> str | None:
        """The curriculum in a line, under the ``update:`` line (None: neither stages nor modifiers)."""
        parts = []
        if self.stages:
            n = len(self.stages)
            parts.append(f"{n} stage{'' if n == 1 else 's'}: " + ", ".join(f"{s.name} (until {self._end(s)})"
                                                                             for s in self.stages))
        if self.modifiers:
            parts.append("modifiers: " + ", ".join(f"{m.name} {m.p:.0%}" for m in self.modifiers))
        return "curriculum: " + "; ".join(parts) if parts else None

    def record(self, state: TrainState) -> dict[str, object]:
        """What train.jsonl says when a stage begins."""
        stage = self.stage(state)
        return {"stage": stage.name if stage else None, "stage_index": state.stage + 1, "update": state.update,
                "epoch": state.epoch + 1}

    def out_of_updates(self, state: TrainState) -> bool:
        """Whether the stage has had its updates (then the epoch ends here and the next stage begins)."""
        stage = self.stage(state)
        return stage is not None and stage.updates is not None and state.update - state.stage_update >= stage.updates

    def within_stage(self, updates: Iterable[T], state: TrainState) -> Iterator[T]:
        """``updates`` (an epoch's) while the stage has updates left: one whose updates are spent ends the
        epoch there (not finished), and the next epoch begins the next stage."""
        for update in updates:
            if self.out_of_updates(state):
                self.finished = False
                return
            yield update

    def next_epoch(self, state: TrainState) -> None:
        """Move ``state`` to the next epoch, and to the next stage where this one ended (by its updates, or
        by the epochs of its corpus, counted when an epoch is trained to its end)."""
        stage = self.stage(state)
        state.epoch, state.batch = state.epoch + 1, 0
        if stage is None:
            return
        state.stage_epochs += self.finished
        if self._over(stage, state) and state.stage < len(self.stages) - 1:
            state.stage, state.stage_update, state.stage_epochs = state.stage + 1, state.update, 0

    def _over(self, stage: Stage, state: TrainState) -> bool:
        """Whether ``stage`` (the state's) has had its updates or its corpus's epochs."""
        seen = stage.corpus is not None and stage.epochs is not None and \
            state.stage_epochs * stage.weights.get(stage.corpus, self._weight(stage.corpus)) >= stage.epochs - 1e-9
        return seen or self.out_of_updates(state)

    def ended(self, state: TrainState) -> StopReason | None:
        """Why training stops where the last stage has an end and has reached it (as OpusTrainer's
        curriculum ends with its last stage), or None. Without it, every later epoch would draw no
        update, to max_epochs or the time limit, or forever."""
        stage = self.stage(state)
        if stage is None or state.stage < len(self.stages) - 1 or stage.endless or not self._over(stage, state):
            return None
        return StopReason(f"the last stage, {stage.name}, ended ({self._end(stage)})", "stage")

    def _weight(self, name: str) -> float:
        return next(c.weight for c in self.corpora if c.name == name)


@dataclass(frozen=True)
class ModifiedPairs:
    """What `modified_pairs` shows: the modifiers asked for, how many pairs each changed in the epoch
    (and ``too long``: changed beyond ``data.max_len``, so kept as they were), and some changed pairs as
    text, each (source, target, modified source, modified target)."""

    modifiers: tuple[Modifier, ...]
    counts: dict[str, int]
    pairs: list[tuple[str, str, str, str]]


def check_stage_pairs(recipe: Recipe, data: PreparedData) -> None:
    """One line naming the stage that would wait for, or train on, corpora `prepare` kept no pair of
    (a back-translation in the wrong language, every pair too long): its stage would end with its
    first epoch, or train on nothing, and the run would silently be another curriculum. Before the run
    directory is opened: nothing is written or moved aside (``--restart``)."""
    stages = recipe.train.stages
    if not stages:
        return
    manifest = data.manifest()
    recorded = {c["name"].rpartition("/")[2]: c for pair in manifest.language_pairs()
                for c in manifest.training_corpora(pair)}
    corpora = [c for pair in recipe.data.language_pairs() for c in pair.train]
    empty = {name: c for name, c in recorded.items() if not c["kept"]}
    why = lambda name: dropped_text(empty[name]["dropped"]) or "none, it is empty"  # noqa: E731
    for index, stage in enumerate(stages):
        where = f"train.stages[{index}] ({stage.name})"
        if stage.corpus in empty:
            raise NmtkError(f"{where}: ends once {stage.corpus} is seen, but prepare kept none of its "
                            f"{empty[stage.corpus]['pairs_in']:,} pairs (dropped: {why(stage.corpus)}; {data.path}"
                            f"/{DROPPED} names each): fix the corpus, or the stage")
        weighed = [c.name for c in corpora if stage.weights.get(c.name, c.weight) > 0]
        if weighed and all(name in empty for name in weighed):
            raise NmtkError(f"{where}: trains on {', '.join(weighed)}, but prepare kept none of "
                            f"{'its' if len(weighed) == 1 else 'their'} pairs (dropped: "
                            f"{'; '.join(why(n) for n in weighed)}): fix the corpora, or the stage's weights")


def modified_pairs(recipe: Recipe, data_dir: Path, epoch: int = 1, stage: str | None = None,
                   count: int = 10) -> ModifiedPairs:
    """The training pairs ``recipe``'s modifiers change in ``epoch`` (from 1), as `train` feeds them that
    epoch from the data prepared in ``data_dir``: the same draw from the seed and the epoch, the same
    text. ``stage``: the modifiers of that stage (its own, else ``train.modifiers``); without it, the
    first stage's, as training begins.

    Why: OpusTrainer's and Eole's users look at what their modifiers make before spending hours of
    training on it (Eole's ``-dump_samples``): capitals, typos and hints read wrong are seen at once."""
    if epoch < 1:
        raise NmtkError(f"--epoch {epoch}: epochs count from 1")
    chosen = _stage_named(recipe, stage)
    modifiers = tuple(recipe.train.modifiers if chosen is None or chosen.modifiers is None else chosen.modifiers)
    if not modifiers:
        where = f"stage {chosen.name}" if chosen is not None else "the recipe"
        raise NmtkError(f"{recipe.name}: {where} has no modifiers ([[train.modifiers]], or a stage's modifiers)")
    data = PreparedData(data_dir)
    if not data.manifest_path.is_file():
        raise NmtkError(f"{data_dir}: no prepared data (nmtk prepare the recipe first, or give --data)")
    from nmtk.data.prepare import settings_difference

    if difference := settings_difference(data.manifest(), recipe):  # as `train` refuses it: shown read wrong
        raise NmtkError(f"{data_dir}: prepared with {difference}; nmtk prepare this recipe (its own --out), "
                        "then give that folder as --data")
    split, _ = training_split(data)
    curriculum = Curriculum(recipe, data, split, split_lengths(split), show=False)
    modified = curriculum.split
    assert isinstance(modified, ModifiedSplit)  # the recipe has modifiers: `Curriculum` made one
    counts = modified.set_epoch(epoch - 1, modifiers)
    src, tgt = modified.subwords
    pairs = []
    for i in sorted(modified.changed_src):  # drawn pairs that a modifier left as they were are not shown
        old, new = (split.src[i], split.tgt[i]), (modified.changed_src[i], modified.changed_tgt[i])
        if not (np.array_equal(old[0], new[0]) and np.array_equal(old[1], new[1])):
            pairs.append((src.decode(old[0].tolist()), tgt.decode(old[1].tolist()),
                          src.decode(new[0].tolist()), tgt.decode(new[1].tolist())))
            if len(pairs) == count:
                break
    return ModifiedPairs(modifiers, dict(counts), pairs)


def _stage_named(recipe: Recipe, name: str | None) -> Stage | None:
    """The recipe's stage called ``name`` (None: the first, where there are stages), one error naming
    the stages where it has none of that name."""
    stages = recipe.train.stages
    if name is None:
        return stages[0] if stages else None
    found = next((s for s in stages if s.name == name), None)
    if found is None:
        have = ", ".join(s.name for s in stages) or "none"
        raise NmtkError(f"--stage {name}: {recipe.name} has no stage of that name (its stages: {have})")
    return found
