"""Every command tried with bad input and the habits of fairseq, sacreBLEU and CTranslate2 users: each
case ends with its exit code, one line naming the user's path or field, no traceback, and nothing
already written lost or changed. Uses the trained copy run of conftest.py; a test that changes a run
works on a copy of it."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cli_runner import run_nmtk

pytestmark = pytest.mark.slow


def nmtk(*args: str, cwd: Path, env: dict, stdin: str | None = None) -> subprocess.CompletedProcess:
    """`nmtk ARGS` (in this process: `cli_runner`)."""
    return run_nmtk(*args, stdin=stdin, cwd=cwd, env=env)


def one_line(result: subprocess.CompletedProcess, code: int, *expected: str) -> str:
    """The stderr of a refused command: one line (the command's own notes aside), no traceback."""
    assert result.returncode == code, result.stderr
    assert "Traceback" not in result.stderr
    last = result.stderr.strip().splitlines()[-1]
    for text in expected:
        assert text in last, result.stderr
    return last


def run_copy(copy_run, tmp_path: Path) -> tuple[Path, Path, dict]:
    tmp, recipe, env = copy_run
    run = tmp_path / "run"
    shutil.copytree(tmp / "run", run)
    return tmp, run, env


def snapshot(folder: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns) for p in folder.rglob("*")
            if p.is_file()}


# ---------------------------------------------------------------------------------------------- export


def test_export_force_replaces_only_an_earlier_export(copy_run, tmp_path: Path) -> None:
    tmp, _, env = copy_run
    mine = tmp_path / "mydocs"
    (mine / "sub").mkdir(parents=True)
    (mine / "notes.txt").write_text("mine")
    refused = nmtk("export", str(tmp / "run"), "-o", str(mine), "--force", cwd=tmp, env=env)
    one_line(refused, 1, str(mine), "nmtk did not write it")
    assert (mine / "notes.txt").read_text() == "mine" and (mine / "sub").is_dir()
    out = tmp_path / "new" / "ct2"  # missing parents are created, as for every output
    old_mask = os.umask(0o022)
    try:
        assert nmtk("export", str(tmp / "run"), "-o", str(out), cwd=tmp, env=env).returncode == 0
    finally:
        os.umask(old_mask)
    assert out.stat().st_mode & 0o777 == 0o755  # the user's umask, not mkdtemp's 0700
    again = nmtk("export", str(tmp / "run"), "-o", str(out), "--force", cwd=tmp, env=env)
    assert again.returncode == 0 and (out / "nmtk-export.json").is_file(), again.stderr
    assert json.loads((out / "nmtk-written.json").read_text())["command"].startswith("nmtk export")  # the one rule
    # --force replaces a folder nmtk wrote whole and that holds nothing else: what a user put into it, or
    # changed, stops it, named (issue 62: MY_NOTES.txt and a sub-folder were deleted silently)
    for put, named in (("MY_NOTES.txt", "MY_NOTES.txt"), ("sub/", "sub"), ("README.md", "README.md")):
        if put.endswith("/"):
            (out / put).mkdir()
        else:
            (out / put).write_text("the user's")
        refused = nmtk("export", str(tmp / "run"), "-o", str(out), "--force", cwd=tmp, env=env)
        one_line(refused, 1, str(out / named), "nmtk export did not write it")
        assert (out / named).exists()
        (out / named).rmdir() if put.endswith("/") else (out / named).unlink()
    empty = tmp_path / "empty"
    empty.mkdir()  # an empty folder holds nothing to lose: no --force needed
    written = nmtk("export", str(tmp / "run"), "-o", str(empty), cwd=tmp, env=env)
    assert written.returncode == 0 and (empty / "model.bin").is_file(), written.stderr


def test_skip_goes_on_from_its_partial_file_and_within_the_input(copy_run, tmp_path: Path) -> None:
    """--skip N leaves out lines that an interrupted run put in OUT.partial: without that file, or past
    the input's end, it is one line and nothing is written (issue 62: an OUT without its first lines)."""
    tmp, _, env = copy_run
    source = tmp_path / "in.en"
    source.write_text("the cat\nthe dog\n")
    out = tmp_path / "out.de"
    run = ["translate", "-m", str(tmp / "run")]
    one_line(nmtk(*run, "-i", str(source), "-o", str(out), "--skip", "1", cwd=tmp, env=env), 1,
             "--skip 1:", str(out) + ".partial", "does not exist")
    one_line(nmtk(*run, "-i", str(source), "--skip", "5", cwd=tmp, env=env), 1, f"--skip 5: {source} has only 2 lines")
    piped = nmtk(*run, "--skip", "5", cwd=tmp, env=env, stdin="the cat\nthe dog\n")
    one_line(piped, 1, "--skip 5: the standard input has only 2 lines")
    assert piped.stdout == "" and list(tmp_path.iterdir()) == [source]


def test_a_compressed_input_is_read_as_its_text(copy_run, tmp_path: Path) -> None:
    """`translate -i` reads gzip, xz and bzip2 input as Marian reads .gz (known by their first bytes, not
    their names; was one line asking to zcat it), --skip counting its lines; a truncated .gz is one line
    naming it, nothing written; zstd (no reader in Python's library) is still one line saying what to do."""
    import bz2
    import gzip
    import lzma

    tmp, _, env = copy_run
    text = b"the cat\nthe dog\nthe cat and the dog\n"
    plain = tmp_path / "in.en"
    plain.write_bytes(text)
    run = ["translate", "-m", str(tmp / "run")]
    expected = nmtk(*run, "-i", str(plain), cwd=tmp, env=env).stdout
    assert expected.count("\n") == 3
    for name, data in (("in.en.gz", gzip.compress(text)), ("in.en.xz", lzma.compress(text)),
                       ("in.en.bz2", bz2.compress(text)), ("gzipped-without-its-suffix", gzip.compress(text))):
        (tmp_path / name).write_bytes(data)
        assert nmtk(*run, "-i", str(tmp_path / name), cwd=tmp, env=env).stdout == expected, name
    skipped = nmtk(*run, "-i", str(tmp_path / "in.en.gz"), "--skip", "5", cwd=tmp, env=env)
    one_line(skipped, 1, f"--skip 5: {tmp_path / 'in.en.gz'} has only 3 lines")
    (tmp_path / "cut.gz").write_bytes(gzip.compress(text * 200)[:-12])  # its end and trailer cut off
    out = tmp_path / "cut.de"
    one_line(nmtk(*run, "-i", str(tmp_path / "cut.gz"), "-o", str(out), cwd=tmp, env=env), 1,
             f"{tmp_path / 'cut.gz'}: corrupt gzip file (Compressed file ended before the end-of-stream marker")
    assert not out.exists() and not Path(f"{out}.partial").exists()
    (tmp_path / "in.en.zst").write_bytes(b"\x28\xb5\x2f\xfd" + b"\x00" * 20)
    one_line(nmtk(*run, "-i", str(tmp_path / "in.en.zst"), cwd=tmp, env=env), 1, "zstd-compressed, not text")


# --------------------------------------------------------------------------------------------- train


def test_a_second_train_on_a_running_run_is_refused_and_a_killed_one_leaves_no_lock(copy_run, tmp_path) -> None:
    tmp, recipe, env = copy_run
    _, run, _ = run_copy(copy_run, tmp_path)
    holder = subprocess.Popen(  # a training job's lock, held as `nmtk train` holds it
        [sys.executable, "-c", "import sys, time\nfrom nmtk.rundir import RunDir\n"
         "from nmtk.train.lock import training_lock\nwith training_lock(RunDir(sys.argv[1])):\n"
         "    print('locked', flush=True); time.sleep(600)", str(run)],
        stdout=subprocess.PIPE, text=True, env=env)
    assert holder.stdout.readline().strip() == "locked"
    frozen = {name: (run / name).read_bytes() for name in ("recipe.toml", "manifest.json", "checkpoint_last.pt")}
    args = ["train", str(recipe), "--data", str(tmp / "data"), "--run-dir", str(run), "--threads", "1",
            "--set", "train.max_updates=705"]
    second = nmtk(*args, cwd=tmp, env=env)
    one_line(second, 1, str(run), "already being trained by process", str(holder.pid))
    assert {name: (run / name).read_bytes() for name in frozen} == frozen  # the refused job wrote nothing
    holder.send_signal(signal.SIGKILL)
    holder.wait(timeout=60)
    from nmtk.rundir import RunDir
    from nmtk.train.lock import training_lock

    with training_lock(RunDir(run)):  # the killed holder left no stale lock
        pass


def test_a_finished_run_says_so_and_trains_no_more(copy_run, tmp_path: Path) -> None:
    tmp, recipe, env = copy_run
    _, run, _ = run_copy(copy_run, tmp_path)
    args = ["train", str(recipe), "--data", str(tmp / "data"), "--run-dir", str(run), "--threads", "1",
            "--set", "model.d_model=64", "--set", "model.d_ff=128", "--set", "batching.batch_tokens=1024",
            "--set", "optim.lr=0.002", "--set", "tokenizer.vocab_size=140", "--set", "train.validate_every_updates=350",
            "--set", "train.save_every_updates=100"]
    before = snapshot(run)
    again = nmtk(*args, "--set", "train.max_updates=700", cwd=tmp, env=env)
    assert again.returncode == 0, again.stderr
    assert "finished" in again.stderr and "reached max_updates = 700 at update 700" in again.stderr
    after = snapshot(run)
    assert {k: v for k, v in after.items() if k.startswith("checkpoint")} == \
        {k: v for k, v in before.items() if k.startswith("checkpoint")}
    assert (run / "train.jsonl").read_text() == (tmp / "run" / "train.jsonl").read_text()
    more = nmtk(*args, "--set", "train.max_updates=705", cwd=tmp, env=env)
    assert more.returncode == 0 and "update 705" in more.stderr, more.stderr
    assert "resuming with changed settings: train.max_updates 700 → 705" in more.stderr


def test_strict_recipe_types_name_the_field(copy_run) -> None:
    tmp, recipe, env = copy_run
    for override, field in (("model.layers=true", "model.layers"), ('model.dropout="0.3"', "model.dropout"),
                            ('tokenizer.joint="yes"', "tokenizer.joint")):
        result = nmtk("recipe", "validate", str(recipe), "--set", override, cwd=tmp, env=env)
        one_line(result, 1, field)


# ------------------------------------------------------------------------------------------- average


@pytest.mark.parametrize(("args", "message"), [
    (["--last", "0"], "--last"),
    (["--last=-2"], "--last"),
    (["--last", "1", "--updates", "350-700"], "--last and --updates"),
    (["--last", "1", "CKPT"], "not both"),
])
def test_average_refuses_what_it_cannot_honour(copy_run, tmp_path: Path, args: list[str], message: str) -> None:
    tmp, _, env = copy_run
    args = [str(tmp / "run" / "checkpoint_700.pt") if a == "CKPT" else a for a in args]
    result = nmtk("average", str(tmp / "run"), *args, "-o", str(tmp_path / "avg.pt"), cwd=tmp, env=env)
    one_line(result, result.returncode or 1, message)
    assert result.returncode != 0 and not (tmp_path / "avg.pt").exists()


def test_a_stray_average_never_becomes_the_model(copy_run, tmp_path: Path) -> None:
    tmp, run, env = run_copy(copy_run, tmp_path)
    shutil.copyfile(run / "checkpoint_350.pt", run / "checkpoint_avg_experiment.pt")
    used = nmtk("translate", "-m", str(run), cwd=tmp, env=env, stdin="the cat\n")
    assert used.returncode == 0 and "checkpoint_best.pt (best validation BLEU)" in used.stderr, used.stderr
    shutil.copyfile(run / "checkpoint_700.pt", run / "checkpoint_avg_last5.pt")  # the name the recipe's average has
    used = nmtk("translate", "-m", str(run), cwd=tmp, env=env, stdin="the cat\n")
    assert "checkpoint_avg_last5.pt (the recipe's average of the last 5)" in used.stderr, used.stderr


# ----------------------------------------------------------------------------------------- translate


@pytest.mark.parametrize("engine", ["torch", "ctranslate2"])
def test_a_pipe_gets_each_translation_as_soon_as_its_line_is_in(copy_run, exported, engine: str) -> None:
    """A program writes one line and waits for its translation before writing the next (issue 44: both
    engines waited for 1,000 lines or the end of the input). The 60 s are a hang guard, not a speed."""
    import queue
    import threading

    tmp, _, env = copy_run
    model = tmp / "run" if engine == "torch" else exported
    proc = subprocess.Popen([sys.executable, "-m", "nmtk", "translate", "-m", str(model), "--beam", "1"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=tmp, env=env)
    answers: queue.Queue = queue.Queue()
    threading.Thread(target=lambda: [answers.put(line) for line in proc.stdout], daemon=True).start()
    expected = nmtk("translate", "-m", str(model), "--beam", "1", cwd=tmp, env=env,
                    stdin="the dog runs\na cat sits on the grass\n").stdout.splitlines()
    try:
        for sent, want in zip(("the dog runs", "a cat sits on the grass"), expected, strict=True):
            start = time.monotonic()
            proc.stdin.write(sent + "\n")
            proc.stdin.flush()
            got = answers.get(timeout=60)  # the process is still waiting for more input: not its end
            print(f"{engine}: {sent!r} answered after {time.monotonic() - start:.2f} s")
            assert got.rstrip("\n") == want
        assert proc.poll() is None
    finally:
        proc.stdin.close()
        proc.wait(timeout=60)
    assert proc.returncode == 0, proc.stderr.read()


@pytest.mark.parametrize("how", ["same name", "hard link", "symbolic link", "standard input"])
def test_the_output_is_never_the_input(copy_run, tmp_path: Path, how: str) -> None:
    tmp, _, env = copy_run
    source = tmp_path / "f.en"
    source.write_text("the cat sits\n")
    target = {"same name": source, "hard link": tmp_path / "hard.en", "symbolic link": tmp_path / "soft.en",
              "standard input": source}[how]
    if how == "hard link":
        os.link(source, target)
    elif how == "symbolic link":
        target.symlink_to(source)
    inputs = [] if how == "standard input" else ["-i", str(source)]
    with open(source, "rb") as stdin:
        result = subprocess.run([sys.executable, "-m", "nmtk", "translate", "-m", str(tmp / "run"), *inputs, "-o",
                                 str(target), "--force"], stdin=stdin, capture_output=True, text=True, cwd=tmp, env=env)
    one_line(result, 1, "is the input file")
    assert source.read_text() == "the cat sits\n" and "checkpoint:" not in result.stderr


def test_a_run_that_fails_before_its_first_line_leaves_no_partial_file(copy_run, tmp_path: Path) -> None:
    """Invalid UTF-8 in the first buffer: the error says to use --errors replace, and that then works
    (no 'OUT.partial exists' in the way)."""
    tmp, _, env = copy_run
    (tmp_path / "bad.en").write_bytes(b"the cat\n\xff\xfe\n")
    out = tmp_path / "out.de"
    cmd = ["translate", "-m", str(tmp / "run"), "-i", str(tmp_path / "bad.en"), "-o", str(out)]
    failed = nmtk(*cmd, cwd=tmp, env=env)
    one_line(failed, 1, "invalid UTF-8", "--errors replace")
    assert list(tmp_path.iterdir()) == [tmp_path / "bad.en"]
    replaced = nmtk(*cmd, "--errors", "replace", cwd=tmp, env=env)
    assert replaced.returncode == 0 and out.read_text().count("\n") == 2, replaced.stderr


@pytest.mark.parametrize(("case", "message"), [
    ("missing input", "input file not found"),
    ("input folder", "is a folder, not a file"),
    ("output under a file", "cannot create its folder"),
    ("output is a folder", "is a folder; give a file name"),
])
def test_file_system_errors_name_the_users_path_before_any_model_loads(copy_run, tmp_path: Path, case: str,
                                                                       message: str) -> None:
    tmp, _, env = copy_run
    (tmp_path / "afile").write_text("x\n")
    (tmp_path / "in.en").write_text("the cat\n")
    paths = {"missing input": ["-i", str(tmp_path / "nope.en")], "input folder": ["-i", str(tmp_path)],
             "output under a file": ["-i", str(tmp_path / "in.en"), "-o", str(tmp_path / "afile" / "out.de")],
             "output is a folder": ["-i", str(tmp_path / "in.en"), "-o", str(tmp_path)]}[case]
    result = nmtk("translate", "-m", str(tmp / "run"), *paths, cwd=tmp, env=env)
    last = one_line(result, 1, message)
    assert str(tmp_path) in last and ".tmp" not in last
    assert "checkpoint:" not in result.stderr  # refused before the model was loaded


def test_a_damaged_subword_model_is_one_line_naming_it(copy_run, tmp_path: Path) -> None:
    tmp, run, env = run_copy(copy_run, tmp_path)
    (run / "spm.model").write_bytes(b"garbage, not a model")
    one_line(nmtk("translate", "-m", str(run), cwd=tmp, env=env, stdin="the cat\n"), 1, str(run / "spm.model"),
             "not a readable sentencepiece model")


def test_fairseq_habits_a_checkpoint_file_as_the_model_and_score_with_a_wrong_model(copy_run, tmp_path) -> None:
    tmp, _, env = copy_run
    text = "the red cat\n"
    by_file = nmtk("translate", "-m", str(tmp / "run" / "checkpoint_350.pt"), cwd=tmp, env=env, stdin=text)
    by_option = nmtk("translate", "-m", str(tmp / "run"), "--checkpoint", str(tmp / "run" / "checkpoint_350.pt"),
                     cwd=tmp, env=env, stdin=text)
    assert by_file.returncode == 0 and by_file.stdout == by_option.stdout, by_file.stderr
    (tmp_path / "ref").write_text("a\n")
    (tmp_path / "hyp").write_text("a\n")
    one_line(nmtk("score", "-r", str(tmp_path / "ref"), "-m", "bleu", str(tmp_path / "hyp"), cwd=tmp_path, env=env), 1,
             "-m bleu", "not an nmtk run directory")


def test_both_engines_stop_at_the_same_length(copy_run, exported) -> None:
    tmp, _, env = copy_run
    text = "the red cat runs in the park with a dog\n"
    limits = ["--max-len-a", "0", "--max-len-b", "3", "--beam", "1", "--precision", "fp32"]
    torch_out = nmtk("translate", "-m", str(tmp / "run"), *limits, cwd=tmp, env=env, stdin=text).stdout.split()
    ct2_out = nmtk("translate", "-m", str(exported), *limits, cwd=tmp, env=env, stdin=text).stdout.split()
    assert len(torch_out) == len(ct2_out) == 3 and torch_out == ct2_out


def test_help_shows_no_value_after_flags_and_folds_long_words(copy_run) -> None:
    tmp, _, env = copy_run
    result = nmtk("translate", "--help", cwd=tmp, env={**env, "COLUMNS": "80"})
    assert result.returncode == 0 and "<bool>" not in result.stdout and "…" not in result.stdout
    # grouped in panels, types without their ranges, the long file name whole in a readable column
    assert all(f"─ {panel} " in result.stdout for panel in ("Model", "Input and output", "Search", "Sampling"))
    assert "range>" not in result.stdout and "[x>=" not in result.stdout
    assert "checkpoint_avg_last<N>.pt" in result.stdout
    assert max(len(line) for line in result.stdout.splitlines()) <= 80
    for command in ("serve", "score", "attention"):
        shown = nmtk(command, "--help", cwd=tmp, env={**env, "COLUMNS": "80"}).stdout
        assert shown.count("╭─") >= 3, command
    # a long choice list wraps between choices, and each command's description between words only (issue 62:
    # "fl / oat16", and the source's line breaks cut serve's mid-phrase)
    exported = nmtk("export", "--help", cwd=tmp, env={**env, "COLUMNS": "80"}).stdout
    assert "float16>" in exported and "int8_bfloat16" in exported, exported
    commands = nmtk("--help", cwd=tmp, env={**env, "COLUMNS": "80"}).stdout
    text = " ".join(word for line in commands.splitlines() for word in line.strip("│ ").split())
    assert "request formats, batching across requests, a page at / to try it. SIGTERM finishes" in text, commands


# ------------------------------------------------------------------------------------ training reports


def test_a_run_stopped_before_its_first_validation_is_validated_at_the_end(copy_run, tmp_path: Path) -> None:
    tmp, recipe, env = copy_run
    run = tmp_path / "short"
    result = nmtk("train", str(recipe), "--data", str(tmp / "data"), "--run-dir", str(run), "--threads", "1",
                  "--set", "train.max_updates=4", "--set", "train.validate_every_updates=1000",
                  "--set", "tokenizer.vocab_size=140", cwd=tmp, env=env)
    assert result.returncode == 0, result.stderr
    assert "BLEU None" not in result.stderr and "best valid BLEU" in result.stderr
    assert '"validation": true' in (run / "train.jsonl").read_text() and (run / "checkpoint_best.pt").is_file()
    assert (run / "curves.png").is_file()


# ------------------------------------------------------------------------- cases that already worked


def test_the_cases_that_already_worked_still_do(copy_run, tmp_path: Path) -> None:
    """Invalid UTF-8, mismatched line counts, a truncated checkpoint, a missing run-directory file, an
    unknown recipe key, a negative batch_tokens, data prepared by another recipe: one line each."""
    tmp, recipe, env = copy_run
    (tmp_path / "bad.en").write_bytes(b"the cat\n\xff\xfe broken\n")
    one_line(nmtk("translate", "-m", str(tmp / "run"), "-i", str(tmp_path / "bad.en"), cwd=tmp, env=env), 1,
             str(tmp_path / "bad.en"), "2", "UTF-8")
    (tmp_path / "ref").write_text("a\nb\n")
    (tmp_path / "hyp").write_text("a\n")
    one_line(nmtk("score", "-r", str(tmp_path / "ref"), str(tmp_path / "hyp"), cwd=tmp, env=env), 1, "hyp")
    _, run, _ = run_copy(copy_run, tmp_path)
    (run / "checkpoint_best.pt").write_bytes((run / "checkpoint_best.pt").read_bytes()[:1000])
    one_line(nmtk("translate", "-m", str(run), cwd=tmp, env=env, stdin="a\n"), 1, "checkpoint_best.pt")
    (run / "manifest.json").unlink()
    one_line(nmtk("translate", "-m", str(run), cwd=tmp, env=env, stdin="a\n"), 1, "manifest.json")
    one_line(nmtk("recipe", "validate", str(recipe), "--set", "model.surprise=1", cwd=tmp, env=env), 1,
             "model.surprise")
    one_line(nmtk("recipe", "validate", str(recipe), "--set", "batching.batch_tokens=-5", cwd=tmp, env=env), 1,
             "batching.batch_tokens")
    other = nmtk("train", str(recipe), "--data", str(tmp / "data"), "--run-dir", str(tmp_path / "other"),
                 "--set", "tokenizer.vocab_size=99", cwd=tmp, env=env)
    one_line(other, 1, str(tmp / "data"), "tokenizer.vocab_size")
