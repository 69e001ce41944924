"""`nmtk translate`'s streaming helpers that need no model."""

from __future__ import annotations

from pathlib import Path

from nmtk.decode.stream import TranslateOptions, count_lines, lines_to_translate, summary, time_left


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


def test_the_last_line_names_lines_cut_and_lines_searched_again_apart() -> None:
    """Lines that ran to their length limit and ended when searched again with repeats barred are named
    apart from those still cut, each list at most ten numbers long."""
    assert summary(3, 1.0, []) == "translated 3 lines in 1.0 s (3.0 lines/s)"
    said = summary(20, 2.0, [13], list(range(1, 13)))
    assert said == ("translated 20 lines in 2.0 s (10.0 lines/s); 12 translated again with repeats barred, having "
                    "run to the length limit: lines 1, 2, 3, 4, 5, 6, 7, 8, 9, 10 and 2 more; 1 ran to the length "
                    "limit without ending (the model repeating itself?): line 13")
