"""Lines in capitals or title case: which are folded to sentence case, how, and how the case comes back
(`nmtk.text.casing`; the engines' round trip is in tests/integration/test_copy_run.py)."""

from __future__ import annotations

import pytest

from nmtk.text.casing import case_of, folded, recased


@pytest.mark.parametrize(("line", "case"), [
    ("A MAN IS SLEEPING ON A BENCH.", "upper"),
    ("I LOVE YOU", "upper"),
    ("ÜBER ALLES, GRÜẞE!", "upper"),
    ("A Man In A Blue Shirt Stands Near 3 Dogs.", "title"),
    ("A man in New York.", None),  # names in a sentence: as typed
    ("NASA", None),  # a lone acronym is not shouting
    ("The EU and NATO met.", None),
    ("Two Dogs", None),  # too short to tell a title from a name
    ("", None),
    ("1234 56", None),
])
def test_only_unmistakable_forms_are_folded(line: str, case: str | None) -> None:
    assert case_of(line) == case


def test_folding_writes_sentence_case_and_english_i() -> None:
    assert folded("A MAN IS SLEEPING. TWO DOGS RUN!", "upper") == "A man is sleeping. Two dogs run!"
    assert folded("I THINK I'M LATE, AREN'T I?", "upper", "en") == "I think I'm late, aren't I?"
    assert folded("I THINK I'M LATE", "upper", "de") == "I think i'm late"  # "I" is English's alone
    assert folded("A Man In A Blue Shirt", "title") == "A man in a blue shirt"
    assert folded("As Typed", None) == "As Typed"


def test_the_translation_gets_the_case_back() -> None:
    assert recased("Ein Mann schläft auf der Straße.", "upper") == "EIN MANN SCHLÄFT AUF DER STRASSE."
    assert recased("ein Mann  im blauen Hemd", "title") == "Ein Mann  Im Blauen Hemd"
    assert recased("as it came", None) == "as it came"
