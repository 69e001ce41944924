"""`nmtk score`: every figure equals sacreBLEU's own API on the same fixtures; paper BLEU by hand."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import sacrebleu
from sacrebleu.metrics import BLEU, CHRF, TER

HYP = ["The cat sits on the mat.", "A man rides a red bike down the street.", "Two dogs play in the snow."]
REF = ["The cat sat on the mat.", "A man is riding a red bicycle down the street.", "Two dogs are playing in snow."]
REF2 = ["A cat sits on the mat.", "A man rides a red bike along the road.", "Two dogs play in the snow."]


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    paths = {}
    annotated = {"scored": [f"-{i}.25\t{h}" for i, h in enumerate(HYP)],  # translate --print-scores
                 "aligned": [f"{h}\t0-0 1-2" if i else f"{h}\t" for i, h in enumerate(HYP)],  # --print-alignment
                 "nbest": [f"{i}\t-1.5e-3\t{h}" for i, h in enumerate(HYP)]}  # --nbest
    for name, lines in (("hyp", HYP), ("ref", REF), ("ref2", REF2), ("short", HYP[:2]), ("empty", []),
                        *annotated.items()):
        paths[name] = tmp_path / f"{name}.txt"
        paths[name].write_text("".join(line + "\n" for line in lines))
    return paths


def test_scores_equal_sacrebleu(nmtk, files) -> None:
    result = nmtk("score", "-r", str(files["ref"]), "--metrics", "bleu,chrf,ter", "--json", stdin="\n".join(HYP) + "\n")
    assert result.returncode == 0, result.stderr
    got = json.loads(result.stdout)
    metric = BLEU()
    bleu = metric.corpus_score(HYP, [REF])
    assert got["bleu"]["score"] == pytest.approx(bleu.score, abs=1e-4)
    assert got["bleu"]["precisions"] == pytest.approx(bleu.precisions, abs=1e-4)
    assert got["bleu"]["bp"] == pytest.approx(bleu.bp, abs=1e-4)
    assert got["bleu"]["signature"] == str(metric.get_signature())
    assert got["chrf"]["score"] == pytest.approx(CHRF().corpus_score(HYP, [REF]).score, abs=1e-4)
    assert got["ter"]["score"] == pytest.approx(TER().corpus_score(HYP, [REF]).score, abs=1e-4)


def test_options_pass_through_and_multiple_references(nmtk, files) -> None:
    result = nmtk("score", "-r", str(files["ref"]), "-r", str(files["ref2"]), "--lowercase", "--tokenize", "intl",
                  "--metrics", "bleu", "--json", str(files["hyp"]))
    assert result.returncode == 0, result.stderr
    expected = sacrebleu.corpus_bleu(HYP, [REF, REF2], lowercase=True, tokenize="intl")
    got = json.loads(result.stdout)["bleu"]
    assert got["score"] == pytest.approx(expected.score, abs=1e-4)
    assert "nrefs:2" in got["signature"] and "case:lc" in got["signature"] and "tok:intl" in got["signature"]


def test_compressed_references_and_hypotheses_are_read_as_their_text(nmtk, files, tmp_path: Path) -> None:
    """sacreBLEU reads a ``ref.de.gz``; so does `score` (gzip, xz or bzip2, known by their first bytes)."""
    import bz2
    import gzip

    ref, hyp = tmp_path / "ref.gz", tmp_path / "hyp.txt.bz2"
    ref.write_bytes(gzip.compress(files["ref"].read_bytes()))
    hyp.write_bytes(bz2.compress(files["hyp"].read_bytes()))
    plain = nmtk("score", "-r", str(files["ref"]), "--json", str(files["hyp"]))
    packed = nmtk("score", "-r", str(ref), "--json", str(hyp))
    assert packed.returncode == 0, packed.stderr
    assert json.loads(packed.stdout) == json.loads(plain.stdout)
    ref.write_bytes(gzip.compress(files["ref"].read_bytes())[:30])  # cut short
    cut = nmtk("score", "-r", str(ref), str(files["hyp"]))
    assert cut.returncode == 1 and f"{ref}: corrupt gzip file" in cut.stderr, cut.stderr


def test_human_output_has_sacrebleu_line(nmtk, files) -> None:
    result = nmtk("score", "-r", str(files["ref"]), str(files["hyp"]))
    assert result.returncode == 0
    bleu = BLEU()
    score = bleu.corpus_score(HYP, [REF])
    line = score.format(signature=str(bleu.get_signature()))
    assert line in result.stdout.splitlines()
    assert "BLEU" in result.stderr  # the table


def test_paper_bleu_by_hand(nmtk, tmp_path: Path) -> None:
    """hyp: the cat ##AT##-##AT## like dog sat .  (7 tokens); ref adds "on the mat" (10 tokens).

    Matches: 1-grams 7/7, 2-grams 5/6, 3-grams 4/5, 4-grams 3/4 ("sat ." is not in the reference).
    Geometric mean = (1 · 5/6 · 4/5 · 3/4)^(1/4) = 0.5^(1/4); BP = exp(1 - 10/7).
    """
    (tmp_path / "h").write_text("the cat-like dog sat.\n")
    (tmp_path / "r").write_text("the cat-like dog sat on the mat.\n")
    result = nmtk("score", "-r", str(tmp_path / "r"), "--paper-bleu", "--lang", "en", "--metrics", "bleu",
                  "--json", str(tmp_path / "h"))
    assert result.returncode == 0, result.stderr
    got = json.loads(result.stdout)["bleu"]
    by_hand = 100 * math.exp(1 - 10 / 7) * 0.5**0.25
    assert got["score"] == pytest.approx(by_hand, abs=1e-3)
    assert (got["sys_len"], got["ref_len"]) == (7, 10) and "tok:none" in got["signature"]


def test_several_systems_with_significance(nmtk, files, tmp_path: Path) -> None:
    worse = tmp_path / "worse.txt"
    worse.write_text("The cat.\nA man.\nTwo dogs.\n")
    result = nmtk("score", "-r", str(files["ref"]), str(files["hyp"]), str(worse), "--significance",
                  "--samples", "100", "--json")
    assert result.returncode == 0, result.stderr
    got = json.loads(result.stdout)
    assert set(got["systems"]) == {str(files["hyp"]), str(worse)}
    assert got["systems"][str(worse)]["bleu"]["score"] == pytest.approx(
        BLEU().corpus_score(worse.read_text().splitlines(), [REF]).score, abs=1e-4)
    sig = got["significance"]
    assert "p_value" in sig[str(worse)]["bleu"] and "ci" in sig[str(files["hyp"])]["chrf"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["-r", "{ref}", "{short}"], "has 2 lines but reference"),
        (["-r", "{ref}", "{empty}"], "the hypothesis is empty"),
        (["-r", "{missing}", "{hyp}"], "reference file not found"),
        (["-r", "{ref}", "--metrics", "bleu,meteor", "{hyp}"], "unknown metric meteor"),
        # translate's annotated output was scored with its numbers as words
        (["-r", "{ref}", "{scored}"], "every line is SCORE<TAB>TRANSLATION (translate --print-scores), not a "
                                      "translation alone: score the translations (cut -f2- "),
        (["-r", "{ref}", "{aligned}"], "TRANSLATION<TAB>ALIGNMENT (translate --print-alignment)"),
        (["-r", "{ref}", "{nbest}"], "N<TAB>SCORE<TAB>HYPOTHESIS (translate --nbest)"),
    ],
)
def test_errors_are_one_line(nmtk, files, tmp_path: Path, args: list[str], message: str) -> None:
    paths = {**{k: str(v) for k, v in files.items()}, "missing": str(tmp_path / "nope.txt")}
    result = nmtk("score", *[a.format(**paths) for a in args])
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], result.stderr


def test_test_set_offline_is_a_clear_message(nmtk, files, tmp_path: Path) -> None:
    result = nmtk("score", "--test-set", "wmt14", "--langpair", "en-de", str(files["hyp"]),
                  env={"SACREBLEU": str(tmp_path / "sacrebleu-cache"), "https_proxy": "http://127.0.0.1:9",
                       "http_proxy": "http://127.0.0.1:9"})
    assert result.returncode == 1
    assert "use -r" in result.stderr or "-r REF" in result.stderr


def test_paper_bleu_significance_scores_the_same_text_as_the_table(nmtk, files, tmp_path: Path) -> None:
    worse = tmp_path / "worse.txt"
    worse.write_text("The cat.\nA man.\nTwo dogs.\n")
    result = nmtk("score", "-r", str(files["ref"]), str(files["hyp"]), str(worse), "--significance", "--samples",
                  "50", "--paper-bleu", "--lang", "en", "--json")
    assert result.returncode == 0, result.stderr
    got = json.loads(result.stdout)
    for name in (str(files["hyp"]), str(worse)):
        for metric in ("bleu", "chrf"):  # chrF on raw text in both tables; BLEU on paper tokens in both
            table, bootstrap = got["systems"][name][metric]["score"], got["significance"][name][metric]["score"]
            assert bootstrap == pytest.approx(table, abs=1e-3), (name, metric)


@pytest.mark.parametrize(("name", "langpair", "run_lang", "lang"), [
    ("newstest2014-deen-ref.de.sgm", None, None, "de"), ("test_2016_flickr.raw.fr", None, None, "fr"),
    ("ref.cs.gz", None, None, "cs"), ("reference.txt", "en-de", None, "de"), ("ref.de", None, "fr", "fr"),
])
def test_paper_bleu_language_comes_from_the_run_the_pair_or_the_reference_name(
        name: str, langpair: str | None, run_lang: str | None, lang: str) -> None:
    from nmtk.score import target_language

    assert target_language(None, [Path(name)], langpair, run_lang) == lang
    assert target_language("en", [Path(name)], langpair, run_lang) == "en"  # --lang wins


def test_paper_bleu_without_a_language_and_with_tokenize_are_errors(nmtk, tmp_path: Path) -> None:
    (tmp_path / "reference").write_text("a b c.\n")
    (tmp_path / "h").write_text("a b c.\n")
    unknown = nmtk("score", "-r", str(tmp_path / "reference"), "--paper-bleu", str(tmp_path / "h"))
    assert unknown.returncode == 1 and "pass --lang" in unknown.stderr and len(unknown.stderr.splitlines()) == 1
    both = nmtk("score", "-r", str(tmp_path / "reference"), "--paper-bleu", "--lang", "en", "--tokenize", "intl",
                str(tmp_path / "h"))
    assert both.returncode == 1 and "--tokenize intl with --paper-bleu" in both.stderr


def _corpus(n: int = 60) -> tuple[list[str], list[str], list[str]]:
    """References, a system close to them and one far from them (every third word dropped)."""
    import random

    rng = random.Random(5)
    words = "the a man woman dog cat runs sits on in red blue big small park street ball".split()
    refs = [" ".join(rng.choice(words) for _ in range(rng.randint(5, 12))) + "." for _ in range(n)]
    close = [r if i % 5 else r.replace(" the ", " a ", 1) for i, r in enumerate(refs)]
    far = [" ".join(w for j, w in enumerate(r.split()) if j % 3) for r in refs]
    return refs, close, far


def test_identical_systems_are_not_significantly_different() -> None:
    """Koehn's paired bootstrap: two identical systems tie on every resample, p = 1 (sacreBLEU 2.6's own
    statistic says 1/(n+1) for them, the defect of issue 44)."""
    from sacrebleu.significance import PairedTest

    from nmtk.score import Scorer

    refs, close, _ = _corpus()
    ours = Scorer(metrics=("bleu", "chrf", "ter")).significance([("a", close), ("b", list(close))], [refs], 200)
    assert all(ours["b"][m]["p_value"] == 1.0 for m in ("bleu", "chrf", "ter")), ours["b"]
    _, theirs = PairedTest([("a", close), ("b", list(close))], {"BLEU": BLEU()}, [refs], test_type="bs",
                           n_samples=200)()
    assert theirs["BLEU"][1].p_value < 0.01  # what sacreBLEU reports for the same files


def test_systems_that_differ_are_significant_as_in_sacrebleu() -> None:
    """A system far worse than the baseline, and the baseline against it: p as small as sacreBLEU's
    (both < 0.01), whichever is first; scores and means equal sacreBLEU's to rounding."""
    from sacrebleu.significance import PairedTest

    from nmtk.score import Scorer

    refs, close, far = _corpus()
    for first, second in ((close, far), (far, close)):
        ours = Scorer(metrics=("bleu", "chrf", "ter")).significance([("a", first), ("b", second)], [refs], 200)
        metrics = {"BLEU": BLEU(), "chrF2": CHRF(), "TER": TER()}
        _, theirs = PairedTest([("a", first), ("b", second)], metrics, [refs], test_type="bs", n_samples=200)()
        for ours_name, their_name in (("bleu", "BLEU"), ("chrf", "chrF2"), ("ter", "TER")):
            mine, sacre = ours["b"][ours_name], theirs[their_name][1]
            assert mine["p_value"] < 0.01 and sacre.p_value < 0.01, (ours_name, mine, sacre)
            assert mine["score"] == pytest.approx(sacre.score, abs=1e-3)
            assert mine["mean"] == pytest.approx(sacre.mean, abs=1e-3)  # the same seed, the same resamples
