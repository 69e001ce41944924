"""`nmtk translate`'s streaming helpers that need no model."""

from __future__ import annotations

from pathlib import Path

from nmtk.decode.stream import TranslateOptions, count_lines, lines_to_translate


def test_the_progress_total_leaves_out_skipped_lines(tmp_path: Path) -> None:
    """Going on with --skip N, the bar counts the lines still to do, not the whole file."""
    src = tmp_path / "in.en"
    src.write_text("a\nb\nc\nd\ne")  # a last line without a newline counts
    assert count_lines(src) == 5
    assert lines_to_translate(TranslateOptions(input=src)) == 5
    assert lines_to_translate(TranslateOptions(input=src, skip=3)) == 2
    assert lines_to_translate(TranslateOptions(input=src, skip=9)) == 0
    assert lines_to_translate(TranslateOptions()) is None  # stdin: unknown
