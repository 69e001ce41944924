"""`prepare`'s cleaning rules on raw text (`nmtk.data.cleaning`), and language identification."""

from __future__ import annotations

import numpy as np
import pytest

from nmtk.data.cleaning import Cleaner, first_occurrences, pair_hash
from nmtk.recipe import CleanSection
from nmtk.text import langid

GOOD = ("A man in a red shirt rides his bike down the street.", "Ein Mann in einem roten Hemd fährt mit dem Fahrrad.")


@pytest.mark.parametrize(("source", "target", "rule"), [
    (*GOOD, None),
    ("", "Ein Mann.", "empty"),
    ("A man.", "   ", "empty"),
    ("A man rides a bike.", "a  MAN rides a bike. ", "copy"),
    ("Two dogs play in 2019.", "Zwei Hunde spielen im Jahr 2018.", "numbers"),
    ("See www.example.com for the photos.", "Die Fotos gibt es hier.", "numbers"),
    ("2 girls wash a floor.", "Zwei Mädchen waschen einen Boden.", None),  # spelled out on one side
    ("Three dogs play in 3 parks.", "Drei Hunde spielen in 4 Parks.", "numbers"),
    ("A man rides a bike down the street.", "Мужчина едет на велосипеде по улице.", "script"),
    ("A man rides a bike down the street.", "Un homme fait du vélo dans la rue avec son chien.", "language"),
    ("Ein Mann fährt mit dem Fahrrad die Straße entlang.", GOOD[1], "language"),
])
def test_each_rule_drops_what_it_names(source: str, target: str, rule: str | None) -> None:
    assert Cleaner.of("en", "de", CleanSection()).verdict(source, target) == rule


@pytest.mark.parametrize(("source", "target"), [
    ("A man in the 1950s.", "Un homme des années 50."),
    ("A shirt for 2.00 Euros.", "Une chemise pour 2 euros."),
    ("1,000 people and 2.5 m.", "1.000 Menschen und 2,5 m."),
    ("Music of the '50s.", "Musik der 50er Jahre."),
    ("2 rows of seats, 50 % full.", "Deux rangées de sièges, pleines à 50 %."),  # 2 spelled out on one side
])
def test_numbers_are_compared_as_numbers(source: str, target: str) -> None:
    """Issue 77: 4 of the 5 pairs the rule dropped on Multi30k en-fr were these."""
    cleaner = Cleaner.of("en", "fr", CleanSection(language=False))
    assert cleaner.verdict(source, target) is None
    assert cleaner.verdict(source + " 8", target + " 9") == "numbers"  # each side has one the other lacks


def test_every_rule_but_empty_switches_off() -> None:
    off = Cleaner.of("en", "de", CleanSection(copies=False, numbers=False, scripts=1.0, language=False))
    assert off.verdict("A man rides a bike.", "a man rides a bike.") is None
    assert off.verdict("In 2019.", "Мужчина едет на велосипеде в 2018.") is None
    assert off.verdict("", "x") == "empty"


def test_a_language_nmtk_knows_nothing_of_is_not_judged() -> None:
    cleaner = Cleaner.of("xx", "de", CleanSection())
    assert cleaner.source.code is None and cleaner.source.other_scripts is None
    assert cleaner.verdict("Мужчина едет на велосипеде.", GOOD[1]) is None
    assert langid.code_for("pt_BR") == "pt" and langid.code_for("zh-Hant") == "zh" and langid.code_for("xx") is None


def test_short_or_unsure_sentences_are_left_alone() -> None:
    """Captions of a word or two are guessed with little confidence: never judged on that."""
    cleaner = Cleaner.of("en", "de", CleanSection())
    assert cleaner.verdict("Paris.", "Paris!") == "copy"  # the copy rule, not language identification
    assert cleaner.verdict("Berlin at night.", "Berlin bei Nacht.") is None


def test_duplicates_keep_the_first_and_hashes_are_stable() -> None:
    hashes = np.array([pair_hash("a", "b"), pair_hash("c", "d"), pair_hash("a", "b"), pair_hash("a b", ""),
                       pair_hash("a", " b"), pair_hash("c", "d")], dtype=np.int64)
    assert first_occurrences(hashes).tolist() == [True, True, False, True, True, False]
    assert pair_hash("ab", "c") != pair_hash("a", "bc")
    assert pair_hash("Ein Mann.", "A man.") == pair_hash("Ein Mann.", "A man.")  # the same in every process
    assert first_occurrences(np.zeros(0, dtype=np.int64)).tolist() == []


def test_a_stage_line_counts_only_its_own_drops() -> None:
    """`prepare`'s lines said ``dropped 5 (numbers 5)`` then ``dropped 10 (numbers 5, duplicate 5)``: the
    second stage counted the first's drops again."""
    from collections import Counter

    from nmtk.data.cleaning import CorpusCounts
    from nmtk.data.preparer import _dropped_text

    counts = CorpusCounts("train", dropped=Counter(numbers=5))
    earlier = [Counter(counts.dropped)]
    counts.dropped["duplicate"] += 5
    assert _dropped_text([counts], earlier) == "dropped 5 (duplicate 5)"
    assert _dropped_text([counts]) == "dropped 10 (numbers 5, duplicate 5)"


def test_language_names_are_langcodes_english_names_and_codes_where_none() -> None:
    """What GET /languages names each language (LibreTranslate gives names, not codes)."""
    names = {code: langid.language_name(code) for code in ("en", "de", "pt_BR", "eng_Latn", "xx", "not a tag")}
    assert names == {"en": "English", "de": "German", "pt_BR": "Portuguese (Brazil)", "eng_Latn": "English",
                     "xx": "xx", "not a tag": "not a tag"}
