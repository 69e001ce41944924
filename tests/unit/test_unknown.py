"""Spans a model should not read, carried through (`nmtk.decode.unknown`): which spans, and how markup
(`nmtk.text.markup`, with ``keep``) takes them out of the words and puts them back."""

from __future__ import annotations

import html
from functools import partial

from nmtk.decode.unknown import (
    code_spans,
    garbled_numbers,
    kept_spans,
    link_spans,
    lost_numbers,
    lost_terms,
    sentences_apart,
)
from nmtk.text.markup import Target, parse, place, token_spans


def ascii_only(char: str) -> bool:
    return char.isascii()


def copied(line: str, order: list[int] | None = None) -> str:
    """``line`` through markup as `nmtk.decode.unknown` sends a text line (escaped, spans kept) and a
    'translation' that copies its words (in ``order``), each aligned to itself, as text again."""
    doc = parse(html.escape(line, quote=False), keep=partial(kept_spans, spells=ascii_only))
    placed = []
    for segment in doc.segments:
        words = [segment.words[i] for i in (order or range(len(segment.words)))]
        text = " ".join(words)
        placed.append(place(segment, Target(text, token_spans(words, text), order or list(range(len(words))))))
    return html.unescape(doc.render(placed))


def test_unknown_runs_and_links_are_the_spans_kept() -> None:
    line = "A dog🐶 runs & <jumps> 寿司 寿司. See www.x.example/a?b=1&c=2."
    assert [line[lo:hi] for lo, hi in kept_spans(line, ascii_only)] == [
        "🐶", "寿司", "寿司", "www.x.example/a?b=1&c=2"]
    assert kept_spans("A dog runs.", ascii_only) == [] and kept_spans("   ", ascii_only) == []
    assert [line[lo:hi] for lo, hi in kept_spans(line, ascii_only, links=False)] == ["🐶", "寿司", "寿司"]
    # an accent typed apart from its letter (e + U+0301) is spelt with it, as the composed "é" is; one the
    # vocabulary lacks even so, or with no letter before it, is carried alone (it came back after the "." )
    latin = lambda text: all(ord(c) < 256 for c in text)  # noqa: E731
    assert kept_spans("A man in a cafe\u0301 .", latin) == [] and kept_spans("A man in a caf\u00e9 .", latin) == []
    odd = "A q\u0301 and \u0301 and e\u0301\u0301 ."
    assert [odd[lo:hi] for lo, hi in kept_spans(odd, latin)] == ["\u0301", "\u0301", "\u0301"]
    assert tuple(kept_spans(odd, latin)[2]) == (len(odd) - 3, len(odd) - 2)  # the second accent on e, not the first
    keys = "Press 1\ufe0f\u20e3 or #\ufe0f\u20e3, I \u2764\ufe0f it."  # a keycap is carried with its digit
    assert [keys[lo:hi] for lo, hi in kept_spans(keys, latin)] == ["1\ufe0f\u20e3", "#\ufe0f\u20e3", "\u2764\ufe0f"]
    # read as lines are read (`read_as_spelt`): a soft hyphen or zero-width space dropped, a ligature or a
    # full-width letter in its compatibility form ("ben\u00adch" was cut in two, "ﬁsh" read "sh")
    from types import SimpleNamespace

    from nmtk.decode.unknown import read_as_spelt
    from nmtk.text.reading import Reading

    view = SimpleNamespace(src_pipe=SimpleNamespace(spells=lambda text: all(ord(c) < 128 for c in text)))
    web = "A ben\u00adch, a \ufb01sh and a \uff21 \u200bdog\u2060s \U0001f436."
    assert [web[lo:hi] for lo, hi in kept_spans(web, read_as_spelt(view))] == ["\U0001f436"]
    assert Reading(spells=view.src_pipe.spells).read(web) == "A bench, a fish and a A dogs \U0001f436."
    assert Reading().read("ben\u00adch \ufb01sh") == "bench \ufb01sh"  # no vocabulary: composed alone


def test_spans_come_back_where_they_stood_spaced_as_in_the_source() -> None:
    for line in ("A man eats 寿司. 🐶🐱 A dog🐶 runs & <jumps>.", "🐶 A dog.", "A dog runs 🐶", "Two 🐶 🐱 dogs.",
                 "Mail jo@x.example, or see https://x.example/a_(b)."):
        assert copied(line) == line, line
    # reordered: after the last target word aligned to a source word before it (markup's `place`)
    assert copied("A big dog 🐶 runs", [0, 2, 1, 3]) == "A dog big 🐶 runs"


def test_brackets_and_quotes_around_a_span_go_with_it() -> None:
    """``(寿司)``: the model, given ``()`` around nothing, drops them; carried whole they stay."""
    line = "A man eats (寿司) and «寿司», not (sushi)."
    assert [line[lo:hi] for lo, hi in kept_spans(line, ascii_only)] == ["(寿司)", "«寿司»"]
    assert parse(html.escape(line), keep=partial(kept_spans, spells=ascii_only)).segments[0].words == [
        "A", "man", "eats", "and", ",", "not", "(sushi)."]


def test_links_are_carried_whole_and_the_sentence_keeps_its_punctuation() -> None:
    """URLs and e-mail addresses are spans too, though every character is spelt; the full stop, comma or
    bracket after one belongs to the sentence, a bracket the link opened to the link."""
    line = ("See https://de.wikipedia.org/wiki/Bonn_(Stadt), www.example.com/a?b=1&c=2. "
            "(Write to Jo.Doe+x@mail.example.org!) Or ftp://files.example.net/x.")
    assert [line[lo:hi] for lo, hi in link_spans(line)] == [
        "https://de.wikipedia.org/wiki/Bonn_(Stadt)", "www.example.com/a?b=1&c=2", "Jo.Doe+x@mail.example.org",
        "ftp://files.example.net/x"]
    assert copied(line) == line
    for plain in ("A dog runs, e.g. at 3.5 km/h.", "a@b is no address", "Mr.Smith ran. 12:30", "http:// alone",
                  "Meet at 5 @ the park.", "mail@@x"):
        assert link_spans(plain) == [], plain
    handles = "Thanks @alice_b, and @jo@example.social: see jo@example.org."  # a handle is a name: the model dropped it
    assert [handles[lo:hi] for lo, hi in link_spans(handles)] == ["@alice_b", "@jo@example.social", "jo@example.org"]
    assert copied(handles) == handles
    # a hashtag is a link on its platform: the demo model wrote "#soccer" as "Fußball" and "#happy" as
    # "mit der Aufschrift"; a number, C#, an html entity and a heading's marks are not hashtags
    tags = "A child plays #soccer, #Fußball_2024! See https://x.org/a#top."
    assert [tags[lo:hi] for lo, hi in link_spans(tags)] == ["#soccer", "#Fußball_2024", "https://x.org/a#top"]
    assert copied(tags) == tags
    for plain in ("A man wears the #5 shirt.", "He writes C# code.", "It&#39;s", "## Heading", "# Title"):
        assert link_spans(plain) == [], plain


def test_codes_of_capitals_and_digits_are_carried_and_words_with_small_letters_are_not() -> None:
    """``B-52``, ``COVID-19``, ``MP3`` are written alike in every language (the demo model: "Ein52",
    "„VO“.19", dropped); ``10th``, ``mp3``, ``Mid-1990s`` and plain numbers are the model's."""
    line = "A B-52, a COVID-19 test, an MP3 player (H2O), 3D at 4K; the 10th mp3 of the Mid-1990s, 12 dogs."
    assert [line[lo:hi] for lo, hi in code_spans(line)] == ["B-52", "COVID-19", "MP3", "H2O", "3D", "4K"]
    assert [line[lo:hi] for lo, hi in kept_spans(line, ascii_only)] == ["B-52", "COVID-19", "MP3", "(H2O)", "3D",
                                                                         "4K"]
    assert kept_spans(line, ascii_only, links=False) == [] and code_spans("TWO MEN IN THEIR 50S, THE 3RD RUN") == []
    sizes = "A 77x147 cm shelf, a 1920×1080 screen, a 4x4 car, 3x faster, x3."  # "77x147 cm" came back without it
    assert [sizes[lo:hi] for lo, hi in code_spans(sizes)] == ["77x147", "1920×1080", "4x4"]
    assert copied(line) == line


def test_a_link_beside_an_unknown_character_is_one_span_and_a_span_between_letters_leaves_two_words() -> None:
    line = "Look 🐶https://example.com/dog now, A🐶B"
    assert [line[lo:hi] for lo, hi in kept_spans(line, ascii_only)] == ["🐶https://example.com/dog", "🐶"]
    assert parse(line, keep=partial(kept_spans, spells=ascii_only)).segments[0].words == ["Look", "now,", "A", "B"]
    assert copied(line) == "Look 🐶https://example.com/dog now, A🐶 B"  # the model read two words


def test_a_translation_lost_a_number_where_neither_its_digits_nor_its_words_are_there() -> None:
    assert not lost_numbers("3 dogs and 3,500 apples for $12.99.", "Drei Hunde und 3.500 Äpfel für 12,99 $.", "de")
    assert lost_numbers("A man gives 2 thumbs up.", "Ein Mann scheint zu laufen.", "de")
    assert lost_numbers("the number 1102", "die Nummer Nummer Nummer", "de")
    assert not lost_numbers("1 dog, an mp3 player, the 10th", "ein Hund", "de")  # 1 is "ein"; in words: not numbers
    assert not lost_numbers("6 people on 12/05/2023", "sechs Leute am 12.05.2023", "de")
    assert lost_numbers("6 people", "sechs Leute", "xx")  # no spelling for the language: digits only
    assert not lost_numbers("3 dogs", "٣ كلاب", "ar") and not lost_numbers("3 dogs", "三只狗", "ja")
    assert not lost_numbers("21 dogs", "einundzwanzig Hunde", "de") and lost_numbers("21 dogs", "zwei Hunde", "de")
    # numbers are compared whole: 2 is not kept by a 12 (the demo model dropped "on 2 chairs" so)
    assert lost_numbers("12 cats sit on 2 chairs.", "12 Katzen sitzen auf Stühlen.", "xx")
    assert lost_numbers("12 cats", "2 Katzen", "xx") and lost_numbers("2 cats and 1 dog", "12 Katzen", "xx")
    assert not lost_numbers("12 cats on 2 chairs", "12 Katzen auf 2 Stühlen", "xx")
    # a decimal is its groups, not its digits run together ("3.5" came back "Nummer 35", taken for kept);
    # thousands are its digits, however they are set apart
    assert lost_numbers("A man gets 3.5 on a car.", "Ein Mann steigt aus der Nummer 35.", "de")
    assert garbled_numbers("A man gets 3.5 on a car.", "Ein Mann steigt aus der Nummer 35.", "en")
    assert not lost_numbers("It weighs 3.5 kg at 12:30.", "Es wiegt 3,5 kg um 12.30 Uhr.", "de")
    assert not any(lost_numbers("1,000 people", text, "de") for text in ("1000 Leute", "1.000 Leute", "1 000 Leute"))
    assert lost_numbers("2024-01-02", "20240102", "xx") and lost_numbers("12:30", "1230", "xx")
    assert not lost_numbers("3,500 people", "3 500 personnes", "fr")
    assert not lost_numbers("3,500 people", "3\u202f500 personnes", "fr")
    assert not lost_numbers("a 3-year-old and 10 kids", "ein 3-Jähriger und 10er-Gruppe", "xx")
    # a minus sign is the number's ("-5 °C" came back "5 °C"), written as a sign or a word
    assert lost_numbers("It is -5 °C.", "Es sind 5 °C.", "de") and lost_numbers("(-3.5%)", "(3,5%)", "xx")
    assert not any(lost_numbers("It is -5 °C.", text, "de") for text in ("Es sind −5 °C.", "Es sind minus 5 °C."))
    assert not lost_numbers("the A-5 road, 5-10 dogs, 2024-12-25", "die A-5, 5-10 Hunde, 2024-12-25", "xx")
    assert [line[a:b] for line in ["Now -5 °C, then -12."] for a, b in kept_spans(line, ascii_only, numbers=True)] == [
        "-5 °C", "-12"]


def test_numbers_are_kept_only_when_asked() -> None:
    line = "Call 555-1234 now for 3 dogs at $12.99, 10% off, not mp3s."
    assert kept_spans(line, ascii_only) == []
    assert [line[lo:hi] for lo, hi in kept_spans(line, ascii_only, numbers=True)] == [
        "555-1234", "3", "$12.99", "10%"]
    assert copied(line) == line


def test_a_measure_whose_unit_the_translation_lost_is_made_again_with_it_carried() -> None:
    """The demo model kept a measure's number and dropped its unit ("runs 5 km in the park" → "rennt 5 im
    Park", "20°C" → "20°"): a lost unit asks for the second try, which carries number and unit together."""
    from nmtk.decode.unknown import lost_numbers, lost_unit

    assert lost_numbers("A man runs 5 km in the park.", "Ein Mann rennt 5 im Park.", "de")
    assert not lost_numbers("A man runs 5 km in the park.", "Ein Mann rennt 5 km im Park.", "de")
    assert lost_unit("It is 20°C.", "Es hat 20°.") and not lost_unit("It is 20°C.", "Es hat 20 °C.")
    assert lost_unit("At 100 km/h.", "Mit 100 km.") and not lost_unit("At 100 km/h.", "Mit 100 km/h.")
    assert not lost_unit("3 men put 5 in a box at 10 am.", "Drei Männer.")  # no unit: men, in, am
    line = "A car drives 100 km/h, 5 km away, at 20°C with 64 GB."
    assert [line[lo:hi] for lo, hi in kept_spans(line, ascii_only, numbers=True)] == [
        "100 km/h", "5 km", "20°C", "64 GB"]


def test_a_list_marker_beginning_a_block_is_kept() -> None:
    """Markup's ``<p>1. A dog runs.</p>``: the demo model dropped the "1." (a line's own marker is written
    back apart: `nmtk.text.line_breaks.list_marker`)."""
    block = "  1. A dog runs. 2. A cat."  # the marker the block begins with, not one after a sentence
    assert [block[lo:hi] for lo, hi in kept_spans(block, ascii_only)] == ["1."] and copied(block) == block
    assert kept_spans(block, ascii_only, links=False) == [] and kept_spans("1.5 kg", ascii_only) == []


def test_a_translation_made_again_replaces_the_first_unless_it_garbles_what_the_first_kept() -> None:
    """Made again with its numbers carried, "a number 3 on it" became "Nummer 3 Nummer 9" where the first
    translation had "Nummer 3 3": a number the line never had is no better; one that lost the 3 is."""
    from types import SimpleNamespace

    from nmtk.decode.unknown import renumbered_better

    view = SimpleNamespace(src_pipe=SimpleNamespace(moses=SimpleNamespace(lang="en")),
                           tgt_pipe=SimpleNamespace(moses=SimpleNamespace(lang="de")))
    line = "A man with a number 3 on it."
    assert not renumbered_better(view, line, "Ein Mann mit der Nummer 3 3 darauf.", "Ein Mann, Nummer 3 Nummer 9.")
    assert renumbered_better(view, line, "Ein Mann mit einer Nummer darauf.", "Ein Mann, Nummer 3 Nummer 9.")
    assert renumbered_better(view, line, "Ein Mann mit der Nummer 3 3 darauf.", "Ein Mann mit der Nummer 3.")


def test_documents_made_again_are_taken_only_where_better_in_translate_and_serve() -> None:
    """Markup's second try follows the same rule as a line's (`take_renumbered`, which `translate_markup`
    and serve's html share): serve's html took every document made again, one where the model added a
    number of its own included."""
    from types import SimpleNamespace

    from nmtk.decode.markup import take_renumbered

    view = SimpleNamespace(src_pipe=SimpleNamespace(moses=SimpleNamespace(lang="en")),
                           tgt_pipe=SimpleNamespace(moses=SimpleNamespace(lang="de")))
    documents = ["<p>A man with a <b>number 3</b> on it.</p>", "<p>A <i>man</i> with 2 dogs.</p>", "<p>Hi</p>"]
    out = ["<p>Ein Mann mit der <b>Nummer 3 3</b> darauf.</p>", "<p>Ein <i>Mann</i> mit Hunden.</p>", "<p>Hallo</p>"]
    redone = ["<p>Ein Mann, <b>Nummer 3 Nummer 9</b>.</p>", "<p>Ein <i>Mann</i> mit 2 Hunden.</p>"]
    assert take_renumbered(view, documents, out, [0, 1], redone, "html") == [1]
    assert out == ["<p>Ein Mann mit der <b>Nummer 3 3</b> darauf.</p>", redone[1], "<p>Hallo</p>"]


def test_a_translation_garbled_numbers_where_it_writes_digits_its_line_has_not() -> None:
    """The demo model turned "12 cats" into "1 1 1 1 12 Viert" and "$5" into "5 5 5": made again with the
    line's numbers carried. A number the line spells out ("three" → "3") is its own; a line without
    digits has nothing to carry."""
    assert garbled_numbers("Two men and 12 cats.", "Zwei Männer und 1 1 1 1 12 Viert.", "en")
    assert garbled_numbers("the number 15 on a track", "der Nummer 1 1 1 1555", "en")
    assert not garbled_numbers("Two men and 12 cats.", "Zwei Männer und 12 Katzen.", "en")
    assert not garbled_numbers("three dogs and 2 cats", "3 Hunde und 2 Katzen", "en")
    assert not garbled_numbers("one dog and 2 cats", "1 Hund und 2 Katzen", "en")
    assert garbled_numbers("three dogs and 2 cats", "3 Hunde und 2 Katzen", "xx")  # no spelling: digits only
    assert not garbled_numbers("three dogs", "3 Hunde", "en")  # nothing to carry: left as it is
    assert not garbled_numbers("$12.99 and 3,500", "12,99 $ und 3.500", "en")
    assert not garbled_numbers("三只狗和2只猫", "3 Hunde und 2 Katzen", "ja")  # 三: a script without spaces
    assert garbled_numbers("A man pays $5 for a coffee.", "Ein Mann, der eine Töße 5 5 5-Kaffeet ist.", "en")
    assert not garbled_numbers("5 dogs and 5 cats", "5 Hunde und 5 Katzen", "en")  # as often as the line
    assert not garbled_numbers("5 dogs and five cats", "5 Hunde und fünf Katzen", "en")


def test_a_glossary_s_untranslated_terms_are_lost_where_not_written_as_often_as_whole_words() -> None:
    """Names that translate to themselves (`Glossary.untranslated`): a translation that lacks one, writes
    it twice or glued to another word is made again with them carried (the terms model: "Ein
    NASASASASA…", "Googleise für Google", "McDonald s s s"); matched as whole words, ignoring case
    where the glossary does."""
    from nmtk.decode.guide import Glossary
    from nmtk.text.reading import terms_pattern

    glossary = Glossary((("NASA", "NASA"), ("Google", " Google"), ("dog", "Hund"), ("McDonald's", "McDonald's")))
    assert glossary.untranslated() == ("NASA", "Google", "McDonald's")
    terms = terms_pattern(glossary.untranslated())
    assert lost_terms("A NASA engineer.", "Ein NASASASASASA.", terms)
    assert lost_terms("She works for Google.", "Sie arbeitet für Googleise für Google.", terms)
    assert lost_terms("They eat at McDonald's.", "Sie essen bei McDonald s s s.", terms)
    assert not lost_terms("A NASA engineer at Google.", "Ein NASA-Ingenieur bei Google.", terms)
    assert not lost_terms("A dog and NASAs", "Ein Hund", terms)  # "NASAs" is not the term
    assert kept_spans("A NASA engineer at Google.", lambda c: True, terms=terms) == [(2, 6), (19, 25)]
    assert kept_spans("a nasa engineer", lambda c: True, terms=terms) == []
    assert kept_spans("a nasa engineer", lambda c: True, terms=terms_pattern(["NASA"], ignore_case=True)) == [(2, 6)]
    assert terms_pattern([]) is None


def test_sentences_glued_to_each_other_are_set_apart_outside_links_and_abbreviations() -> None:
    """Pasted or OCR'd text: "snow.A cat" was one word to the model, which dropped the second sentence."""
    assert sentences_apart("Two dogs play in the snow.A cat watches.Then it sleeps!Really?Yes") == (
        "Two dogs play in the snow. A cat watches. Then it sleeps! Really? Yes")
    assert sentences_apart("Die Straße.Über uns") == "Die Straße. Über uns"
    for kept in ("e.g.The dog", "a Ph.D student", "the U.S.A team", "it costs 3.5 now", "A dog.", "java.util.List",
                 "see www.example.com/Page.Html or jo@doe.Example", "two dogs.a cat", "the end.", "run.X1"):
        assert sentences_apart(kept) == kept, kept


def test_what_a_glossary_translates_is_not_carried() -> None:
    """A code, handle or link that a glossary term translates to something else is the glossary's
    (``MP3`` → ``Musikdatei`` came back "MP3"); one it keeps as it is, and the rest, are still carried."""
    from nmtk.decode.guide import Glossary

    glossary = Glossary((("MP3", "Musikdatei"), ("@alice", "Alice"), ("NASA", "NASA")))
    assert glossary.translated() == ("MP3", "@alice") and glossary.untranslated() == ("NASA",)
    glossed = glossary.translated_patterns()
    line = "An MP3 player, @alice and @bob, B-52 and 🐶."
    assert [line[lo:hi] for lo, hi in kept_spans(line, ascii_only, glossed=glossed)] == ["@bob", "B-52", "🐶"]
    assert [line[lo:hi] for lo, hi in kept_spans(line, ascii_only)] == ["MP3", "@alice", "@bob", "B-52", "🐶"]


def test_a_joined_glossary_reuses_its_parts_compiled_terms_where_they_agree() -> None:
    """A server's glossary compiled once, not again with each request's (5,000 terms: 47 ms a compile,
    140 ms a request); where the request keeps as it is a term the server translates, or reads case
    otherwise, the joined glossary's own terms are compiled."""
    from nmtk.decode.guide import Glossary

    server = Glossary((("MP3", "Musikdatei"), ("@alice", "Alice")))
    joined = server + Glossary((("@bob", "Bob"),))
    assert joined.translated_patterns()[0] is server.translated_patterns()[0]  # the same object: not compiled again
    line = "An MP3 player, @alice and @bob, B-52 and 🐶."
    assert [line[lo:hi] for lo, hi in kept_spans(line, ascii_only, glossed=joined.translated_patterns())] == [
        "B-52", "🐶"]
    kept = server + Glossary((("MP3", "MP3"),))  # the request keeps MP3 as it is: carried again
    assert len(kept.translated_patterns()) == 1
    assert [line[lo:hi] for lo, hi in kept_spans(line, ascii_only, glossed=kept.translated_patterns())] == [
        "MP3", "@bob", "B-52", "🐶"]
    folded = server + Glossary((("@BOB", "Bob"),), ignore_case=True)
    assert [line[lo:hi] for lo, hi in kept_spans(line, ascii_only, glossed=folded.translated_patterns())] == [
        "B-52", "🐶"]


def test_quoted_names_are_carried_in_the_second_try_where_the_translation_lost_them() -> None:
    """A name or a sign's text quoted inside a sentence (each word begun by a capital or a digit) is
    carried, quotes and all, when the translation lost it: the demo model wrote „Ei“ for "El Corazon" and
    dropped "Pullman". Quoted speech, words used loosely and a quote that begins the line are the model's."""
    from types import SimpleNamespace

    from nmtk.decode.unknown import lost_names, quoted_names, renumbered_taken

    def names(line: str) -> list[str]:
        return [line[a:b] for a, b in quoted_names(line)]

    assert names('A boat named "El Corazon" and a "VAIO" notebook, the number “93”.') == ["El Corazon", "VAIO", "93"]
    assert names('A shirt that says „Asian Pacific 2007“ and a «Kids\' Food Basket».') == [
        "Asian Pacific 2007", "Kids' Food Basket"]
    assert names('"A dog runs," she said. A "bath" in "street clothes", a sign: "Come on now."') == []
    assert names('A "V" formation, a "broken quote and "X”.') == ["V"]  # quotes of one pair only
    german = 'Ein Schild „Kaffee“, ein „VAIO“-Laptop und „Haus 3“.'  # German's nouns have capitals
    assert [german[a:b] for a, b in quoted_names(german, "de")] == ["VAIO", "Haus 3"]
    assert not lost_names("Ein Schild „Kaffee“.", 'A sign "Coffee".', "de")
    line = 'A man rides a "Pullman" vehicle.'
    assert lost_names(line, "Ein Mann fährt ein Fahrzeug.") and not lost_names(line, 'Ein Mann fährt ein "Pullman".')
    assert lost_names('A "V" formation.', "Eine „Vation“.")  # as a whole word
    assert [line[a:b] for a, b in kept_spans(line, ascii_only, numbers=True)] == ['"Pullman"']  # with its quotes
    assert kept_spans(line, ascii_only) == []  # only in the second try
    view = SimpleNamespace(src_pipe=SimpleNamespace(moses=SimpleNamespace(lang="en")),
                           tgt_pipe=SimpleNamespace(moses=SimpleNamespace(lang="de")))
    called = 'A man walks past a shop called "32 De Neude."'
    assert renumbered_taken(view, called, "Ein Mann geht vorbei 32.", 'Ein Mann geht vorbei. "32 De Neude."') == (
        'Ein Mann geht vorbei "32 De Neude."')  # the quoted stop ends it, not the translation's before it
    assert renumbered_taken(view, line, "Ein Mann.", 'Ein "Pullman" Mann.') == 'Ein "Pullman" Mann.'


def test_words_in_mixed_case_are_names_carried_where_the_translation_lost_them() -> None:
    """A brand's capital after a small letter (``iPhone``, ``eBay``, ``McDonald's``): the demo model wrote
    "uses his iPhone" as "verwendet sein Trikot"; a word in capitals, a hyphenated one or a sentence's
    first word is not such a name."""
    from nmtk.decode.unknown import lost_names, mixed_case_names

    line = "A man with an iPhone sells on eBay at McDonald's, YouTube and PowerPoint."
    assert [line[a:b] for a, b in mixed_case_names(line)] == ["iPhone", "eBay", "McDonald's", "YouTube", "PowerPoint"]
    assert mixed_case_names("A NASA T-shirt, an X-Ray and Mary sit.") == []
    assert lost_names("He uses his iPhone.", "Er benutzt sein Trikot.")
    assert not lost_names("He uses his iPhone.", "Er benutzt sein iPhone.")
    assert [line[a:b] for a, b in kept_spans(line, ascii_only, numbers=True)][:2] == ["iPhone", "eBay"]


def test_a_speaker_label_the_translation_lost_is_carried_at_its_start() -> None:
    """Subtitles for the deaf and scripts name their speakers in capitals ("JOHN: A man sits."): the demo
    model dropped the label. A translation that begins with a label of its own keeps it."""
    from nmtk.decode.unknown import lost_label, speaker_label

    def label(line: str) -> list[str]:
        return [line[a:b] for a, b in speaker_label(line)]

    assert label("JOHN: A man sits.") == ["JOHN:"] and label("- DR. SMITH: Hi.") == ["DR. SMITH:"]
    assert label("MAN #2: Hi.") == ["MAN #2:"] and label("A man: he sits.") == [] and label("I: hi") == []
    assert label("12:30 A dog.") == [] and label("John: Hi.") == []
    assert lost_label("JOHN: A man sits.", "Ein Mann sitzt.") and not lost_label("JOHN: A man sits.", "JOHN: Ein Mann.")
    assert not lost_label("NARRATOR: A man sits.", "ERZÄHLER: Ein Mann sitzt.") and not lost_label("A dog.", "Hund.")
    line = "JOHN: A man sits."
    assert [line[a:b] for a, b in kept_spans(line, ascii_only, numbers=True)] == ["JOHN:"]
    assert kept_spans(line, ascii_only) == []  # only in the second try
