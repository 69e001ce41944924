"""A run's lexical shortlist (`nmtk shortlist`): built from the run's training data, kept in the run,
used by `translate --shortlist` and `serve --shortlist`, and written into a CTranslate2 export as its
vocabulary map (``vmap.txt``, for CTranslate2's ``use_vmap``)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from nmtk.data.binarized import BinarizedSplit
from nmtk.data.prepare import default_out_dir
from nmtk.data.shortlist import Shortlist, build
from nmtk.errors import NmtkError
from nmtk.manifest import PreparedData
from nmtk.rundir import SHORTLIST, RunDir


@dataclass(frozen=True)
class ShortlistReport:
    path: Path
    sentences: int
    per_source: int
    frequent: int
    mean_candidates: float  # over the training sources read: how many target pieces a sentence keeps
    vocabulary: int


def make_shortlist(run: Path, data: Path | None = None, per_source: int = 50, frequent: int = 100,
                   max_sentences: int = 2_000_000) -> ShortlistReport:
    """Build ``run``'s shortlist from the prepared data it was trained on (``data``: default `training_data`'s
    choice) and save it in the run."""
    folder = RunDir(run).require()
    manifest = folder.manifest()
    if manifest.pairs:
        raise NmtkError(f"{run}: a multilingual run: shortlists are for one language pair (its per-target output "
                        "vocabularies already restrict each target)")
    prepared = training_data(folder, data)
    pair = manifest.language_pairs()[0]
    split = BinarizedSplit(prepared, "train", pair)
    src_vocab, tgt_vocab = manifest.vocab_sizes()
    shortlist = build(split.src, split.tgt, src_vocab, tgt_vocab, per_source, frequent, max_sentences,
                      joint=manifest.vocab.joint)
    path = folder.path / SHORTLIST
    shortlist.save(path)
    sentences = min(len(split), max_sentences)
    sizes = [len(shortlist.candidates([split.src[i]])) for i in range(0, sentences, max(1, sentences // 1000))]
    return ShortlistReport(path, sentences, per_source, frequent, round(sum(sizes) / max(1, len(sizes)), 1),
                           tgt_vocab)


def training_data(run: RunDir, data: Path | None = None) -> PreparedData:
    """The prepared data ``run`` was trained on: ``data`` when given, else the folder training recorded
    (`RunDir.trained_on`) or the recipe's ``data-bin/<name>``, the first prepared with the run's subword
    models (a folder rebuilt since with others is passed over, and named when none is left)."""
    places = [data] if data else [p for p in (run.trained_on(), default_out_dir(run.recipe())) if p is not None]
    places = list(dict.fromkeys(places))
    found = [prepared for prepared in map(PreparedData, places) if prepared.manifest_path.is_file()]
    if not found:
        raise NmtkError(f"{' nor '.join(map(str, places))}: no prepared data (the data {run.path} was trained on: "
                        "--data DIR)")
    vocab = run.manifest().vocab.sha256
    same = next((prepared for prepared in found if prepared.manifest().vocab.sha256 == vocab), None)
    if same is None:
        raise NmtkError(f"{found[0].path}: prepared with other subword models than {run.path}'s: pass the data it "
                        "was trained on (--data DIR)")
    return same


def run_shortlist(run: Path) -> Shortlist:
    """The shortlist `nmtk shortlist` saved in ``run``; one line when there is none."""
    path = Path(run) / SHORTLIST
    if not path.is_file():
        raise NmtkError(f"--shortlist: {run} has no shortlist: make one with `nmtk shortlist {run}`")
    return Shortlist.load(path)
