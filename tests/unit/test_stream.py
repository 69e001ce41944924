"""`nmtk translate`'s streaming helpers that need no model."""

from __future__ import annotations

from pathlib import Path

from nmtk.decode.stream import TranslateOptions, count_lines, lines_to_translate, summary, time_left
from nmtk.text.markup import holds_tags


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
                    "repeated themselves: lines 1, 2, 3, 4, 5, 6, 7, 8, 9, 10 and 2 more; 1 ran to the length "
                    "limit without ending (the model repeating itself?): line 13")


def test_text_lines_holding_markup_tags_are_named_on_the_last_line() -> None:
    """A line of text with tags (subtitles' <i>, a scraped <br>, XLIFF's <x/>) is read as words, which a model
    trained on plain text garbles: the last line names such lines and --format html; corpus and language
    tags and comparisons are not tags."""
    tagged = ['<b>A</b> cat.', '<i>Where are you?</i>', 'one<br>two', 'one<BR/>two', 'see <x id="1"/> here',
              'Click <a href="x">here', "<span class='a'>b"]
    plain = ["A dog.", "a < b > c", "<BT> A dog.", "<2de> Hallo", "x<y and y>z", "<unk> is a token", "<3 you",
             "if a<b then", "</ 3"]
    assert all(holds_tags(line) for line in tagged) and not any(holds_tags(line) for line in plain)
    said = summary(9, 1.0, [], tagged=[2, 5])
    assert said.endswith("; 2 held markup tags, read as words (--format html translates the text between them and "
                         "puts them back): lines 2, 5")


def test_lines_in_a_language_the_model_reads_none_of_are_named_on_the_last_line() -> None:
    """``--source-lang auto`` with an en→de model: a French line was translated as English ("Ein mült sich
    bereit.") without a word; the identifier, sure of it, names it. A model's own languages, short lines
    and lines it is unsure of are not named."""
    from nmtk.text.langid import foreign_language

    among = ["en", "de"]
    assert foreign_language("Un chien court dans le parc avec son ami.", among) == "fr"
    assert foreign_language("Un perro corre en el parque con su amigo.", among) == "es"
    for ours in ("A dog runs in the park with his friend.", "Ein Hund rennt mit seinem Freund im Park.", "Chien.",
                 "12345 67890"):
        assert foreign_language(ours, among) is None, ours
    said = summary(4, 1.0, [], foreign=[(3, "fr"), (4, "es"), (5, "fr")])
    assert said.endswith("; 3 seemed to be in a language the model does not read (French, Spanish), translated as one "
                         "it reads: lines 3, 4, 5")


def test_a_page_in_another_language_than_the_models_is_a_warning(capsys) -> None:
    """``<html lang="fr">`` for an English model: translated all the same (pages' ``lang`` is often
    wrong), with one warning; the model's own language, a region of it, or no ``lang``: nothing said."""
    from types import SimpleNamespace

    from nmtk.decode.stream import _warn_of_page_language

    translator = SimpleNamespace(src_pipe=SimpleNamespace(moses=SimpleNamespace(lang="en")))
    for page in ('<html lang="en-GB"><p>A.</p></html>', "<html><p>A.</p></html>", '<p lang="fr">A.</p>'):
        _warn_of_page_language(page, translator, "page.html")
    assert capsys.readouterr().err == ""
    _warn_of_page_language("<!DOCTYPE html>\n<html class='x' lang=fr>", translator, "page.html")
    assert 'page.html: the page says it is in another language (<html lang="fr">)' in capsys.readouterr().err
