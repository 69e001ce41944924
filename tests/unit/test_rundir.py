"""The one rule of `--force` (`rundir.check_replaceable`): it replaces a folder of its kind that nmtk wrote
whole and that holds nothing else; anything else is one line naming the first thing in the way."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from nmtk.errors import NmtkError
from nmtk.rundir import EXPORT_MARKER, WRITTEN_BY, check_replaceable, mark_written


def written(folder: Path, kind: str = "export") -> Path:
    (folder / "sub").mkdir(parents=True)
    (folder / "model.bin").write_bytes(b"x" * 10)
    (folder / "sub" / "vocab.txt").write_text("a\nb\n")
    mark_written(folder, f"nmtk {kind} SOURCE", kind)
    return folder


def test_force_replaces_a_whole_folder_of_its_kind_and_nothing_else(tmp_path: Path) -> None:
    folder = written(tmp_path / "exp")
    check_replaceable(folder, True, "export")
    with pytest.raises(NmtkError, match="exists; use --force to replace it"):
        check_replaceable(folder, False, "export")
    with pytest.raises(NmtkError, match="written by nmtk export, not nmtk import"):
        check_replaceable(folder, True, "import")
    for change, named in ((lambda: (folder / "sub" / "mine.txt").write_text("mine"), "sub/mine.txt"),
                          (lambda: (folder / "model.bin").write_bytes(b"y" * 11), "model.bin"),
                          (lambda: (folder / "more").mkdir(), "more")):
        change()
        with pytest.raises(NmtkError, match=f"{folder / named}: nmtk export did not write it"):
            check_replaceable(folder, True, "export")
        path = folder / named
        path.rmdir() if path.is_dir() else path.unlink() if named != "model.bin" else path.write_bytes(b"x" * 10)
    check_replaceable(folder, True, "export")


def test_folders_without_a_marker_a_file_and_an_empty_folder(tmp_path: Path) -> None:
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("mine")
    with pytest.raises(NmtkError, match="nmtk did not write it"):
        check_replaceable(tmp_path / "mine", True, "export")
    (tmp_path / "file").write_text("x")
    with pytest.raises(NmtkError, match="is a file"):
        check_replaceable(tmp_path / "file", True, "export")
    (tmp_path / "empty").mkdir()
    check_replaceable(tmp_path / "empty", False, "export")  # nothing in it to lose
    check_replaceable(tmp_path / "missing", False, "import")


@pytest.mark.parametrize("marker", [WRITTEN_BY, EXPORT_MARKER])
def test_a_folder_of_an_older_nmtk_holds_what_is_no_newer_than_its_marker(tmp_path: Path, marker: str) -> None:
    """Markers written before they listed their files (an import's, an older export's): nothing newer than
    the marker (by a minute) may be in the folder."""
    folder = tmp_path / "old"
    folder.mkdir()
    (folder / "checkpoint_last.pt").write_bytes(b"x")
    (folder / marker).write_text(json.dumps({"command": "nmtk import SOURCE"} if marker == WRITTEN_BY else {}))
    past = time.time() - 3600
    for path in folder.iterdir():
        os.utime(path, (past, past))
    kind = "import" if marker == WRITTEN_BY else "export"
    check_replaceable(folder, True, kind)
    (folder / "test.hyp.de").write_text("a translation the user made later")
    with pytest.raises(NmtkError, match=f"{folder / 'test.hyp.de'}: nmtk {kind} did not write it"):
        check_replaceable(folder, True, kind)


def test_the_default_checkpoint_falls_back_to_the_newest_numbered(tmp_path: Path) -> None:
    """A run that crashed at its first save holds numbered checkpoints and no checkpoint_last.pt: translate
    takes the newest full one (it said "no checkpoint to translate with (train first …)"); an average the
    recipe names, the best and the last come first, as before."""
    from helpers import toy_recipe

    from nmtk.model_source import default_checkpoint
    from nmtk.recipe import load_recipe
    from nmtk.rundir import RunDir

    recipe, run = load_recipe(toy_recipe(tmp_path)), RunDir(tmp_path / "run")
    run.path.mkdir()
    with pytest.raises(NmtkError, match="no checkpoint to translate with"):
        default_checkpoint(run, recipe)
    for name in ("checkpoint_100.pt", "checkpoint_200.pt", "checkpoint_300.params.pt"):
        (run.path / name).write_bytes(b"")
    assert default_checkpoint(run, recipe) == (run.path / "checkpoint_200.pt", "the newest numbered")
    run.last.write_bytes(b"")
    assert default_checkpoint(run, recipe) == (run.last, "the newest")


def test_the_newest_run_counts_numbered_checkpoints_and_not_averages(tmp_path: Path) -> None:
    """``-m`` left out: the run trained most recently, whether it has a checkpoint_last.pt or numbered
    checkpoints alone; an average written later into an older run does not make it the newest."""
    from nmtk.model_source import latest_run

    older, newer = tmp_path / "older", tmp_path / "newer"
    older.mkdir(), newer.mkdir()
    (older / "checkpoint_last.pt").write_bytes(b"")
    (newer / "checkpoint_50.pt").write_bytes(b"")
    (older / "checkpoint_avg_last5.pt").write_bytes(b"")
    now = time.time()
    os.utime(older / "checkpoint_last.pt", (now - 100, now - 100))
    os.utime(newer / "checkpoint_50.pt", (now - 50, now - 50))
    assert latest_run(tmp_path).path == newer
    assert latest_run(tmp_path / "none") is None
