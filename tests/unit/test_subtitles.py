"""Subtitle files: cues apart from numbers, timings, headers and notes; written back as they were."""

from __future__ import annotations

import pytest

from nmtk.errors import NmtkError
from nmtk.text.subtitles import AssScript, Subtitles, wrapped


def test_cues_are_their_text_and_everything_else_is_written_as_it_was() -> None:
    srt = ("\ufeff1\r\n00:00:01,000 --> 00:00:04,000\r\nA dog runs in the park\r\nwith a ball.\r\n\r\n"
           "2\r\n00:00:05,000 --> 00:00:08,000 X1:40\r\n- Hi.\r\n– <i>Hello.</i>\r\n\r\n\r\n"
           "3\r\n00:00:09,000 --> 00:00:10,000\r\n")
    parsed = Subtitles.parse(srt.removeprefix("\ufeff"))
    assert parsed.segments() == ["A dog runs in the park with a ball.", "Hi.", "<i>Hello.</i>"]
    assert parsed.render(parsed.segments()) == ("1\r\n00:00:01,000 --> 00:00:04,000\r\nA dog runs in the park "
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


def test_lines_that_are_each_a_speaker_or_a_sentence_are_translated_apart() -> None:
    """As one text, ``<v Anna>…`` / ``<v Bo>…`` left Anna's voice open (the cue lost its tags) and
    "A woman sings." / "A man plays." came back broken mid-sentence; lines whose tags span them, and an
    ellipsis that goes on, stay one text (the latter on one line where it fits one)."""
    vtt = ("WEBVTT\n\n00:01.000 --> 00:02.000\n<v Anna>Where is\n<v Bo>Here.\n\n00:03.000 --> 00:04.000\n"
           "A woman sings.\nA man \"plays\"!\n\n00:05.000 --> 00:06.000\n<i>A woman sings.\nA man plays.</i>\n\n"
           "00:07.000 --> 00:08.000\nI was thinking...\nmaybe not.\n")
    parsed = Subtitles.parse(vtt)
    assert parsed.segments() == ["<v Anna>Where is</v>", "<v Bo>Here.</v>", "A woman sings.", 'A man "plays"!',
                                 "<i>A woman sings. A man plays.</i>", "I was thinking... maybe not."]
    rendered = parsed.render(["<v Anna>Wo ist</v>", "<v Bo>Hier.</v>", "Eine Frau singt.", "Ein Mann spielt!",
                              "<i>Eine Frau singt. Ein Mann spielt.</i>", "Ich dachte... vielleicht nicht."])
    assert rendered.split("\n\n")[1:] == ["00:01.000 --> 00:02.000\n<v Anna>Wo ist\n<v Bo>Hier.",
                                          "00:03.000 --> 00:04.000\nEine Frau singt.\nEin Mann spielt!",
                                          "00:05.000 --> 00:06.000\n<i>Eine Frau singt.\nEin Mann spielt.</i>",
                                          "00:07.000 --> 00:08.000\nIch dachte... vielleicht nicht.\n"]


def test_ass_codes_come_back_where_markup_placed_them_and_take_no_width() -> None:
    """SubRip files often carry ASS codes (``{\\an8}``: the cue at the top); as text the model read
    ``{\\Ein Mann}``. Tags and codes show nothing, so they count nothing in a line's width, and a tag's
    own spaces are no place to break a line."""
    from nmtk.text.markup import parse
    from nmtk.text.subtitles import marked_up, restored

    text = "{\\an8}A <i>dog</i> runs{\\i1}."
    assert marked_up(text) == '<img data-ass="\\an8">A <i>dog</i> runs<img data-ass="\\i1">.'
    parse(marked_up(text), "html")  # no MarkupError
    assert restored('<img data-ass="\\an8">Ein <i>Hund</i> rennt<img data-ass="\\i1">.', text) == (
        "{\\an8}Ein <i>Hund</i> rennt{\\i1}.")
    assert wrapped('<font color="#ff0">Hunde rennen</font> schnell.', 2) == ['<font color="#ff0">Hunde rennen</font>',
                                                                          "schnell."]
    assert wrapped("{\\an8}Hunde rennen schnell.", 2) == ["{\\an8}Hunde rennen", "schnell."]


def test_cues_with_no_blank_line_between_them_are_cues_apart() -> None:
    """A file that leaves out the blank line between cues: the second cue's number and timing were read
    as the first one's text and sent to the model ("2 00:00:03,000 Ein" / "Hund> 00:00:04,000")."""
    srt = ("1\n00:00:01,000 --> 00:00:02,000\nA man runs.\n2\n00:00:03,000 --> 00:00:04,000\nA dog\nsleeps.\n"
           "00:00:05,000 --> 00:00:06,000\n3\n\n4\n00:00:07,000 --> 00:00:08,000\nA cat.\n")
    parsed = Subtitles.parse(srt)
    assert [cue.head for cue in parsed.cues] == [["1", "00:00:01,000 --> 00:00:02,000"],
                                                 ["2", "00:00:03,000 --> 00:00:04,000"],
                                                 ["00:00:05,000 --> 00:00:06,000"],
                                                 ["4", "00:00:07,000 --> 00:00:08,000"]]
    assert parsed.segments() == ["A man runs.", "A dog sleeps.", "3", "A cat."]
    assert parsed.render(parsed.segments()) == srt.replace("A dog\nsleeps.", "A dog sleeps.")  # one line's text


def test_subrip_writes_characters_where_webvtt_escapes_them() -> None:
    """Markup writes html ("3 &lt; 5"); a SubRip file is text with a few tags, and a player showed the
    escape as it is. WebVTT escapes ``<`` and ``&`` in its text itself."""
    cue = "00:00:01,000 --> 00:00:02,000\nA"
    translated = ['3 &lt; 5 <font color="#f0f">AT&amp;T</font> &gt; &quot;x&quot;']
    written = Subtitles.parse(f"1\n{cue}\n").render(translated)
    assert written == f'1\n{cue[:-1]}3 < 5 <font color="#f0f">AT&T</font> > "x"\n'
    vtt = "\ufeffWEBVTT\n\n00:01.000 --> 00:02.000\nA\n"
    assert Subtitles.parse(vtt).render(translated) == vtt.replace("\nA\n", f"\n{translated[0]}\n")


def test_a_translation_wider_than_a_subtitle_line_takes_two() -> None:
    """A one-line cue whose translation is longer than a subtitle line holds (about 42 characters, or the
    file's own widest line) is wrapped over two lines, never more; tags count nothing; one that fits a
    line takes one, however many the source took (a cue of three may keep three)."""
    from nmtk.text.subtitles import Cue

    cue = Cue(["1", "00:00:01,000 --> 00:00:02,000"], ["A man climbs a rock."])
    long = "Ein Mann in einem roten Hemd klettert mit einem Seil."  # 53 characters
    assert cue.written([long])[2:] == ["Ein Mann in einem roten Hemd", "klettert mit einem Seil."]
    italic = "<i>Ein Mann klettert auf einen Felsen.</i>"  # 36 characters shown
    assert cue.written([italic])[2:] == [italic]
    assert cue.room(long * 3) == 2
    wide = Cue(["1", "00:00:01,000 --> 00:00:02,000"], ["A man in a red shirt climbs a rock with a long blue rope."])
    assert wide.room(long) == 1  # the file's own lines are that wide
    two = Cue(["1", "00:00:01,000 --> 00:00:02,000"], ["A dog", "runs."])  # a short text takes one line
    assert two.written(["Ein Hund rennt."])[2:] == ["Ein Hund rennt."] and two.room(long) == 2
    three = Cue(["1", "00:00:01,000 --> 00:00:02,000"], ["A", "b", "c"])
    assert three.room(long * 3) == 3 and three.room("Ja.") == 1


def test_a_webvtt_header_says_the_translations_language() -> None:
    """YouTube's captions say ``Language: en`` in their header: the translation's says ``de``; a cue's
    text, another language's line and a file without one are as they were."""
    vtt = "WEBVTT\nKind: captions\nLanguage: en-US\n\n00:01.000 --> 00:02.000\nLanguage: en\n"
    parsed = Subtitles.parse(vtt)
    parsed.relabelled("en", "de")
    assert parsed.render(["Language: en"]) == vtt.replace("Language: en-US", "Language: de")
    nllb = Subtitles.parse(vtt)  # a model's codes as NLLB writes them: the same languages
    nllb.relabelled("eng_Latn", "deu_Latn")
    assert nllb.render(["x"]).startswith("WEBVTT\nKind: captions\nLanguage: de\n")
    french = Subtitles.parse(vtt.replace("en-US", "fr"))
    french.relabelled("en", "de")
    assert french.render(["x"]).startswith("WEBVTT\nKind: captions\nLanguage: fr\n")


ASS = ("[Script Info]\r\nTitle: a, b\r\nScriptType: v4.00+\r\n\r\n[V4+ Styles]\r\nFormat: Name, Fontname\r\n"
       "Style: Default,Arial\r\n\r\n[Events]\r\n"
       "Format: Layer, Start, End, Style, Name, MarginL, MarginR, MarginV, Effect, Text\r\n"
       "Comment: 0,0:00:00.00,0:00:01.00,Default,,0,0,0,,not shown\r\n"
       "Dialogue: 0,0:00:01.00,0:00:02.00,Default,Anna,0,0,0,,{\\pos(10,20)}A dog, a cat\\Nand a bird.\r\n"
       "Dialogue: 0,0:00:03.00,0:00:04.00,Default,,0,0,0,,- Hi.\\N- 3 < 5 & so\\hon.\r\n")


def test_an_ass_script_is_its_dialogue_texts_and_everything_else_is_written_as_it_was() -> None:
    """(Advanced) SubStation Alpha: each Dialogue's Text (the last field, commas and all) is a cue, its lines
    split at ``\\N``; its codes become markup's elements, ``<`` and ``&`` are text; the header, styles,
    comments and each event's other fields are written as they were, CRLF too."""
    script = AssScript.parse(ASS, "film.ass")
    assert script.segments() == ['<img data-ass="\\pos(10,20)">A dog, a cat and a bird.', "Hi.",
                                 "3 &lt; 5 &amp; so\u00a0on."]
    assert script.render(script.segments()) == ASS
    # wrapped back over its lines, never more (a renderer wraps a line too wide for the picture itself)
    translated = ['<img data-ass="\\pos(10,20)">Ein Hund, eine Katze und ein Vogel.', "Hallo.",
                  "3 &lt; 5 &amp; so\u00a0weiter."]
    expected = ASS.replace("A dog, a cat\\Nand a bird.", "Ein Hund, eine\\NKatze und ein Vogel.")
    assert script.render(translated) == expected.replace("- Hi.", "- Hallo.").replace("on.", "weiter.")
    one = AssScript.parse(ASS.replace("a cat\\Nand", "a cat and"), "film.ass")
    assert one.render(translated).count("\\N") == 1  # the dialogue's own
    assert AssScript.parse("", "x.ass").render([]) == ""
    # a note in a block is no text; a soft break is a space
    noted = AssScript.parse(ASS.replace("{\\pos(10,20)}", "{TL: <a> & b}").replace("cat\\Nand", "cat\\nand"),
                            "x.ass")
    assert noted.segments()[0] == '<img data-ass="TL: &lt;a&gt; &amp; b">A dog, a cat and a bird.'
    assert "{TL: <a> & b}Ein Hund." in noted.render(['<img data-ass="TL: &lt;a&gt; &amp; b">Ein Hund.', "Hallo.", "x"])


@pytest.mark.parametrize(("events", "said"), [
    ("Dialogue: 0,0:00:01.00,0:00:02.00,Default,,0,0,0,,Hi.", "line 2: a Dialogue line before its [Events] "
                                                               "section's Format line"),
    ("Format: Layer, Start, End, Text\nDialogue: 0,0:00:01.00,Hi.", "line 3: a Dialogue line of 3 fields, its "
                                                                  "Format names 4"),
    ("Format: Layer, Text, Start", "line 2: an [Events] Format whose last field is not Text")])
def test_a_broken_ass_script_is_one_line_naming_its_line(events: str, said: str) -> None:
    with pytest.raises(NmtkError) as caught:
        AssScript.parse(f"[Events]\n{events}\n", "film.ass")
    assert str(caught.value) == f"film.ass: {said}"
