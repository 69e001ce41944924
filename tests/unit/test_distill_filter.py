"""`nmtk distill`'s filter: empty translations and the lowest-scored share are left out, the rest kept
in order, each source with its own translation; a scored file that is not one is a line naming it."""

from __future__ import annotations

import pytest

from nmtk.errors import NmtkError
from nmtk.rundir import DistillDir
from nmtk.train.distill import _keep


def _folder(tmp_path, scored: list[str]) -> DistillDir:
    folder = DistillDir(tmp_path, "en", "de")
    folder.sources("c").write_text("".join(f"source {i}\n" for i in range(len(scored))))
    folder.scored("c").write_text("".join(line + "\n" for line in scored))
    return folder


def test_empty_and_lowest_scored_translations_are_left_out(tmp_path) -> None:
    scored = ["-0.5\teins", "-3.0\tzwei", "-0.1\t", "-1.0\tdrei", "-0.2\tvier", "-2.0\tfünf", "\t"]
    report = _keep(_folder(tmp_path, scored), "c", drop=0.4)
    src, tgt = (p.read_text().splitlines() for p in DistillDir(tmp_path, "en", "de").kept("c"))
    assert (report.pairs, report.empty, report.low_score, report.kept) == (7, 2, 2, 3)
    assert tgt == ["eins", "drei", "vier"] and src == ["source 0", "source 3", "source 4"]
    assert report.threshold == -1.0


def test_nothing_is_dropped_by_score_at_zero(tmp_path) -> None:
    report = _keep(_folder(tmp_path, ["-9\ta", "-1\tb"]), "c", drop=0.0)
    assert report.kept == 2 and report.threshold is None


def test_a_file_without_scores_is_one_error_naming_its_line(tmp_path) -> None:
    folder = _folder(tmp_path, ["-1\tgut", "kein Wert"])
    with pytest.raises(NmtkError, match=r"c\.scored\.de:2: not 'SCORE<TAB>TRANSLATION'"):
        _keep(folder, "c", drop=0.05)
