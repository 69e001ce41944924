"""`Speller`: every piece sequence that writes a phrase, so that a banned word cannot come back spelt
with other pieces or glued to the word before it (issue 62: "einerbank" with "Bank" banned)."""

from __future__ import annotations

from nmtk.text.spellings import MAX_SPELLINGS, Speller

PIECES = ["<pad>", "<unk>", "<s>", "</s>", "▁Bank", "▁B", "ank", "bank", "▁ein", "er", "▁einer", "▁bank", "▁BANK",
          "B", "a", "n", "k", "▁", "▁Ban", "<0xC3>", "▁rote", "▁Park", "park"]


def spelt(speller: Speller, phrase: str) -> list[list[str]]:
    return [[PIECES[i] for i in seq] for seq in speller.spellings(phrase)]


def test_a_word_is_banned_in_every_spelling_the_vocabulary_has() -> None:
    found = spelt(Speller(PIECES, first_id=4), "Bank")
    for spelling in (["▁Bank"], ["▁B", "ank"], ["▁Ban", "k"], ["▁B", "a", "n", "k"], ["▁", "B", "ank"],  # a word
                     ["bank"], ["B", "ank"], ["▁bank"], ["▁BANK"]):  # glued to the word before, other cases
        assert spelling in found, spelling
    assert found[0] == ["▁Bank"] and len(found[0]) <= min(len(s) for s in found)  # fewest pieces first
    assert not any("<0xC3>" in s or "<pad>" in s for s in found)


def test_several_words_keep_their_boundary_and_a_phrase_nothing_spells_has_no_spelling() -> None:
    speller = Speller(PIECES, first_id=4)
    assert ["▁rote", "▁Bank"] in spelt(speller, "rote  Bank")
    assert not any(s[:1] == ["▁rote"] and s[1:2] == ["bank"] for s in spelt(speller, "rote Bank"))  # not glued inside
    assert speller.spellings("Zug") == [] and speller.spellings("  ") == []


def test_wordpiece_continuations_are_the_glued_spellings() -> None:
    pieces = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "Bank", "##bank", "B", "##ank", "ein"]
    found = [[pieces[i] for i in s] for s in Speller(pieces, first_id=4).spellings("Bank")]
    assert ["Bank"] in found and ["##bank"] in found and ["B", "##ank"] in found


def test_the_spellings_of_a_long_phrase_are_capped_fewest_pieces_first() -> None:
    letters = [chr(c) for c in range(ord("a"), ord("z") + 1)]
    pairs = [a + b for a, b in zip(letters, letters[1:], strict=False)]
    pieces = ["<pad>", "<unk>", "<s>", "</s>", "▁", *letters, *pairs]
    found = Speller(pieces, first_id=4).spellings("abcdefghijklmnopqrstu", limit=100)  # 2 x 17,711 splits
    assert len(found) == 100 and len(found[0]) <= len(found[-1]) and len(found[0]) == 11
    assert len(Speller(pieces, first_id=4).spellings("abc")) < MAX_SPELLINGS
