"""`nmtk distill` on the copy task: the copy run teaches a one-decoder-layer student; the teacher pass
goes on where an interrupted one stopped; a folder made with another teacher search is not reused."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import run_nmtk

STUDENT = ("--set", "name=student", "--set", "train.max_updates=30", "--set", "train.save_every_updates=30",
           "--set", "train.validate_every_updates=30", "--set", "model.d_model=64", "--set", "model.d_ff=128",
           "--set", "model.decoder_layers=1", "--set", "tokenizer.vocab_size=140")


@pytest.fixture(scope="module")
def distilled(copy_run, tmp_path_factory):
    """The copy run distils 300 new copy pairs into a student trained 30 updates: (folder, distil args,
    environment, result)."""
    from helpers import copy_pairs, toy_recipe, write_corpus

    tmp, _, env = copy_run
    work = tmp_path_factory.mktemp("distill")
    write_corpus(Path(env["NMTK_DATA"]), "distil", copy_pairs(300, 7))
    recipe = toy_recipe(work, name="student")
    recipe.write_text(recipe.read_text().replace('"toy/train.', '"toy/distil.'))
    args = ("distill", str(tmp / "run"), str(recipe), "--out", str(work / "out"), "--beam", "2", "--drop", "0.1",
            "--run-dir", str(work / "run"), "--threads", "2", *STUDENT)
    result = run_nmtk(*args, cwd=work, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    return work, args, env, result


def _scored(path: Path) -> list[tuple[float, str]]:
    return [(float(score), text) for score, _, text in (line.partition("\t") for line in path.read_text().splitlines())]


def test_the_student_trains_on_the_teachers_best_translations(distilled) -> None:
    from nmtk.manifest import PreparedData

    work, _, _, result = distilled
    out = work / "out"
    sources = (out / "train.en").read_text().splitlines()
    scored = _scored(out / "train.scored.de")
    kept_src, kept_tgt = ((out / f"train.kept.{lang}").read_text().splitlines() for lang in ("en", "de"))
    assert len(sources) == len(scored) == 300 and len(kept_src) == len(kept_tgt) == 270
    assert "kept 270 of 300 pairs" in result.stderr and "30 with the lowest teacher scores" in result.stderr
    copied = sum(text == source for (_, text), source in zip(scored, sources, strict=True))
    assert copied >= 240  # the teacher copies: its translations are its training targets
    by_source = dict(zip(sources, scored, strict=True))
    kept_scores = [by_source[s][0] for s in kept_src]
    dropped = sorted(score for score, _ in scored)[:30]
    assert min(kept_scores) >= max(dropped)  # the lowest-scored tenth is what was left out
    assert [by_source[s][1] for s in kept_src] == kept_tgt  # each source with its own translation
    assert (work / "run" / "checkpoint_30.pt").is_file()
    manifest = PreparedData(work / "data-bin" / "student").manifest()
    train = manifest.splits["train"]
    assert train["corpora"][0]["name"] == "train-distilled" and train["kept"] == 270


def test_an_interrupted_teacher_pass_goes_on_where_it_stopped(distilled) -> None:
    """Ctrl-C leaves the finished lines in the partial file; the same command goes on after them."""
    work, args, env, _ = distilled
    out = work / "out"
    scored = out / "train.scored.de"
    whole = scored.read_text().splitlines(keepends=True)
    scored.unlink()
    (out / "train.scored.de.partial").write_text("".join(whole[:100]))  # what Ctrl-C after 100 lines leaves
    result = run_nmtk(*args, "--translate-only", "--with-original", cwd=work, env=env)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "going on from" in result.stderr and "100 finished lines are kept" in result.stderr
    recipe = (out / "recipe.toml").read_text()
    assert 'name = "train-distilled"' in recipe and 'name = "train"' in recipe  # --with-original: both
    again = _scored(scored)
    assert [t for _, t in again] == [line.partition("\t")[2].rstrip("\n") for line in whole]
    assert again[:100] == _scored_lines(whole[:100])


def _scored_lines(lines: list[str]) -> list[tuple[float, str]]:
    return [(float(s), t.rstrip("\n")) for s, _, t in (line.partition("\t") for line in lines)]


def test_another_teacher_search_is_refused_until_forced(distilled) -> None:
    work, args, env, _ = distilled
    changed = [*args[:6], "3", *args[7:], "--translate-only"]  # --beam 3
    refused = run_nmtk(*changed, cwd=work, env=env)
    assert refused.returncode == 1
    assert "distilled with another beam (2 there, 3 now)" in refused.stderr and "--force" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1
    forced = run_nmtk(*changed, "--force", cwd=work, env=env)
    assert forced.returncode == 0, forced.stderr[-2000:]
    assert '"beam": 3' in (work / "out" / "distill.json").read_text()


def test_a_teacher_of_another_direction_is_refused_before_anything_is_written(distilled) -> None:
    work, args, env, _ = distilled
    other = [*args[:4], str(work / "other"), *args[5:], "--set", "data.target_lang=fr", "--translate-only"]
    refused = run_nmtk(*other, cwd=work, env=env)
    assert refused.returncode == 1 and len(refused.stderr.strip().splitlines()) == 1, refused.stderr
    assert "translates en → de, not en → fr as the student recipe student asks" in refused.stderr
    assert not (work / "other").exists()


def test_a_ctranslate2_export_teaches_too(distilled, exported) -> None:
    """The teacher may be anything `-m` takes: an export translates through CTranslate2."""
    work, args, env, _ = distilled
    out = work / "from-export"
    result = run_nmtk("distill", str(exported), *args[2:3], "--out", str(out), "--beam", "2", "--translate-only",
                      *STUDENT, cwd=work, env=env)
    assert result.returncode == 0, result.stderr[-2000:]
    assert str((exported / "model.bin").resolve()) in (out / "distill.json").read_text()
    sources = (out / "train.en").read_text().splitlines()
    kept = (out / "train.kept.de").read_text().splitlines()
    assert len(kept) == 285 and sum(line in sources for line in kept) >= 250  # 5 % dropped; copies
    assert "student recipe:" in result.stderr and not (out / "run").exists()


def test_ctrl_c_says_the_exact_command_that_goes_on_never_with_force(distilled, monkeypatch) -> None:
    """The go-on line is the command that was run less ``--force`` (which would delete the finished
    lines); translations are kept a buffer of 1,000 lines at a time, as `translate` keeps them."""
    import shlex

    import nmtk.train.distill as distill_module
    from nmtk.errors import Interrupted

    work, args, env, _ = distilled
    seen = {}

    def interrupted_after_100(options):
        seen["buffer"] = options.buffer_size
        partial = options.output.with_name(options.output.name + ".partial")
        partial.write_text("".join("-1.0\tx\n" for _ in range(100)))
        raise Interrupted("interrupted", 130)

    monkeypatch.setattr(distill_module, "translate", interrupted_after_100)
    result = run_nmtk(*args, "--translate-only", "--force", cwd=work, env=env)
    assert result.returncode == 130 and seen["buffer"] == 1000, result.stderr
    line = result.stderr.strip().splitlines()[-1]
    assert "the teacher has translated 100 of train's 300 lines" in line
    command = line.split("go on with: ", 1)[1]
    assert shlex.split(command) == ["nmtk", *args, "--translate-only"]  # --force left out
