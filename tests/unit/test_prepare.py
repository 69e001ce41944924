"""`prepare`: building, caching, cleaning, and every bad input leaving no half-written output."""

from __future__ import annotations

import gzip
import json
import os
import re
from pathlib import Path

import numpy as np
import pytest
from helpers import synthetic_pairs, toy_data, toy_recipe, write_corpus, write_lines

from nmtk.data.binarized import BinarizedSplit
from nmtk.data.cleaning import Cleaner
from nmtk.data.prepare import prepare
from nmtk.errors import NmtkError
from nmtk.manifest import PreparedData
from nmtk.pair import Pair
from nmtk.recipe import CleanSection, load_recipe
from nmtk.text import TextPipeline, moses_for


@pytest.fixture
def toy(tmp_path: Path):
    root = toy_data(tmp_path / "root")
    return root, toy_recipe(tmp_path), tmp_path / "out" / "toy"


def leftovers(out: Path) -> list[str]:
    """Anything prepare left next to its output folder (temporary folders, partial files), but its lock file,
    which stays (`PreparedData.lock_path`)."""
    lock = PreparedData(out).lock_path
    return sorted(p.name for p in out.parent.iterdir() if p != lock) if out.parent.exists() else []


def test_a_second_prepare_waits_for_the_first_then_finds_the_data_up_to_date(toy, monkeypatch) -> None:
    """Jobs started together over missing data (several `nmtk train`): while one holds the folder's lock and
    builds it, another says one line and waits, then finds it built instead of building it again."""
    import threading

    from nmtk.data import prepare as module
    from nmtk.files import os_lock

    root, recipe_path, out = toy
    recipe = load_recipe(recipe_path)
    said, results = [], []
    monkeypatch.setattr(module.console, "print", said.append)
    waiter = threading.Thread(target=lambda: results.append(prepare(recipe, root, out)))
    with os_lock(PreparedData(out).lock_path):  # the first job
        waiter.start()
        waiter.join(0.5)
        assert waiter.is_alive() and not out.exists()
        built = module._prepare(recipe, root, out, False, None, True, False)
    waiter.join(60)
    assert not built.up_to_date and results and results[0].up_to_date
    assert len(said) == 1 and re.fullmatch(rf"prepare: {re.escape(str(out))} is being prepared by process "
                                           rf"{os.getpid()} on \S+ since [-\d]+ [:\d]+; waiting for it", said[0])
    assert leftovers(out) == ["toy"]


def test_prepare_builds_then_is_up_to_date(toy) -> None:
    root, recipe_path, out = toy
    recipe = load_recipe(recipe_path)
    first = prepare(recipe, root, out)
    assert not first.up_to_date
    learned = (out / "spm.model").read_bytes()
    manifest = json.loads((out / "manifest.json").read_text())
    train = manifest["splits"]["train"]
    assert train["pairs_in"] == 400 and train["kept"] == 400
    assert manifest["vocab"]["size"] == {"en": 64, "de": 64} and manifest["dtype"] == "uint8"
    assert set(manifest["splits"]) == {"train", "valid", "test"}
    assert all(len(v["sha256"]) == 64 for v in manifest["inputs"].values()) and len(manifest["inputs"]) == 6

    split = BinarizedSplit(PreparedData(out), "train", Pair("en", "de"))
    assert len(split) == 400 and int(split.src.lengths.sum()) == train["sides"]["en"]["tokens"]
    pipe = TextPipeline(moses_for(recipe.tokenizer, "de", "target"), out / "spm.model")
    expected = synthetic_pairs(400)[7][1]
    assert pipe.decode(split.tgt[7].tolist()) == expected
    assert (out / "valid.raw.de").read_text().splitlines()[0] == synthetic_pairs(40, 1)[0][1]

    mtime = (out / "manifest.json").stat().st_mtime_ns
    assert prepare(recipe, root, out).up_to_date
    assert (out / "manifest.json").stat().st_mtime_ns == mtime

    changed = load_recipe(recipe_path, ["tokenizer.vocab_size=70"])  # other settings: only when asked
    assert not prepare(changed, root, out, force=True).up_to_date
    write_corpus(root, "valid", synthetic_pairs(40, 99))  # changed inputs, same settings: rebuilt
    assert not prepare(changed, root, out).up_to_date
    # the same training data and settings learn the same file, byte for byte (it named prepare's temporary
    # input files, so that a run's resume refused data prepared again as "another vocabulary")
    assert not prepare(recipe, root, out, force=True).up_to_date and (out / "spm.model").read_bytes() == learned
    assert leftovers(out) == ["toy"]


def test_cleaning_counts_every_drop_and_lists_it_in_dropped_tsv(tmp_path: Path) -> None:
    root = tmp_path / "root"
    keeps = Cleaner.of("en", "de", CleanSection())
    base = list(dict.fromkeys(p for p in synthetic_pairs(340) if keeps.verdict(*p) is None))[:300]
    injected = [
        (("", "Leer."), "empty"), (("   ", ""), "empty"),
        (("A dog runs in the park.", "a dog runs in the park!"), "copy"),
        (("Two dogs play in 3 parks.", "Zwei Hunde spielen in 4 Parks."), "numbers"),
        (("See www.example.com today.", "Siehe heute."), "numbers"),
        (("A man sleeps on a bench.", "Мужчина спит на скамейке."), "script"),
        (("A man is sleeping on a bench in the park.", "Un homme dort sur un banc dans le parc."), "language"),
        (base[5], "duplicate"),
        (("A dog runs in the park. " * 12, "Ein Hund läuft im Park. " * 12), "too_long"),  # > max_len = 100
        (("The dog runs with the ball on the street in the park under the old house.", "Ein Hund läuft."), "ratio"),
    ]
    write_corpus(root, "train", base + [pair for pair, _ in injected])
    write_corpus(root, "valid", synthetic_pairs(10, 1) + [("", "")])
    write_corpus(root, "test", synthetic_pairs(10, 2))
    recipe = load_recipe(toy_recipe(tmp_path, vocab_size=80, clean=True), ["data.max_ratio=3"])
    result = prepare(recipe, root, tmp_path / "o")
    train = result.manifest.splits["train"]
    assert train["dropped"] == {"empty": 2, "copy": 1, "numbers": 2, "script": 1, "language": 1, "duplicate": 1,
                                "too_long": 1, "ratio": 1}
    assert train["kept"] == 300 and train["pairs_in"] == 310
    assert train["corpora"] == [{"name": "train", "pairs_in": 310, "kept": 300, "dropped": train["dropped"]}]
    listed = (tmp_path / "o" / "dropped.tsv").read_text().splitlines()
    assert listed[0] == "corpus\tline\trule"
    assert sorted(listed[1:], key=lambda x: int(x.split("\t")[1])) == [
        f"train\t{301 + i}\t{rule}" for i, (_, rule) in enumerate(injected)]
    assert result.manifest.splits["valid"]["kept"] == 11  # evaluation sets keep every line
    # the table's subwords per word are the kept pairs': their words, as if the dropped were never there
    # (3,095 duplicates of 5 pairs showed "0.00/0.00")
    alone = tmp_path / "alone"
    for split, pairs in (("train", base), ("valid", synthetic_pairs(10, 1)), ("test", synthetic_pairs(10, 2))):
        write_corpus(alone, split, pairs)
    assert prepare(recipe, alone, tmp_path / "a").manifest.splits["train"]["words"] == train["words"]

    every_rule_off = load_recipe(toy_recipe(tmp_path, vocab_size=80), ["data.max_ratio=3"])
    kept = prepare(every_rule_off, root, tmp_path / "p").manifest.splits["train"]["kept"]
    assert kept == 306  # only the empty, too long and bad-ratio pairs


def test_mismatched_line_counts(toy) -> None:
    root, recipe_path, out = toy
    write_lines(root / "toy" / "train.de.gz", [b for _, b in synthetic_pairs(399)])
    with pytest.raises(NmtkError) as err:
        prepare(load_recipe(recipe_path), root, out)
    message = str(err.value)
    assert "train.en.gz has 400 lines" in message and "train.de.gz has 399" in message
    assert leftovers(out) == []


@pytest.mark.parametrize("policy", ["error", "replace"])
def test_invalid_utf8(toy, policy: str) -> None:
    root, recipe_path, out = toy
    lines = gzip.decompress((root / "toy" / "train.en.gz").read_bytes()).split(b"\n")
    lines[41] = b"caf\xe9 au lait"
    (root / "toy" / "train.en.gz").write_bytes(gzip.compress(b"\n".join(lines)))
    recipe = load_recipe(recipe_path, [f"data.encoding_errors={policy}"])
    if policy == "error":
        with pytest.raises(NmtkError, match=r"train\.en\.gz:42: invalid UTF-8"):
            prepare(recipe, root, out)
        assert leftovers(out) == []
    else:
        assert prepare(recipe, root, out).manifest.splits["train"]["kept"] == 400


def test_empty_corpus(toy) -> None:
    root, recipe_path, out = toy
    write_corpus(root, "train", [])
    with pytest.raises(NmtkError, match=r"the training corpora have no sentence pairs \(toy/train.en.gz / "):
        prepare(load_recipe(recipe_path), root, out)
    assert leftovers(out) == []


def test_a_corpus_every_pair_of_which_a_rule_drops_says_which_rules(toy) -> None:
    """The counts are in the message: the prepared data and its dropped.tsv are not written."""
    root, recipe_path, out = toy
    write_corpus(root, "train", [("In 2019 and 3.", "Im Jahr 2018 und 4.")] * 3 + [("A man.", "   ")])
    recipe = load_recipe(recipe_path, ["data.clean.numbers=true"])
    with pytest.raises(NmtkError) as error:
        prepare(recipe, root, out)
    assert str(error.value) == ("data.train: no training pair is left of 4 after cleaning (dropped 4 (empty 1, "
                                "numbers 3)); [data.clean] switches rules off")
    assert "dropped.tsv" not in str(error.value) and leftovers(out) == []


def test_a_byte_order_mark_is_not_text(toy) -> None:
    """U+FEFF at the start of a file (Windows editors) is removed as it is read: no vocabulary piece of
    its own, and not in the raw references that BLEU is scored against."""
    root, recipe_path, out = toy
    for name in ("train", "valid"):
        for lang in ("en", "de"):
            path = root / "toy" / f"{name}.{lang}.gz"
            lines = gzip.open(path, "rt", encoding="utf-8").read()
            with gzip.open(path, "wt", encoding="utf-8") as handle:
                handle.write("\ufeff" + lines)
    prepare(load_recipe(recipe_path), root, out)
    data = PreparedData(out)
    assert "\ufeff" not in (out / "valid.raw.de").read_text(encoding="utf-8")
    pieces = data.manifest().model_paths(out)
    from nmtk.text.subword import load_subword_model
    assert not any("\ufeff" in p for path in pieces.values() for p in load_subword_model(path).pieces())


def test_an_empty_valid_set_is_refused_by_prepare(toy) -> None:
    """Training would stop at its first validation (sacrebleu's IndexError): refused here, with the file."""
    root, recipe_path, out = toy
    write_corpus(root, "valid", [])
    with pytest.raises(NmtkError, match=r"data.valid: toy/valid.en.gz has no sentence pairs"):
        prepare(load_recipe(recipe_path), root, out)
    assert leftovers(out) == []


def test_missing_file_without_url(toy) -> None:
    root, recipe_path, out = toy
    os.remove(root / "toy" / "test.de.gz")
    with pytest.raises(NmtkError, match=r"test\.de\.gz: file not found, and the recipe gives no url"):
        prepare(load_recipe(recipe_path), root, out)
    assert leftovers(out) == []


def test_failure_keeps_previous_output(toy) -> None:
    root, recipe_path, out = toy
    prepare(load_recipe(recipe_path), root, out)
    before = (out / "train.en.bin").read_bytes()
    write_lines(root / "toy" / "train.de.gz", ["Eins."])
    with pytest.raises(NmtkError):
        prepare(load_recipe(recipe_path), root, out)
    assert (out / "train.en.bin").read_bytes() == before and leftovers(out) == ["toy"]


def test_separate_vocabularies_and_plain_text(tmp_path: Path) -> None:
    root = tmp_path / "root"
    for name, n, seed in (("train", 300, 0), ("valid", 10, 1), ("test", 10, 2)):
        write_corpus(root, name, synthetic_pairs(n, seed), suffix="")
    text = toy_recipe(tmp_path, vocab_size=48).read_text().replace(".gz", "")
    text = text.replace("normalize_punctuation = false",
                        'normalize_punctuation = false\njoint = false\ntype = "unigram"')
    text = text.replace("dropout = 0.0", 'dropout = 0.0\nshare_embeddings = "decoder"')
    (tmp_path / "sep.toml").write_text(text)
    result = prepare(load_recipe(tmp_path / "sep.toml"), root, tmp_path / "o")
    assert result.manifest.vocab.models == {"en": "spm.en.model", "de": "spm.de.model"}
    assert (tmp_path / "o" / "spm.en.model").is_file() and (tmp_path / "o" / "spm.de.model").is_file()
    ids = BinarizedSplit(result.data, "train", Pair("en", "de")).src[0]
    assert isinstance(ids, np.ndarray) and len(ids) > 0


def test_cli_prepare(nmtk, toy) -> None:
    root, recipe_path, out = toy
    first = nmtk("prepare", str(recipe_path), "--data-root", str(root), "--out", str(out))
    assert first.returncode == 0, first.stderr
    assert "train" in first.stderr and "prepared" in first.stderr
    # each stage on a line of its own, with its count, time and rate (400 toy pairs)
    stages = [line for line in first.stderr.splitlines() if line.startswith("prepare ")]
    counted = r"(read and clean|clean and Moses-tokenise) the training pairs: 400 pairs in [\d.]+ s \([\d,]+ pairs/s\)"
    assert any(re.search(counted, s) for s in stages), stages
    assert any(s.startswith("prepare learn spm.model") for s in stages)
    assert any("binarise train: 400 pairs" in s for s in stages)
    assert any(re.search(r"binarise valid: \d+ pairs", s) for s in stages), stages
    second = nmtk("prepare", str(recipe_path), "--data-root", str(root), "--out", str(out))
    assert second.returncode == 0 and "up to date" in second.stderr
    bad = nmtk("prepare", str(recipe_path), "--data-root", str(tmp := out.parent / "nowhere"), "--out", str(out))
    assert bad.returncode == 1 and len(bad.stderr.strip().splitlines()) == 1 and str(tmp) in bad.stderr


def test_prepare_with_wordpiece(toy) -> None:
    root, recipe_path, out = toy
    recipe = load_recipe(recipe_path, ["tokenizer.type=wordpiece", "tokenizer.vocab_size=80"])
    manifest = prepare(recipe, root, out).manifest
    assert manifest.vocab.models == {"en": "wordpiece.json", "de": "wordpiece.json"}
    assert manifest.vocab.size == {"en": 80, "de": 80}
    split = BinarizedSplit(PreparedData(out), "train", Pair("en", "de"))
    pipe = TextPipeline(moses_for(recipe.tokenizer, "de", "target"), out / "wordpiece.json")
    assert pipe.decode(split.tgt[7].tolist()) == synthetic_pairs(400)[7][1]


def test_prepared_data_is_reused_without_its_inputs_and_refused_with_other_settings(toy, tmp_path: Path) -> None:
    root, recipe_path, out = toy
    recipe = load_recipe(recipe_path)
    prepare(recipe, root, out)
    elsewhere = tmp_path / "empty-root"  # e.g. data-bin/ copied to a GPU machine without the corpora
    elsewhere.mkdir()
    reused = prepare(recipe, elsewhere, out, rebuild=False)
    assert reused.up_to_date and not reused.inputs_checked
    changed = load_recipe(recipe_path, ["tokenizer.vocab_size=70"])
    with pytest.raises(NmtkError, match=r"toy: prepared with tokenizer\.vocab_size = 64, the recipe has 70; give "):
        prepare(changed, root, out, rebuild=False)
    assert (out / "manifest.json").is_file() and leftovers(out) == ["toy"]  # nothing touched


def test_prepare_never_rebuilds_a_folder_with_other_settings_in_place_unasked(toy, tmp_path: Path, monkeypatch) -> None:
    """Issue 44: re-preparing with a changed vocabulary size rebuilt the folder a run was trained on."""
    import shutil

    root, recipe_path, out = toy
    prepare(load_recipe(recipe_path), root, out)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs" / "numbers").mkdir(parents=True)  # a run trained on it (its frozen manifest)
    shutil.copyfile(out / "manifest.json", tmp_path / "runs" / "numbers" / "manifest.json")
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    changed = load_recipe(recipe_path, ["tokenizer.vocab_size=70"])
    with pytest.raises(NmtkError, match=r"tokenizer\.vocab_size = 64, the recipe has 70; runs/numbers was trained on "
                                        r"it: give --out a new folder, or --force"):
        prepare(changed, root, out)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    elsewhere = prepare(changed, root, tmp_path / "new")  # a new folder: built
    assert not elsewhere.up_to_date and elsewhere.manifest.vocab.size["en"] == 70
    forced = prepare(changed, root, out, force=True)
    assert not forced.up_to_date and forced.manifest.vocab.size["en"] == 70


def test_prepare_removes_what_a_killed_prepare_of_the_same_folder_left(toy, capsys) -> None:
    """A prepare killed (SIGKILL, a power cut) leaves its temporary folder; the next prepare of the same
    folder, holding its lock, removes it (and a swap's ``.old-*`` folder), and nothing of other folders."""
    root, recipe_path, out = toy
    out.parent.mkdir(parents=True)
    stale = [out.parent / f".{out.name}.tmp-abc123", out.parent / f".{out.name}.old-4242"]
    other = out.parent / ".other.tmp-abc123"
    for folder in [*stale, other]:
        (folder / "work-1").mkdir(parents=True)
        (folder / "work-1" / "train.tok.en").write_text("half of a corpus\n")
    prepare(load_recipe(recipe_path), root, out)
    assert leftovers(out) == [".other.tmp-abc123", out.name]
    assert other.is_dir()


def test_one_tab_separated_file_can_hold_both_sides(toy, tmp_path: Path) -> None:
    """``column`` reads a side from a TSV file (OPUS, ParaCrawl, OpusTrainer's corpora): the same data as
    two files; a line short of the column is one error naming it; the column is a data setting."""
    root, recipe_path, out = toy
    pairs = synthetic_pairs(400)
    write_lines(root / "toy" / "train.tsv.gz", [f"{a}\t{b}\tscore 0.9" for a, b in pairs])
    text = recipe_path.read_text().replace('source = "toy/train.en.gz"\ntarget = "toy/train.de.gz"',
                                           'source = { path = "toy/train.tsv.gz", column = 1 }\n'
                                           'target = { path = "toy/train.tsv.gz", column = 2 }')
    tsv_recipe = tmp_path / "tsv.toml"
    tsv_recipe.write_text(text)
    prepare(load_recipe(recipe_path), root, out)
    prepare(load_recipe(tsv_recipe), root, tmp_path / "tsv")
    for name in ("train.en.bin", "train.de.bin", "train.en.idx", "spm.model"):
        assert (tmp_path / "tsv" / name).read_bytes() == (out / name).read_bytes(), name
    tsv_recipe.write_text(text.replace("column = 1", "column = 3"))  # another column: other data
    with pytest.raises(NmtkError, match=r"data\.train\.0\.source\.column = 1, the recipe has 3"):
        prepare(load_recipe(tsv_recipe), root, tmp_path / "tsv")
    write_lines(root / "toy" / "train.tsv.gz", [f"{a}\t{b}" if i != 6 else a for i, (a, b) in enumerate(pairs)])
    tsv_recipe.write_text(text)
    with pytest.raises(NmtkError, match=r"train\.tsv\.gz:7: 1 tab-separated column, where the recipe reads column 2"):
        prepare(load_recipe(tsv_recipe), root, tmp_path / "short" / "tsv")
    assert leftovers(tmp_path / "short" / "tsv") == []
