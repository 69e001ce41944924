"""XLIFF files: each segment's source, and the file written back with translations in the targets."""

from __future__ import annotations

import pytest

from nmtk.errors import NmtkError
from nmtk.text.xliff import Xliff

V12 = """<?xml version="1.0" encoding="UTF-8"?>
<!-- made by a CAT tool -->
<xliff version="1.2" xmlns="urn:oasis:names:tc:xliff:document:1.2">
  <file source-language="en" target-language="de" datatype="plaintext" original="a.txt">
    <body>
      <trans-unit id="1">
        <source>A man rides a <g id="1">red</g> bike.</source>
        <alt-trans><source>A man.</source><target>Ein Mann.</target></alt-trans>
      </trans-unit>
      <trans-unit id="2"><source>Two dogs &amp; a cat.</source><target state="new"></target></trans-unit>
      <trans-unit id="3" translate="no"><source>NASA</source></trans-unit>
      <trans-unit id="4"><source>Hi.</source><target>Hallo.</target></trans-unit>
      <trans-unit id="5"><source>Yes.</source><target/></trans-unit>
    </body>
  </file>
</xliff>
"""

V20 = """<xliff xmlns:x="urn:oasis:names:tc:xliff:document:2.0" version="2.0" srcLang="en" trgLang="de">
<x:file id="f"><x:unit id="u"><x:segment><x:source>A <x:pc id="1">red</x:pc> car.</x:source></x:segment>
<x:ignorable><x:source> </x:source></x:ignorable><x:segment><x:source>Done.</x:source></x:segment></x:unit></x:file>
</xliff>"""


MT = 'state="needs-review-translation" state-qualifier="leveraged-mt"'  # what a target filled by nmtk says


def test_segments_sources_and_the_targets_they_fill() -> None:
    """Empty and missing targets are filled, saying they are machine translation awaiting review (a CAT
    tool showed them untranslated, or as new where the target said ``state="new"``); a target holding a
    translation is kept, ``translate="no"`` units and ``<alt-trans>`` proposals are left alone; every
    other byte is written as it was."""
    xliff = Xliff.parse(V12, "a.xlf")
    assert xliff.languages == ("en", "de") and Xliff.parse(V20, "b.xlf").languages == ("en", "de")
    assert [s.source for s in xliff.segments] == ['A man rides a <g id="1">red</g> bike.', "Two dogs &amp; a cat.",
                                                  "Hi.", "Yes."]
    assert xliff.todo() == [0, 1, 3]
    out = xliff.render({0: 'Ein Mann fährt ein <g id="1">rotes</g> Rad.', 1: "Zwei Hunde &amp; eine Katze.",
                        3: "Ja."})
    assert out == V12.replace(
        '<g id="1">red</g> bike.</source>\n',
        f'<g id="1">red</g> bike.</source>\n        <target {MT}>Ein Mann fährt ein <g id="1">rotes</g> Rad.</target>\n'
    ).replace('<target state="new"></target>', f'<target {MT}>Zwei Hunde &amp; eine Katze.</target>'
              ).replace("<target/>", f"<target {MT}>Ja.</target>")
    assert Xliff.parse(V12, "a.xlf").render({}) == V12
    crlf = V12.replace("\n", "\r\n")  # a new target's line ends as the file's lines do
    assert Xliff.parse(crlf, "a.xlf").render({0: "X"}) == crlf.replace(
        "bike.</source>\r\n", f"bike.</source>\r\n        <target {MT}>X</target>\r\n")
    # a target's other attributes are kept, a state in single quotes takes the new value
    odd = V12.replace("<target/>", "<target xml:lang='de' state='needs-translation' />")
    assert Xliff.parse(odd, "a.xlf").render({3: "Ja."}) == odd.replace(
        "<target xml:lang='de' state='needs-translation' />",
        """<target xml:lang='de' state='needs-review-translation' state-qualifier="leveraged-mt">Ja.</target>""")


def test_xliff_2_segments_and_a_prefixed_namespace() -> None:
    xliff = Xliff.parse(V20, "b.xlf")
    assert [s.source for s in xliff.segments] == ['A <x:pc id="1">red</x:pc> car.', "Done."]
    out = xliff.render({0: "Ein rotes Auto.", 1: "Fertig."})
    assert out == V20.replace("car.</x:source>", "car.</x:source><x:target>Ein rotes Auto.</x:target>").replace(
        "Done.</x:source>", "Done.</x:source><x:target>Fertig.</x:target>").replace(
        "<x:segment>", '<x:segment state="translated">')  # 2.x says a segment's state on the segment
    initial = V20.replace("<x:segment>", '<x:segment id="s" state="initial">', 1)
    assert Xliff.parse(initial, "b.xlf").render({0: "X"}).count('<x:segment id="s" state="translated">') == 1


@pytest.mark.parametrize(("text", "error"), [
    ("<xliff><file><trans-unit><source>a</b></source>", "b.xlf:1: column 37: not well-formed XML (mismatched tag)"),
    ('<?xml version="1.0"?>\n<html><p>A</p></html>', "b.xlf: not an XLIFF file (its root element is <html>"),
])
def test_what_is_not_an_xliff_file_is_one_line(text: str, error: str) -> None:
    with pytest.raises(NmtkError) as caught:
        Xliff.parse(text, "b.xlf")
    assert str(caught.value).startswith(error), caught.value


SEGMENTED = ("""<xliff version="1.2"><file source-language="en" target-language="de"><body>
<trans-unit id="1">
<source>A dog runs. <g id="1">Two</g> cats sit.</source>
<seg-source><mrk mtype="seg" mid="1">A dog runs.</mrk> """
             """<mrk mtype="seg" mid="2"><g id="1">Two</g> cats <mrk mtype="protected">sit</mrk>.</mrk></seg-source>
</trans-unit>
<trans-unit id="2"><source>Hi.</source><seg-source><mrk mtype="seg" mid="3">Hi.</mrk></seg-source>"""
             """<target><mrk mtype="seg" mid="3"/></target></trans-unit>
</body></file></xliff>""")


def test_a_segmented_unit_is_translated_sentence_by_sentence_into_its_targets_sentences() -> None:
    """Okapi and Trados cut a unit into sentences (``<seg-source>``'s ``<mrk mtype="seg">``) and read a
    target's by their ``mid``s: the target mirrors the seg-source, each sentence translated in its mrk.
    An empty sentence skeleton (``<mrk mid="3"/>``) is an empty target, not a translation to keep."""
    xliff = Xliff.parse(SEGMENTED, "s.xlf")
    assert xliff.todo() == [0, 1]
    assert xliff.pieces(0) == ["A dog runs.", '<g id="1">Two</g> cats <mrk mtype="protected">sit</mrk>.']
    assert xliff.pieces(1) == ["Hi."]
    out = xliff.render({0: xliff.body(0, ["Ein Hund rennt.", '<g id="1">Zwei</g> Katzen <mrk mtype="protected">sit'
                                                             "</mrk>."]), 1: xliff.body(1, ["Hallo."])})
    assert f'</seg-source>\n<target {MT}><mrk mtype="seg" mid="1">Ein Hund rennt.</mrk> <mrk mtype="seg" mid="2">' \
           '<g id="1">Zwei</g> Katzen <mrk mtype="protected">sit</mrk>.</mrk></target>\n</trans-unit>' in out, out
    assert f'<target {MT}><mrk mtype="seg" mid="3">Hallo.</mrk></target>' in out, out
