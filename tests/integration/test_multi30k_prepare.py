"""`prepare` on the real Multi30k files: round trip of the text pipeline and padding of the batches."""

from __future__ import annotations

from pathlib import Path

import pytest

from nmtk.data.batching import BatchingPlan, padding_fraction
from nmtk.data.binarized import BinarizedSplit
from nmtk.data.corpus import read_lines
from nmtk.data.prepare import prepare
from nmtk.pair import Pair
from nmtk.recipe import load_recipe
from nmtk.text import TextPipeline, moses_for

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def prepared(multi30k_root: Path, tmp_path_factory: pytest.TempPathFactory):
    recipe = load_recipe(ROOT / "recipes" / "multi30k-en-de.toml")
    out = tmp_path_factory.mktemp("m30k") / "data"
    return recipe, prepare(recipe, multi30k_root, out)


def test_round_trip_restores_99_percent(prepared, multi30k_root: Path) -> None:
    recipe, result = prepared
    for lang, side in (("en", "source"), ("de", "target")):
        pipe = TextPipeline(moses_for(recipe.tokenizer, lang, side), result.out_dir / "spm.model")
        lines = list(read_lines(multi30k_root / "multi30k" / f"train.{lang}.gz"))
        restored = sum(pipe.decode(pipe.encode(line)) == line for line in lines) / len(lines)
        print(f"detok(tok(x)) == x for {restored:.2%} of Multi30k train.{lang}")
        assert restored >= 0.99


def test_padding_at_4096_tokens_is_at_most_5_percent(prepared) -> None:
    recipe, result = prepared
    split = BinarizedSplit(result.data, "train", Pair("en", "de"))
    src, tgt = split.src.lengths + 1, split.tgt.lengths + 1  # + EOS / BOS, as batches hold them
    plan = BatchingPlan(src, tgt, batch_tokens=4096, seed=recipe.train.seed)
    fraction = padding_fraction(plan.epoch_batches(0), src, tgt)
    print(f"padding at batch_tokens=4096: {fraction:.2%}")
    assert fraction <= 0.05
    train = result.manifest.splits["train"]
    assert train["pairs_in"] == 29000 and train["kept"] == 29000 - sum(train["dropped"].values())
    assert 28900 <= train["kept"] < 29000  # cleaning takes 8 (3 duplicates, 4 numbers, 1 language): 28,992


def test_cli_second_run_is_up_to_date(nmtk, prepared, multi30k_root: Path) -> None:
    _, result = prepared
    run = nmtk("prepare", "recipes/multi30k-en-de.toml", "--data-root", str(multi30k_root),
               "--out", str(result.out_dir))
    assert run.returncode == 0 and "up to date" in run.stderr


def test_train_uses_prepared_data_without_the_corpora(nmtk, prepared, tmp_path: Path) -> None:
    """data-bin/ prepared on one machine, copied to another that has no corpora (and no network)."""
    _, result = prepared
    empty = tmp_path / "no-corpora"
    empty.mkdir()
    # decode.max_len_*: the validation at the end still runs (its references read from data-bin), but
    # the untrained model's 1,014 sentences stop after one token instead of running to 50 (~30 s)
    run = nmtk("train", "recipes/multi30k-en-de.toml", "--data", str(result.out_dir),
               "--run-dir", str(tmp_path / "run"), "--set", "train.max_updates=1", "--threads", "2",
               "--set", "decode.max_len_a=0", "--set", "decode.max_len_b=1", env={"NMTK_DATA": str(empty)})
    assert run.returncode == 0, run.stderr
    assert "valid | update 1" in run.stderr, run.stderr
    started = run.stderr.index("valid | update 1 | translating the valid set")  # said as it starts (it runs for
    assert started < run.stderr.index("valid | update 1 | loss")                # minutes on a real valid set)
    assert "not re-checked" in run.stderr and (tmp_path / "run" / "checkpoint_1.pt").is_file()
    other = nmtk("train", "recipes/multi30k-en-de.toml", "--data", str(result.out_dir), "--run-dir",
                 str(tmp_path / "run2"), "--set", "tokenizer.vocab_size=9000", env={"NMTK_DATA": str(empty)})
    assert other.returncode == 1 and "tokenizer.vocab_size = 8000, the recipe has 9000" in other.stderr
    assert len(other.stderr.strip().splitlines()) == 1
