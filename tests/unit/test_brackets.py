"""Brackets a model dropped, given back by alignment (`nmtk.text.brackets`): which translations dropped
them, the fragment whose inline elements markup places, and the brackets made again from its translation."""

from __future__ import annotations

from nmtk.text.brackets import as_marked, lost_brackets, rebracketed, tidied, to_rebracket, unmarked


def test_a_translation_that_dropped_the_brackets_of_a_bracketed_part_is_found() -> None:
    line = "A woman (in a red dress) dances."
    assert lost_brackets(line, "Eine Frau in einem roten Kleid tanzt.")  # the demo model's
    assert not lost_brackets(line, "Eine Frau (in einem roten Kleid) tanzt.")
    assert lost_brackets("The man [left] holds a ball.", "Der Mann hält einen Ball.")
    assert not lost_brackets("A man (30) runs.", "Ein Mann rennt.")  # no letter inside: a number's, not a part
    assert not lost_brackets("A dog runs :(", "Ein Hund rennt.")  # never closed: no part
    # the demo model's own brackets, unpaired, around nothing or the wrong way round
    assert lost_brackets("The engineer (left) smiles.", "Der Ingenieur (der linken Seite lächelt.")
    assert lost_brackets("The engineer (left) smiles.", "Der Ingenieur () lächelt.")
    assert lost_brackets("A man [in blue] sits.", "Ein blau gekleideter Mann] [sitzt.")
    assert lost_brackets("A girl ((in pink)) jumps.", "Ein Mädchen (in rosa () springt.")
    assert not lost_brackets("A girl ((in pink)) jumps.", "Ein Mädchen ((in rosa)) springt.")
    assert not lost_brackets("A boy ) runs (in red).", "Ein Junge rennt.")  # the line's own stray bracket
    # a note before the sentence is not a part of it: its words dropped, markup put its brackets around
    # another word ("(laughs) A dog runs." → "Ein (Hund) rennt.")
    for note in ("(laughs) A dog runs.", "- [music] A dog runs.", "<i>(laughs)</i> A dog runs."):
        assert not lost_brackets(note, "Ein Hund rennt.") and as_marked(note, markup=True) == note, note


def test_a_subtitle_cue_is_marked_as_markup() -> None:
    """A cue's text is markup already: nothing escaped, and a part holding a tag left as it is."""
    assert as_marked("<i>A woman (in red) & a dog</i>", markup=True) == (
        "<i>A woman <nmtk-round>in red</nmtk-round> & a dog</i>")
    assert as_marked("Two men (<i>brothers</i>) walk.", markup=True) == "Two men (<i>brothers</i>) walk."


def test_the_bracketed_parts_become_inline_elements_and_come_back_as_brackets() -> None:
    fragment = as_marked("A woman (in a red dress) & [a man] dance <b>.")
    assert fragment == ("A woman <nmtk-round>in a red dress</nmtk-round> &amp; <nmtk-square>a man</nmtk-square> "
                        "dance &lt;b&gt;.")
    placed = "Eine Frau <nmtk-round>in einem roten Kleid </nmtk-round> & <nmtk-square>ein Mann</nmtk-square> tanzen."
    assert unmarked(placed) == "Eine Frau (in einem roten Kleid) & [ein Mann] tanzen."
    # markup placed a part around no word ("Ein Hund rennt<i>.</i>"), or lost one half: no better than without
    assert unmarked("Ein Hund rennt<nmtk-round>.</nmtk-round>") is None
    assert unmarked("Ein Hund <nmtk-round>rennt.") is None


def test_stray_brackets_are_removed_and_a_line_wholly_in_brackets_keeps_them() -> None:
    """What a second try could not mend is tidied: no bracket of the line's parts' kinds left unpaired or
    around nothing, with the spaces beside it; the line's own strays stay; a line wholly in brackets
    (a note, a subtitle's "[Music]") gets them back around its translation."""
    assert tidied("A man [in blue] sits.", "Ein blau gekleideter Mann] [sitzt.") == "Ein blau gekleideter Mann sitzt."
    assert tidied("A girl ((in pink)) jumps.", "Ein Mädchen (in rosa () springt.") == "Ein Mädchen in rosa springt."
    assert tidied("The engineer (left) smiles!", "Der Ingenieur () lächelt!") == "Der Ingenieur lächelt!"
    assert tidied("A dog (left) runs.", "Ein Hund rennt (.") == "Ein Hund rennt."
    assert tidied("A dog (left) runs.", "(Ein Hund rennt.") == "Ein Hund rennt."
    kept = "Ein Mann (links) rennt (3)."
    assert tidied("A man (left) runs (3).", kept) == kept
    assert tidied("A boy ) runs (.", "Ein Junge ) rennt (.") == "Ein Junge ) rennt (."
    assert tidied("(A woman sings.)", "Eine Frau singt.") == "(Eine Frau singt.)"
    assert tidied(" [Music] ", "Musik") == "[Musik]"
    assert tidied("(A dog) and (a cat)", "Ein Hund und eine Katze") == "Ein Hund und eine Katze"
    assert tidied("(A woman sings.)", "(Eine Frau singt.)") == "(Eine Frau singt.)"


def test_a_segment_is_read_with_the_characters_it_carries_and_tidied_with_its_tags_left_alone() -> None:
    """A document's segment is checked as written: brackets the vocabulary cannot spell are carried as
    points (its words lack them); a bracket inside a tag is none of the text's."""
    from nmtk.text.markup import Segment, Tag

    segment = Segment(["A", "bird", "sings", "loudly."], [Tag("[", "", 3, 3, None), Tag("]", "", 4, 4, None)])
    assert segment.written() == "A bird sings [loudly.]"
    assert tidied(segment.written(), "Ein Vogel singt [.]") == "Ein Vogel singt."
    link = 'Ein <a href="/x(1)">Hund</a> rennt (schnell.'
    assert tidied("A dog runs (fast).", link) == 'Ein <a href="/x(1)">Hund</a> rennt schnell.'
    assert tidied("(A dog runs.)", "<b>Ein Hund</b> rennt. ") == "(<b>Ein Hund</b> rennt.) "
    assert not lost_brackets("A dog (<i>left</i>) runs.", "Ein Hund (<i>links</i>) rennt.")


def test_a_bracket_inside_a_tag_is_no_part_of_the_text() -> None:
    """A line of `--format html` is marked as a cue is: an attribute's brackets (``title="a (b)"``,
    ``href="/x(1)"``) are the tag's, never a part made an element (that broke the tag)."""
    line = '<a title="a (b)" href="/x(1)">A dog (left) runs.</a>'
    assert as_marked(line, markup=True) == '<a title="a (b)" href="/x(1)">A dog <nmtk-round>left</nmtk-round> runs.</a>'
    assert lost_brackets(line, '<a title="a (b)" href="/x(1)">Ein Hund rennt.</a>')
    assert not lost_brackets('<a title="a (b)">A dog runs.</a>', '<a title="a (b)">Ein Hund rennt.</a>')


def test_fragments_that_lost_brackets_are_marked_and_take_their_second_translation_where_it_is_whole() -> None:
    """Cues and lines of html (`translate`, `serve`): which to translate again, and what is taken back."""
    segments = ["<p>A man (in red) walks.</p>", "<b>A dog</b> runs.", "A cat [left] sits.", "Two men (<i>x</i>) talk."]
    done = ["<p>Ein Mann in Rot geht.</p>", "<b>Ein Hund</b> rennt.", "Eine Katze sitzt ] .", "Zwei Männer reden."]
    found = to_rebracket(segments, done)
    assert found == {0: "<p>A man <nmtk-round>in red</nmtk-round> walks.</p>",
                     2: "A cat <nmtk-square>left</nmtk-square> sits."}  # the last: a part holding a tag
    again = ["<p>Ein Mann <nmtk-round>in Rot</nmtk-round> geht.</p>", "Eine Katze sitzt<nmtk-square>.</nmtk-square>"]
    assert rebracketed(segments, done, found, again) == [
        "<p>Ein Mann (in Rot) geht.</p>", "<b>Ein Hund</b> rennt.", "Eine Katze sitzt.", "Zwei Männer reden."]


def test_quotes_a_translation_left_open_are_closed_or_removed_and_a_quoted_line_keeps_them() -> None:
    """Where the source's quotation marks pair and the translation's do not: a quote left open is closed
    at the end where the source's closes at its end (before the stop or after it, as there), else
    removed, as a stray closing mark is; a line wholly in quotes gets them back (the demo model dropped
    them). Paired quotes in any language's style, and a source whose own marks do not pair, stay."""
    says = 'A man says: "Two dogs play in the snow."'
    assert tidied(says, "Ein Mann sagt: „Hunde spielen im Schnee.") == "Ein Mann sagt: „Hunde spielen im Schnee.“"
    assert tidied('A sign reads "Stop".', "Ein Schild mit „Stopp.") == "Ein Schild mit „Stopp“."
    assert tidied('A sign reads "Stop"', "Ein Schild mit «Stopp") == "Ein Schild mit «Stopp»"
    assert tidied('A dog runs "fast".', "„Ein Hund rennt schnell.") == "Ein Hund rennt schnell."  # not the whole line
    assert tidied('"A dog runs fast."', "„Ein Hund rennt schnell.") == "„Ein Hund rennt schnell.“"
    assert tidied('A sign reads "Free hugs".', "Ein Schild mit „Fuu“ -S “.") == "Ein Schild mit „Fuu“ -S."
    shirt = 'A man in a "Star Wars" shirt.'
    assert tidied(shirt, 'Ein Mann in "Star Wars einem Hemd.') == "Ein Mann in Star Wars einem Hemd."
    assert tidied('"A dog runs in the park."', "Ein Hund rennt im Park.") == '"Ein Hund rennt im Park."'
    assert tidied("“A woman sings.”", "Eine Frau singt.") == "“Eine Frau singt.”"
    for fine in ("Ein Schild mit „Stopp“.", "Ein Schild mit “Stopp”.", "Ein Schild mit « Stopp ».", "Ein Schild."):
        assert tidied('A sign reads "Stop".', fine) == fine
    assert tidied('A TV 55" wide.', "Ein Fernseher „ breit.") == "Ein Fernseher „ breit."  # an inch: no quote
    assert tidied("A dog runs.", "Ein Hund „ rennt.") == "Ein Hund „ rennt."  # a source without quotes
    assert tidied('<a href="x">A</a> "B" c.', '<a href="x">X</a> „B c.') == '<a href="x">X</a> B c.'  # tags aside
    entities = "&quot;Ein Hund rennt.&quot;"  # markup's own quotes as character references: left alone
    assert tidied('"A dog runs."', entities) == entities and tidied('A "B" c.', "X &quot;B c.") == "X &quot;B c."
