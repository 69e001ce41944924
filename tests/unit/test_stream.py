"""`nmtk translate`'s streaming helpers that need no model."""

from __future__ import annotations

from pathlib import Path

from nmtk.decode.stream import TranslateOptions, count_lines, lines_to_translate, time_left


def test_the_progress_total_leaves_out_skipped_lines(tmp_path: Path) -> None:
    """Going on with --skip N, the bar counts the lines still to do, not the whole file."""
    src = tmp_path / "in.en"
    src.write_text("a\nb\nc\nd\ne")  # a last line without a newline counts
    assert count_lines(src) == 5
    assert lines_to_translate(TranslateOptions(input=src)) == 5
    assert lines_to_translate(TranslateOptions(input=src, skip=3)) == 2
    assert lines_to_translate(TranslateOptions(input=src, skip=9)) == 0
    assert lines_to_translate(TranslateOptions()) is None  # stdin: unknown


def test_time_left_follows_the_lines_done_per_second() -> None:
    """Issue 44: rich's estimate showed -:--:-- for whole runs of 1,000-line buffers."""
    assert time_left(1000, 4000, 10.0) == "0:30 left"
    assert time_left(1000, 1_000_000, 10.0) == "2:46:30 left"
    assert time_left(0, 4000, 0.0) == "" and time_left(10, None, 1.0) == ""
