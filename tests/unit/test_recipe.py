"""Recipes: shipped files, validation errors naming the field, overrides, schema."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nmtk.errors import NmtkError
from nmtk.recipe import Recipe, derived_figures, load_recipe, recipe_schema, recipe_to_toml

ROOT = Path(__file__).resolve().parents[2]
RECIPES = sorted((ROOT / "recipes").glob("*.toml"))
SMALL = ROOT / "recipes" / "multi30k-en-de.toml"


def write_variant(tmp_path: Path, old: str, new: str, name: str = "variant.toml") -> Path:
    text = SMALL.read_text()
    assert old in text, old
    path = tmp_path / name
    path.write_text(text.replace(old, new, 1))
    return path


@pytest.mark.parametrize("path", RECIPES, ids=lambda p: p.name)
def test_shipped_recipes_are_valid(path: Path) -> None:
    recipe = load_recipe(path)
    assert recipe.name == path.stem


@pytest.mark.parametrize(
    ("name", "low", "high"),
    [("wmt14-en-de-big", 209_000_000, 217_000_000), ("wmt14-en-de-base", 60_000_000, 66_000_000)],
)
def test_paper_parameter_counts(nmtk, name: str, low: int, high: int) -> None:
    """Paper Table 3: big 213M, base 65M parameters."""
    result = nmtk("recipe", "show", f"recipes/{name}.toml", "--json")
    assert result.returncode == 0, result.stderr
    payload = json.loads(result.stdout)
    assert low <= payload["parameters"] <= high
    assert payload["recipe"]["name"] == name


def test_paper_settings() -> None:
    base = load_recipe(ROOT / "recipes" / "wmt14-en-de-base.toml")
    big = load_recipe(ROOT / "recipes" / "wmt14-en-de-big.toml")
    enfr = load_recipe(ROOT / "recipes" / "wmt14-en-fr-big.toml")
    assert (base.model.d_model, base.model.heads, base.model.d_ff, base.model.layers) == (512, 8, 2048, 6)
    assert (big.model.d_model, big.model.heads, big.model.d_ff) == (1024, 16, 4096)
    assert (base.model.dropout, big.model.dropout, enfr.model.dropout) == (0.1, 0.3, 0.1)
    assert base.optim.betas == (0.9, 0.98) and base.optim.eps == 1e-9 and base.optim.warmup == 4000
    assert base.optim.label_smoothing == 0.1
    assert (base.train.max_updates, big.train.max_updates) == (100_000, 300_000)
    assert (base.average.last, big.average.last) == (5, 20)
    assert base.tokenizer.vocab_size == 37000 and base.tokenizer.type == "bpe" and base.tokenizer.joint
    assert enfr.tokenizer.vocab_size == 32000 and enfr.tokenizer.type == "wordpiece"
    # §6.1: a checkpoint every 10 minutes = every 1,500 (base, 0.4 s/update) or 600 (big, 1.0 s) updates
    assert (base.train.save_every_updates, big.train.save_every_updates, enfr.train.save_every_updates) == (
        1500, 600, 600)
    assert base.train.save_every_minutes == big.train.save_every_minutes == enfr.train.save_every_minutes == 0
    assert min(r.train.keep_last for r in (base, big, enfr)) >= 20
    for recipe in (base, big, enfr):  # nothing on the target side that detokenisation cannot undo
        tok = recipe.tokenizer
        assert not tok.applies("moses", "target") and not tok.applies("normalize_punctuation", "target")
        assert tok.normalization == "identity"
    assert base.batching.batch_tokens * base.train.update_freq == 25_000
    assert (base.decode.beam, base.decode.length_penalty, base.decode.max_len_a, base.decode.max_len_b) == (
        4, 0.6, 1.0, 50)


@pytest.mark.parametrize(
    ("old", "new", "field"),
    [
        ("d_ff = 512", "d_fff = 512", "model.d_fff"),
        ("d_model = 256", 'd_model = "wide"', "model.d_model"),
        ("d_model = 256", "d_model = 250", "d_model (250) must be divisible by heads (4)"),
        ("vocab_size = 8000", "vocab_size = 4", "tokenizer.vocab_size"),
        ("joint = true", "joint = false", "share_embeddings"),
        ('precision = "auto"', 'precision = "fp8"', "train.precision"),
        ('[[data.train]]\nname = "train"', '[[data.train]]\nname = "train"\nweight = 0', "corpus train: weight 0.0"),
        ('[[data.train]]\nname = "train"', '[[data.train]]\nname = "train"\ntag = "<s>"', "corpus train: tag '<s>'"),
        ('[[data.train]]\nname = "train"', '[[data.train]]\nname = "train"\ntag = ">>de<<"', "corpus train: tag"),
        ('[data.valid]\nname = "val"', '[data.valid]\nname = "val"\nweight = 2', "corpus val: weight and tag are for"),
    ],
)
def test_invalid_recipe_is_one_line_naming_the_field(nmtk, tmp_path: Path, old: str, new: str, field: str) -> None:
    path = write_variant(tmp_path, old, new)
    result = nmtk("recipe", "validate", str(path))
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert field in lines[0] and str(path) in lines[0]
    assert "Traceback" not in result.stderr


def test_a_field_added_later_at_its_default_is_no_change() -> None:
    """A run trained (or data prepared) by the nmtk before ``tokenizer.correct_typos`` existed resumes:
    `check_resumable` leaves out a field the checkpoint's recipe lacks when it is at its default."""
    from nmtk.recipe import added_later, differences

    recipe = load_recipe(SMALL)
    old = recipe.model_dump(mode="json")
    del old["tokenizer"]["correct_typos"]
    assert differences(old, recipe.model_dump(mode="json")) == [("tokenizer.correct_typos", None, False)]
    assert not [d for d in differences(old, recipe.model_dump(mode="json")) if not added_later(*d)]
    on = load_recipe(SMALL, ["tokenizer.correct_typos=true"]).model_dump(mode="json")
    assert [d for d in differences(old, on) if not added_later(*d)] == [("tokenizer.correct_typos", None, True)]


def test_typo_correction_needs_one_pair(nmtk) -> None:
    result = nmtk("recipe", "validate", str(ROOT / "recipes" / "multi30k-en-many.toml"),
                   "--set", "tokenizer.correct_typos=true")
    assert result.returncode != 0 and "tokenizer.correct_typos: one language pair only" in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize(
    ("override", "expected"),
    [
        ("model.dropot=0.3", "--set model.dropot=0.3: unknown field (did you mean dropout or relu_dropout?)"),
        # a list's item: its section's fields, where none is close
        ('train.stages=[{name="a", mix={train=1}}]', "train.stages.0.mix: unknown field (its fields: name, weights, "
                                                     "updates, epochs, corpus, modifiers)"),
        # a field of another section: that section's
        ("train.lr=0.1", "--set train.lr=0.1: unknown field (did you mean optim.lr?)"),
        ("data.train.0.source.sha=1", "--set data.train.0.source.sha=1: unknown field (did you mean sha256?)"),
        ("data.train.0.source.column=0", "source.column=0: Input should be greater than or equal to 1 (got 0)"),
        ('data.train.0.source={path="newstest.sgm", column=1}', 'column=1}: newstest.sgm: a WMT .sgm file has no '
                                                               "columns"),
        ("model.dropout=abc", "--set model.dropout=abc"),
        ("model.heads=7", "must be divisible by heads (7)"),
        ("model.dropout", "expected KEY=VALUE"),
        # a list given whole: its error names the --set, then the field inside it
        ('train.stages=[{name="a", updates=0}]', '--set train.stages=[{name="a", updates=0}]: train.stages.0.updates: '
                                                 'Input should be greater than or equal to 1'),
        ('train.stages=[{name="a", updates=5}, {name="b", weights={bt=0}}]',  # a check of the whole recipe
         "--set train.stages=[{name=\"a\", updates=5}, {name=\"b\", weights={bt=0}}]: train.stages[1] (b): "
         "no training corpus named 'bt'"),
    ],
)
def test_bad_override_is_one_line(nmtk, override: str, expected: str) -> None:
    result = nmtk("recipe", "validate", str(SMALL), "--set", override)
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and expected in lines[0], result.stderr


def test_overrides_are_typed_like_the_file() -> None:
    recipe = load_recipe(SMALL, ["model.dropout=0.3", "train.precision=bf16", "optim.betas=[0.9, 0.99]",
                                 "model.layers=2", "data.train.0.name=renamed", "train.max_minutes=1.5"])
    assert recipe.model.dropout == 0.3
    assert recipe.train.precision == "bf16"
    assert recipe.optim.betas == (0.9, 0.99)
    assert recipe.model.n_encoder_layers == 2 and recipe.model.n_decoder_layers == 2
    assert recipe.data.train[0].name == "renamed"
    assert recipe.train.max_minutes == 1.5


def test_invalid_toml_and_missing_file(tmp_path: Path) -> None:
    broken = tmp_path / "broken.toml"
    broken.write_text("[model\nd_model = 3\n")
    with pytest.raises(NmtkError, match=r"broken.toml: invalid TOML.*line 1"):
        load_recipe(broken)
    with pytest.raises(NmtkError, match="recipe file not found"):
        load_recipe(tmp_path / "absent.toml")


def test_resolved_recipe_round_trips_through_toml(tmp_path: Path) -> None:
    recipe = load_recipe(SMALL, ["model.dropout=0.2"])
    frozen = tmp_path / "frozen.toml"
    frozen.write_text(recipe_to_toml(recipe))
    again = load_recipe(frozen)
    assert again == recipe and again.hash() == recipe.hash()
    assert load_recipe(SMALL).hash() != recipe.hash()


def test_schema_describes_every_field() -> None:
    schema = recipe_schema()
    missing = []
    for name, definition in schema["$defs"].items():
        for field, spec in definition.get("properties", {}).items():
            if not spec.get("description"):
                missing.append(f"{name}.{field}")
    for field, spec in schema["properties"].items():
        if field != "name" and "$ref" not in spec and not spec.get("description"):
            missing.append(field)
    assert not missing, missing
    assert schema["$defs"]["ModelSection"]["additionalProperties"] is False


def test_derived_figures() -> None:
    recipe = load_recipe(ROOT / "recipes" / "wmt14-en-de-base.toml")
    figures = derived_figures(recipe)
    assert figures["d_head"] == 64
    assert figures["peak_lr"] == pytest.approx(512**-0.5 * 4000**-0.5)
    assert figures["tokens_per_update"] == 25_000
    assert isinstance(Recipe.model_json_schema(), dict)


@pytest.mark.parametrize("path", RECIPES, ids=lambda p: p.name)
def test_every_download_has_a_sha256(path: Path) -> None:
    recipe = load_recipe(path)
    data = recipe.data
    for corpus in data.corpora():
        for side in (corpus.source, corpus.target):
            if side.url:
                assert side.sha256, f"{path.name}: {corpus.name} {side.path} is downloaded from {side.url} unchecked"


@pytest.mark.parametrize(("value", "source", "target"), [
    (True, True, True), (False, False, False), ("source", True, False), ("target", False, True),
    ("both", True, True), ("none", False, False)])
def test_moses_steps_per_side(value: object, source: bool, target: bool) -> None:
    from nmtk.recipe import TokenizerSection

    tok = TokenizerSection(moses=value, normalize_punctuation=value)
    for step in ("moses", "normalize_punctuation"):
        assert (tok.applies(step, "source"), tok.applies(step, "target")) == (source, target)


def test_tokenizer_options_of_the_wrong_model_type_are_errors() -> None:
    with pytest.raises(NmtkError, match="byte_fallback is a sentencepiece option"):
        load_recipe(SMALL, ["tokenizer.type=wordpiece", "tokenizer.byte_fallback=true"])
    with pytest.raises(NmtkError, match="byte_fallback needs vocab_size above 260"):
        load_recipe(SMALL, ["tokenizer.vocab_size=200", "tokenizer.byte_fallback=true"])


def test_renamed_keys_are_read_as_their_new_names_with_one_notice(nmtk, tmp_path: Path) -> None:
    """``max_tokens`` had two meanings; old recipes, old ``--set`` habits and old checkpoints still work."""
    from nmtk.recipe import with_current_names

    old = write_variant(tmp_path, "batch_tokens = 1024", "max_tokens = 1000")
    old.write_text(old.read_text().replace("[decode]\n", "[decode]\nmax_tokens = 777\n"))
    result = nmtk("recipe", "show", str(old), "--json")
    assert result.returncode == 0, result.stderr
    notices = [line for line in result.stderr.splitlines() if line.startswith("notice:")]
    assert len(notices) == 2 and "batching.max_tokens is now batching.batch_tokens" in notices[0], notices
    recipe = load_recipe(old, ["decode.max_tokens=555"])
    assert (recipe.batching.batch_tokens, recipe.decode.beam_tokens) == (1000, 555)
    both = write_variant(tmp_path, "batch_tokens = 1024", "batch_tokens = 1024\nmax_tokens = 5", "both.toml")
    with pytest.raises(NmtkError, match="batching.max_tokens and batching.batch_tokens are one setting"):
        load_recipe(both)
    # A checkpoint written before the rename compares equal to the same recipe read today (resume).
    dumped = load_recipe(SMALL).model_dump(mode="json")
    earlier = json.loads(json.dumps(dumped))
    earlier["batching"]["max_tokens"] = earlier["batching"].pop("batch_tokens")
    assert with_current_names(earlier, "ckpt") == dumped and "max_tokens" in earlier["batching"]


def test_renamed_options_still_work_with_one_notice(nmtk) -> None:
    """``translate --max-tokens`` is ``--beam-tokens``; ``serve --max-tokens`` is ``--gather-tokens``."""
    from nmtk.cli.app import _renamed_options

    assert _renamed_options(["nmtk", "translate", "--max-tokens", "9"]) == ["nmtk", "translate", "--beam-tokens", "9"]
    assert _renamed_options(["nmtk", "serve", "--max-tokens=9"]) == ["nmtk", "serve", "--gather-tokens=9"]
    assert _renamed_options(["nmtk", "train", "--max-tokens", "9"]) == ["nmtk", "train", "--max-tokens", "9"]
    result = nmtk("translate", "--max-tokens", "0", stdin="x\n")
    assert "notice: nmtk translate --max-tokens is now --beam-tokens" in result.stderr
    assert result.returncode != 0 and "--beam-tokens" in result.stderr.splitlines()[-1], result.stderr


def test_a_list_entry_is_set_with_brackets_or_a_dot_and_a_wrong_index_names_the_range() -> None:
    """``data.train[1].weight`` said "unknown field"; the working form ``data.train.1.weight`` was not
    documented. Both work; an index past the list's end says which there are."""
    recipe = Path(__file__).resolve().parents[2] / "recipes" / "multi30k-en-de.toml"
    assert load_recipe(recipe, ["data.train[0].weight=2"]).data.train[0].weight == 2.0
    assert load_recipe(recipe, ["data.train.0.weight=3"]).data.train[0].weight == 3.0
    with pytest.raises(NmtkError, match=r"--set data.train.4.weight: data.train has 1 entries: data.train.0 to "):
        load_recipe(recipe, ["data.train[4].weight=2"])
