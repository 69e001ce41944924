"""HTML through translation with a trained model (the copy run: every word translates to itself, so the
tags must come back around the same words), in `translate --format html` and `serve`; language
detection (`/detect`, ``source: "auto"``)."""

from __future__ import annotations

import asyncio
import json
import random
import shutil
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from conftest import run_nmtk

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from markup import check, stripped, tagged  # noqa: E402 - the benchmark's own sentences and checks


def _lines(tmp: Path, n: int) -> list[str]:
    return (tmp / "data" / "test.raw.en").read_text().splitlines()[:n]


def _endpoint(app, path: str):  # noqa: ANN001, ANN202
    return next(r for r in app.routes if getattr(r, "path", "") == path).endpoint


@pytest.fixture(scope="module")
def tagged_copy(copy_run):
    """40 test lines, each with 1-3 inline tags (the benchmark's), as one html document of paragraphs,
    translated by `translate --format html`; and the lines' plain translations."""
    tmp, _, env = copy_run
    lines = _lines(tmp, 40)
    rng = random.Random(3)
    tagged_lines = [tagged(line, rng) for line in lines]
    document = "<html><body>\n" + "\n".join(f"<p>{t}</p>" for t in tagged_lines) + "\n</body></html>\n"
    result = run_nmtk("translate", "-m", str(tmp / "run"), "--format", "html", "--document", stdin=document, env=env)
    assert result.returncode == 0, result.stderr
    plain = run_nmtk("translate", "-m", str(tmp / "run"), stdin="\n".join(lines) + "\n", env=env)
    assert plain.returncode == 0, plain.stderr
    return tmp, lines, tagged_lines, document, result.stdout, plain.stdout.splitlines()


def test_html_keeps_every_tag_once_around_the_words_it_covered(tagged_copy) -> None:
    """Every tag once, well-formed, non-empty; each paragraph's text is the line's plain translation
    (one batch, the same search); where the model copied the line, the tags are where they were."""
    _, lines, tagged_lines, document, out, plain = tagged_copy
    assert out.startswith("<html><body>\n<p>") and out.endswith("</p>\n</body></html>\n")
    paragraphs = [p.removeprefix("<p>").removesuffix("</p>") for p in out.splitlines()[1:-1]]
    assert len(paragraphs) == len(lines)
    assert check(tagged_lines, paragraphs) == {"tags_exactly_once": 1.0, "well_formed": 1.0, "content_non_empty": 1.0}
    assert [stripped(p) for p in paragraphs] == plain
    copied = [i for i, line in enumerate(lines) if plain[i] == line]
    assert len(copied) >= 30
    same = sum(paragraphs[i] == tagged_lines[i] for i in copied)
    moved = [(tagged_lines[i], paragraphs[i]) for i in copied if paragraphs[i] != tagged_lines[i]]
    assert same >= 0.8 * len(copied), moved
    ET.fromstring(out)  # the whole document too


def test_html_is_translated_line_for_line_unless_it_is_one_document(tagged_copy, tmp_path: Path) -> None:
    """Each input line is one fragment, as serve's items are: as many lines out as in (two lines came
    back as one), each the same as that paragraph of the whole document; ``--skip`` goes on."""
    tmp, _, tagged_lines, _, out, _ = tagged_copy
    env = {"NMTK_DATA": str(tmp / "root")}
    fragments = "".join(f"{t}\n" for t in tagged_lines[:10])
    result = run_nmtk("translate", "-m", str(tmp / "run"), "--format", "html", stdin=fragments, env=env)
    assert result.returncode == 0, result.stderr
    paragraphs = [p.removeprefix("<p>").removesuffix("</p>") for p in out.splitlines()[1:11]]
    assert result.stdout.splitlines() == paragraphs
    source = tmp_path / "in.html"
    source.write_text(fragments)
    target = tmp_path / "out.html"
    (tmp_path / "out.html.partial").write_text("".join(f"{p}\n" for p in paragraphs[:4]))
    went_on = run_nmtk("translate", "-m", str(tmp / "run"), "--format", "html", "-i", str(source), "-o", str(target),
                       "--skip", "4", env=env)
    assert went_on.returncode == 0 and target.read_text().splitlines() == paragraphs, went_on.stderr
    bad = run_nmtk("translate", "-m", str(tmp / "run"), "--format", "html", stdin=f"{tagged_lines[0]}\n"
                   '<b class="x>red car.\n', env=env)
    assert bad.returncode == 1 and "stdin:2: column 1: '<b class=\"x>' is not a complete tag" in bad.stderr, bad.stderr
    text = run_nmtk("translate", "-m", str(tmp / "run"), "--document", stdin="a\n", env=env)
    assert text.returncode == 1 and "--document: for --format html or xml" in text.stderr
    page = tmp_path / "page.html"  # a page's name chooses --format html --document (as text, tags were words)
    page.write_text(tagged_copy[3])
    named = run_nmtk("translate", "-m", str(tmp / "run"), "-i", str(page), env=env)
    assert named.returncode == 0 and named.stdout == out, named.stderr
    assert "format: html --document (from the name page.html" in named.stderr


def test_html_errors_are_one_line_and_write_nothing(copy_run, exported, tmp_path: Path) -> None:
    tmp, _, env = copy_run
    run = str(tmp / "run")
    bad = run_nmtk("translate", "-m", run, "--format", "html", stdin="<p>a <b>dog</p>\n", env=env)
    where = "stdin:1: column 6: <b> is not closed (its block ends at column 12)"
    assert bad.returncode == 1 and where in bad.stderr, bad.stderr
    whole = run_nmtk("translate", "-m", run, "--format", "html", "--document", stdin="<p>a <b>dog</p>\n", env=env)
    assert whole.returncode == 1 and "line 1, column 6: <b> is not closed" in whole.stderr, whole.stderr
    out = tmp_path / "out.html"
    refused = run_nmtk("translate", "-m", run, "--format", "html", "--nbest", "2", "-o", str(out), stdin="<p>a</p>",
                       env=env)
    assert refused.returncode == 1 and "--nbest cannot be used with it" in refused.stderr and not out.exists()
    old = tmp_path / "old-export"  # an export from before exports carried alignments
    shutil.copytree(exported, old)
    meta = json.loads((old / "nmtk-export.json").read_text())
    (old / "nmtk-export.json").write_text(json.dumps({k: v for k, v in meta.items() if k != "alignment_heads"}))
    ct2 = run_nmtk("translate", "-m", str(old), "--format", "html", stdin="<p>a dog</p>", env=env)
    assert ct2.returncode == 1 and "export the run again" in ct2.stderr, ct2.stderr
    assert len(ct2.stderr.splitlines()) == 1, ct2.stderr  # refused before the model loads
    good = run_nmtk("translate", "-m", run, "--format", "xml", "-o", str(out), stdin='the <g id="1">dog</g> runs\n',
                    env=env)
    assert good.returncode == 0 and out.read_text().count('<g id="1">') == 1 and out.read_text().endswith("\n")


def test_an_export_places_tags_as_the_run_does(copy_run, exported) -> None:
    """A CTranslate2 export aligns as nmtk's engine does (its attention: the last decoder layer's heads
    averaged, `nmtk.convert.ctranslate2`), so its html is the run's, tag for tag."""
    tmp, _, env = copy_run
    fragments = [tagged(line, random.Random(k)) for k, line in enumerate(_lines(tmp, 20))]
    carried = ["the dog 🐶 sits on <b>www.the.example/dog?a=1&amp;b=2</b> now", "<i>a cat</i> 🐱 runs"]
    fragments += carried  # kept out of the words, as in text, and back where they stood
    common = ["--format", "html", "--lenpen", "0"]  # the raw log-probability: both engines search alike
    ours = run_nmtk("translate", "-m", str(tmp / "run"), *common, "--precision", "fp32",
                    stdin="\n".join(fragments) + "\n", env=env)
    theirs = run_nmtk("translate", "-m", str(exported), *common, stdin="\n".join(fragments) + "\n", env=env)
    assert ours.returncode == 0 and theirs.returncode == 0, ours.stderr + theirs.stderr
    pairs = list(zip(ours.stdout.splitlines(), theirs.stdout.splitlines(), strict=True))
    assert check(fragments, [row for _, row in pairs])["tags_exactly_once"] == 1.0, pairs
    assert sum(a == b for a, b in pairs) >= 20, pairs
    for (a, b), kept in zip(pairs[-2:], (["🐶 ", "<b>www.the.example/dog?a=1&amp;b=2</b>"], ["</i> 🐱 "]), strict=True):
        assert all(a.count(k) == b.count(k) == 1 for k in kept), (a, b)


def test_the_server_answers_html_as_translate_does_and_detects_languages(tagged_copy, copy_run) -> None:
    """``format: "html"`` equals `translate --format html` (its documents batched as text is); /detect
    answers in LibreTranslate's shape among the server's languages; ``source: "auto"`` on a one-pair
    server reports the detected source."""
    from nmtk.decode.load import LoadOptions
    from nmtk.serve.app import DetectRequest, LibreRequest
    from nmtk.serve.server import ServeOptions, build

    tmp, lines, tagged_lines, _, out, out_plain = tagged_copy
    app, worker, _ = build(ServeOptions(load=LoadOptions(model=tmp / "run"), workers=1))
    translate, detect = _endpoint(app, "/translate"), _endpoint(app, "/detect")
    try:
        answer = asyncio.run(translate(LibreRequest(q=[f"<p>{t}</p>" for t in tagged_lines[:10]], format="html")))
        assert answer["translatedText"] == out.splitlines()[1:11]
        # alternatives, which LibreTranslate's page asks for with every text, are none for html (as there), not a 400
        asked = asyncio.run(translate(LibreRequest(q=[f"<p>{t}</p>" for t in tagged_lines[:2]], format="html",
                                                   alternatives=3)))
        assert asked["translatedText"] == out.splitlines()[1:3] and asked["alternatives"] == [[], []], asked
        labelled = asyncio.run(translate(LibreRequest(q=f'<p lang="en">{tagged_lines[0]}</p>', format="html")))
        assert labelled["translatedText"] == out.splitlines()[1].replace("<p>", '<p lang="de">')  # as translate
        found = asyncio.run(detect(DetectRequest(q="Ein Mann fährt mit dem Fahrrad über die Brücke.")))
        assert found[0]["language"] == "de" and found[0]["confidence"] > 50
        assert {f["language"] for f in found} == {"en", "de"}
        many = asyncio.run(detect(DetectRequest(q=["A man rides a bike.", "Ein Mann fährt Fahrrad."])))
        assert [f[0]["language"] for f in many] == ["en", "de"]
        auto = asyncio.run(translate(LibreRequest(q=lines[0], source="auto")))
        assert auto["detectedLanguage"]["language"] == "en" and set(auto) == {"translatedText", "detectedLanguage"}
        from nmtk.serve.app import ApiError

        # what was detected is reported, as /detect says it (issue 77: "en 1.1" for German on an en->de server)
        german = asyncio.run(translate(LibreRequest(q="Ein Mann fährt mit dem Fahrrad.", source="auto")))
        alone = asyncio.run(detect(DetectRequest(q="Ein Mann fährt mit dem Fahrrad.")))
        assert german["detectedLanguage"] == alone[0] and alone[0]["language"] == "de"
        # and, surely German, it comes back as it is, as LibreTranslate gives it (it was translated as English)
        assert alone[0]["confidence"] >= 50 and german["translatedText"] == "Ein Mann fährt mit dem Fahrrad."
        both = asyncio.run(translate(LibreRequest(q=["Ein Mann fährt mit dem Fahrrad.", lines[0]], source="auto",
                                                  alternatives=1)))
        alike = asyncio.run(translate(LibreRequest(q=lines[0], source="en", alternatives=1)))
        assert both["translatedText"] == ["Ein Mann fährt mit dem Fahrrad.", alike["translatedText"]]
        assert both["alternatives"] == [[], alike["alternatives"]]
        # translate --source-lang auto alike: the line written as it is, the others as without it
        mixed = "\n".join([lines[0], "Ein Mann fährt mit dem Fahrrad.", lines[1]]) + "\n"
        auto = run_nmtk("translate", "-m", str(tmp / "run"), "--source-lang", "auto", stdin=mixed, env=copy_run[2])
        assert auto.returncode == 0, auto.stderr
        assert auto.stdout.splitlines() == [out_plain[0], "Ein Mann fährt mit dem Fahrrad.", out_plain[1]]
        assert "1 already in the target language, written as they are: line 2" in auto.stderr
        # an html document is identified by its words, not its markup (read whole: "de" 27 % here, not 99 %)
        marked = asyncio.run(translate(LibreRequest(q='<div class="header"><p>Ein <b>Mann</b> fährt.</p></div>',
                                                    source="auto", format="html")))
        assert marked["detectedLanguage"] == asyncio.run(detect(DetectRequest(q="Ein Mann fährt.")))[0]
        for unknown in ("Hund", "xyz", "1234567890"):  # the identifier recognises nothing: no confidence
            assert {f["confidence"] for f in asyncio.run(detect(DetectRequest(q=unknown)))} == {0.0}
        short = asyncio.run(detect(DetectRequest(q="Hund.")))
        assert short[0]["confidence"] < 25  # a word says little of its language
        with pytest.raises(ApiError, match="q is empty"):
            asyncio.run(detect(DetectRequest(q="")))

        with pytest.raises(ApiError, match="malformed html: line 1, column 12: </b> where </i> was expected"):
            asyncio.run(translate(LibreRequest(q="<b>a <i>dog</b></i>", format="html")))
        with pytest.raises(ApiError, match="malformed html: q\\[1\\]: line 1, column 5: </b> where </i>"):
            asyncio.run(translate(LibreRequest(q=["<b>a dog</b>", "<i>a</b>", "<b>b</b>"], format="html")))
        with pytest.raises(ApiError, match='format "html": scores cannot be asked'):
            asyncio.run(translate(LibreRequest(q="<b>a</b>", format="html", scores=True, alternatives=3)))
    finally:
        worker.stop(timeout=30)


def test_markup_whose_translation_lost_a_number_is_made_again_with_its_numbers_carried(copy_run, monkeypatch) -> None:
    """As a line of text is: the demo model wrote "&copy; 2024 Dog Park" as "&copy; Basketballspieler der
    Nummer4444." and html had no second try. Here the first search loses everything."""
    from nmtk.decode.load import LoadOptions, load_translator
    from nmtk.decode.markup import translate_markup
    from nmtk.decode.search.config import SearchConfig
    from nmtk.model_source import resolve_model
    from nmtk.precision import Precision

    tmp, _, _ = copy_run
    translator = load_translator(resolve_model(tmp / "run"), LoadOptions(precision=Precision.fp32, threads=1))
    monkeypatch.setattr(translator.src_pipe, "spells", lambda char: True)
    calls: list[list[str]] = []
    real = translator.hypotheses

    def losing_first(lines, search, **kwargs):  # noqa: ANN001, ANN202 - the translator's own signature
        calls.append(list(lines))
        return [[] for _ in lines] if len(calls) == 1 else real(lines, search, **kwargs)

    monkeypatch.setattr(translator, "hypotheses", losing_first)
    documents = ["<p>the <b>red</b> cat runs 12 times</p>", "<p>a cat</p>"]
    got = translate_markup(translator, documents, SearchConfig(beam=2), "html")
    assert len(calls) == 2 and calls[1] == ["the red cat runs times"], calls  # the number out of the words
    assert "12" in got[0] and got[0].count("<b>") == 1 and got[1] == "<p></p>", got  # only the one made again


def test_what_has_no_letter_is_kept_as_it_is_in_text_and_html(copy_run, monkeypatch) -> None:
    """A line or sentence of punctuation, symbols and numbers alone (``...``, ``* * *``, ``3``) is nothing to translate:
    given to a model, it writes a sentence of its own (the demo model made "..." "Ein Taucher."). Text
    and html keep it as it is, the rest translated as before. (The copy model's vocabulary spells no
    punctuation, which would be carried anyway: here it spells everything.)"""
    from nmtk.decode.load import LoadOptions, load_translator
    from nmtk.decode.markup import translate_markup
    from nmtk.decode.search.config import SearchConfig
    from nmtk.decode.stream import Engine, TranslateOptions
    from nmtk.model_source import resolve_model
    from nmtk.precision import Precision

    tmp, _, _ = copy_run
    translator = load_translator(resolve_model(tmp / "run"), LoadOptions(precision=Precision.fp32, threads=1))
    monkeypatch.setattr(translator.src_pipe, "spells", lambda char: True)
    search = SearchConfig(beam=2)
    html = ["<p>...</p>", "<p>the <b>red</b> cat runs</p>", "<ul><li>* * *</li><li>a cat</li></ul>",
            "<tr><td>3</td><td>12:30</td></tr>"]
    got = translate_markup(translator, html, search, "html")
    assert got[0] == html[0] and got[2].startswith("<ul><li>* * *</li><li>"), got
    assert got[1] == "<p>the <b>red</b> cat runs</p>" and got[2] == html[2] and got[3] == html[3], got
    engine = Engine(translator, search)
    options = TranslateOptions()
    lines = ["...", "the red cat runs", "* * *", "3", "$5 - 12:30"]  # numbers alone: "Drei" from the demo model
    assert engine.carried(lines, 1, options, set()) == {0: "...", 2: "* * *", 3: "3", 4: "$5 - 12:30"}


def test_a_lines_list_marker_is_written_back_before_its_translation(copy_run, monkeypatch) -> None:
    """``1. ``, ``2) ``, ``- ``, ``a) `` begin a list item, not a sentence: the model is given the item alone
    (the demo model dropped "1." and "2)") and the marker is written back, as `serve` writes a text's
    back; read as typed, or with n-best lists, the line is the model's whole."""
    from nmtk.decode.load import LoadOptions, load_translator
    from nmtk.decode.search.config import SearchConfig
    from nmtk.decode.stream import Engine, TranslateOptions, _translated
    from nmtk.model_source import resolve_model
    from nmtk.precision import Precision

    tmp, _, _ = copy_run
    translator = load_translator(resolve_model(tmp / "run"), LoadOptions(precision=Precision.fp32, threads=1))
    monkeypatch.setattr(translator.src_pipe, "spells", lambda char: True)
    given: list[str] = []
    hypotheses = translator.hypotheses

    def recorded(sources, *args, **kwargs):
        given.extend(sources)
        return hypotheses(sources, *args, **kwargs)

    monkeypatch.setattr(translator, "hypotheses", recorded)
    lines = ["1. the red cat runs", "2)  a dog", "- the cat", "a) a red dog", "the cat.The dog", "1.5 cats"]
    out = _translated(Engine(translator, SearchConfig(beam=2)), TranslateOptions(), lines, 1)
    # and sentences glued to each other set apart ("snow.A cat" was one word to the model)
    assert given[:6] == ["the red cat runs", "a dog", "the cat", "a red dog", "the cat. The dog", "1.5 cats"], given
    assert [line[:4] for line in out[:4]] == ["1. t", "2)  ", "- th", "a) a"] and not out[4].startswith("1"), out
    given.clear()
    _translated(Engine(translator, SearchConfig(beam=2, nbest=2)), TranslateOptions(), lines[:1], 1)
    assert given == lines[:1]


def test_a_subtitle_file_keeps_its_numbers_timings_and_notes_and_each_cue_reads_as_one_sentence(copy_run) -> None:
    """`--format srt|vtt|ass`: a cue's lines are one sentence (translated as the joined line is, wrapped back
    over one line where it fits one, else two), a dialogue cue's lines each a speaker's (dashes kept), and
    the numbers, timings, the WebVTT header and notes written as they were, line endings included. Read as
    text, ``WEBVTT`` and ``NOTE`` lines went to the model; an ASS code stays where it was (``{\\an8}``, the
    cue at the top)."""
    tmp, _, env = copy_run
    one, two, three = _lines(tmp, 3)
    half = one.index(" ", len(one) // 2)
    srt = (f"1\r\n00:00:01,000 --> 00:00:04,000\r\n{{\\an8}}{one[:half]}\r\n{one[half + 1:]}\r\n\r\n"
           f"2\r\n00:00:05,000 --> 00:00:08,000\r\n- {two}\r\n- <i>{three}</i>\r\n")
    result = run_nmtk("translate", "-m", str(tmp / "run"), "--format", "srt", stdin=srt, env=env)
    assert result.returncode == 0 and "translated 2 cues in" in result.stderr, result.stderr  # the last line
    plain = run_nmtk("translate", "-m", str(tmp / "run"), "--format", "html", stdin=f"{one}\n{two}\n<i>{three}</i>\n",
                     env=env).stdout.splitlines()
    assert result.stdout.endswith("\r\n") and not result.stdout.endswith("\r\n\r\n")
    cues = result.stdout.removesuffix("\r\n").split("\r\n\r\n")
    first, second = (cue.split("\r\n") for cue in cues)
    assert first[:2] == ["1", "00:00:01,000 --> 00:00:04,000"] and " ".join(first[2:]) == "{\\an8}" + plain[0], cues
    assert len(first) == 3 + (len(plain[0]) > 42)  # wrapped back over two lines where one would be wider
    assert second == ["2", "00:00:05,000 --> 00:00:08,000", f"- {plain[1]}", f"- {plain[2]}"], cues
    vtt = f"WEBVTT\n\nNOTE a note\n\nintro\n00:01.000 --> 00:04.000 align:start\n{two}\n"
    (tmp / "film.vtt").write_text(vtt)  # a subtitle file's name chooses its format: read as lines, its header
    result = run_nmtk("translate", "-m", str(tmp / "run"), "-i", str(tmp / "film.vtt"), env=env)  # went to the model
    assert result.returncode == 0 and "format: vtt (from the name film.vtt" in result.stderr, result.stderr
    assert result.stdout == f"WEBVTT\n\nNOTE a note\n\nintro\n00:01.000 --> 00:04.000 align:start\n{plain[1]}\n"
    ass = ("[Script Info]\nScriptType: v4.00+\n\n[Events]\nFormat: Layer, Start, End, Style, Name, MarginL, MarginR, "
           f"MarginV, Effect, Text\nDialogue: 0,0:00:01.00,0:00:04.00,Default,,0,0,0,,{{\\an8}}{two}\n")
    (tmp / "film.ssa").write_text(ass)  # SubStation Alpha: its Dialogue texts, by the name
    result = run_nmtk("translate", "-m", str(tmp / "run"), "-i", str(tmp / "film.ssa"), env=env)
    assert result.returncode == 0 and "format: ass (from the name film.ssa" in result.stderr, result.stderr
    assert result.stdout == ass.replace(f"}}{two}", f"}}{plain[1]}"), result.stdout
    broken = f"WEBVTT\n\n00:01.000 --> 00:02.000\n<i>{two}</b>\n\n00:03.000 --> 00:04.000\n<v Bo>{two}\n"
    result = run_nmtk("translate", "-m", str(tmp / "run"), "--format", "vtt", stdin=broken, env=env)
    assert result.returncode == 0 and "translated without its tags" in result.stderr, result.stderr  # not the file
    assert result.stdout == (f"WEBVTT\n\n00:01.000 --> 00:02.000\n{plain[1]}\n\n"
                             f"00:03.000 --> 00:04.000\n<v Bo>{plain[1]}\n")


def test_an_xliff_file_gets_its_targets_filled_and_its_sources_kept(copy_run, tmp_path: Path) -> None:
    """`--format xliff` (or a FILE.xlf): each segment's source translated as `--format xml` translates
    it, written into its target; a target holding a translation kept; read as an xml document the sources
    were translated in place, which is now one line saying to use xliff."""
    tmp, _, env = copy_run
    one, two = _lines(tmp, 2)
    words = one.split()
    marked = f'{" ".join(words[:2])} <g id="1">{" ".join(words[2:4])}</g> {" ".join(words[4:])}'
    units = (f'<trans-unit id="1">\n<source>{marked}</source>\n</trans-unit>\n'
             f'<trans-unit id="2"><source>{two}</source><target></target></trans-unit>\n'
             f'<trans-unit id="3"><source>{two}</source><target>kept</target></trans-unit>\n')
    xliff = f'<?xml version="1.0"?>\n<xliff version="1.2"><file><body>\n{units}</body></file></xliff>\n'
    source = tmp_path / "doc.xlf"
    source.write_text(xliff)
    result = run_nmtk("translate", "-m", str(tmp / "run"), "-i", str(source), env=env)
    assert result.returncode == 0, result.stderr
    assert "format: xliff" in result.stderr and "translated 2 of 3 segments (1 kept" in result.stderr, result.stderr
    xml = run_nmtk("translate", "-m", str(tmp / "run"), "--format", "xml", stdin=f"{marked}\n{two}\n", env=env)
    first, second = xml.stdout.splitlines()
    mt = '<target state="needs-review-translation" state-qualifier="leveraged-mt">'  # for a CAT tool's review
    assert result.stdout == xliff.replace(f"{marked}</source>\n", f"{marked}</source>\n{mt}{first}</target>\n"
                                          ).replace("<target></target>", f"{mt}{second}</target>")
    as_xml = run_nmtk("translate", "-m", str(tmp / "run"), "--format", "xml", "--document", "-i", str(source), env=env)
    assert as_xml.returncode == 1 and "an XLIFF file: --format xliff writes" in as_xml.stderr, as_xml.stderr
    skipped = run_nmtk("translate", "-m", str(tmp / "run"), "-i", str(source), "--skip", "1", env=env)
    assert skipped.returncode == 1 and "--format xliff: --skip cannot be used with it (the whole input is read" \
        in skipped.stderr, skipped.stderr
    seg = (f'<trans-unit id="4"><source>{marked} {two}</source><seg-source><mrk mtype="seg" mid="1">{marked}</mrk> '
           f'<mrk mtype="seg" mid="2">{two}</mrk></seg-source></trans-unit>\n')  # a CAT tool's sentences
    source.write_text(xliff.replace("</body>", f"{seg}</body>"))
    segmented = run_nmtk("translate", "-m", str(tmp / "run"), "-i", str(source), env=env)
    assert segmented.returncode == 0, segmented.stderr
    assert f'</seg-source>{mt}<mrk mtype="seg" mid="1">{first}</mrk> <mrk mtype="seg" mid="2">{second}</mrk></target>' \
        in segmented.stdout, segmented.stdout
    source.write_text(xliff.replace("<file>", '<file source-language="en-US" target-language="fr">'))
    french = run_nmtk("translate", "-m", str(tmp / "run"), "-i", str(source), env=env)  # not this model's target
    assert french.returncode == 1 and "an XLIFF file to translate into fr (its languages: en-US → fr); this model " \
        "translates en into de" in french.stderr, french.stderr
