"""Markup cut into segments and put back (`nmtk.text.markup`): without a model, with alignments given."""

from __future__ import annotations

import random
import re
import xml.etree.ElementTree as ET

import pytest

from nmtk.text.markup import MarkupError, Target, owners, parse, place, token_spans


def identity(segment, words=None) -> Target:
    """A 'translation' that copies the source words, each aligned to itself."""
    words = words or segment.words
    text = " ".join(words)
    return Target(text, token_spans(words, text), list(range(len(words))))


def round_trip(markup: str, kind: str = "html", keep=None) -> str:  # noqa: ANN001 (parse's Keep)
    doc = parse(markup, kind, keep=keep)
    return doc.render([place(s, identity(s)) for s in doc.segments])


@pytest.mark.parametrize("markup, expected", [
    ("<p>A <b>red</b> car.</p>", None),
    ("<p>A <a href=\"x.html\" title=\"T\">red <i>fast</i></a> car &amp; a &copy; bike.</p>\n"
     "<ul><li>One</li><li>Two <br> three</li></ul>", None),
    ("<div>Run <code>ls -l</code> to <span class=\"x\">see</span> it <img src=\"a.png\" alt=\"A\"> now.</div>", None),
    ("<p>Keep <span translate=\"no\">Foo Bar</span> and <em></em>this<!-- note -->.</p>", None),
    ("<pre>  not <b>translated</b>  </pre><p>  spaced   out  </p>",
     "<pre>  not <b>translated</b>  </pre><p>  spaced out  </p>"),
    ("<p><b>Line one<br>line two</b> and <i>three<br/></i></p>", None),  # a <br> in a tag: a point, ending a word
    ("<!DOCTYPE html><html><head><title>T</title></head><body><P CLASS=x>Upper <B>case</B></P></body></html>", None),
    # nothing to translate before the first word or after the last: the spaces stay where they were (issue 77)
    ('<p><img src="a.png"> A dog runs.</p>', None),
    ('<p>A dog runs. <img src="b.png"></p>', None),
    ("<p><code>x = 1</code> is code.</p>", None),
    ('<p> <span translate="no">nmtk</span>  works. <!-- c --> </p>', None),
    # a ">" written as it is comes back so (a subtitle's "-->" came back "--&gt;"), one written "&gt;" so
    ("<p>00:00:01,000 --> 00:00:04,000</p><p>And c > d.</p>", None),
    ("<p>A &gt; b.</p>", None),
])
def test_a_copy_gives_the_markup_back(markup: str, expected: str | None) -> None:
    """With every word aligned to itself, every tag, entity, comment and verbatim element is where it was
    (whitespace inside a segment collapses to one space)."""
    assert round_trip(markup) == (expected or markup)


def test_xliff_inline_codes_are_kept_verbatim_in_xml() -> None:
    """``<bpt>``/``<ept>``/``<ph>`` hold the original document's markup: not words to translate (the
    demo model made ``<bpt>&lt;b&gt;</bpt>`` "<bpt>Nahaufnahme &lt;&gt;</bpt>"); ``<g>`` holds words."""
    markup = 'A <bpt id="1">&lt;b&gt;</bpt>red<ept id="1">&lt;/b&gt;</ept> <g id="2">car</g><ph id="3">{0}</ph>.'
    segment = parse(markup, "xml").segments[0]
    assert segment.words == ["A", "red", "car."]
    assert round_trip(markup, "xml") == markup
    assert parse("<p>A <ph>red</ph> car.</p>").segments[0].words == ["A", "red", "car."]  # html has no such codes


@pytest.mark.parametrize("markup, kind", [
    ("<doc><!-- c --><seg>A dog.</seg></doc>", "xml"),  # a comment before a tag that opens at its word: outside it
    ("<p><!-- c --><b>A dog</b> runs.</p>", "html"),
    ("<!-- a --><b><!-- b --><i><!-- c -->x</i></b>", "xml"),  # ... inside those that opened before it
    ("<doc><seg>A dog.</seg><?pi data?></doc>", "xml"),  # a processing instruction inside an element (an error)
    ("<p>A <?php echo 1 ?> dog.</p>", "html"),  # ... inside a sentence: it stays one sentence
    ('<?xml version="1.0"?><doc>A dog.</doc>', "xml"),
    ("<doc>A <![CDATA[<cat> & co]]> dog.</doc>", "xml"),  # CDATA as written (its "]]>" came back "]>")
    ('<p>A dog.<img src="x"></p>', "html"),  # glued after the "." (a space was put before it)
])
def test_comments_and_processing_instructions_stay_where_they_were(markup: str, kind: str) -> None:
    assert round_trip(markup, kind) == markup
    if "php" in markup:
        assert parse(markup, kind).segments[0].words == ["A", "dog."]


def test_an_xml_document_s_elements_around_lines_are_kept_around_them() -> None:
    """``--format xml --document`` on a document written a tag a line: the root and the containers hold
    lines of text (each a block); they were "not closed" errors."""
    doc = ('<?xml version="1.0"?>\n<doc lang="en">\n  <body>\n    <seg id="1">A <b>red</b> car.</seg>\n'
           '    <seg id="2">Two dogs.</seg>\n  </body>\n</doc>\n')
    assert round_trip(doc, "xml") == doc
    assert [s.words for s in parse(doc, "xml").segments] == [["A", "red", "car."], ["Two", "dogs."]]
    with pytest.raises(MarkupError, match="<doc> is not closed before the end of the input"):
        parse("<doc>\n<seg>A dog.</seg>\n", "xml")
    with pytest.raises(MarkupError, match="each line is one text"):  # an element whose words go past its line
        parse("<doc><seg>A dog\nruns.</seg></doc>", "xml")


def test_sentences_in_elements_side_by_side_are_words_and_sentences_apart() -> None:
    """``park.</seg><seg>Two``: the text ran "park.Two" together, one word, so a one-line document's
    sentences were one garbled sentence; a tag opening after a sentence's end now ends the word there
    (an abbreviation does not: ``Mr.<b>Smith</b>``)."""
    doc = parse("<doc><seg>A dog runs.</seg><seg>Two cats sleep.</seg></doc>", "xml")
    assert doc.segments[0].words == ["A", "dog", "runs.", "Two", "cats", "sleep."]
    assert doc.segments[0].sentences() == [(0, 3), (3, 6)]
    assert round_trip("<doc><seg>A dog runs.</seg><seg>Two cats.</seg></doc>", "xml") == \
        "<doc><seg>A dog runs.</seg> <seg>Two cats.</seg></doc>"
    assert parse("<p>Mr.<b>Smith</b> runs.</p>").segments[0].words == ["Mr.Smith", "runs."]


def test_reordered_words_carry_their_tags() -> None:
    doc = parse("<p>the <b>red</b> <i>car</i> is fast</p>")
    segment = doc.segments[0]
    assert segment.words == ["the", "red", "car", "is", "fast"]
    words = ["das", "Auto", "ist", "rot", "schnell"]  # aligned: das-the, Auto-car, ist-is, rot-red, schnell-fast
    text = " ".join(words)
    out = doc.render([place(segment, Target(text, token_spans(words, text), [0, 2, 3, 1, 4]))])
    assert out == "<p>das <i>Auto</i> ist <b>rot</b> schnell</p>"


def test_crossing_alignments_still_nest_and_keep_every_tag_once() -> None:
    """Random alignments of random tag sets: the output always parses as XML, each tag once, non-empty."""
    rng = random.Random(1)
    for trial in range(300):
        words = [f"w{i}" for i in range(rng.randint(1, 9))]
        markup, opened = "", []
        for k, word in enumerate(words):
            if rng.random() < 0.3:
                name = rng.choice("bis")
                markup += f"<{name} id=\"{k}\">"
                opened.append(name)
            markup += word + " "
            while opened and rng.random() < 0.4:
                markup = markup.rstrip() + f"</{opened.pop()}> "
        while opened:
            markup = markup.rstrip() + f"</{opened.pop()}>"
        doc = parse(markup, "xml")
        segment = doc.segments[0]
        target = [f"t{j}" for j in range(rng.randint(1, 9))]
        aligned = [rng.randrange(len(segment.words)) for _ in target]
        text = " ".join(target)
        out = doc.render([place(segment, Target(text, token_spans(target, text), aligned))])
        root = ET.fromstring(f"<r>{out}</r>")
        tags = [e for e in root.iter() if e.tag != "r"]
        assert sorted(e.get("id") for e in tags) == sorted(t.start.split('"')[1] for t in segment.tags), (trial, out)
        assert all("".join(e.itertext()).strip() for e in tags), (trial, markup, out)


def test_detokenised_text_and_moses_tokens_are_mapped_by_their_characters() -> None:
    assert token_spans(["Hund", "."], "Hund.") == [(0, 4), (4, 5)]
    assert token_spans(["&quot;", "Hi", "&quot;"], '"Hi"') == [(0, 1), (1, 3), (3, 4)]  # changed characters
    assert owners(["Hello,", "world!"], ["Hello", ",", "world", "!"]) == [0, 0, 1, 1]


def test_translated_attributes_fill_their_slots_and_others_stay() -> None:
    doc = parse('<p>A <img src="a b.png" alt="red car"> and <a title=\'big\' href="x">link</a>.</p>', "html",
                ("alt", "title"))
    assert [s.words for s in doc.segments] == [["A", "and", "link."], ["red", "car"], ["big"]]
    placed = [place(doc.segments[0], identity(doc.segments[0])), "rotes <Auto>", "groß"]
    assert doc.render(placed) == ('<p>A <img src="a b.png" alt="rotes &lt;Auto&gt;"> and '
                                  '<a title="groß" href="x">link</a>.</p>')
    # an element before a block's first word or after its last is kept verbatim around the words: its
    # slot was not renumbered, and the alt became the block's own translation with a NUL-bracketed "0"
    edges = parse('<p><img alt="red car"> A dog. <img title="big"></p>', "html", ("alt", "title"))
    placed = [place(edges.segments[0], identity(edges.segments[0])), "rotes Auto", "groß"]
    assert edges.render(placed) == '<p><img alt="rotes Auto"> A dog. <img title="groß"></p>'


def test_sentences_are_cut_where_one_ends_and_the_next_begins() -> None:
    segment = parse("<p>A dog runs. Then it sits! Dr. Who? no cut e.g. here. 3 cats.</p>").segments[0]
    assert [" ".join(segment.words[a:b]) for a, b in segment.sentences()] == [
        "A dog runs.", "Then it sits!", "Dr. Who? no cut e.g. here.", "3 cats."]
    kept = parse('<p>I like it. <span translate="no">nmtk</span> is great.</p>').segments[0]
    assert [" ".join(kept.words[a:b]) for a, b in kept.sentences()] == ["I like it.", "is great."]
    text = "A dog runs (see Fig. 3) here. (A cat sleeps. A bird sings.) Sad :( me. 2 cats."
    bracketed = parse(f"<p>{text}</p>").segments[0]
    assert [" ".join(bracketed.words[a:b]) for a, b in bracketed.sentences()] == [  # a number in brackets: no cut
        "A dog runs (see Fig. 3) here.", "(A cat sleeps.", "A bird sings.)", "Sad :( me.", "2 cats."]


@pytest.mark.parametrize("markup, where", [
    ("<p>An <b>open tag.</p>", "<b> is not closed"),
    ("<p>An </i>end tag.</p>", "</i> where no end tag"),
    ("<p>Crossed <b><i>tags</b></i>.</p>", "</b> where </i> was expected"),
    ("<code>never closed", "<code> is not closed"),
    ('<p>A <b class="x>red car.</p>', "line 1, column 6: '<b class=\"x>' is not a complete tag"),
])
def test_malformed_markup_is_one_error_naming_where(markup: str, where: str) -> None:
    with pytest.raises(MarkupError, match=where):
        parse(markup)


def test_xml_lines_are_segments_and_every_tag_is_inline() -> None:
    doc = parse('<g id="1">Hello</g> world\n<x id="2"/>Second <p>line</p>', "xml")
    assert [s.words for s in doc.segments] == [["Hello", "world"], ["Second", "line"]]
    assert round_trip('<g id="1">Hello</g> world\n<x id="2"/>Second <p>line</p>', "xml") == \
        '<g id="1">Hello</g> world\n<x id="2"/>Second <p>line</p>'


def test_punctuation_left_outside_a_tag_stays_outside_in_the_target() -> None:
    """``<a>two dogs</a>.``: the target's "." is its own word (Moses), aligned to "dogs." with "Hunde":
    it stays outside the tag, as in the source."""
    doc = parse('<p><a href="/x">two dogs</a>.</p>')
    words = ["zwei", "Hunde", "."]
    text = "zwei Hunde."
    out = doc.render([place(doc.segments[0], Target(text, token_spans(words, text), [0, 1, 1]))])
    assert out == '<p><a href="/x">zwei Hunde</a>.</p>'


def test_kept_spans_leave_the_words_and_come_back_where_they_stood() -> None:
    """``keep`` (what the model cannot read, links: `nmtk.decode.unknown`) takes spans out of a block's
    words, each a point written as it was (escaped), inside the tag around it; a copy gives the markup
    back, and a point that had a space before it keeps one (``eats <img>.``, ``eats 🐶.``)."""
    def keep(text: str) -> list[tuple[int, int]]:
        return [m.span() for m in re.finditer(r"🐶|https://\S+(?<!\.)", text)]

    markup = '<p>A dog 🐶 eats at <b>https://x.example/a?b=1&amp;c=2</b>.</p><p>🐶 A dog🐶 runs 🐶.</p>'
    doc = parse(markup, keep=keep)
    first, second = doc.segments
    assert first.words == ["A", "dog", "eats", "at", "."] and second.words == ["A", "dog", "runs", "."]
    url = next(t for t in first.tags if "https" in t.start)  # the element it fills is the point
    assert (url.start, url.end, url.point) == ("<b>https://x.example/a?b=1&amp;c=2", "</b>", True)
    assert doc.render([place(s, identity(s)) for s in doc.segments]) == markup
    assert parse(markup).segments[0].words[2] == "🐶"  # without keep, the model reads it
    moved = parse("<p>A man eats <img src='s.png'>.</p>").segments[0]  # a target with no space before "."
    assert place(moved, Target("Ein Mann isst.", [(0, 3), (4, 8), (9, 13), (13, 14)], [0, 1, 2, 3])) == (
        "Ein Mann isst <img src='s.png'>.")


def test_an_element_a_kept_span_fills_is_kept_with_the_elements_around_and_inside_it() -> None:
    """A link in bold, or a footnote's link with its brackets in spans: the outermost element the span
    fills is the point, holding the markup inside it (the bold became an empty ``<b></b>`` beside the
    link, and the spans ``<span></span>`` after the word)."""
    def keep(text: str) -> list[tuple[int, int]]:
        return [m.span() for m in re.finditer(r"https://\S+(?<!\.)", text)]

    markup = '<p>A dog <b><a href="https://x.org">https://<i>x</i>.org</a></b> runs.</p>'
    doc = parse(markup, keep=keep)
    assert doc.segments[0].words == ["A", "dog", "runs."] and len(doc.segments[0].tags) == 1
    segment = doc.segments[0]
    assert place(segment, Target("Ein Hund rennt.", [(0, 3), (4, 8), (9, 15)], [0, 1, 2])) == (
        'Ein Hund <b><a href="https://x.org">https://<i>x</i>.org</a></b> rennt.')
    # a kept character written as an entity comes back as that entity (it came back as the character)
    written = "<p>A dog &copy; runs<sup>&dagger;</sup>.</p>"
    entity = parse(written, keep=lambda text: [m.span() for m in re.finditer("©", text)])
    assert entity.segments[0].words == ["A", "dog", "runs."]
    target = Target("Ein Hund rennt.", [(0, 3), (4, 8), (9, 14), (14, 15)], [0, 1, 2, 2])
    # and the footnote before the stop, as it stood before its word's
    assert entity.render([place(entity.segments[0], target)]) == "<p>Ein Hund &copy; rennt<sup>&dagger;</sup>.</p>"


@pytest.mark.parametrize("markup, words, placed", [
    ("<p>A dog<sup>1</sup> runs.</p>", ["A", "dog", "runs."], "Ein Hund<sup>1</sup> rennt."),
    ("<p>A dog<sup>[1]</sup> runs.</p>", ["A", "dog", "runs."], "Ein Hund<sup>[1]</sup> rennt."),
    ('<p>A dog<sup class="r"><a href="#n1"><span>[</span>1<span>]</span></a></sup> runs.</p>', ["A", "dog", "runs."],
     'Ein Hund<sup class="r"><a href="#n1"><span>[</span>1<span>]</span></a></sup> rennt.'),
    ("<p>A dog runs.<sup>12</sup></p>", ["A", "dog", "runs."], None),
    # read as words: letters (an ordinal), inside a word (H2O), a space before it
    ("<p>A dog<sup>st</sup> runs.</p>", ["A", "dogst", "runs."], None),
    ("<p>A H<sub>2</sub>O dog.</p>", ["A", "H2O", "dog."], None),
    ("<p>A dog <sup>1</sup> runs.</p>", ["A", "dog", "1", "runs."], None),
])
def test_a_footnote_marker_glued_to_a_word_is_kept_after_it(markup: str, words: list[str], placed: str | None) -> None:
    """An element holding no letter, written right after a word (a footnote's 1 or [1], the 2 of m²):
    the model read "dog1" ("<sup>Ein Hund rennt.</sup>"); now it reads "dog", and the marker follows the
    word aligned to it."""
    segment = parse(markup).segments[0]
    assert segment.words == words
    if placed is not None:
        assert place(segment, Target("Ein Hund rennt.", [(0, 3), (4, 8), (9, 15)], [0, 1, 2])) == placed
    if "dogst" not in words and "H2O" not in words:  # a tag inside a word comes back around the word
        assert round_trip(markup) == markup


def test_a_kept_span_before_a_tag_stays_before_it_and_separators_part_a_menu_s_items() -> None:
    """A span taken out before an element opening at the next word stays outside it (``A 🐶<b>dog</b>``
    came back ``<b>🐶Hund</b>``); a separator (``|``, ``·``) is a sentence of its own, so that a menu's
    items are translated apart (read as one sentence, the bar went into the next link)."""
    def keep(text: str) -> list[tuple[int, int]]:
        return [m.span() for m in re.finditer(r"🐶|\|", text)]

    glued = parse("<p>A 🐶<b>dog</b> runs.</p>", keep=keep).segments[0]
    assert place(glued, identity(glued)) == "A 🐶<b>dog</b> runs."
    menu = parse('<p><a href="/">Home</a> | <a href="/b">About us</a> · <a href="/c">Help</a></p>', keep=keep)
    segment = menu.segments[0]
    assert [segment.words[a:b] for a, b in segment.sentences()] == [["Home"], ["About", "us"], ["·"], ["Help"]]
    assert menu.render([place(segment, identity(segment))]) == (
        '<p><a href="/">Home</a> | <a href="/b">About us</a> · <a href="/c">Help</a></p>')


def test_a_tag_whose_words_were_lost_stays_in_its_own_sentence() -> None:
    """A link on a sentence's last word, which the translation lost, goes around the nearest word of its
    own sentence, not the next sentence's first word (a Wikipedia paragraph's "of the <a>wolf</a>."
    came back with the link around the next sentence's "Ein")."""
    segment = parse('<p>A dog runs to the <a href="/w">wolf</a>. A cat sleeps.</p>').segments[0]
    assert segment.sentences() == [(0, 6), (6, 9)]
    words = ["Ein", "Hund", "rennt.", "Eine", "Katze", "schläft."]
    text = " ".join(words)
    target = Target(text, token_spans(words, text), [0, 1, 2, 6, 7, 8])  # nothing aligned to "wolf."
    assert place(segment, target) == 'Ein Hund <a href="/w">rennt</a>. Eine Katze schläft.'


@pytest.mark.parametrize("markup", [
    '<p>A dog. <i class="icon"><img src="x"></i> </p>',  # at a block's edge: the parser failed (KeyError)
    '<p><span><i><img src="a"></i><b></b></span> A dog.</p>',
    '<p>A <em><img src="b"></em> dog.</p>',  # inside a sentence: the image came out of its element
    '<p><a href="/"><i class="icon"><img src="h"></i> Home</a></p>',  # a menu's icon: "<p> <a …" (one space more)
    '<p>  <a href="/"><img src="h"> Home</a> </p>',
])
def test_an_empty_element_holding_an_image_is_kept_whole(markup: str) -> None:
    assert round_trip(markup) == markup


def test_a_point_after_a_closing_tag_stays_outside_it() -> None:
    """``<i>cat</i><img>`` (no space): the point follows the word and stays where it was, outside ``<i>``;
    written inside, inside."""
    for markup in ('<p>A <i>cat</i><img src="x"> runs.</p>', '<p>A <i>cat<img src="x"></i> runs.</p>',
                   '<p><b>A <i>dog</i><img src="x"> runs</b>.</p>'):
        assert round_trip(markup) == markup


def test_points_placed_together_before_a_glued_word_keep_one_space_each() -> None:
    """``eats 寿司 at www.x.example.`` where the model wrote "isst." (no word for "at"): both spans go
    before the full stop, each with the space it had before it, never two spaces."""
    def keep(text: str) -> list[tuple[int, int]]:
        return [m.span() for m in re.finditer(r"寿司|www\.x\.example", text)]

    segment = parse("A man eats 寿司 at www.x.example.", keep=keep).segments[0]
    assert segment.words == ["A", "man", "eats", "at", "."]
    target = Target("Ein Mann isst.", [(0, 3), (4, 8), (9, 13), (13, 14)], [0, 1, 2, 4])
    assert place(segment, target) == "Ein Mann isst 寿司 www.x.example."


def test_a_point_from_inside_the_sentence_stays_before_its_final_full_stop() -> None:
    """Where no target word is aligned after it (the model dropped its phrase), a point that stood
    before words of the source goes before the translation's closing punctuation, not after it; one
    that stood at the end stays at the end."""
    segment = parse('A man gives <img src="x"> thumbs up.').segments[0]
    target = Target("Ein Mann lacht.", [(0, 3), (4, 8), (9, 14), (14, 15)], [0, 1, 2, 2])
    assert place(segment, target) == 'Ein Mann lacht <img src="x">.'
    end = parse('A man laughs. <img src="x">').segments[0]
    assert place(end, Target("Ein Mann lacht.", [(0, 3), (4, 8), (9, 14), (14, 15)], [0, 1, 2, 2])) == (
        'Ein Mann lacht. <img src="x">')


def test_a_blocks_sentences_are_matched_to_their_words_one_by_one() -> None:
    """`_joined` finds each sentence's words in its own text (a block of 300 sentences whose quotes the
    detokeniser changed took 11 s as one `difflib` match): the same spans as over the whole block."""
    from nmtk.decode.markup import _joined

    sentences = [(0, "Ein „Hund“ rennt.", ["Ein", '"', "Hund", '"', "rennt", "."], [0, 1, 2, 3, 4, 5]),
                 (6, "", [], []), (6, "Eine Katze.", ["Eine", "Katze", "."], [0, 1, 2])]
    target = _joined(sentences)
    words = [w for _, _, sentence, _ in sentences for w in sentence]
    assert target.text == "Ein „Hund“ rennt. Eine Katze." and target.aligned == [0, 1, 2, 3, 4, 5, 6, 7, 8]
    assert [target.text[lo:hi] for lo, hi in target.spans] == ["Ein", "„", "Hund", "“", "rennt", ".", "Eine", "Katze",
                                                                "."]
    assert target.spans == token_spans(words, target.text)


@pytest.mark.parametrize("markup", [
    '<p>A dog <sup>🐶 🐱</sup> runs.</p>',  # came back '<sup></sup> 🐶 🐱'
    '<p>A dog runs <b><i>jo@x.example</i> 🐶</b></p>',  # '<b></b> <i>jo@x.example</i> 🐶'
    '<p>A <a href="/u"><img src="face.png"> 🐶</a> runs.</p>',  # '<a></a> <img> 🐶'
    '<p>A dog <span><img src="a.png"> <img src="b.png"></span> runs.</p>',  # '<span></span> <img> <img>'
    '<p>A <b>🐶</b> <i>🐱</i> dog.</p>',  # apart, each in its own element, as they were
])
def test_an_element_holding_only_kept_spans_and_images_is_kept_whole(markup: str) -> None:
    """Spans the model does not read (`nmtk.decode.unknown`: here emoji and links) and images, with white
    space alone between them, in an element with no word: the element is one point, whole; a copy gives
    the markup back."""
    def keep(text: str) -> list[tuple[int, int]]:
        return [m.span() for m in re.finditer(r"[🐶🐱]|\S+@\S+", text)]

    doc = parse(markup, keep=keep)
    assert doc.render([place(s, identity(s)) for s in doc.segments]) == markup


def test_a_sentence_of_a_document_ends_as_its_source_does() -> None:
    """A heading, list item, ``alt`` text or subtitle fragment: models trained on sentences end every
    output with a stop ("Dogs in the park" → "Hunde im Park.", "Where is the dog?" → "Wo ist der Hund.");
    documents' translations end with no stop, or the source's marks (a colon too: "Ingredients:"), where
    the model wrote a stop of its own; what else it wrote at the end stays (an ellipsis, a question mark)."""
    from nmtk.decode.markup import _own_end

    words, aligned = ["Hunde", "im", "Park", "."], [0, 2, 3, 3]
    assert _own_end("Dogs in the park", "Hunde im Park.", words, aligned) == (
        "Hunde im Park", ["Hunde", "im", "Park"], [0, 2, 3])
    assert _own_end("Dogs in the park", "Hunde im Park.", ["▁Hunde", "▁im", "▁Park."], [0, 2, 3]) == (
        "Hunde im Park", ["▁Hunde", "▁im", "▁Park"], [0, 2, 3])  # the stop inside a word (no Moses)
    assert _own_end("Dogs in the park?!", "Hunde im Park.", words, aligned) == (
        "Hunde im Park?!", ["Hunde", "im", "Park", "?!"], aligned)
    said = _own_end('He said "Go!"', "Er sagte: Geh.", ["Er", "sagte", ":", "Geh."], [0, 1, 1, 2])
    assert said == ("Er sagte: Geh!", ["Er", "sagte", ":", "Geh!"], [0, 1, 1, 2])
    colon = _own_end("Dogs: ", "Hunde im Park.", words, aligned)
    assert colon == ("Hunde im Park:", ["Hunde", "im", "Park", ":"], aligned)
    for source in ("Dogs in the park.", 'He said "Go."', "Dogs (in the park.)"):
        assert _own_end(source, "Hunde im Park.", words, aligned) == ("Hunde im Park.", words, aligned)
    assert _own_end("Wait", "Warte...", ["Warte", "..."], [0, 0]) == ("Warte...", ["Warte", "..."], [0, 0])
    assert _own_end("Wait!", "Warte?", ["Warte", "?"], [0, 0]) == ("Warte?", ["Warte", "?"], [0, 0])
    assert _own_end("Wait", "", [], []) == ("", [], [])


def test_elements_in_the_source_language_say_the_target_language() -> None:
    from types import SimpleNamespace

    from nmtk.decode.markup import relabelled

    pipe = SimpleNamespace  # a translator's pipelines, as far as their languages go
    translator = SimpleNamespace(src_pipe=pipe(moses=pipe(lang="en")), tgt_pipe=pipe(moses=pipe(lang="de")))
    page = ('<html lang="en"><p lang=en-GB title="lang=en">A <q lang="fr">oui</q> <b xml:lang=\'EN\'>b</b> '
            "lang=en</p></html>")
    assert relabelled(page, translator) == ('<html lang="de"><p lang=de title="lang=en">A <q lang="fr">oui</q> '
                                            "<b xml:lang='de'>b</b> lang=en</p></html>")


def test_xliffs_protected_text_is_kept_as_it_is() -> None:
    """XLIFF 1.2's ``<mrk mtype="protected">`` (as 2.x's ``translate="no"``) marks text not to translate:
    the model read "Ctrl+S" as words; html has no such attribute."""
    segment = parse('Press <mrk mtype="protected">Ctrl+S</mrk> to save.', "xml").segments[0]
    assert segment.words == ["Press", "to", "save."]
    assert parse('Press <mrk mtype="protected">Ctrl+S</mrk> to save.', "html").segments[0].words == [
        "Press", "Ctrl+S", "to", "save."]


def test_a_final_stop_aligned_to_a_word_does_not_carry_its_tags_to_the_end() -> None:
    """Models often align a sentence's final "." to its verb: a footnote after the verb went after the
    ".", a tag around the verb around the rest of the sentence. A "." aligned to a word of letters is
    nobody's; one aligned to ``runs.`` is that word's (an image after it stays after it)."""
    text = "Ein Hund rennt im Park ."
    words = text.split()
    spans = token_spans(words, text)

    def placed(markup: str, aligned: list[int]) -> str:
        segment = parse(markup, "html").segments[0]
        return place(segment, Target(text, spans, aligned))

    verb_and_stop = [0, 1, 2, 3, 5, 2]  # "." aligned to "runs", as the demo model aligns it
    assert placed("A dog runs<sup>1</sup> in the park.", verb_and_stop) == "Ein Hund rennt<sup>1</sup> im Park ."
    assert placed("A dog <b>runs</b> in the park.", verb_and_stop) == "Ein Hund <b>rennt</b> im Park ."
    after_stop = placed('A dog runs.<img src="a.png"> in the park', verb_and_stop)
    assert after_stop == 'Ein Hund rennt im Park .<img src="a.png">'
    assert placed("A dog runs <b>in the park.</b>", [0, 1, 2, 3, 5, 5]) == "Ein Hund rennt <b>im Park .</b>"


@pytest.mark.parametrize(("markup", "segments"), [
    ("<p>A man<br>sits on a bench.</p>", ["A man sits on a bench."]),
    ("<p>A man,<br/> two dogs and<BR>a cat run.</p>", ["A man, two dogs and a cat run."]),
    ("<p>A man sits.<br>two dogs run.</p>", ["A man sits.", "two dogs run."]),  # after a sentence's end
    ("<p>Name<br>Street 5<br>Berlin</p>", ["Name", "Street 5", "Berlin"]),  # an address's lines
    ("<p>A man<br></p>", ["A man"]),
    ("<p>A man <b>sits</b><br>on a <i>bench</i>.</p>", ["A man sits on a bench."]),  # inline elements beside it
    ("<p>A <b>man<br><i>sits</i></b> on a bench.</p>", ["A man sits on a bench."]),
    ("<p>A man<br><br>sits on a bench.</p>", ["A man", "sits on a bench."]),  # two breaks: a paragraph's
    ("<p>A man</p><br><p>sits on a bench.</p>", ["A man", "sits on a bench."]),  # between blocks
])
def test_a_line_break_inside_a_sentence_keeps_the_sentence_whole(markup: str, segments: list[str]) -> None:
    """``A man<br>sits on a bench.``: each half was translated alone ("Ein Mann<br>Ein sitzt auf einer
    Bank."); a ``<br>`` between a word and a word in small letters is a point inside the sentence."""
    doc = parse(markup, "html")
    assert [" ".join(s.words) for s in doc.segments] == segments
    assert round_trip(markup) == markup


def test_a_point_glued_to_an_opening_bracket_is_spaced_where_the_translation_lost_the_bracket() -> None:
    """``dog (3 years old)`` with the 3 carried (a number the translation lost): it was glued to the word
    it went after ("Hund3") when the model dropped the "("; beside a "(" it stays glued to it."""
    markup = "A dog (3 years old) runs."
    segment = parse(markup, "html", keep=lambda text: [(text.index("3"), text.index("3") + 1)]).segments[0]

    def placed(text: str, aligned: list[int]) -> str:
        return place(segment, Target(text, token_spans(text.split(), text), aligned))

    assert placed("Ein Hund alter Mann, rennt.", [0, 1, 3, 4, 5]) == "Ein Hund 3 alter Mann, rennt."
    assert placed("Ein Hund ( alter ) rennt .", [0, 1, 2, 4, 4, 5, 5]) == "Ein Hund (3 alter ) rennt ."


@pytest.mark.parametrize("markup", ["Water is H<sub>2</sub>O.", "A <b>big MP<i>3</i></b> file.",
                                    "Take H<sub>2</sub>SO<sub>4</sub> now."])
def test_a_kept_span_keeps_the_elements_inside_it(markup: str) -> None:
    """A code kept as it is (``H2O``, which the model cannot be trusted with) held a subscript: the code
    came back without it and the subscript emptied beside it ("H2O <sub></sub>")."""
    def codes(text: str) -> list[tuple[int, int]]:
        return [m.span() for m in re.finditer(r"\b(?:H2O|MP3|H2SO4)", text)]

    segment = parse(markup, "html", keep=codes).segments[0]
    code = next(t for t in segment.tags if t.point)
    assert re.sub("<[^>]+>", "", code.start) in ("H2O", "MP3", "H2SO4") and code.start in markup
    assert [t.start for t in segment.tags if not t.point] == (["<b>"] if "<b>" in markup else [])
    assert round_trip(markup, keep=codes) == markup


def test_a_line_of_text_ends_with_its_own_question_or_exclamation_marks() -> None:
    """"A dog runs!" came back "Ein Hund rennt." (a model trained on captions ends every output with a
    stop); a line's own stop, and a stop where the line has none, stay as the model wrote them."""
    from nmtk.decode.markup import own_marks

    assert own_marks("A dog runs!", "Ein Hund rennt.") == "Ein Hund rennt!"
    assert own_marks("Where is the dog?!", "Wo ist der Hund.") == "Wo ist der Hund?!"
    assert own_marks('Is it "red"?', "Ist es rot.") == "Ist es rot?"  # before a closing quote
    assert own_marks("A dog runs.", "Ein Hund rennt.") == "Ein Hund rennt."
    assert own_marks("a dog runs", "Ein Hund rennt.") == "Ein Hund rennt."  # the references keep it (Multi30k)
    assert own_marks("Wait...", "Warte...") == "Warte..." and own_marks("Why?", "Warum?") == "Warum?"
    assert own_marks("A dog runs in the park...", "Ein Hund rennt im Park.") == "Ein Hund rennt im Park..."
    assert own_marks("And then…", "Und dann.") == "Und dann…"
    assert own_marks("Two dogs:", "Zwei Hunde.") == "Zwei Hunde:" and own_marks("At 12:30.", "Um 12:30.") == "Um 12:30."


def test_sentences_the_source_wrote_with_no_space_between_are_joined_with_none() -> None:
    """``<b>A dog runs.</b><i>A cat sleeps.</i>``, and minified xml's ``</para><para>``: the translation's
    sentences were joined by a space, which the source never had between those tags."""
    from nmtk.decode.markup import _joined

    segment = parse("<p><b>A dog runs.</b><i>A cat sleeps.</i> A bird.</p>", "html").segments[0]
    assert segment.words[2:4] == ["runs.", "A"] and segment.glued == frozenset({2})
    sentences = [(0, "Ein Hund rennt.", ["Ein", "Hund", "rennt."], [0, 1, 2]),
                 (3, "Eine Katze schläft.", ["Eine", "Katze", "schläft."], [0, 1, 2]),
                 (6, "Ein Vogel.", ["Ein", "Vogel."], [0, 1])]
    joined = _joined(sentences, segment.glued)
    assert joined.text == "Ein Hund rennt.Eine Katze schläft. Ein Vogel."
    assert joined.text[slice(*joined.spans[3])] == "Eine" and joined.text[slice(*joined.spans[6])] == "Ein"
    assert place(segment, joined) == "<b>Ein Hund rennt.</b><i>Eine Katze schläft.</i> Ein Vogel."
    assert _joined(sentences).text == "Ein Hund rennt. Eine Katze schläft. Ein Vogel."
