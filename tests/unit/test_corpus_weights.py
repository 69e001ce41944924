"""Corpus weights and tags (tagged back-translation): what `prepare` writes and what training draws."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from helpers import synthetic_pairs, toy_recipe, write_lines

from nmtk.data.batching import BatchingPlan
from nmtk.data.binarized import BinarizedSplit
from nmtk.data.dataset import corpus_draws
from nmtk.data.prepare import prepare
from nmtk.errors import NmtkError
from nmtk.pair import Pair
from nmtk.recipe import load_recipe
from nmtk.text import TextPipeline, moses_for
from nmtk.text.subword import load_subword_model

#: A second training corpus: synthetic back-translations, tagged and drawn twice an epoch.
BT = """
[[data.train]]
name = "bt"
source = "toy/bt.en.gz"
target = "toy/bt.de.gz"
weight = 2
tag = "<BT>"
"""


@pytest.fixture(scope="module")
def tagged(tmp_path_factory: pytest.TempPathFactory):
    tmp = tmp_path_factory.mktemp("tagged")
    root = tmp / "root"
    for name, pairs in (("train", synthetic_pairs(200)), ("bt", synthetic_pairs(100, 5)),
                        ("valid", synthetic_pairs(20, 1)), ("test", synthetic_pairs(20, 2))):
        write_lines(root / "toy" / f"{name}.en.gz", [a for a, _ in pairs])
        write_lines(root / "toy" / f"{name}.de.gz", [b for _, b in pairs])
    text = toy_recipe(tmp, vocab_size=80).read_text().replace("[data.valid]", BT + "[data.valid]", 1)
    (tmp / "bt.toml").write_text(text)
    recipe = load_recipe(tmp / "bt.toml")
    return recipe, prepare(recipe, root, tmp / "data"), tmp


def test_a_tag_is_one_piece_before_every_source_of_its_corpus_only(tagged) -> None:
    recipe, result, _ = tagged
    pieces = load_subword_model(result.out_dir / "spm.model").pieces()
    tag = pieces.index("<BT>")
    split = BinarizedSplit(result.data, "train", Pair("en", "de"))
    sources = [split.src[i].tolist() for i in range(len(split))]
    assert all(s[0] != tag and tag not in s for s in sources[:200])
    assert all(s[0] == tag and tag not in s[1:] for s in sources[200:])
    assert all(tag not in split.tgt[i].tolist() for i in range(len(split)))
    pipe = TextPipeline(moses_for(recipe.tokenizer, "en", "source"), result.out_dir / "spm.model")
    assert tag not in pipe.encode("<BT> dog runs.")  # what translate encodes: text never becomes the tag
    assert result.manifest.splits["train"]["corpora"][1] == {"name": "bt", "pairs_in": 100, "kept": 100,
                                                              "dropped": {}}


def test_weight_2_draws_every_pair_of_its_corpus_twice_an_epoch(tagged) -> None:
    recipe, result, _ = tagged
    split = BinarizedSplit(result.data, "train", Pair("en", "de"))
    draws = corpus_draws(result.data, recipe, len(split))
    assert draws is not None and draws.weights == (1.0, 2.0)
    assert np.array_equal(draws.ids, np.repeat([0, 1], [200, 100]))
    plan = BatchingPlan(split.src.lengths + 1, split.tgt.lengths + 1, batch_tokens=256, seed=1, draws=draws)
    drawn = np.bincount(np.concatenate(plan.epoch_batches(0)), minlength=300)
    assert (drawn[:200] == 1).all() and (drawn[200:] == 2).all()


def test_weights_that_the_data_does_not_record_are_refused_naming_it(tagged) -> None:
    recipe, result, tmp = tagged
    other = load_recipe(tmp / "bt.toml", ['data.train=[{name = "train", source = "toy/train.en.gz", '
                                          'target = "toy/train.de.gz", weight = 3}]'])
    with pytest.raises(NmtkError, match=rf"{result.out_dir}.*\(train, bt\) is not the recipe's corpora"):
        corpus_draws(result.data, other, 300)
    unweighted = load_recipe(tmp / "toy.toml")
    assert corpus_draws(result.data, unweighted, 300) is None


def test_a_reused_vocabulary_without_the_tag_is_refused_naming_the_corpus(tagged, tmp_path: Path) -> None:
    _, result, tmp = tagged
    plain = tmp / "plain"
    prepare(load_recipe(tmp / "toy.toml"), tmp / "root", plain)
    reuse = load_recipe(tmp / "bt.toml", [f'tokenizer.reuse="{plain}"'])
    with pytest.raises(NmtkError, match=r"corpus bt: tag '<BT>' is not a piece of spm.model"):
        prepare(reuse, tmp / "root", tmp_path / "o")
