"""`nmtk.text.line_breaks`: which line breaks of a served text are kept, and how they are written back."""

from __future__ import annotations

import pytest

from nmtk.text.line_breaks import cut_at_breaks, join_at_breaks


@pytest.mark.parametrize(
    ("text", "pieces", "around"),
    [
        ("Two dogs play.\nA girl sings.", ["Two dogs play.", "A girl sings."], ["", "\n"]),
        ('He said "Go."\r\nShe went!', ['He said "Go."', "She went!"], ["", "\r\n"]),  # closers, CRLF
        ("A girl\nsings.", ["A girl sings."], [""]),  # a wrapped sentence: a space
        ("A dog.\rA cat.\u2028A girl\u2028sings\u2029Title", ["A dog.", "A cat.", "A girl sings", "Title"],
         ["", "\r", "\u2028", "\u2029"]),  # other line breaks; Unicode's paragraph separator
        ("Title\n \n  A dog runs.", ["Title", "A dog runs."], ["", "\n\n  "]),  # a paragraph, indented
        ("Animals:\n- a dog\n* a cat", ["Animals:", "a dog", "a cat"], ["", "\n- ", "\n* "]),  # list items
        ("1. eggs\n2) milk", ["eggs", "milk"], ["1. ", "\n2) "]),
        ("(1)  eggs\na) milk\n1.5 kg", ["eggs", "milk 1.5 kg"], ["(1)  ", "\na) "]),  # a decimal is no item
        ("- A cat sleeps\nThe sun shines.", ["A cat sleeps", "The sun shines."], ["- ", "\n"]),  # after an item
        ("- a dog that\n  runs\nfast", ["a dog that runs fast"], ["- "]),  # an item wrapped: spaces
        ("- a trip to\n  Paris", ["a trip to Paris"], ["- "]),  # indented under its item: its words
        ("Dogs\n\n  A dog\nRuns", ["Dogs", "A dog Runs"], ["", "\n\n  "]),  # indented, no item: wrapped
        ("\n\n A dog runs. \n", ["A dog runs."], [""]),  # outer breaks: not written back
        ("", [""], [""]),
    ],
)
def test_breaks_are_kept_where_they_end_a_sentence_paragraph_or_item(text: str, pieces: list[str],
                                                                     around: list[str]) -> None:
    assert cut_at_breaks(text) == (pieces, around)


def test_translations_are_joined_with_what_stood_around_their_pieces() -> None:
    pieces, around = cut_at_breaks("Animals:\r\n- a dog\n\n  A cat sleeps.")
    assert join_at_breaks(["Tiere:", "ein Hund", "Eine Katze schläft."], around) == \
        "Tiere:\r\n- ein Hund\n\n  Eine Katze schläft."
