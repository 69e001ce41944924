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
    """Build ``run``'s shortlist from the prepared data it was trained on (``data``: default the recipe's
    ``data-bin/<name>``) and save it in the run."""
    folder = RunDir(run).require()
    recipe, manifest = folder.recipe(), folder.manifest()
    if manifest.pairs:
        raise NmtkError(f"{run}: a multilingual run: shortlists are for one language pair (its per-target output "
                        "vocabularies already restrict each target)")
    prepared = PreparedData(data or default_out_dir(recipe))
    if not prepared.manifest_path.is_file():
        raise NmtkError(f"{prepared.path}: no prepared data (the data {run} was trained on: --data DIR)")
    if prepared.manifest().vocab.sha256 != manifest.vocab.sha256:
        raise NmtkError(f"{prepared.path}: prepared with other subword models than {run}'s: pass the data it was "
                        "trained on (--data DIR)")
    pair = manifest.language_pairs()[0]
    split = BinarizedSplit(prepared, "train", pair)
    src_vocab, tgt_vocab = manifest.vocab_sizes()
    shortlist = build(split.src, split.tgt, src_vocab, tgt_vocab, per_source, frequent, max_sentences)
    path = folder.path / SHORTLIST
    shortlist.save(path)
    sentences = min(len(split), max_sentences)
    sizes = [len(shortlist.candidates([split.src[i]])) for i in range(0, sentences, max(1, sentences // 1000))]
    return ShortlistReport(path, sentences, per_source, frequent, round(sum(sizes) / max(1, len(sizes)), 1),
                           tgt_vocab)


def run_shortlist(run: Path) -> Shortlist:
    """The shortlist `nmtk shortlist` saved in ``run``; one line when there is none."""
    path = Path(run) / SHORTLIST
    if not path.is_file():
        raise NmtkError(f"--shortlist: {run} has no shortlist: make one with `nmtk shortlist {run}`")
    return Shortlist.load(path)
