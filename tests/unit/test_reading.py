"""How a translator reads a line: capitals and title case folded to sentence case and the case given
back (`nmtk.text.casing`), typos corrected against the training words (`nmtk.text.typos`). The engines'
round trips are in tests/integration/test_copy_run.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from nmtk.decode.guide import Glossary
from nmtk.errors import NmtkError
from nmtk.text.casing import case_of, folded, recased
from nmtk.text.reading import Reading
from nmtk.text.typos import TypoCorrector, count_words, write_words


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


def test_a_sentence_in_capitals_is_folded_in_a_line_that_is_not() -> None:
    """Only its sentences in capitals; one word of capitals (OK., NASA.) is not shouting; the line's
    translation comes back as it is (no case to give back: the line is not in capitals as a whole)."""
    line = "THE KIDS ARE PLAYING. They laugh at NASA.  TWO DOGS RUN! OK. I THINK SO?"
    assert case_of(line) is None
    read = "The kids are playing. They laugh at NASA.  Two dogs run! OK. I think so?"
    assert Reading(lang="en").read(line) == read
    assert Reading(lang="de").read("A dog. I THINK SO.") == "A dog. I think so."
    assert Reading(fold_case=False).read(line) == line
    for typed in ("The EU and NATO met. A dog ran.", "A man in New York. He SHOUTS.", "NASA. A dog ran."):
        assert Reading(lang="en").read(typed) == typed
    assert Reading().marked([line], [["x"]]) == [["x"]]


@pytest.mark.parametrize(("typed", "read"), [
    ("A MAN IN A RED SHIRT is climbing.", "A man in a red shirt is climbing."),
    ("I saw A RED CAR today.", "I saw a red car today."),  # inside a sentence: no capital
    ("Yes, I LOVE IT.", "Yes, I love it."),  # English's "I" where it was
    ("a man WITH A HAT", "a man with a hat"),
    ("THE MAN IS HAPPY. the woman is sad.", "The man is happy. the woman is sad."),  # the rest as typed
    ("I saw a DOG.", "I saw a DOG."),  # one word: maybe an acronym
    ("The EU and NATO met.", "The EU and NATO met."),  # not side by side
    ("An IBM PC on a desk.", "An ibm pc on a desk."),  # two acronyms side by side read as shouting
    ("A MAN, A DOG and a cat.", "A man, a dog and a cat."),  # punctuation inside the run
])
def test_a_run_of_words_in_capitals_inside_a_sentence_is_folded(typed: str, read: str) -> None:
    """The demo model wrote "Ein MAAAAAAEEEEEEEEEEES." for the first line as typed (`benchmarks/robustness.py`'s
    shouted variant: 15.68 BLEU as typed, 34.61 read so, 35.69 clean)."""
    assert Reading(lang="en").read(typed) == read
    assert Reading(fold_case=False).read(typed) == typed


def test_a_lone_word_in_capitals_is_folded_where_the_model_spells_it_better_in_lower_case() -> None:
    """One word in capitals may be an acronym: it is read in lower case only where the source subword
    model spells that in at most half the pieces (the demo model: "DOG" ▁D O G, "dog" ▁dog; "BMX" one
    piece). Test set with one word of 3+ letters in capitals a line: 24.69 BLEU read without, 35.75 with
    (35.69 clean; `benchmarks/robustness.py`'s shouted_word)."""
    spelt = {"DOG": 3, "dog": 1, "BMX": 1, "bmx": 3, "NASA": 4, "nasa": 3, "RED": 3, "red": 1, "GO": 2, "go": 1}
    read = Reading(lang="en", pieces=spelt.__getitem__).read
    assert read("I saw a DOG.") == "I saw a dog."
    assert read("DOG, a dog.") == "Dog, a dog."  # a sentence's first word keeps its capital
    assert read("A man on a BMX bike near NASA.") == "A man on a BMX bike near NASA."  # as typed
    assert read("A RED car. GO!") == "A red car. GO!"  # 2 pieces: not spelt letter by letter
    assert read("A MAN IN A RED SHIRT is climbing.") == "A man in a red shirt is climbing."  # runs as before
    assert Reading(lang="en").read("I saw a DOG.") == "I saw a DOG."  # no spelling known: as typed


def test_a_glossary_s_terms_in_capitals_are_read_as_typed() -> None:
    """WHO is an organisation, not "who": a translator given a case-matching glossary with it reads it as
    typed, in a lone word, a run and a line in capitals alike (its source term is found there)."""
    spelt = {"WHO": 3, "who": 1, "DOG": 3, "dog": 1}
    read = Reading(lang="en", pieces=spelt.__getitem__, keep=frozenset({"WHO"})).read
    assert read("The WHO warns about a DOG.") == "The WHO warns about a dog."
    assert read("THE WHO WARNS. A dog.") == "The WHO warns. A dog."
    assert read("THE WHO WARNS (WHO).") == "The WHO warns (WHO)."  # punctuation around it
    assert read("A Man Of The WHO Who Warns") == "A man of the WHO who warns"
    assert Reading(lang="en", keep=frozenset({"U.S.A."})).read("A FLAG OF THE U.S.A.") == "A flag of the U.S.A."
    assert Glossary((("WHO", "WHO"), ("red car", "rotes Auto"), ("UN staff", "UN-Personal"))).cased() == {
        "WHO", "UN"}
    assert Glossary((("WHO", "WHO"),), ignore_case=True).cased() == frozenset()


def test_the_translation_gets_the_case_back() -> None:
    assert recased("Ein Mann schläft auf der Straße.", "upper") == "EIN MANN SCHLÄFT AUF DER STRASSE."
    assert recased("a man  in a blue shirt", "title", "en") == "A Man  In A Blue Shirt"
    assert recased("a man", "title", "eng_Latn") == recased("a man", "title", "en_GB") == "A Man"
    assert recased("as it came", None) == "as it came"
    # German (French, Czech…) writes titles in sentence case, its nouns in capitals: not "Im Blauen Hemd"
    assert recased("Ein Mann im blauen Hemd", "title", "de") == "Ein Mann im blauen Hemd"
    assert recased("Ein Mann im blauen Hemd", "upper", "de") == "EIN MANN IM BLAUEN HEMD"


# ------------------------------------------------------------------------- typos (`nmtk.text.typos`)

def corrector(tmp_path: Path) -> TypoCorrector:
    """Training words as `prepare` writes them, read back."""
    lines = ["A dog runs on the grass .", "The dog sits .", "A dog and a cat .", "dogs do n't sit in the house ."]
    write_words(tmp_path / "words.en.tsv", count_words(lines))
    return TypoCorrector.read(tmp_path / "words.en.tsv")


def test_words_are_counted_lower_cased_most_frequent_first(tmp_path: Path) -> None:
    corrector(tmp_path)
    rows = (tmp_path / "words.en.tsv").read_text().splitlines()
    assert rows[:3] == ["a\t3", "dog\t3", "the\t3"]  # most frequent first, ties by word
    counts = dict(r.split("\t") for r in rows)
    assert counts["dogs"] == "1" and "n" not in counts and "." not in counts  # "n't": not a word of letters


def test_an_unknown_word_near_training_words_becomes_the_most_frequent_of_them(tmp_path: Path) -> None:
    fix = corrector(tmp_path).corrected
    assert fix("A dgo runs on teh grsas.") == "A dog runs on the grass."  # swaps, one letter each
    assert fix("Dgo and DGO and dgos") == "Dog and DOG and dogs"  # the typed word's case kept; "dogs" is known
    assert fix("A dog in Berlin, a cta.") == "A dog in Berlin, a cat."  # nothing near "Berlin": as it came
    assert fix("xa dg") == "xa dg"  # shorter than three letters: never corrected
    assert fix("dgo's dgo-like __source__ dgo2") == "dgo's dgo-like __source__ dgo2"  # parts of longer tokens
    assert fix("(dgo, „cta“ dgo!?") == "(dog, „cat“ dog!?"  # punctuation around a word is not part of it
    kept = "www.cta.com jon@dgo.com dgo.txt dgo/cta"  # addresses and file names: a "correction" breaks them
    assert fix(kept) == kept


def test_a_correct_english_word_the_training_data_lacked_is_not_corrected(tmp_path: Path) -> None:
    """English sources: symspellpy's English dictionary marks words as known ("sits" is no typo of
    "sit"); typos are still corrected; a language without a dictionary has only the training words."""
    from nmtk.text.typos import dictionary_words

    corrector(tmp_path)
    english = TypoCorrector.read(tmp_path / "words.en.tsv", "en")
    german = TypoCorrector.read(tmp_path / "words.en.tsv", "de")
    assert {"brought", "sits", "house"} <= dictionary_words("en") and not dictionary_words("de")
    assert english.corrected("The dgo sits in teh house .") == "The dog sits in the house ."
    assert english.corrected("The cats sat .") == "The cats sat ."
    assert german.corrected("The cats sat .") == "The cat sit ."  # no dictionary: the training words alone


def test_a_damaged_word_list_is_one_line_naming_its_line(tmp_path: Path) -> None:
    path = tmp_path / "words.en.tsv"
    path.write_text("dog\t3\ncat three\n")
    with pytest.raises(NmtkError, match=r"words.en.tsv:2: expected 'word<TAB>count'"):
        TypoCorrector.read(path)


def test_reading_folds_then_corrects_and_as_typed_does_neither(tmp_path: Path) -> None:
    typos = corrector(tmp_path)
    assert Reading(lang="en", typos=typos).read("A DGO RUNS ON THE GRSAS") == "A dog runs on the grass"
    assert Reading(fold_case=False).read("A DGO RUNS") == "A DGO RUNS"


def test_an_acronym_the_model_spells_letter_by_letter_is_carried() -> None:
    """``NASA`` among words in small letters, spelt letter by letter by a model that never saw it (the demo
    model wrote "NAAAS"), is carried as it is; not an acronym the model knows (``USA``: one piece), a word
    it reads better in small letters (``DOG``: "dog"), a run of shouting, a line in capitals, or a word
    with small letters."""
    from nmtk.text.casing import acronym_spans

    known = {"USA": 1, "dog": 1, "who": 1, "nasa": 3, "ikea": 3}

    def pieces(word: str) -> int:
        return known.get(word, len(word))  # letter by letter, as a model that never saw the word

    def found(line: str) -> list[str]:
        return [line[a:b] for a, b in acronym_spans(line, pieces)]

    assert found("A man from NASA shops at IKEA, in the USA.") == ["NASA", "IKEA"]
    assert found("Texas AM beat (PM) today.") == ["AM", "PM"]
    assert found("A DOG runs, the WHO warns.") == []  # read as "dog", "who"
    assert found("A MAN FROM NASA") == [] and found("HELLO NASA, a dog") == []  # shouting: sentence case
    assert found("An iPhone, a T-Shirt, NASA2 and A.") == []
