"""Lexical shortlists (`nmtk shortlist`, `--shortlist`) on the copy run: every word translates to itself,
so a sentence's own pieces are all its translation needs."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from conftest import run_nmtk


@pytest.fixture(scope="module")
def listed(copy_run, tmp_path_factory):
    """A copy of the copy run with a small shortlist: 3 pieces per source piece, no frequent ones. The run
    was trained with --data; the shortlist finds that data again without it (the run recorded where)."""
    tmp, _, env = copy_run
    run = tmp_path_factory.mktemp("shortlist") / "run"
    shutil.copytree(tmp / "run", run)
    result = run_nmtk("shortlist", str(run), "--per-source", "3", "--frequent", "0", env=env)
    assert result.returncode == 0, result.stderr
    assert "wrote" in result.stderr and "3 pieces per source piece" in result.stderr
    return tmp, run, env


def test_the_training_data_is_found_where_it_was_or_named_in_one_line(listed, tmp_path: Path, monkeypatch) -> None:
    """`training_data`: the recorded folder; given --data, that one; a recorded folder rebuilt with other
    subword models, or gone, is an error naming it (and the recipe's data-bin/<name>, also absent here)."""
    from nmtk.decode.shortlists import training_data
    from nmtk.errors import NmtkError
    from nmtk.rundir import TRAINED_ON, RunDir

    tmp, run, _ = listed
    monkeypatch.chdir(tmp_path)  # where data-bin/<name> is looked for: absent
    folder = RunDir(run)
    assert training_data(folder).path.resolve() == (tmp / "data").resolve()
    assert training_data(folder, tmp / "data").path == tmp / "data"
    moved = tmp_path / "run"
    shutil.copytree(run, moved)
    (moved / TRAINED_ON).write_text('{"prepared": "%s"}' % (tmp_path / "gone"))
    with pytest.raises(NmtkError, match=r"gone nor data-bin/\S+: no prepared data .*--data DIR\)$"):
        training_data(RunDir(moved))
    other = tmp_path / "other"
    other.mkdir()
    manifest = json.loads((tmp / "data" / "manifest.json").read_text())
    manifest["vocab"]["sha256"] = {name: "0" * 64 for name in manifest["vocab"]["sha256"]}
    (other / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(NmtkError, match=r"other: prepared with other subword models than .*--data DIR\)$"):
        training_data(RunDir(moved), other)
    (moved / TRAINED_ON).write_text("[]")
    with pytest.raises(NmtkError, match=r"data\.json: not the JSON nmtk writes there"):
        training_data(RunDir(moved))


def test_each_piece_lists_itself_first(listed) -> None:
    from nmtk.data.shortlist import Shortlist
    from nmtk.text.subword import load_subword_model

    tmp, run, _ = listed
    shortlist = Shortlist.load(run / "shortlist.npz")
    assert shortlist.table.shape[1] == 3 and len(shortlist.frequent) == 0
    pieces = load_subword_model(next(run.glob("*.model"))).pieces()
    words = {i for i, p in enumerate(pieces) if p.startswith("▁") and p[1:].isalpha()}  # the lexicon's words
    listed_rows = [i for i in words if shortlist.table[i, 0] >= 0]
    assert len(listed_rows) >= 30
    assert all(shortlist.table[i, 0] == i for i in listed_rows)  # a word's best co-occurrence: itself
    candidates = shortlist.candidates([[sorted(words)[0]]])
    assert len(candidates) <= 3 + 4 and set(range(4)) <= set(candidates.tolist())


def test_a_target_piece_in_a_source_can_be_copied_in_a_joint_vocabulary() -> None:
    """A piece the targets hold (a German word, as a terminology hint spells it in the source) lists
    itself, first; a source-language piece does not, nor anything in separate vocabularies."""
    import numpy as np

    from nmtk.data.shortlist import build

    the, man, mann, ein, hund, name, dog = 4, 5, 6, 7, 8, 9, 10  # "Ada" (9): a name both sides hold
    src = [np.array(s) for s in ([the, man], [the, man, name], [the], [man], [the, dog])]
    tgt = [np.array(t) for t in ([ein, mann], [ein, mann, name], [ein], [mann], [ein, hund])]
    joint = build(src, tgt, 11, 11, per_source=2, frequent=0, joint=True)
    assert joint.table[hund].tolist() == [hund, -1] and joint.table[mann].tolist() == [mann, -1]  # never in a source
    assert joint.table[name, 0] == name and the not in joint.table[the]  # names pass; English is not added
    assert joint.table[man].tolist() == build(src, tgt, 11, 11, per_source=2, frequent=0).table[man].tolist()
    hinted = [the, man, hund]  # "the man __target__ Hund __done__": the hint's piece is a candidate
    assert hund in joint.candidates([hinted]) and hund not in build(src, tgt, 11, 11, 2, 0).candidates([hinted])


def test_translating_with_the_shortlist_keeps_the_translations_and_the_terms(listed) -> None:
    """The copy needs only the sentence's own pieces: --shortlist gives the same lines; a constraint whose
    word is not in the source joins the candidates and is still produced."""
    tmp, run, env = listed
    lines = (tmp / "data" / "test.raw.en").read_text().splitlines()[:30]
    stdin = "\n".join(lines) + "\n"
    full = run_nmtk("translate", "-m", str(run), stdin=stdin, env=env)
    short = run_nmtk("translate", "-m", str(run), "--shortlist", stdin=stdin, env=env)
    assert full.returncode == 0 and short.returncode == 0, short.stderr
    assert short.stdout == full.stdout
    # int8: the shortlist's rows packed in int8 as the whole matrix is
    full8, short8 = (run_nmtk("translate", "-m", str(run), "--precision", "int8", *extra, stdin=stdin, env=env)
                     for extra in ([], ["--shortlist"]))
    assert full8.returncode == 0 and short8.returncode == 0, short8.stderr
    assert short8.stdout == full8.stdout
    termed = "\n".join(f"{line}\tcat" for line in lines if "cat" not in line.split()) + "\n"
    out = run_nmtk("translate", "-m", str(run), "--shortlist", "--constraints", "unordered", stdin=termed, env=env)
    assert out.returncode == 0, out.stderr
    assert all("cat" in line.split() for line in out.stdout.splitlines())


def test_a_batch_searches_only_its_candidates(listed) -> None:
    """The search's log-probabilities are normalised over the candidates: every piece a translation
    chose is one of them (the restriction is real, not a no-op)."""
    import torch

    from nmtk.decode.load import LoadOptions, load_translator
    from nmtk.decode.search.config import SearchConfig
    from nmtk.decode.search.step import in_vocabulary
    from nmtk.model_source import resolve_model

    tmp, run, _ = listed
    translator = load_translator(resolve_model(run), LoadOptions(model=run, shortlist=True, threads=2))
    model = translator.first_model
    ids = translator.encode(["dog cat"])
    allowed = torch.from_numpy(translator.shortlist.candidates(ids))
    model.restrict_output(allowed)
    try:
        compact = model.project(torch.zeros(1, model.cfg.d_model))
        logits = in_vocabulary(model, compact)
    finally:
        model.restrict_output(None)
    assert compact.shape == (1, len(allowed))
    assert torch.isfinite(logits[0, allowed]).all() and torch.isinf(logits).sum() == model.cfg.tgt_vocab - len(allowed)
    hyps = translator.hypotheses(["dog cat"], SearchConfig(beam=2))
    assert set(hyps[0][0].tokens) <= set(allowed.tolist())


def test_searches_side_by_side_each_project_onto_their_own_batchs_candidates(listed) -> None:
    """Two one-thread searches (a CPU's default with 2 threads) restrict the output to their own batch's
    candidates, in their own thread: the lines come back as from one search. A restriction leaked to
    the other search's batch would lose words its sentences need (here each batch's words are its own)."""
    import random

    from helpers import WORDS

    from nmtk.decode.load import LoadOptions, load_translator
    from nmtk.decode.search.config import SearchConfig
    from nmtk.model_source import resolve_model

    _, run, _ = listed
    two = load_translator(resolve_model(run), LoadOptions(model=run, shortlist=True, threads=2, device="cpu"))
    one = load_translator(resolve_model(run), LoadOptions(model=run, shortlist=True, threads=1, device="cpu"))
    assert (two.searches, one.searches) == (2, 1)
    rng = random.Random(5)
    words = sorted(WORDS)
    lines = [" ".join(rng.choice(words[k % 4 :: 4]) for _ in range(rng.randint(2, 9))) for k in range(60)]
    search = SearchConfig(beam=3, beam_tokens=16 * 3)
    ours = two.hypotheses(lines, search)
    assert [[h.tokens for h in x] for x in ours] == [[h.tokens for h in x] for x in one.hypotheses(lines, search)]
    assert sum(two.detokenize(x[0]) == line for x, line in zip(ours, lines, strict=True)) >= 50  # copied


def test_the_export_carries_it_as_ctranslate2s_vocabulary_map(listed, tmp_path: Path) -> None:
    tmp, run, env = listed
    out = tmp_path / "ct2"
    assert run_nmtk("export", str(run), "-o", str(out), env=env).returncode == 0
    vmap = (out / "vmap.txt").read_text().splitlines()
    assert vmap[0] == "\t" and all(len(row.split("\t")[1].split()) <= 3 for row in vmap[1:])
    lines = (tmp / "data" / "test.raw.en").read_text().splitlines()[:30]
    stdin = "\n".join(lines) + "\n"
    plain = run_nmtk("translate", "-m", str(out), stdin=stdin, env=env)
    short = run_nmtk("translate", "-m", str(out), "--shortlist", stdin=stdin, env=env)
    assert short.returncode == 0 and short.stdout == plain.stdout, short.stderr
    missing = run_nmtk("translate", "-m", str(tmp / "run"), "--shortlist", stdin="dog\n", env=env)
    assert missing.returncode == 1 and "has no shortlist: make one with `nmtk shortlist" in missing.stderr
    assert "precision:" not in missing.stderr and "checkpoint:" not in missing.stderr  # refused before loading
    assert np.load(run / "shortlist.npz")["table"].shape[1] == 3
