"""Subtitle files: cues apart from numbers, timings, headers and notes; written back as they were."""

from __future__ import annotations

from nmtk.text.subtitles import Subtitles, wrapped


def test_cues_are_their_text_and_everything_else_is_written_as_it_was() -> None:
    srt = ("\ufeff1\r\n00:00:01,000 --> 00:00:04,000\r\nA dog runs in the park\r\nwith a ball.\r\n\r\n"
           "2\r\n00:00:05,000 --> 00:00:08,000 X1:40\r\n- Hi.\r\n– <i>Hello.</i>\r\n\r\n\r\n"
           "3\r\n00:00:09,000 --> 00:00:10,000\r\n")
    parsed = Subtitles.parse(srt.removeprefix("\ufeff"))
    assert parsed.segments() == ["A dog runs in the park with a ball.", "Hi.", "<i>Hello.</i>"]
    assert parsed.render(parsed.segments()) == ("1\r\n00:00:01,000 --> 00:00:04,000\r\nA dog runs in the\r\npark "
                                                "with a ball.\r\n\r\n2\r\n00:00:05,000 --> 00:00:08,000 X1:40\r\n- "
                                                "Hi.\r\n– <i>Hello.</i>\r\n\r\n\r\n3\r\n00:00:09,000 --> "
                                                "00:00:10,000\r\n")
    vtt = "WEBVTT - a title\n\nNOTE two\nlines\n\nSTYLE\n::cue { color: red }\n\nid\n00:01.000 --> 00:02.000\nHi.\n"
    parsed = Subtitles.parse(vtt)
    assert parsed.segments() == ["Hi."] and parsed.render(["Hallo."]) == vtt.replace("\nHi.\n", "\nHallo.\n")
    assert Subtitles.parse("").segments() == [] and Subtitles.parse("").render([]) == ""


def test_a_translation_is_wrapped_so_that_its_longest_line_is_shortest() -> None:
    assert wrapped("Ein Hund rennt im Park mit einem Ball.", 2) == ["Ein Hund rennt im", "Park mit einem Ball."]
    assert wrapped("one two three four five six", 3) == ["one two", "three four", "five six"]
    assert wrapped("Ja.", 2) == ["Ja."] and wrapped("a  b", 1) == ["a b"] and wrapped("", 2) == [""]


def test_webvtt_notation_becomes_html_markup_parses_and_comes_back() -> None:
    """``<c.yellow>`` closes with ``</c>`` and ``<v Anna>`` may stay open to the cue's end: as they are,
    markup refused the whole file; karaoke timings are left out (no word to place them by)."""
    from nmtk.text.markup import parse
    from nmtk.text.subtitles import marked_up, restored

    for text in ("<v Anna>A girl <c.yellow.big>sings</c>.", "A <00:00:02.000>dog <i>runs</i>.", "<v.loud Bo>Hi</v>"):
        parse(marked_up(text), "html")  # no MarkupError
    assert marked_up("<v Anna>A <c.yellow>girl</c>.") == '<v Anna>A <c data-vtt-class=".yellow">girl</c>.</v>'
    assert restored('<v Anna>Ein <c data-vtt-class=".yellow">Mädchen</c>.</v>', "<v Anna>A <c.yellow>girl</c>.") == (
        "<v Anna>Ein <c.yellow>Mädchen</c>.")
    assert marked_up("A <00:02.000>dog.") == "A dog."
    assert restored("<v Bo>Hallo</v>", "<v Bo>Hi</v>") == "<v Bo>Hallo</v>"
