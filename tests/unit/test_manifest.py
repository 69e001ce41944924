"""The typed manifest: validated when read, versioned, the one place for prepared-data file names."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_runner import run_nmtk

from nmtk.errors import NmtkError
from nmtk.manifest import MANIFEST_VERSION, Manifest, PreparedData

GOOD = {"format": 1, "source_lang": "en", "target_lang": "de", "dtype": "uint16",
        "vocab": {"joint": True, "models": {"en": "spm.model", "de": "spm.model"}, "size": {"en": 8000, "de": 8000},
                  "sha256": {"spm.model": "0" * 64}}}


def write(folder: Path, data: dict) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "manifest.json").write_text(json.dumps(data))
    return folder


def test_a_manifest_without_a_version_is_version_1_and_round_trips(tmp_path: Path) -> None:
    manifest = PreparedData(write(tmp_path / "d", GOOD)).manifest()
    assert manifest.version == MANIFEST_VERSION == 1
    assert manifest.model_paths(tmp_path) == {"en": tmp_path / "spm.model", "de": tmp_path / "spm.model"}
    manifest.write(tmp_path / "again.json")
    assert Manifest.read(tmp_path / "again.json") == manifest


@pytest.mark.parametrize(("change", "expected"), [
    ({"version": 2}, "manifest version 2, this nmtk reads version 1"),
    ({"dtype": None}, "invalid manifest: dtype"),
    ({"vocab": {"joint": True}}, "invalid manifest: vocab.models"),
    ({"surprise": 1}, "invalid manifest: surprise"),
])
def test_a_bad_manifest_is_one_line_naming_the_file(tmp_path: Path, change: dict, expected: str) -> None:
    folder = write(tmp_path / "d", {**GOOD, **change})
    with pytest.raises(NmtkError) as error:
        PreparedData(folder).manifest()
    message = str(error.value)
    assert "\n" not in message and str(folder / "manifest.json") in message and expected in message


def test_a_run_with_a_manifest_of_another_version_is_refused_by_translate(tmp_path: Path) -> None:
    run = tmp_path / "run"
    write(run, {**GOOD, "version": 7})
    (run / "recipe.toml").write_text("")
    result = run_nmtk("translate", "-m", str(run), stdin="a\n")
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 1 and len(lines) == 1 and "manifest version 7" in lines[0]
    assert "Traceback" not in result.stderr


def test_unreadable_manifests_make_prepare_rebuild(tmp_path: Path) -> None:
    (tmp_path / "manifest.json").write_text("{not json")
    assert Manifest.in_folder_or_none(tmp_path) is None
    assert Manifest.in_folder_or_none(tmp_path / "nowhere") is None


def test_prepares_table_names_each_split_whole(capsys) -> None:
    """A multilingual recipe's split names (``train.en-de``) are shown whole, however narrow the output
    (issue 62: ``train.e…`` in an 80-column log)."""
    from nmtk.data.report import render_manifest

    split = {"pairs_in": 29_000, "kept": 28_990, "dropped": {"empty": 1, "too_long": 2, "ratio": 7},
             "sides": {"en": {"tokens": 400_123, "max_len": 80}, "de": {"tokens": 410_456, "max_len": 90}},
             "words": {"en": 350_000, "de": 360_000}, "seconds": 3.2}
    manifest = Manifest.model_validate({**GOOD, "splits": {name: split for name in ("train.en-de", "valid.en-de",
                                                                                     "test_2016_flickr.en-de")}})
    render_manifest(manifest)
    shown = capsys.readouterr().err
    assert all(name in shown for name in manifest.splits) and "…" not in shown, shown  # no name or figure cut
    assert "400,123 / 410,456" in shown
