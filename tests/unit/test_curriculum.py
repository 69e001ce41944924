"""Training stages and on-the-fly modifiers (OpusTrainer's), and terminology hints from the input."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import synthetic_pairs, toy_recipe, write_lines

from nmtk.checkpoint import Checkpoint
from nmtk.data.binarized import BinarizedSplit
from nmtk.data.dataset import split_lengths
from nmtk.data.modifiers import ModifiedSplit
from nmtk.data.prepare import prepare
from nmtk.decode.guide import Glossary, inline_terms
from nmtk.errors import NmtkError
from nmtk.pair import Pair
from nmtk.recipe import Modifier, load_recipe
from nmtk.rundir import RunDir
from nmtk.text import text_pipelines
from nmtk.text.subword import load_subword_model
from nmtk.train.curriculum import Curriculum
from nmtk.train.distributed import DistInfo
from nmtk.train.trainer import Trainer
from nmtk.vocab import HINT_SYMBOLS, UNK_ID

ROOT = Path(__file__).resolve().parents[2]
BT = """
[[data.train]]
name = "bt"
source = "toy/bt.en.gz"
target = "toy/bt.de.gz"
tag = "<BT>"
"""
TERMS = """
[[train.modifiers]]
name = "terms"
p = 0.5
words = 0.5
"""


def _root(tmp: Path) -> Path:
    root = tmp / "root"
    for name, pairs in (("train", synthetic_pairs(200)), ("bt", synthetic_pairs(100, 5)),
                        ("valid", synthetic_pairs(20, 1)), ("test", synthetic_pairs(20, 2))):
        write_lines(root / "toy" / f"{name}.en.gz", [a for a, _ in pairs])
        write_lines(root / "toy" / f"{name}.de.gz", [b for _, b in pairs])
    return root


@pytest.fixture(scope="module")
def staged(tmp_path_factory: pytest.TempPathFactory):
    """Two corpora (original, tagged back-translation) prepared with the terms modifier's hints."""
    tmp = tmp_path_factory.mktemp("staged")
    root = _root(tmp)
    text = toy_recipe(tmp, TERMS, vocab_size=90).read_text().replace("[data.valid]", BT + "[data.valid]", 1)
    (tmp / "staged.toml").write_text(text)
    recipe = load_recipe(tmp / "staged.toml")
    return recipe, prepare(recipe, root, tmp / "data"), tmp


def _trainer(tmp: Path, recipe_path: Path, data, overrides: list[str], run: str = "run") -> Trainer:
    recipe = load_recipe(recipe_path, overrides)
    out = RunDir(tmp / run)
    out.path.mkdir()
    pipes = text_pipelines(recipe.tokenizer, ("en", "de"), data.manifest.model_paths(data.out_dir))
    return Trainer(recipe, data.data, pipes, out, torch.device("cpu"), DistInfo())


def _split(result) -> tuple[ModifiedSplit, list, BinarizedSplit]:
    split = BinarizedSplit(result.data, "train", Pair("en", "de"))
    models = [load_subword_model(result.out_dir / "spm.model")] * 2
    recipe = load_recipe(result.out_dir.parent / "staged.toml")
    curriculum = Curriculum(recipe, result.data, split, split_lengths(split), show=False)
    assert isinstance(curriculum.split, ModifiedSplit)
    return curriculum.split, models, split


def _texts(split, models, i: int) -> tuple[str, str]:
    return models[0].decode(split.src[i].tolist()), models[1].decode(split.tgt[i].tolist())


# ----------------------------------------------------------------------------------------------- modifiers


@pytest.mark.parametrize("name", ["uppercase", "titlecase", "typos", "noise", "merge", "terms"])
def test_each_modifier_changes_the_chosen_pairs_as_opustrainer_does(staged, name: str) -> None:
    _, result, _ = staged
    modified, models, base = _split(result)
    counts = modified.set_epoch(0, [Modifier(name=name, p=1.0, **({"words": 1.0} if name == "terms" else {}))])
    assert counts[name] == len(base)
    changed = sorted(modified.changed_src)
    assert len(changed) >= 0.9 * len(base) if name != "terms" else len(changed) > 0.5 * len(base)
    for i in changed[:40]:
        src, tgt = _texts(modified, models, i)
        old_src, old_tgt = _texts(base, models, i)
        assert modified.src_lengths[i] == len(modified.src[i]) + 1  # batching sees the new lengths
        if name == "uppercase":  # the toy vocabulary has no capitals: compare the ids they encode to
            assert modified.src[i].tolist()[-len(models[0].encode(old_src.upper())):] == models[0].encode(
                old_src.upper()) and modified.tgt[i].tolist() == models[1].encode(old_tgt.upper())
        elif name == "titlecase":
            title = " ".join(w[0].upper() + w[1:] for w in old_tgt.split())
            assert modified.tgt[i].tolist() == models[1].encode(title)
        elif name == "typos":
            assert tgt == old_tgt  # typos are the source's
        elif name == "noise":
            assert src == tgt and src != old_src  # a random string to copy, of pieces both vocabularies spell
            assert UNK_ID not in modified.src[i].tolist() + modified.tgt[i].tolist()
        elif name == "merge":
            assert src.startswith(old_src) and len(src) > len(old_src) and tgt.startswith(old_tgt)
        else:
            assert "__source__" in src and tgt == old_tgt
            for hint in src.split("__source__")[1:]:
                term = hint.split("__target__")[1].split("__done__")[0].strip()
                assert term in tgt.split()  # the hint is the aligned target word
    if name == "typos":
        assert sum(_texts(modified, models, i)[0] != _texts(base, models, i)[0] for i in changed) > 0.4 * len(changed)


def test_recipe_samples_shows_the_pairs_an_epoch_changes_as_training_feeds_them(staged, nmtk) -> None:
    """`nmtk recipe samples`: the epoch's changed pairs, original and modified, as `set_epoch` makes them;
    a stage's modifiers by name; one line for a recipe without modifiers, an unknown stage, no data, data
    prepared with other settings (as `train` refuses it)."""
    from nmtk.train.curriculum import modified_pairs

    recipe, result, tmp = staged
    found = modified_pairs(recipe, result.out_dir, epoch=2, count=3)
    assert [m.name for m in found.modifiers] == ["terms"] and 0 < len(found.pairs) <= 3
    modified, models, base = _split(result)
    modified.set_epoch(1, found.modifiers)
    changed = [i for i in sorted(modified.changed_src) if _texts(modified, models, i) != _texts(base, models, i)]
    assert [(*_texts(base, models, i), *_texts(modified, models, i)) for i in changed[:3]] == found.pairs
    assert all("__source__" in new and "__source__" not in old for old, _, new, _ in found.pairs)
    stages = 'train.stages=[{name="a", updates=5, modifiers=[{name="typos", p=1.0}]}, {name="b"}]'
    staged_recipe = load_recipe(tmp / "staged.toml", [stages])
    typos = modified_pairs(staged_recipe, result.out_dir, stage="a", count=2)
    assert [m.name for m in typos.modifiers] == ["typos"] and len(typos.pairs) == 2
    assert typos.counts["typos"] == len(base)
    upper = load_recipe(tmp / "staged.toml", [stages.replace("typos", "uppercase")])  # capitals are data settings:
    with pytest.raises(NmtkError, match=r"data: prepared with casing\.0 = None, the recipe has 'uppercase'; "
                                        r"nmtk prepare this recipe"):  # shown on this data, read with unknowns
        modified_pairs(upper, result.out_dir, stage="a")
    for args, error in (({"stage": "c"}, "--stage c: staged has no stage of that name (its stages: a, b)"),
                        ({"epoch": 0}, "--epoch 0: epochs count from 1")):
        with pytest.raises(NmtkError, match=error.replace("(", r"\(").replace(")", r"\)")):
            modified_pairs(staged_recipe, result.out_dir, **args)
    with pytest.raises(NmtkError, match="no prepared data"):
        modified_pairs(recipe, tmp / "nowhere")
    shown = nmtk("recipe", "samples", str(tmp / "staged.toml"), "--data", str(result.out_dir), "-n", "1",
                 "--set", "train.modifiers=[]")
    assert shown.returncode == 1 and shown.stderr.strip() == "error: staged: the recipe has no modifiers " \
        "([[train.modifiers]], or a stage's modifiers)", shown.stderr
    shown = nmtk("recipe", "samples", str(tmp / "staged.toml"), "--data", str(result.out_dir), "-n", "1")
    assert shown.returncode == 0 and shown.stdout.startswith("epoch 1: terms 50%; pairs drawn: terms ")
    assert "__source__" in shown.stdout.splitlines()[3], shown.stdout


def test_a_replaced_hint_is_one_to_three_words_of_the_corpus_targets_and_in_the_target_in_their_place(staged) -> None:
    """``replace``: the hint and the target both get 1 to ``max_words`` other words of the corpus's
    targets, words of several pieces too (a model must learn to copy those: glossary terms mostly are),
    several words in one hint with ``max_words`` 3 (two-word terms), one by default."""
    _, result, _ = staged
    modified, models, base = _split(result)
    corpus_words = {w for i in range(len(base)) for w in _texts(base, models, i)[1].split()}
    modified.set_epoch(0, [Modifier(name="terms", p=1.0, words=1.0, replace=1.0, max_words=3)])
    terms = []
    for i in sorted(modified.changed_src):
        src, tgt = _texts(modified, models, i)
        for hint in src.split("__source__")[1:]:
            terms.append(hint.split("__target__")[1].split("__done__")[0].strip())
            assert f" {terms[-1]} " in f" {tgt} " and set(terms[-1].split()) <= corpus_words, (src, tgt)
    assert len(terms) > 50 and len(set(terms)) > 10
    assert {len(term.split()) for term in terms} == {1, 2, 3}
    assert any(len(models[1].encode(term)) > 1 for term in terms if " " not in term)  # not only one-piece words
    modified.set_epoch(0, [Modifier(name="terms", p=1.0, words=1.0, replace=1.0)])  # max_words 1: as before it
    assert all(len(hint.split("__target__")[1].split("__done__")[0].split()) == 1
               for i in modified.changed_src for hint in _texts(modified, models, i)[0].split("__source__")[1:])


def test_modified_pairs_are_drawn_afresh_each_epoch_from_the_seed_and_put_back(staged) -> None:
    _, result, _ = staged
    modified, _, base = _split(result)
    mods = [Modifier(name="uppercase", p=0.3), Modifier(name="typos", p=0.3), Modifier(name="terms", p=0.3)]
    original = modified.src_lengths.copy()
    modified.set_epoch(0, mods)
    first = {i: modified.src[i].tolist() for i in modified.changed_src}
    modified.set_epoch(1, mods)
    assert set(modified.changed_src) != set(first)  # another share each epoch
    modified.set_epoch(0, mods)
    assert {i: modified.src[i].tolist() for i in modified.changed_src} == first  # the same run twice
    modified.set_epoch(2, [])
    assert not modified.changed_src and np.array_equal(modified.src_lengths, original)
    assert all(modified.src[i].tolist() == base.src[i].tolist() for i in range(len(base)))


def test_a_corpus_tag_stays_first_and_a_too_long_change_keeps_its_original(staged) -> None:
    _, result, _ = staged
    modified, models, base = _split(result)
    tag = models[0].pieces().index("<BT>")
    modified.set_epoch(0, [Modifier(name="uppercase", p=1.0)])
    assert all(modified.src[i][0] == tag for i in range(200, 300))
    modified.limit = 8  # few pairs fit: the others keep their original pair
    counts = modified.set_epoch(0, [Modifier(name="merge", p=1.0)])
    assert counts["too long"] > 0 and len(modified.changed_src) == len(base) - counts["too long"]
    assert all(len(modified.src[i]) + 1 <= 8 for i in modified.changed_src)


# -------------------------------------------------------------------------------------------------- stages

STAGES = """
[[train.stages]]
name = "mixed"
epochs = 1
corpus = "bt"
[[train.stages]]
name = "original"
weights = { bt = 0 }
"""


def test_stages_switch_where_they_should_and_say_so(staged) -> None:
    recipe, result, tmp = staged
    path = tmp / "stages.toml"
    path.write_text((tmp / "staged.toml").read_text() + STAGES)
    trainer = _trainer(tmp, path, result, ["train.max_updates=1000", "train.max_epochs=3",
                                           "train.validate_every_updates=1000", "train.validate_at_end=false"])
    trainer.train()
    assert trainer.state.epoch == 3 and trainer.state.stage == 1 and trainer.state.stage_epochs == 2
    records = [json.loads(line) for line in trainer.run.log_path.read_text().splitlines()]
    begun = [(r["stage"], r["epoch"]) for r in records if "stage_index" in r]
    assert begun == [("mixed", 1), ("original", 2)]
    from nmtk.pictures import _figure, _stage_starts, read_log

    axes = _figure(600, 400).subplots(1, 2)  # `nmtk plot` marks where the second stage began, on each panel
    axes[0].plot([0, 1], [0, 1], color="red")
    _stage_starts(axes, read_log(trainer.run.path)[0])
    second = next(r["update"] for r in records if r.get("stage_index") == 2)
    assert [[tuple(line.get_xdata()) for line in ax.get_lines()[-1:]] for ax in axes] == [[(second, second)]] * 2
    assert [t.get_text() for t in axes[0].texts] == [" original"] and axes[1].get_lines()[0].get_color() == "red"
    curriculum = trainer.curriculum
    for stage, drawn_bt in ((0, True), (1, False)):
        state = type(trainer.state)(epoch=stage, stage=stage)
        plan = curriculum.plan(trainer.base_plan, state)
        drawn = np.concatenate(plan.epoch_batches(stage))
        assert (drawn >= 200).any() == drawn_bt and (drawn < 200).sum() == 200
    trainer.metrics.close()


def test_a_stage_ends_after_its_updates_mid_epoch_and_a_resume_inside_and_across_stages_is_exact(staged) -> None:
    _, result, tmp = staged
    path = tmp / "by_updates.toml"
    path.write_text((tmp / "staged.toml").read_text() + STAGES.replace('epochs = 1\ncorpus = "bt"', "updates = 3")
                    + '[[train.modifiers]]\nname = "uppercase"\np = 0.3\n')
    common = ["train.validate_every_updates=1000", "train.validate_at_end=false", "train.save_every_updates=1"]
    whole = _trainer(tmp, path, result, ["train.max_updates=8", *common], "whole")
    whole.train()
    assert whole.state.stage == 1 and whole.state.stage_update == 3 and whole.state.epoch >= 1
    records = [json.loads(line) for line in whole.run.log_path.read_text().splitlines()]
    assert [(r["stage"], r["update"]) for r in records if "stage_index" in r] == [("mixed", 0), ("original", 3)]
    for stop in (2, 3, 5):  # inside the first stage, at its end, inside the second
        part = _trainer(tmp, path, result, [f"train.max_updates={stop}", *common], f"part{stop}")
        part.train()
        resumed = _trainer(tmp, path, result, ["train.max_updates=8", *common], f"resumed{stop}")
        resumed.resume(Checkpoint.read(part.run.resume_checkpoint()))
        resumed.train()
        for name, value in whole.model.state_dict().items():
            assert torch.equal(value, resumed.model.state_dict()[name]), (stop, name)
        for t in (part, resumed):
            t.metrics.close()
    whole.metrics.close()


@pytest.mark.parametrize("end", ["updates = 4", 'epochs = 2\ncorpus = "train"'])
def test_a_last_stage_with_an_end_ends_training_and_a_run_trained_again_is_finished(staged, end: str) -> None:
    """As OpusTrainer's curriculum ends with its last stage (before, every later epoch drew no update,
    to max_epochs, the time limit or forever)."""
    _, result, tmp = staged
    path = tmp / f"last_{end[0]}.toml"
    path.write_text((tmp / "staged.toml").read_text() + STAGES + end + "\n")
    common = ["train.max_updates=1000", "train.max_epochs=40", "train.validate_every_updates=1000",
              "train.validate_at_end=false"]
    trainer = _trainer(tmp, path, result, common, f"last_{end[0]}")
    trainer.train()
    s = trainer.state
    assert s.stage == 1 and s.stop_reason.startswith("the last stage, original, ended") and s.epoch < 10
    assert s.update - s.stage_update == 4 if end.startswith("updates") else s.stage_epochs == 2
    finished = trainer.stopping.limit(s)  # what `nmtk train` tells a run trained again
    assert finished == s.stop_reason and finished.kind == "stage"
    assert trainer.curriculum.describe().startswith("curriculum: 2 stages: mixed (until bt is seen 1 time), "
                                                    "original (until ")
    trainer.metrics.close()


@pytest.mark.parametrize("extra, message", [
    ('[[train.modifiers]]\nname = "capitals"\np = 0.1\n', r"train.modifiers.0.name: Input should be 'uppercase'"),
    ('[[train.modifiers]]\nname = "typos"\np = 1.5\n', r"train.modifiers.0.p: Input should be less than or equal to 1"),
    ('[[train.modifiers]]\nname = "typos"\np = 0.1\nwords = 0.5\n',  # another modifier's field, not its default
     r"train.modifiers.0: modifier typos: words is the terms modifier's \(leave it out\)"),
    ('[[train.stages]]\nname = "a"\nweights = { news = 1 }\n', r"train.stages\[0\] \(a\): no training corpus named "
                                                              r"'news'"),
    ('[[train.stages]]\nname = "a"\n[[train.stages]]\nname = "b"\n', r"stages\[0\] \(a\): has no end"),
    ('[[train.stages]]\nname = "a"\nupdates = 5\nepochs = 1\ncorpus = "train"\n', "give updates or epochs"),
    ('[[train.stages]]\nname = "a"\nupdates = 5\n[[train.stages]]\nname = "a"\n',
     r"train.stages\[1\] \(a\): train.stages\[0\] has that name too"),
])
def test_bad_modifiers_and_stages_are_one_line_naming_the_field_and_nothing_is_written(
        tmp_path: Path, extra: str, message: str) -> None:
    path = toy_recipe(tmp_path, extra)
    with pytest.raises(NmtkError, match=message) as error:
        load_recipe(path)
    assert "\n" not in str(error.value) and ": recipe:" not in str(error.value)  # the field, not "recipe"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["toy.toml"]


def test_a_stage_on_a_corpus_prepare_emptied_is_refused_naming_the_stage(staged, capsys) -> None:
    """A back-translation in the wrong language loses every pair to cleaning: a stage waiting for it ended
    with its first epoch and one training on it alone trained on nothing, silently another curriculum.
    `prepare` warns, and `train` refuses naming the stage (before it opens the run directory)."""
    from nmtk.data.report import render_manifest
    from nmtk.manifest import PreparedData
    from nmtk.train.curriculum import check_stage_pairs

    _, result, tmp = staged
    manifest = result.data.manifest().model_copy(deep=True)
    bt = manifest.splits["train"]["corpora"][1]
    bt.update(kept=0, dropped={"language": bt["pairs_in"]})
    emptied = PreparedData(result.out_dir, manifest)
    render_manifest(manifest)
    assert "warning: training corpus bt: none of its 100 pairs kept (language 100" in capsys.readouterr().err
    waits = '[[train.stages]]\nname = "mixed"\nepochs = 2\ncorpus = "bt"\n[[train.stages]]\nname = "original"\n'
    only = '[[train.stages]]\nname = "bt-only"\nweights = { train = 0 }\n'
    for extra, message in ((waits, r"train.stages\[0\] \(mixed\): ends once bt is seen, but prepare kept none of "
                                   r"its 100 pairs \(dropped: language 100; .*dropped.tsv names each\)"),
                           (only, r"train.stages\[0\] \(bt-only\): trains on bt, but prepare kept none of its pairs")):
        (tmp / "emptied.toml").write_text((tmp / "staged.toml").read_text() + extra)
        stages = load_recipe(tmp / "emptied.toml")
        with pytest.raises(NmtkError, match=message) as error:
            check_stage_pairs(stages, emptied)
        assert "\n" not in str(error.value)
        check_stage_pairs(stages, result.data)  # as prepared: every corpus holds pairs


def test_terms_need_data_prepared_with_them(tmp_path: Path) -> None:
    from helpers import toy_prepared

    recipe, out, _ = toy_prepared(tmp_path)
    with_terms = load_recipe(toy_recipe(tmp_path, TERMS, name="terms"))
    with pytest.raises(NmtkError, match=r"terms needs data prepared with it .*nmtk prepare --force"):
        Curriculum(with_terms, out.data, BinarizedSplit(out.data, "train", Pair("en", "de")),
                   split_lengths(BinarizedSplit(out.data, "train", Pair("en", "de"))))


# ------------------------------------------------------------------------------------------ terms in input


def test_a_glossary_becomes_hints_in_the_source_longest_term_first() -> None:
    glossary = Glossary((("hard hat", "Schutzhelm"), ("hat", "Hut"), ("dog", "Hund")))
    tokenize = lambda text: text.replace(".", " .")  # noqa: E731
    assert glossary.hinted("A dog in a hard hat.", tokenize, str) == (
        "A __source__ dog __target__ Hund __done__ in a __source__ hard hat __target__ Schutzhelm __done__ .")
    assert glossary.hinted("A cat.", tokenize, str) == "A cat ."



def test_without_moses_a_term_beside_punctuation_is_found_and_hinted_whole() -> None:
    """A recipe without Moses (the default) reads space-separated words: "street." ending a sentence and
    "man," before a comma were never found, so neither hints nor constraints reached them. Found now,
    hinted as the whole word (as the terms modifier hints such words in training); punctuation inside a
    term, or letters after it, still no match."""
    glossary = Glossary((("street", "Straße"), ("man", "Mann"), ("ice cream", "Eis")))
    assert glossary.hinted("The man, in the street.", str, str) == (
        "The __source__ man, __target__ Mann __done__ in the __source__ street. __target__ Straße __done__")
    assert glossary.found('("man") eats ice cream!', str) == {"Mann": '("man")', "Eis": "ice cream!"}
    assert glossary.terms("ice, cream; a streets' man's", str) == ()
    assert Glossary((("e.g.", "z.B."),)).terms("say e.g. this", str) == ("z.B.",)  # its own punctuation kept

def test_an_alignment_of_a_hinted_source_names_the_line_s_own_words() -> None:
    """Hint markup and the target term belong to the source term's first word; the other words keep
    the numbers they have without hints (an alignment once named positions past the line's end)."""
    from nmtk.text.subword import word_index

    source, target, done, word, piece = 10, 11, 12, 20, 21  # 21: a piece that continues a word
    starts = np.zeros(30, dtype=bool)
    starts[[source, target, done, word]] = True
    # "a hard hat __target__ Schutz helm __done__ works", with "__source__" before "hard"
    hinted = [word, source, word, word, target, word, piece, done, word, piece]
    assert word_index(starts, hinted, (source, target, done)) == [0, 1, 1, 2, 1, 1, 1, 1, 3, 3]
    assert word_index(starts, [source, word, target, word, done, word], (source, target, done)) == [0, 0, 0, 0, 0, 1]
    plain = [word, word, piece, word]
    assert word_index(starts, plain, (source, target, done)) == word_index(starts, plain) == [0, 1, 1, 2]


def test_inline_terms_are_chosen_by_the_data_and_refused_without_hints(staged) -> None:
    _, result, _ = staged
    hinted, plain = result.manifest, result.manifest.model_copy(update={"hints": False})
    assert inline_terms("auto", hinted, "m") and not inline_terms("auto", plain, "m")
    assert not inline_terms("constrained", hinted, "m") and not inline_terms("auto", None, "m")
    with pytest.raises(NmtkError, match=r"--terms inline: runs/x was not trained with terminology hints"):
        inline_terms("inline", plain, "runs/x")


def test_hints_are_one_piece_each_and_survive_the_export(staged, tmp_path: Path, monkeypatch) -> None:
    """The hint symbols are vocabulary items segmented from text: nmtk's pipeline and the CTranslate2
    export read a hinted source as the same pieces, so either engine takes terms from its input."""
    from conftest import run_nmtk

    from nmtk.convert.formats import export_model
    from nmtk.decode.load import LoadOptions, load_translator
    from nmtk.model_source import resolve_model

    _, result, tmp = staged
    run = tmp / "export-run"
    done = run_nmtk("train", str(tmp / "staged.toml"), "--data", str(result.out_dir), "--data-root", str(tmp / "root"),
                    "--run-dir", str(run), "--set", "train.max_updates=2", "--set", "train.validate_at_end=false")
    assert done.returncode == 0, done.stderr
    ours = load_translator(resolve_model(run), LoadOptions(threads=1))
    pieces = ours.src_pipe.subwords.pieces()
    assert all("\u2581" + s in pieces for s in HINT_SYMBOLS)  # with the space before it: one piece
    export = tmp_path / "ct2"
    export_model(resolve_model(run), export, "ctranslate2", "int8")
    theirs = load_translator(resolve_model(export), LoadOptions(threads=1))
    glossary = Glossary((("dog", "Hund"),))
    a = ours.encode(["the dog runs ."], 1, glossary)[0]
    b = theirs.encode(["the dog runs ."], 1, glossary)[0]
    assert a == b and all(pieces.index("\u2581" + s) in a for s in HINT_SYMBOLS)
    assert ours.src_pipe.encode_tokenized(["the dog ."]) == ours.src_pipe.encode_tokenized(["the dog .", "x"])[:1]
    _batched_as_written_without_hints(ours, theirs, a, ours.encode(["the dog runs ."])[0], monkeypatch)
    assert all("\u2581" + s in json.loads((export / "shared_vocabulary.json").read_text()) for s in HINT_SYMBOLS)
    with pytest.raises(NmtkError, match=r"glossary\[0\]: the target term '☃' has characters"):
        ours.check_hints(Glossary.of([("dog", "☃")]))


def _batched_as_written_without_hints(ours, theirs, hinted: list[int], plain: list[int], monkeypatch) -> None:
    """Both engines cut decoding batches by a source's words, its hints' markup left out: a hinted line
    takes the room of the line without hints (its translation is about as long)."""
    import nmtk.decode.ct2
    import nmtk.decode.search.batches
    from nmtk.data.batching import length_batches
    from nmtk.decode.search.config import SearchConfig

    seen = []

    def recorded(lengths, *args):
        seen.append(lengths.tolist())
        return length_batches(lengths, *args)

    for module in (nmtk.decode.search.batches, nmtk.decode.ct2):
        monkeypatch.setattr(module, "length_batches", recorded)
    for engine in (ours, theirs):
        assert engine.src_pipe.hint_markers is not None and len(hinted) > len(plain)
        engine.hypotheses_of_ids([hinted, plain], SearchConfig(beam=2, max_len_b=3))
    # per engine one batching, and one more where lines cut at the limit are searched again repeats barred
    assert len(seen) >= 2 and all(lengths == [len(plain) + 1] * 2 for lengths in seen), seen


def test_a_length_without_hints_counts_the_source_words_only() -> None:
    from nmtk.vocab import unhinted_length

    source, target, done = markers = (4, 5, 6)
    assert unhinted_length([9, source, 10, target, 11, 12, done, 13], markers) == 3  # 9, 10, 13
    assert unhinted_length([9, source, 10, target, 11, done, source, 14, target, 15, done], markers) == 3
    assert unhinted_length([9, 10, 5], None) == 3 and unhinted_length([9, 10], markers) == 2
    # nmtk's searches count |x| of a·|x| + b alike, as tensors (CTranslate2's calls take `unhinted_length`)
    from types import SimpleNamespace

    from nmtk.decode.search.config import SearchConfig
    from nmtk.decode.search.step import max_lengths
    from nmtk.vocab import EOS_ID, PAD_ID

    src = torch.tensor([[9, source, 10, target, 11, 12, done, 13, EOS_ID], [9, 10, EOS_ID] + [PAD_ID] * 6])
    model = SimpleNamespace(cfg=SimpleNamespace(max_positions=100))
    cfg = SearchConfig(max_len_a=2.0, max_len_b=5)
    assert max_lengths(src, cfg, model).tolist() == [2 * 8 + 5, 2 * 2 + 5]
    assert max_lengths(src, replace(cfg, hint_markers=markers), model).tolist() == [2 * 3 + 5, 2 * 2 + 5]


def test_the_subword_learner_sees_capitals_when_training_will(tmp_path: Path) -> None:
    from nmtk.data.prepare import data_settings
    from nmtk.data.preparer import CASED_SHARE, cased_copy

    lines = [f"a dog number {i} runs ." for i in range(2000)]
    text = tmp_path / "train.tok.en"
    text.write_text("".join(x + "\n" for x in lines), encoding="utf-8")
    cased = cased_copy(text, ["uppercase", "titlecase"], seed=1).read_text(encoding="utf-8").splitlines()
    upper = [x for x in cased if x.isupper()]
    assert set(upper) <= {x.upper() for x in lines} and abs(len(upper) - CASED_SHARE * 2000) < 40
    assert all(x == " ".join(w[0].upper() + w[1:] for w in x.split()) for x in cased if not x.isupper())
    plain = load_recipe(toy_recipe(tmp_path))
    capitals = load_recipe(toy_recipe(tmp_path, '[[train.modifiers]]\nname = "uppercase"\np = 0.2\n', name="caps"))
    more = load_recipe(toy_recipe(tmp_path, '[[train.modifiers]]\nname = "uppercase"\np = 0.5\n', name="more"))
    assert "casing" not in data_settings(plain) and data_settings(capitals)["casing"] == ["uppercase"]
    assert data_settings(capitals) == data_settings(more)  # a probability is no data setting


def test_data_prepared_before_a_new_tokenizer_field_is_still_up_to_date() -> None:
    """``tokenizer.correct_typos`` (added later) off leaves the settings hash of data prepared before it:
    the demo's data-bin, prepared by the nmtk before the field, is not refused as "other settings"."""
    from nmtk.data.prepare import data_settings, settings_hash

    demo = load_recipe(ROOT / "recipes" / "multi30k-en-de.toml")
    assert settings_hash(demo) == "c088184051783f8a3cef69f3869bd2bb6de0f58a46fb5bb1181d75ed89deb590"
    robust = load_recipe(ROOT / "recipes" / "multi30k-en-de-robust.toml")
    assert data_settings(robust)["tokenizer"]["correct_typos"] is True and settings_hash(robust) != settings_hash(demo)
