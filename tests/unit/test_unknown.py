"""Characters the source vocabulary cannot spell, taken out of a line and put back (`nmtk.decode.unknown`)."""

from __future__ import annotations

from nmtk.decode.unknown import KEEP, carried, link_spans


def ascii_only(char: str) -> bool:
    return char.isascii()


def test_unknown_runs_become_void_elements_and_the_rest_is_escaped_text() -> None:
    line = "A dog🐶 runs & <jumps> 寿司 寿司."
    kept = carried(line, ascii_only)
    assert kept.fragment == (f'A dog<img {KEEP}="0"> runs &amp; &lt;jumps&gt; <img {KEEP}="1"> '
                             f'<img {KEEP}="2">.')
    assert kept.spans == (("🐶", False, True), ("寿司", True, True), ("寿司", True, False))
    assert carried("A dog runs.", ascii_only) is None and carried("   ", ascii_only) is None


def test_spans_come_back_where_placed_spaced_as_in_the_source() -> None:
    kept = carried("A man eats 寿司. 🐶🐱 A dog🐶 runs.", ascii_only)
    placed = (f'Ein Mann isst<img {KEEP}="0">. <img {KEEP}="1">Ein Hund<img {KEEP}="2"> '
              "rennt &amp; springt &lt;hoch&gt;.")
    assert kept.restore(placed) == "Ein Mann isst 寿司. 🐶🐱 Ein Hund🐶 rennt & springt <hoch>."
    first = carried("🐶 A dog.", ascii_only)
    assert first.restore(f'<img {KEEP}="0">Ein Hund.') == "🐶 Ein Hund."


def test_brackets_and_quotes_around_a_span_go_with_it() -> None:
    """``(寿司)``: the model, given ``()`` around nothing, drops them; carried whole they stay."""
    kept = carried("A man eats (寿司) and «寿司», not (sushi).", ascii_only)
    assert kept.spans == (("(寿司)", True, True), ("«寿司»", True, False))
    assert kept.fragment == f'A man eats <img {KEEP}="0"> and <img {KEEP}="1">, not (sushi).'


def test_links_are_carried_whole_and_the_sentence_keeps_its_punctuation() -> None:
    """URLs and e-mail addresses are spans too, though every character is spelt; the full stop, comma or
    bracket after one belongs to the sentence, a bracket the link opened to the link."""
    line = ("See https://de.wikipedia.org/wiki/Bonn_(Stadt), www.example.com/a?b=1&c=2. "
            "(Write to Jo.Doe+x@mail.example.org!) Or ftp://files.example.net/x.")
    assert [line[lo:hi] for lo, hi in link_spans(line)] == [
        "https://de.wikipedia.org/wiki/Bonn_(Stadt)", "www.example.com/a?b=1&c=2", "Jo.Doe+x@mail.example.org",
        "ftp://files.example.net/x"]
    kept = carried(line, ascii_only)
    assert kept.fragment == (f'See <img {KEEP}="0">, <img {KEEP}="1">. (Write to <img {KEEP}="2">!) '
                             f'Or <img {KEEP}="3">.')
    assert kept.spans[1] == ("www.example.com/a?b=1&c=2", True, False)  # & left as typed, not escaped
    for plain in ("A dog runs, e.g. at 3.5 km/h.", "a@b is no address", "Mr.Smith ran. 12:30", "http:// alone"):
        assert link_spans(plain) == [], plain
    assert carried(line, ascii_only, links=False) is None  # --as-typed: the model reads them


def test_a_link_beside_an_unknown_character_is_one_span_and_side_by_side_spans_stay_apart() -> None:
    kept = carried("Look 🐶https://example.com/dog now", ascii_only)
    assert kept.spans == (("🐶https://example.com/dog", True, True),)
    two = carried("Bought for 寿司 🐶 today", ascii_only)
    assert two.restore(f'Kaufte für<img {KEEP}="0"><img {KEEP}="1"> heute') == "Kaufte für 寿司 🐶 heute"
