"""Decoding controls on a tiny trained copy model: lexical constraints (ordered, unordered, several
pieces, overlapping, impossible), banned phrases, prefixes, repetition limits; and the text-level
parsing of glossaries and tab-separated input."""

from __future__ import annotations

import gzip
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import copy_batch

from nmtk.decode.guide import Glossary, Guidance, InputFormat
from nmtk.decode.search.beam import SearchConfig
from nmtk.decode.search.choose import search
from nmtk.decode.search.config import LineControls
from nmtk.decode.search.sampling import SamplingConfig, sample_search
from nmtk.errors import NmtkError
from nmtk.vocab import PAD_ID


@pytest.fixture(scope="module")
def model(copy_models):
    return copy_models[800]  # copies its input: every change in the output is the controls' doing


@pytest.fixture(scope="module")
def sources() -> torch.Tensor:
    return copy_batch(torch.Generator().manual_seed(11), batch=16)[0]


def has(tokens: list[int], phrase: tuple[int, ...]) -> bool:
    return any(tuple(tokens[i : i + len(phrase)]) == phrase for i in range(len(tokens) - len(phrase) + 1))


def at(tokens: list[int], phrase: tuple[int, ...]) -> int:
    return next(i for i in range(len(tokens)) if tuple(tokens[i : i + len(phrase)]) == phrase)


@pytest.mark.parametrize("beam", [1, 4])
def test_constraints_are_met_unordered_multi_piece_and_overlapping(model, sources, beam: int) -> None:
    plain = [h[0].tokens for h in search(model, sources, SearchConfig(beam=beam))]
    asks = [((5, 6), (7,)), ((8, 9, 10),), ((11, 12), (12, 13))]  # the last two overlap: 11 12 13 meets both
    controls = [LineControls(constraints=asks[i % 3]) for i in range(len(sources))]
    got = [h[0].tokens for h in search(model, sources, SearchConfig(beam=beam), controls)]
    for tokens, control, before in zip(got, controls, plain, strict=True):
        assert all(has(tokens, c) for c in control.constraints), (before, tokens, control)
    if beam > 1:  # the model still copies around the terms (beam 1 has no room to place them well)
        kept = sum(len(set(t) & set(b)) for t, b in zip(got, plain, strict=True))
        assert kept > 0.6 * sum(len(set(b)) for b in plain), (kept, sum(len(set(b)) for b in plain))


def test_ordered_constraints_appear_in_their_order(model, sources) -> None:
    controls = [LineControls(constraints=((20,), (5, 6)))] * len(sources)
    got = search(model, sources, SearchConfig(beam=4, ordered_constraints=True), controls)
    for hyps in got:
        tokens = hyps[0].tokens
        assert has(tokens, (20,)) and has(tokens, (5, 6)) and at(tokens, (20,)) < at(tokens, (5, 6)), tokens


def test_a_batch_with_constraints_gives_each_line_what_it_gets_alone(model, sources) -> None:
    controls = [LineControls(constraints=((5 + i % 7,),)) if i % 2 else None for i in range(len(sources))]
    cfg = SearchConfig(beam=4, nbest=2)
    batched = search(model, sources, cfg, controls)
    for i, row in enumerate(sources):
        alone = search(model, row[row.ne(PAD_ID)][None], cfg, [controls[i]])[0]
        assert [h.tokens for h in alone] == [h.tokens for h in batched[i]]
        assert all(abs(a.score - b.score) < 1e-3 for a, b in zip(alone, batched[i], strict=True))


def test_constraints_that_cannot_fit_are_met_as_far_as_the_limit_allows(model, sources) -> None:
    controls = [LineControls(constraints=((5, 6), (7, 8), (9, 10)))] * len(sources)
    cfg = SearchConfig(beam=4, max_len_a=0.0, max_len_b=4)  # room for two of the three, not three
    for hyps in search(model, sources, cfg, controls):
        tokens = hyps[0].tokens
        assert len(tokens) <= 4 and sum(has(tokens, c) for c in controls[0].constraints) == 2, tokens


def test_banned_phrases_are_never_produced(model, sources) -> None:
    plain = [h[0].tokens for h in search(model, sources, SearchConfig(beam=4))]
    controls = []
    for tokens in plain:  # ban the first token, and the second pair of the copy
        controls.append(LineControls(bans=((tokens[0],), tuple(tokens[1:3]))))
    for beam in (1, 4):
        got = [h[0].tokens for h in search(model, sources, SearchConfig(beam=beam, nbest=min(beam, 2)), controls)]
        for tokens, control in zip(got, controls, strict=True):
            assert not any(has(tokens, b) for b in control.bans), (tokens, control)
    sampled = sample_search(model, sources, SearchConfig(beam=1), controls, sampling=SamplingConfig(seed=2))
    assert not any(has(h[0].tokens, b) for h, c in zip(sampled, controls, strict=True) for b in c.bans)


def test_a_hinted_term_is_never_written_twice_in_a_row(model) -> None:
    """A model trained with hints can copy a hinted term again and again ("Hose Hose Hose"): a line's
    `LineControls.doubled` terms are barred right after themselves (one piece or several), elsewhere not."""
    src = torch.tensor([[5, 5, 9, 6, 7, 6, 7, 8, 3], [5, 5, 9, 6, 7, 6, 7, 8, 3]])  # copies write 5 5, 6 7 6 7
    plain = [h[0].tokens for h in search(model, src, SearchConfig(beam=4))]
    assert plain[0][:7] == [5, 5, 9, 6, 7, 6, 7]
    controls = [LineControls(doubled=((5,), (6, 7))), None]
    for beam in (1, 4):
        got = [h[0].tokens for h in search(model, src, SearchConfig(beam=beam), controls)]
        assert not has(got[0], (5, 5)) and not has(got[0], (6, 7, 6, 7)) and 5 in got[0] and has(got[0], (6, 7))
        assert got[1] == plain[1]  # the other line of the batch asks nothing
    assert LineControls(doubled=((5,),))
    assert LineControls(bans=((4,),), doubled=((5, 6),)).barred == ((4,), (5, 6, 5, 6))


def test_a_prefix_starts_every_hypothesis_with_constraints_too(model, sources) -> None:
    controls = [LineControls(prefix=(30, 31), constraints=((5, 6),) if i % 2 else ()) for i in range(len(sources))]
    for cfg in (SearchConfig(beam=1), SearchConfig(beam=4, nbest=3)):
        for hyps, control in zip(search(model, sources, cfg, controls), controls, strict=True):
            for h in hyps:
                assert h.tokens[:2] == [30, 31] and all(has(h.tokens, c) for c in control.constraints), h.tokens
    sampled = sample_search(model, sources, SearchConfig(beam=1), controls, sampling=SamplingConfig(seed=2))
    assert all(h[0].tokens[:2] == [30, 31] for h in sampled)


def test_no_repeat_ngram_and_repetition_penalty(model) -> None:
    src = torch.tensor([[5, 6, 5, 6, 5, 6, 7, 3]])  # a copy repeats the bigram 5 6 three times
    plain = search(model, src, SearchConfig(beam=4))[0][0].tokens
    assert plain[:6] == [5, 6, 5, 6, 5, 6]
    for n in (2, 3):
        tokens = search(model, src, SearchConfig(beam=4, no_repeat_ngram_size=n))[0][0].tokens
        grams = [tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1)]
        assert len(grams) == len(set(grams)), tokens
    penalised = search(model, src, SearchConfig(beam=1, repetition_penalty=50.0))[0][0].tokens
    assert penalised.count(5) < plain.count(5)


def test_the_unsteered_search_is_untouched(model, sources) -> None:
    """No controls, and controls that ask nothing, give the very same hypotheses and scores."""
    cfg = SearchConfig(beam=4, nbest=2)
    plain, empty = search(model, sources, cfg), search(model, sources, cfg, [LineControls()] * len(sources))
    assert [[(h.tokens, h.score) for h in x] for x in plain] == [[(h.tokens, h.score) for h in x] for x in empty]


def test_alternatives_give_the_beam_s_finished_hypotheses_without_changing_the_search(model, sources) -> None:
    """`SearchConfig.alternatives`: every finished hypothesis the beam holds when a sentence stops, the
    n best first exactly as without (same tokens, same scores): the stopping rule is the n best's."""
    for cfg in (SearchConfig(beam=4), SearchConfig(beam=4, nbest=2), SearchConfig(beam=4, length_penalty_form="power")):
        plain = search(model, sources, cfg)
        more = search(model, sources, replace(cfg, alternatives=True))
        assert [[(h.tokens, h.score) for h in x] for x in plain] == \
            [[(h.tokens, h.score) for h in x[: cfg.nbest]] for x in more]
        assert all(len(x) <= 4 for x in more) and any(len(x) > cfg.nbest for x in more)
        assert all(a.score >= b.score for x in more for a, b in zip(x, x[1:], strict=False))
    assert SearchConfig(beam=4, alternatives=True).returned == 4 and SearchConfig(beam=4, nbest=2).returned == 2


def test_hinted_terms_choose_the_best_hypothesis_holding_most_of_them() -> None:
    """Hints ask, they do not force: among a line's hypotheses, those holding more of its hinted terms
    (as whole words) come first, by score among equals; the first is not read further when it holds all."""
    from nmtk.decode.guide import held, preferring
    from nmtk.decode.search.config import Hypothesis

    texts = ["ein Hunde läuft", "ein Hund läuft", "der Hund im Schutzhelm", "ein Hund im Schutzhelm ."]
    hyps = [Hypothesis([i], -float(i)) for i in range(len(texts))]
    read: list[int] = []

    def words(h: Hypothesis) -> str:
        read.append(h.tokens[0])
        return texts[h.tokens[0]]

    assert held("ein Hund .", "Hund") and not held("ein Hunde", "Hund") and held("x rotes Auto .", "rotes Auto")
    got = preferring(hyps, ("Hund", "Schutzhelm"), words, 4)
    assert [h.tokens[0] for h in got] == [2, 3, 1, 0]
    assert [h.tokens[0] for h in preferring(hyps, ("Hund",), words, 2)] == [1, 2]
    read.clear()
    assert preferring(hyps[1:], ("Hund",), words, 1) == [hyps[1]] and read == [1]  # the best holds it: done
    assert preferring(hyps, (), words, 1) == [hyps[0]] and preferring([], ("Hund",), words, 1) == []
    # a term written more often than it is hinted comes after the same terms written as often, by how often
    texts[:] = ["Hose Hose Hose", "eine Hose", "keine", "Hose und Hose"]
    assert [h.tokens[0] for h in preferring(hyps, ("Hose",), words, 4)] == [1, 3, 0, 2]  # fewer extra first
    assert [h.tokens[0] for h in preferring(hyps, ("Hose", "Hose"), words, 4)] == [3, 0, 1, 2]  # hinted twice


def test_each_sentence_of_a_hinted_line_asks_for_the_terms_of_its_own_hints() -> None:
    """A line cut into sentences: each piece is preferred for the target terms of the hints it holds
    (read from its ids, one per hint), not for its line's every term; a line asking none, none."""
    from types import SimpleNamespace

    from nmtk.decode.base import piece_terms
    from nmtk.decode.long_input import Segments

    source, target, done = 90, 91, 92
    words = {5: "ein", 6: "Hund", 7: "Schutz@@", 8: "helm", 9: "."}
    src = SimpleNamespace(hint_markers=(source, target, done), tokens_text=lambda ids: " ".join(words[i] for i in ids))
    first = [1, source, 2, target, 6, done, 3, source, 2, target, 6, done, 9]  # the same term hinted twice
    second = [4, 4, source, 2, target, 7, 8, done, 9]
    plain = [1, 2, 9]
    segments = Segments([first, second, plain, first], [3, 1], [False, False])
    got = piece_terms(segments, [("Hund", "Schutzhelm"), ()], src, SimpleNamespace())
    assert got == [("Hund", "Hund"), ("Schutz@@ helm",), (), ()]


def test_a_glossary_as_hints_asks_for_preferred_terms_not_constraints() -> None:
    from nmtk.decode.guide import guided

    glossary = Glossary((("dog", "Hund"), ("hard hat", "Schutzhelm")))
    guide = guided("A dog in a hard hat .", Guidance(), glossary, (), str, hints=True)
    assert guide == Guidance(hinted=("Hund", "Schutzhelm")) and guide.constraints == ()
    assert guided("A dog .", Guidance(), glossary, (), str) == Guidance(constraints=("Hund",), anchors=("dog",))
    assert guided("A cat .", Guidance(), glossary, (), str, hints=True) is None
    assert not LineControls(hinted=("Hund",))  # asks nothing of the search itself
    # constrained, each term anchored to the source words it was found for; a given constraint has none
    mixed = glossary.guide("A dog in a hard hat .", Guidance(constraints=("Stadt",)), str)
    assert mixed == Guidance(constraints=("Stadt", "Hund", "Schutzhelm"), anchors=("", "dog", "hard hat"))
    assert LineControls(constraints=((1,), (2,)), anchors=((5,), (6, 7))).anchored
    assert not LineControls(constraints=((1,), (2,)), anchors=((), (6, 7))).anchored
    assert not LineControls(constraints=((1,),)).anchored


def test_input_lines_and_glossaries_parse_or_name_their_line(tmp_path: Path) -> None:
    both = InputFormat(prefix=True, constraints=True)
    assert both.split("a dog\tein\tHund\tKatze", 3) == ("a dog", Guidance("ein", ("Hund", "Katze")))
    assert InputFormat(constraints=True).split("a dog", 1) == ("a dog", Guidance())
    for line, message in (("\t", "line 4: no source text"), ("a dog\t\tHund", "line 4: an empty constraint"),
                          ("a dog\tHund\t", "line 4: an empty constraint")):
        with pytest.raises(NmtkError, match=message):
            InputFormat(constraints=True).split(line, 4)
    with pytest.raises(NmtkError, match="more tab-separated fields"):
        InputFormat(prefix=True).split("a\tb\tc", 2)
    good = tmp_path / "terms.tsv"
    good.write_text("# terms\nred dog\trot Hund\n\ncat\tKatze\n", encoding="utf-8")
    glossary = Glossary.read(good)
    assert glossary.terms("a Red dog and a cat .", str) == ("Katze",)
    assert Glossary.read(good, ignore_case=True).terms("a Red dog and a cat .", str) == ("rot Hund", "Katze")
    for text, message in (("dog\n", "line 1: expected 'source term<TAB>target term', found 1"),
                          ("dog\tHund\ncat\t\n", "line 2: an empty target term"),
                          ("a\tb\tc\n", "line 1: expected"), ("# nothing\n", "holds no term pairs"),
                          ("cat\tKatze\ndog\t__done__\n", "line 2: the target term '__done__' holds '__done__'"),
                          ("a __source__ dog\tHund\n", "line 1: the source term .* holds '__source__'")):
        bad = tmp_path / "bad.tsv"
        bad.write_text(text, encoding="utf-8")
        with pytest.raises(NmtkError, match=message):
            Glossary.read(bad)


def test_a_glossary_gives_each_source_term_one_target_and_the_longest_match(tmp_path: Path) -> None:
    """A term inside a longer one is not forced beside it, the same pair twice is one pair, a source
    term with two targets is refused naming both lines, and a request's pair overrides the server's."""
    nested = Glossary((("running dog", "Rennhund"), ("dog", "Hund"), ("cat", "Katze")))
    assert nested.terms("a running dog and a dog and a cat", str) == ("Rennhund", "Hund", "Katze")
    assert nested.terms("a running dog", str) == ("Rennhund",)
    path = tmp_path / "terms.tsv"
    path.write_text("dog\tHund\ncat\tKatze\ndog\tHund\n", encoding="utf-8")
    assert Glossary.read(path).pairs == (("dog", "Hund"), ("cat", "Katze"))
    path.write_text("dog\tHund\nDog\tKöter\n", encoding="utf-8")
    assert len(Glossary.read(path).pairs) == 2  # two terms where case counts
    with pytest.raises(NmtkError, match=r"terms.tsv: line 2: the source term 'Dog' has another target term at "
                                        r".*terms.tsv: line 1 \('Hund' there, 'Köter' here\)"):
        Glossary.read(path, ignore_case=True)
    with pytest.raises(NmtkError, match=r"glossary\[1\]: the source term 'dog'"):
        Glossary.of([["dog", "Hund"], ["dog", "Köter"]])
    server, request = Glossary.read(tmp_path / "terms.tsv"), Glossary.of([["dog", "Köter"]], where="glossary")
    both = server + request
    assert both.terms("a dog", str) == ("Köter",) and both.terms("a Dog", str) == ("Köter",)
    assert both.where_each() == (f"{tmp_path / 'terms.tsv'}: line 2", "glossary[0]")
    calls: list[str] = []

    def counted(text: str) -> str:
        calls.append(text)
        return text

    big = Glossary(tuple((f"w{i}", f"W{i}") for i in range(500))).index(counted)  # a server's, at its start
    assert len(calls) == 500
    assert (big + request).terms("a dog and w7", counted) == ("Köter", "W7")
    assert calls[500:] == ["a dog and w7", "dog"]  # a request's glossary tokenizes its own terms alone


def test_a_utf16_file_is_said_to_be_utf16_not_invalid(tmp_path: Path) -> None:
    """Excel's "Unicode Text" is UTF-16 with a byte-order mark: the error says so and what to do."""
    from nmtk.files import decode_text

    path = tmp_path / "terms.tsv"
    path.write_bytes("dog\tHund\n".encode("utf-16"))
    with pytest.raises(NmtkError, match=r"terms.tsv: UTF-16 text \(it begins with the byte-order mark FF FE\): "
                                        r"save it as UTF-8$"):
        Glossary.read(path)
    with pytest.raises(NmtkError, match=r"^doc: UTF-16 text .*byte-order mark FE FF"):
        decode_text("<p>dog</p>".encode("utf-16-be").join([b"\xfe\xff", b""]), "doc")
    with pytest.raises(NmtkError, match=r"terms.tsv:1: invalid UTF-8"):
        path.write_bytes(b"d\xe9g\tHund\n")
        Glossary.read(path)


def _a_docx() -> bytes:
    """A Word document's bytes: a zip archive of xml (compressed, as Word writes it)."""
    import io
    import zipfile

    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("word/document.xml", "<w:document><w:body><w:p><w:r><w:t>A dog.</w:t></w:r></w:p>" * 20)
    return out.getvalue()


@pytest.mark.parametrize(("data", "said"), [
    (b"\x28\xb5\x2f\xfd\x04\x58" + b"\x91" * 40, r"in.txt: zstd-compressed, not text: decompress it first \(zstdcat "),
    (_a_docx(), r"in.txt: a zip archive \(a .docx, .*not text: save its text as plain text, html or XLIFF$"),
    (b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n1 0 obj\n", r"in.txt: a PDF document, not text: save its text"),
    (b"A dog.\nA c\xe9t.\n", r"in.txt:2: invalid UTF-8 \(invalid continuation byte at byte 3\)$"),  # text: as before
])
def test_a_compressed_file_or_a_document_is_said_to_be_one_not_invalid_text(tmp_path: Path, data: bytes,
                                                                             said: str) -> None:
    """A .zst file, a .docx or a PDF given as text was "invalid UTF-8 at byte 1" (and ``--errors
    replace`` made it a page of U+FFFD): the error says what the file is and what to give instead."""
    from nmtk.files import read_lines

    path = tmp_path / "in.txt"
    path.write_bytes(data)
    with pytest.raises(NmtkError, match=said):
        read_lines(path, "input")
    path.write_bytes(gzip.compress(b"A dog.\n" * 2))  # gzip, xz and bzip2 are read as their text
    assert read_lines(path, "input") == ["A dog.", "A dog."]


def test_corpora_are_decompressed_by_their_first_bytes(tmp_path: Path) -> None:
    """A corpus in gzip, xz or bzip2 is read as its text whatever its name (only a .gz suffix was
    decompressed); a text that begins "BZh" is text; bad compressed data is one line naming the file."""
    import bz2
    import lzma

    from nmtk.data.corpus import read_lines

    text = "A dog.\nZwei Männer.\n"
    for name, data in (("a.xz", lzma.compress(text.encode())), ("a.bz2", bz2.compress(text.encode())),
                       ("a.txt", gzip.compress(text.encode())), ("bzh.txt", b"BZh9 is no archive.\n")):
        (tmp_path / name).write_bytes(data)
        assert list(read_lines(tmp_path / name)) == (["BZh9 is no archive."] if name == "bzh.txt" else
                                                    ["A dog.", "Zwei Männer."])
    (tmp_path / "bad.bz2").write_bytes(bz2.compress(text.encode())[:10] + b"\x00" * 40)
    with pytest.raises(NmtkError, match=r"bad.bz2: corrupt bzip2 file \(Invalid data stream\)$"):
        list(read_lines(tmp_path / "bad.bz2"))
    (tmp_path / "cut.xz").write_bytes(lzma.compress(text.encode() * 100)[:40])
    with pytest.raises(NmtkError, match=r"cut.xz: corrupt xz file \("):
        list(read_lines(tmp_path / "cut.xz"))


def test_a_pipe_given_as_a_file_is_read_whole(tmp_path: Path) -> None:
    """``translate -i <(cmd)`` names a pipe: looking for a compressed file's first bytes there would read
    them away; a pipe is read as it is, from its first byte."""
    import os
    import threading

    from nmtk.files import compression, open_binary

    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    looked: list[str | None] = []
    looking = threading.Thread(target=lambda: looked.append(compression(fifo)), daemon=True)
    looking.start()
    looking.join(timeout=10)
    assert looked == [None]  # at once, without opening it (with no writer, an open would wait)

    def write() -> None:
        with open(fifo, "wb") as handle:
            handle.write(b"A dog.\nA cat.\n")

    writer = threading.Thread(target=write)
    writer.start()
    with open_binary(fifo) as handle:
        assert handle.read() == b"A dog.\nA cat.\n"
    writer.join()


def test_an_option_about_a_glossary_without_one_is_one_line() -> None:
    """`translate --terms inline` (or constrained) and `--glossary-ignore-case` with no glossary did nothing,
    silently; a server's ``--terms`` applies to its requests' glossaries too."""
    from nmtk.decode.guide import GuideOptions, read_guides
    from nmtk.recipe import load_recipe

    recipe = load_recipe(Path(__file__).resolve().parents[2] / "recipes" / "multi30k-en-de.toml")
    assert read_guides(GuideOptions(), recipe) == (None, ())
    for options, message in ((GuideOptions(terms="inline"), "--terms inline: there is no glossary"),
                             (GuideOptions(ignore_case=True, terms="constrained"),
                              "--glossary-ignore-case, --terms constrained: there is no glossary")):
        with pytest.raises(NmtkError, match=message):
            read_guides(options, recipe)
    assert read_guides(GuideOptions(terms="inline"), recipe, requests=True) == (None, ())
    with pytest.raises(NmtkError, match="--glossary-ignore-case: there is no glossary"):
        read_guides(GuideOptions(ignore_case=True), recipe, requests=True)


@pytest.mark.parametrize(("form", "alpha"), [("gnmt", round(0.6 * 14.8 / 20.8, 4)),
                                             ("power", round(0.6 * 14.8 / 15.8, 4))])
def test_the_hugging_face_export_maps_alpha_for_each_length_penalty_form(form: str, alpha: float) -> None:
    """transformers divides by g^α' (g: tokens before EOS); α' grows as nmtk's penalty does at the mean
    target length L = 14.8: α·L/(L + 6) for GNMT's ((5 + |Y|)/6)^α, α·L/(L + 1) for |Y|^α."""
    from nmtk.convert.marian.exporter import generation_config
    from nmtk.recipe import load_recipe

    recipe = load_recipe(Path(__file__).resolve().parents[2] / "recipes" / "multi30k-en-de.toml")
    recipe = recipe.model_copy(update={"decode": recipe.decode.model_copy(update={"length_penalty_form": form})})
    config = {"pad_token_id": 1, "decoder_start_token_id": 1, "eos_token_id": 0, "max_position_embeddings": 512}
    assert generation_config(recipe, config, 14.8)["length_penalty"] == alpha
    assert generation_config(recipe, config)["length_penalty"] == 0.6  # no training data: α as it is


@pytest.mark.parametrize("beam", [1, 4])
def test_more_terms_than_fit_give_a_translation_with_as_many_as_fit(model, sources, beam: int) -> None:
    """20 one-piece terms, room for 10: every line still has a translation, holding 10 of them (issue 62:
    candidates that met more terms but never ended used to take every finished place, leaving none)."""
    terms = tuple((4 + i,) for i in range(20))
    cfg = SearchConfig(beam=beam, max_len_a=0.0, max_len_b=10)
    for hyps in search(model, sources, cfg, [LineControls(constraints=terms)] * len(sources)):
        assert hyps and len(hyps[0].tokens) == 10 and sum(has(hyps[0].tokens, t) for t in terms) == 10, hyps


def test_a_term_asked_for_twice_is_produced_twice(model, sources) -> None:
    twice = [LineControls(constraints=((9,), (9,)))] * len(sources)
    for hyps in search(model, sources, SearchConfig(beam=4), twice):
        assert hyps[0].tokens.count(9) >= 2, hyps[0].tokens


def test_a_translation_stutters_where_pieces_with_letters_repeat_back_to_back() -> None:
    """One piece 3 times, two 4 times, three 3 times, a letter among them ("Rutututututzt"); fewer repeats,
    other pieces between, or digits and punctuation ("1111", "!!!!") are no stutter."""
    from nmtk.decode.base import stutter, stutters

    lettered = frozenset(range(10, 20))  # ids 10-19 hold a letter; 1-9 are digits and punctuation
    assert stutters([10, 11, 11, 11, 12], lettered) and stutters([12, 13, 12, 13, 12, 13, 12, 13], lettered)
    assert stutters([10, 11, 12, 10, 11, 12, 10, 11, 12, 14], lettered)
    assert stutter([10, 11, 11, 11, 12], lettered) == (11,)
    assert stutter([9, 12, 13, 12, 13, 12, 13, 12, 13], lettered) == (12, 13)
    assert not stutters([10, 11, 11, 12], lettered) and not stutters([12, 13, 12, 13, 12, 13, 14], lettered)
    # a word of any length written three times ("Anhänger Anhänger Anhänger"): ids 10 and 12 begin words
    starts = np.zeros(20, dtype=bool)
    starts[[10, 12]] = True
    assert stutter([10, 11, 10, 11, 10, 11, 12], lettered, starts) == (10, 11)
    assert stutter([10, 11, 10, 11, 12, 10, 11], lettered, starts) is None and not stutters([10, 11, 10, 11], lettered)
    # twice, a word of 6 letters or more ("Nummer Nummer"); "die die" is German ("Frauen, die die Straße …")
    letters = np.full(20, 3)
    assert stutter([12, 10, 11, 10, 11, 12], lettered, starts, letters) == (10, 11)
    assert stutter([10, 12, 12, 10], lettered, starts, letters) is None
    assert not stutters([10, 11, 12, 10, 11, 12, 14], lettered) and not stutters([1, 1, 1, 1, 1, 2, 2, 2, 2], lettered)
    assert not stutters([10, 11, 10, 12, 10, 13, 10], lettered) and not stutters([], lettered)



def test_brackets_count_as_letters_for_stutters_and_digits_and_marks_do_not() -> None:
    """"eine Frau)))))" is a model lost in its brackets; "!!!!" and "1111" may be the line's own."""
    from nmtk.text.pipeline import TextPipeline

    pieces = ["<pad>", "<unk>", "<s>", "</s>", "▁)", ")", "▁(", "▁!", "!", "▁1", "▁a", "▁[", "▁-"]
    pipe = TextPipeline.__new__(TextPipeline)
    pipe.subwords = type("Subwords", (), {"pieces": lambda self: pieces})()
    assert sorted(TextPipeline.lettered.func(pipe)) == [0, 1, 2, 3, 4, 5, 6, 10, 11]  # specials: never written
    _, starts, letters = pipe.word_marks  # what stutters are read by: words' first pieces, letters
    assert starts.tolist()[4:8] == [True, False, True, True] and letters.tolist()[9:] == [0, 1, 0, 0]


def test_only_the_sentences_that_repeated_themselves_are_searched_again() -> None:
    """`unrepeated` works sentence by sentence: of a line's three sentences the one that stutters is searched
    again with repeats barred, and taken where it then ends; the others keep their translations (a whole
    line of 300 sentences was searched again for one)."""
    from nmtk.decode.base import REPEATS_BARRED, unrepeated
    from nmtk.decode.search.config import Hypothesis, SamplingConfig, SearchConfig

    def results() -> list[list[Hypothesis]]:
        return [[Hypothesis([10, 11], -1.0)], [Hypothesis([12, 13, 13, 13], -2.0)],
                [Hypothesis([14] * 9, -3.0, cut=True)]]

    asked: list[tuple[list[int], int]] = []

    def searched(indices: list[int], how: SearchConfig, barred: list) -> list[list[Hypothesis]]:
        asked.append((indices, how.no_repeat_ngram_size, barred))
        return [[Hypothesis([15, 16], -4.0)], [Hypothesis([17] * 9, -5.0, cut=True)]]

    lettered = frozenset(range(10, 20))
    found = unrepeated(searched, SearchConfig(beam=2), results(), lettered)
    # one piece stuttered: it is barred twice in a row as well (a 3-gram barred twice lets "13 13 13" be)
    assert asked == [([1, 2], REPEATS_BARRED, [((13, 13),), ()])]
    assert [h[0].tokens for h in found] == [[10, 11], [15, 16], [14] * 9] and [h[0].retried for h in found] == [
        False, True, False]
    for how in (SearchConfig(beam=2, no_repeat_ngram_size=4), SearchConfig(beam=1, sampling=SamplingConfig()),
                SearchConfig(beam=2, retry_cut=False)):
        asked.clear()
        assert [h[0].tokens for h in unrepeated(searched, how, results(), lettered)][1] == [12, 13, 13, 13]
        assert asked == []


def test_accents_typed_apart_from_their_letters_are_read_as_one_character() -> None:
    """"café" typed as ``cafe`` + U+0301 (macOS, some keyboards: Unicode's decomposed form) is the
    "café" of a corpus: a line reads so (Moses split the accent off as a word of its own), and a glossary
    term, a constraint, a prefix or a banned phrase typed either way finds a line typed the other way."""
    from nmtk.decode.guide import guided
    from nmtk.text.reading import Reading

    apart, together = "cafe\u0301", "caf\u00e9"
    assert Reading().read(f"A man in a {apart}.") == f"A man in a {together}." == Reading(fold_case=False).read(
        f"A man in a {apart}.")
    for term, line in ((apart, f"A {together} ."), (together, f"A {apart} .")):
        source = Reading().read(line)
        assert guided(source, Guidance(), Glossary.of([[term, "Caf\u00e9"]]), (), str).constraints == ("Caf\u00e9",)
        assert guided(source, Guidance(), Glossary.of([[term, "Cafe\u0301"]]), (), str, hints=True).hinted == (
            "Caf\u00e9",)
    asked = guided("A dog .", Guidance(prefix="Cafe\u0301", constraints=("Cafe\u0301s",)), None, ("Cafe\u0301",), str)
    assert asked == Guidance(prefix="Caf\u00e9", constraints=("Caf\u00e9s",), bans=("Caf\u00e9",))
