"""`nmtk translate`'s decoding controls on the trained copy run and its CTranslate2 export: prefixes,
constraints, glossaries, banned phrases, repetition limits; what each engine refuses; bad input as one
line with nothing written."""

from __future__ import annotations

import subprocess
from dataclasses import replace
from pathlib import Path

import pytest
from cli_runner import run_nmtk

pytestmark = pytest.mark.slow

LINES = ["the red cat runs in the park", "a small dog plays with a ball", "the old man sits on the water"]


def nmtk(*args: str, cwd: Path, env: dict, stdin: str) -> subprocess.CompletedProcess:
    """`nmtk translate ARGS --precision fp32` (in this process: `cli_runner`)."""
    return run_nmtk("translate", *args, "--precision", "fp32", stdin=stdin, cwd=cwd, env=env)


def ok(result: subprocess.CompletedProcess) -> list[str]:
    assert result.returncode == 0, result.stderr
    return result.stdout.splitlines()


def test_prefix_constraints_glossary_and_bans_on_the_command_line(copy_run, tmp_path: Path) -> None:
    tmp, _, env = copy_run
    run = str(tmp / "run")
    prefixed = ok(nmtk("-m", run, "--prefix", cwd=tmp, env=env, stdin="".join(f"{x}\tthe blue\n" for x in LINES)))
    assert all(out.startswith("the blue ") for out in prefixed)
    emoji = nmtk("-m", run, "--prefix", cwd=tmp, env=env, stdin=f"{LINES[0]} 🐶\tthe blue\n{LINES[1]}\tthe\n")
    assert emoji.returncode == 0 and "1 held emoji, links or codes, left to the model with --prefix (a " \
        "plain translation carries them through): line 1" in emoji.stderr, emoji.stderr  # said, not silently lost
    terms = ["bike", "green house", "child"]  # one word, two words, one word
    both = "".join(f"{x}\ta\t{t}\n" for x, t in zip(LINES, terms, strict=True))
    for order in ("unordered", "ordered"):
        got = ok(nmtk("-m", run, "--prefix", "--constraints", order, cwd=tmp, env=env, stdin=both))
        assert all(out.startswith("a ") and f" {t} " in f" {out} " for out, t in zip(got, terms, strict=True)), got
    glossary = tmp_path / "terms.tsv"
    glossary.write_text("Cat\tbike\nsmall dog\tyellow car\n", encoding="utf-8")
    got = ok(nmtk("-m", run, "--glossary", str(glossary), "--glossary-ignore-case", cwd=tmp, env=env,
                  stdin="\n".join(LINES) + "\n"))
    assert "bike" in got[0].split() and "yellow car" in got[1] and got[2] == LINES[2], got
    bans = tmp_path / "bans.txt"
    bans.write_text("cat\nthe water\n", encoding="utf-8")
    got = ok(nmtk("-m", run, "--ban", str(bans), "--beam", "4", cwd=tmp, env=env, stdin="\n".join(LINES) + "\n"))
    assert "cat" not in got[0].split() and "the water" not in got[2], got
    repeats = ok(nmtk("-m", run, "--no-repeat-ngram-size", "1", cwd=tmp, env=env, stdin="the red the red the red\n"))
    assert len(repeats[0].split()) == len(set(repeats[0].split())), repeats


def test_the_ctranslate2_export_honours_prefix_bans_and_repeats_and_refuses_constraints(copy_run, exported,
                                                                                         tmp_path: Path) -> None:
    tmp, _, env = copy_run
    text = "".join(f"{x}\tthe blue\n" for x in LINES)
    for beam in ("1", "4"):
        args = ("--prefix", "--beam", beam, "--no-repeat-ngram-size", "2")
        assert ok(nmtk("-m", str(exported), *args, cwd=tmp, env=env, stdin=text)) == \
            ok(nmtk("-m", str(tmp / "run"), *args, cwd=tmp, env=env, stdin=text))
    bans = tmp_path / "bans.txt"
    bans.write_text("cat\n", encoding="utf-8")
    assert "cat" not in ok(nmtk("-m", str(exported), "--ban", str(bans), cwd=tmp, env=env, stdin=LINES[0]))[0]
    out = tmp_path / "out.txt"
    refused = nmtk("-m", str(exported), "--constraints", "unordered", "-o", str(out), cwd=tmp, env=env,
                   stdin=f"{LINES[0]}\tbike\n")
    assert refused.returncode == 1 and "Traceback" not in refused.stderr
    assert "nmtk's own engine" in refused.stderr.strip().splitlines()[-1]
    assert not out.exists() and not out.with_name("out.txt.partial").exists()


@pytest.mark.parametrize(("args", "stdin", "message"), [
    (("--constraints", "unordered"), "the red cat\n\t\n", "line 2: no source text"),
    (("--constraints", "unordered"), "the red cat\t\u2603\n", "line 1: the constraint '\u2603' has characters"),
    (("--glossary", "GLOSSARY"), "the red cat\n", "GLOSSARY: line 2: an empty target term"),
    (("--glossary", "missing.tsv"), "the red cat\n", "missing.tsv: glossary file not found"),
])
def test_bad_control_input_is_one_line_and_nothing_is_written(copy_run, tmp_path: Path, args, stdin,
                                                              message) -> None:
    tmp, _, env = copy_run
    glossary = tmp_path / "terms.tsv"
    glossary.write_text("cat\tbike\ndog\t \n", encoding="utf-8")
    args = tuple(str(glossary) if a == "GLOSSARY" else a for a in args)
    message = message.replace("GLOSSARY", str(glossary))
    out = tmp_path / "out.txt"
    result = nmtk("-m", str(tmp / "run"), *args, "-o", str(out), cwd=tmp_path, env=env, stdin=stdin)
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    assert message in result.stderr.strip().splitlines()[-1], result.stderr
    assert not out.exists() and not out.with_name("out.txt.partial").exists()


def test_each_bad_term_names_its_line_before_any_search(copy_run) -> None:
    """The checks `translate` and `serve` share (`TranslatorBase.controls`), in process."""
    from nmtk.decode.guide import Guidance
    from nmtk.decode.load import LoadOptions, load_translator
    from nmtk.decode.search.config import SamplingConfig, SearchConfig
    from nmtk.errors import NmtkError
    from nmtk.model_source import resolve_model

    tmp, _, _ = copy_run
    translator = load_translator(resolve_model(tmp / "run"), LoadOptions(threads=1))
    ids = translator.encode(["the red cat", "a dog"])
    short = SearchConfig(beam=4, max_len_a=0.0, max_len_b=2)
    for guides, search, message in (
            ([None, Guidance(constraints=("green yellow house",))], short, "line 2: .* longer than the line's output "
                                                                         "limit of 2"),
            ([Guidance(constraints=("bike",)), None], SearchConfig(beam=1, sampling=SamplingConfig()),
             "line 1: constraints need beam search"),
            ([Guidance(prefix="\u2603"), None], short, "line 1: the prefix '\u2603' has characters"),
            ([None, Guidance(bans=(" ",))], short, "line 2: the banned phrase ' ' is empty")):
        with pytest.raises(NmtkError, match=message):
            translator.controls(guides, ids, search, first_line=1)


def test_the_power_length_penalty_searches_as_ctranslate2_does(copy_run, exported) -> None:
    """``length_penalty_form = "power"``: |Y|^α and a search that ends once the beam has finished, so
    the torch engine's n-best lists and scores are CTranslate2's, line for line, at any α."""
    import random

    from helpers import WORDS

    from nmtk.decode.load import LoadOptions, load_translator
    from nmtk.decode.search.config import SearchConfig
    from nmtk.model_source import resolve_model
    from nmtk.precision import Precision

    tmp, _, _ = copy_run
    ours = load_translator(resolve_model(tmp / "run"), LoadOptions(precision=Precision.fp32, threads=1))
    theirs = load_translator(resolve_model(exported), LoadOptions(threads=1))
    rng = random.Random(5)
    lines = LINES + [" ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 14))) for _ in range(60)]
    for alpha in (0.6, 1.0, 2.0):
        search = SearchConfig(beam=4, nbest=4, length_penalty=alpha, length_penalty_form="power")
        for a, b in zip(ours.hypotheses(lines, search), theirs.hypotheses(lines, search), strict=True):
            assert [h.tokens for h in a] == [h.tokens for h in b]
            # the engines' GEMMs sum in different orders: 1.3e-4 apart on an Intel Xeon (Emerald Rapids)
            assert [h.score for h in a] == pytest.approx([h.score for h in b], abs=1e-3)


def test_controls_no_translation_can_meet_together_are_an_error_or_dropped_with_a_warning(copy_run, monkeypatch,
                                                                                        capsys) -> None:
    """A term holding a banned phrase, or one the repetition limit forbids, is one error naming the line
    (before any search); a line whose search still finds no translation is searched again without its
    terms, with one warning naming it: a non-empty line never translates to an empty one (issue 62)."""
    from dataclasses import replace

    from nmtk.decode.guide import Guidance
    from nmtk.decode.load import LoadOptions, load_translator
    from nmtk.decode.search.config import SearchConfig
    from nmtk.errors import NmtkError
    from nmtk.model_source import resolve_model
    from nmtk.precision import Precision

    tmp, _, _ = copy_run
    translator = load_translator(resolve_model(tmp / "run"), LoadOptions(precision=Precision.fp32, threads=1))
    ids = translator.encode(["the red cat runs", "a dog plays"])
    beam, no_repeat = SearchConfig(beam=4), SearchConfig(beam=4, no_repeat_ngram_size=1)
    for guides, search, message in (
            ([Guidance(constraints=("red cat",), bans=("Cat",)), None], beam,
             "line 1: the term 'red cat' holds the banned phrase 'Cat'"),
            ([None, Guidance(constraints=("dog", "dog"))], no_repeat,
             r"line 2: the term 'dog' repeats a 1-gram .*twice"),
            ([None, Guidance(constraints=("dog red dog",))], no_repeat, r"line 2: the term 'dog red dog' repeats")):
        with pytest.raises(NmtkError, match=message):
            translator.controls(guides, ids, search, first_line=1)
    searched = translator.decode_pieces

    def nothing_with_terms(pieces, search, controls=None):  # a search that finds no hypothesis with its terms
        found = searched(pieces, search, controls)
        return [[] if c and c.constraints else h for h, c in zip(found, controls or [None] * len(found), strict=True)]

    monkeypatch.setattr(translator, "decode_pieces", nothing_with_terms)
    capsys.readouterr()
    hyps = translator.hypotheses(["the red cat runs", "a dog plays"], replace(beam, nbest=2), first_line=7,
                                 guides=[Guidance(constraints=("bike",)), None])
    assert all(h and h[0].tokens for h in hyps)
    assert translator.detokenize(hyps[0][0]) == "the red cat runs"
    assert "line 7: no translation meets all its controls together; translated without its terms" in \
        capsys.readouterr().err


def test_more_terms_than_fit_and_a_term_twice_on_the_command_line(copy_run) -> None:
    tmp, _, env = copy_run
    from helpers import WORDS

    many = "\t".join((WORDS * 2)[:53])  # 53 one-word terms, more than a 3-word line's limit of 53 tokens holds
    result = nmtk("-m", str(tmp / "run"), "--constraints", "unordered", cwd=tmp, env=env,
                  stdin=f"the cat sits\t{many}\nthe dog runs\tdog\tdog\n")
    lines = ok(result)
    assert len(lines) == 2 and all(line.strip() for line in lines), lines
    assert "line 1:" in result.stderr and "did not fit in its length limit" in result.stderr
    assert lines[1].split().count("dog") == 2, lines  # a term asked for twice is there twice


def test_a_ban_covers_the_words_case_forms_and_glued_spellings(copy_run, tmp_path: Path) -> None:
    """A banned word is banned in every spelling the vocabulary has (`Speller`): "CAT" bans "cat" too,
    as "Bank" bans "einerbank" (issue 62)."""
    tmp, _, env = copy_run
    bans = tmp_path / "bans.txt"
    bans.write_text("CAT\n", encoding="utf-8")
    got = ok(nmtk("-m", str(tmp / "run"), "--ban", str(bans), "--beam", "4", cwd=tmp, env=env, stdin=LINES[0] + "\n"))
    assert "cat" not in got[0].lower(), got


def test_what_the_options_ask_is_refused_before_the_first_line(copy_run, exported, tmp_path: Path) -> None:
    """A glossary (or --constraints) for the CTranslate2 engine, or a glossary term the target vocabulary
    cannot write, is one line naming the option or the glossary's file and line, before anything is read
    or written: even when no input line holds a term (issue 62)."""
    tmp, _, env = copy_run
    glossary = tmp_path / "terms.tsv"
    glossary.write_text("cat\tbike\n", encoding="utf-8")
    out = tmp_path / "out.de"
    refused = nmtk("-m", str(exported), "--glossary", str(glossary), "-o", str(out), cwd=tmp, env=env,
                   stdin="a dog plays\n" * 3)
    assert refused.returncode == 1 and f"the glossary {glossary}" in refused.stderr, refused.stderr
    assert "nmtk's own engine" in refused.stderr and not out.exists() and not out.with_suffix(".de.partial").exists()
    refused = nmtk("-m", str(exported), "--constraints", "unordered", cwd=tmp, env=env, stdin="a dog\n")
    assert refused.returncode == 1 and "--constraints: constraints (and glossaries) need" in refused.stderr
    glossary.write_text("cat\tbike\ndog\t\u2603\n", encoding="utf-8")
    refused = nmtk("-m", str(tmp / "run"), "--glossary", str(glossary), cwd=tmp, env=env, stdin="a cat\n")
    assert refused.returncode == 1 and refused.stdout == ""
    assert f"{glossary}: line 2: the target term '\u2603' has characters" in refused.stderr, refused.stderr


def test_a_server_refuses_at_start_what_it_could_only_refuse_per_request(copy_run, exported, tmp_path: Path) -> None:
    from nmtk.decode.load import LoadOptions
    from nmtk.errors import NmtkError
    from nmtk.serve.server import ServeOptions, build

    glossary = tmp_path / "terms.tsv"
    glossary.write_text("cat\tbike\n", encoding="utf-8")
    with pytest.raises(NmtkError, match="need nmtk's own engine"):
        build(ServeOptions(load=LoadOptions(model=exported, threads=1), glossary=glossary, workers=1))


def test_a_repetition_penalty_of_zero_names_itself(copy_run) -> None:
    tmp, _, env = copy_run
    refused = nmtk("-m", str(tmp / "run"), "--repetition-penalty", "0", cwd=tmp, env=env, stdin="the cat\n")
    assert refused.returncode == 1 and "repetition_penalty 0: must be above 0" in refused.stderr
    assert "no_repeat" not in refused.stderr


def test_terms_inline_on_a_model_trained_without_hints_is_one_line_and_writes_nothing(copy_run, tmp_path: Path
                                                                                      ) -> None:
    tmp, _, env = copy_run
    glossary, out = tmp_path / "terms.tsv", tmp_path / "out.txt"
    glossary.write_text("cat\tbike\n", encoding="utf-8")
    result = nmtk("-m", str(tmp / "run"), "--glossary", str(glossary), "--terms", "inline", "-o", str(out),
                  cwd=tmp, env=env, stdin="\n".join(LINES) + "\n")
    assert result.returncode != 0 and "--terms inline:" in result.stderr and "trained with terminology hints" \
        in result.stderr and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert not out.exists() and not list(tmp_path.glob("out.txt*"))


def test_hinted_terms_are_preferred_among_the_finished_hypotheses_in_both_engines(copy_run, exported) -> None:
    """A line's hinted terms (``--terms inline``) choose among the hypotheses its search finished, in
    nmtk's engine and in CTranslate2 alike (which returns its beam's when asked): a term the best lacks
    and a lower hypothesis holds makes that one the translation; the other lines are as without."""
    from nmtk.decode.guide import Guidance, held
    from nmtk.decode.load import LoadOptions, load_translator
    from nmtk.decode.search.config import SearchConfig
    from nmtk.model_source import resolve_model
    from nmtk.precision import Precision

    tmp, _, _ = copy_run
    beam = SearchConfig(beam=4)
    for model in (tmp / "run", exported):
        translator = load_translator(resolve_model(model), LoadOptions(precision=Precision.fp32, threads=1))
        ids = translator.encode(LINES)
        plain = translator.hypotheses_of_ids(ids, beam)
        more = translator.hypotheses_of_ids(ids, replace(beam, alternatives=True))
        assert [h[0].tokens for h in more] == [h[0].tokens for h in plain] and max(len(h) for h in more) > 1
        words = [[translator.tgt_pipe.subwords.decode(h.tokens) for h in x] for x in more]
        # a line, and a word of a lower hypothesis that its best lacks
        line, j, term = next((i, j, w) for i, texts in enumerate(words) for j, text in enumerate(texts[1:], 1)
                             for w in text.split() if not held(texts[0], w))
        guides = [Guidance(hinted=(term,)) if i == line else None for i in range(len(LINES))]
        got = translator.hypotheses(LINES, beam, guides=guides)
        assert held(translator.detokenize(got[line][0]), term), (model, term, got[line])
        assert got[line][0].tokens == next(h.tokens for h in more[line] if held(translator.tgt_pipe.subwords.decode(
            h.tokens), term)) and len(got[line]) == 1
        assert all(got[i][0].tokens == plain[i][0].tokens for i in range(len(LINES)) if i != line)
    from nmtk.decode.guide import Glossary
    from nmtk.decode.stream import Engine

    engine = Engine(translator, beam, glossary=Glossary((("cat", "bike"),)), hints=True)  # translate --terms inline
    assert engine.guides(LINES, 1) == (LINES, [Guidance(hinted=("bike",)), None, None])


def test_ctranslate2_bars_the_hinted_terms_of_a_call_s_lines_doubled(exported, monkeypatch) -> None:
    """CTranslate2 takes one set of suppressed sequences per call: a call holding hinted lines suppresses
    each of their terms written twice in a row (as nmtk's search bars them per line), in one call."""
    from nmtk.decode.guide import Guidance
    from nmtk.decode.load import LoadOptions, load_translator
    from nmtk.decode.search.config import SearchConfig
    from nmtk.model_source import resolve_model

    translator = load_translator(resolve_model(exported), LoadOptions(threads=1))
    asked: list[object] = []
    searcher = translator._searcher

    class Spy:
        def __init__(self, inner: object) -> None:
            self.inner = inner

        def translate_batch(self, sources: list, **options: object) -> object:
            asked.append(options.get("suppress_sequences"))
            return self.inner.translate_batch(sources, **options)

    monkeypatch.setattr(translator, "_searcher", lambda search: Spy(searcher(search)))
    guides = [Guidance(hinted=("red",)), Guidance(hinted=("small dog",)), None]
    got = translator.hypotheses(LINES, SearchConfig(beam=2), guides=guides)
    pieces = [[translator.target_pieces[t] for t in translator.tgt_pipe.encode(term)] for term in ("red", "small dog")]
    assert asked == [[pieces[0] * 2, pieces[1] * 2]] and all(got)


def test_a_glossary_s_terms_go_to_the_sentences_holding_their_source_words(copy_run, monkeypatch) -> None:
    """A line of several sentences with glossary terms (constrained) is cut as without them, each term
    asked of the sentences holding its source words (searched whole, the demo model dropped the last
    sentence of "A man rides a bike. A dog runs in the park. Two kids play football." with `dog → Hund`);
    a constraint given as such, with no source words, keeps the line whole."""
    import numpy as np

    from nmtk.decode.guide import Glossary, Guidance
    from nmtk.decode.load import LoadOptions, load_translator
    from nmtk.decode.long_input import ENDS, OPENS, WORDS
    from nmtk.decode.search.config import SearchConfig
    from nmtk.model_source import resolve_model
    from nmtk.precision import Precision

    tmp, _, _ = copy_run
    beam, line = SearchConfig(beam=4), "the red cat the dog runs the dog sits"
    translator = load_translator(resolve_model(tmp / "run"), LoadOptions(precision=Precision.fp32, threads=1))
    pieces = translator.src_pipe.subwords.pieces()
    kinds = np.full(len(pieces), WORDS, dtype=np.int8)
    kinds[pieces.index("▁cat")], kinds[pieces.index("▁runs")], kinds[pieces.index("▁the")] = ENDS, ENDS, OPENS
    monkeypatch.setattr(translator, "sentence_kinds", kinds)
    searched, seen = translator.decode_pieces, []

    def counted(pieces, search, controls=None):
        seen.append([c.constraints if c else () for c in controls or [None] * len(pieces)])
        return searched(pieces, search, controls)

    monkeypatch.setattr(translator, "decode_pieces", counted)
    guide = Glossary((("dog", "bike"), ("red", "ball"))).guide(line, Guidance(), translator.src_pipe.moses.tokenize)
    assert guide == Guidance(constraints=("ball", "bike"), anchors=("red", "dog"))
    got = translator.detokenize(translator.hypotheses([line], beam, guides=[guide])[0][0])
    ball, bike = (tuple(translator.tgt_pipe.encode(w)) for w in ("ball", "bike"))
    assert seen == [[(ball,), (bike,), (bike,)]] and got.count("bike") == 2 and got.count("ball") == 1, got
    seen.clear()
    translator.hypotheses([line], beam, guides=[Guidance(constraints=("bike",))])
    assert seen == [[(bike,)]]  # one piece: the whole line


def test_a_line_of_several_sentences_is_translated_sentence_by_sentence_in_both_engines(copy_run, exported,
                                                                                       monkeypatch) -> None:
    """A model trained on sentences drops all but the first of a line's sentences: each is searched as a
    line of its own and the translations joined, in either engine (an n-best list's alternatives join
    the sentences' k-th); a prefix starts the first sentence's translation, or of as many sentences as it
    holds; a line read as typed is searched whole. (The copy model's
    vocabulary has no full stop or capital: here "cat" ends a sentence and "the" begins one.)"""
    import numpy as np

    from nmtk.decode.guide import Guidance
    from nmtk.decode.load import LoadOptions, load_translator
    from nmtk.decode.long_input import ENDS, OPENS, WORDS
    from nmtk.decode.search.config import SearchConfig
    from nmtk.model_source import resolve_model
    from nmtk.precision import Precision
    from nmtk.text.reading import Reading

    tmp, _, _ = copy_run
    beam, line = SearchConfig(beam=4), "the red cat the dog runs"
    for model in (tmp / "run", exported):
        translator = load_translator(resolve_model(model), LoadOptions(precision=Precision.fp32, threads=1))
        pieces = translator.src_pipe.subwords.pieces()
        kinds = np.full(len(pieces), WORDS, dtype=np.int8)
        kinds[pieces.index("▁cat")], kinds[pieces.index("▁the")] = ENDS, OPENS
        monkeypatch.setattr(translator, "sentence_kinds", kinds)
        searched, seen = translator.decode_pieces, []

        def counted(pieces, search, controls=None, searched=searched, seen=seen):
            seen.append(len(pieces))
            return searched(pieces, search, controls)

        monkeypatch.setattr(translator, "decode_pieces", counted)
        got = translator.hypotheses([line], beam)[0]
        alone = translator.hypotheses(["the red cat", "the dog runs"], beam)
        assert [h.tokens for h in got] == [alone[0][0].tokens + alone[1][0].tokens] and seen == [2, 2]
        assert translator.detokenize(got[0]) == line
        seen.clear()
        two = translator.hypotheses([line], replace(beam, nbest=2))[0]
        assert len(two) == 2 and two[0].tokens == got[0].tokens and two[1].tokens != got[0].tokens, two
        seen.clear()
        prefixed = translator.hypotheses([line], beam, guides=[Guidance(prefix="the red")])[0][0]
        assert seen == [2] and translator.detokenize(prefixed).startswith("the red"), (model, seen, prefixed)
        targets = translator.tgt_pipe.subwords.pieces()  # the prefix's sentences: the first piece's
        kinds = np.full(len(targets), WORDS, dtype=np.int8)
        kinds[targets.index("▁cat")], kinds[targets.index("▁the")] = ENDS, OPENS
        monkeypatch.setattr(translator, "target_kinds", kinds)
        translator.hypotheses([line], beam, guides=[Guidance(prefix="the red cat the")])
        monkeypatch.setattr(translator, "reading", Reading(fold_case=False, carry=False, split=False))
        translator.hypotheses([line], beam)
        assert seen == [2, 1, 1], (model, seen)


def test_a_line_that_ran_to_its_length_limit_is_searched_again_with_repeats_barred(copy_run, exported,
                                                                                     monkeypatch) -> None:
    """A translation cut at its length limit (a model repeating itself), or stuttering short of it, is
    searched again with no 3-gram twice, in both engines, and taken where it then ends (``retried``);
    other lines, sampling and a
    search that bars repeats as asked are left as they are. The copy model never loops: its search is
    made to loop here for one line unless repeats are barred, as the demo model's does."""
    from nmtk.decode.base import REPEATS_BARRED
    from nmtk.decode.load import LoadOptions, load_translator
    from nmtk.decode.search.config import SamplingConfig, SearchConfig
    from nmtk.model_source import resolve_model

    tmp, _, _ = copy_run
    for model in (tmp / "run", exported):
        translator = load_translator(resolve_model(model), LoadOptions(threads=1))
        searched, seen = translator.decode_pieces, []
        looping, stuttering = translator.encode(["the dog runs", "a cat sits"])

        def loops(pieces, search, controls=None, searched=searched, seen=seen, looping=looping,
                  stuttering=stuttering):
            seen.append((len(pieces), search.no_repeat_ngram_size))
            found = searched(pieces, search, controls)
            for piece, hyps in zip(pieces, found, strict=True):
                if piece in (looping, stuttering) and not search.no_repeat_ngram_size:
                    for h in hyps:  # "Kartoffffff…" past any limit; "Rutututut" short of it
                        h.tokens = h.tokens[:1] * 200 if piece == looping else h.tokens[:1] * 4 + h.tokens
            return found

        monkeypatch.setattr(translator, "decode_pieces", loops)
        lines = ["the red cat", "the dog runs", "a cat sits"]
        plain = translator.hypotheses(lines, SearchConfig(beam=4))
        assert seen == [(3, 0), (2, REPEATS_BARRED)]
        assert translator.detokenize(plain[0][0]) == "the red cat" and not plain[0][0].retried
        assert translator.detokenize(plain[1][0]) == "the dog runs" and plain[1][0].retried and not plain[1][0].cut
        assert translator.detokenize(plain[2][0]) == "a cat sits" and plain[2][0].retried
        for search in (SearchConfig(beam=4, no_repeat_ngram_size=4), SearchConfig(beam=1, sampling=SamplingConfig())):
            seen.clear()
            hyps = translator.hypotheses(lines, search)
            assert len(seen) == 1 and not hyps[1][0].retried  # as asked: searched once
        monkeypatch.undo()
