"""M2M-100 interop: random M2M-100-shaped models built locally (no network), with M2M100Tokenizer's files
and with NLLB's, imported as multilingual runs, compared with transformers (logits, greedy outputs per
target language), fine-tuned, and exported back."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest

pytest.importorskip("transformers")
torch = pytest.importorskip("torch")

from conftest import run_nmtk  # noqa: E402
from make_m2m100 import SHAPE, build, build_nllb  # noqa: E402

pytestmark = pytest.mark.slow
SENTENCES = ["a man rides a green bike.", "two young dogs play in the park near the old house.", "the child sits."]


@dataclass
class Imported:
    """A transformers folder, the run imported from it, its three languages (as the run names them:
    en, de, cs), and how its tokenizer spells a language's code."""

    kind: str
    folder: Path
    run: Path
    langs: tuple[str, str, str]
    code_format: str

    def code(self, lang: str) -> str:
        return self.code_format.format(lang)

    def transformers(self, folder: Path | None = None):
        from transformers import M2M100ForConditionalGeneration, M2M100Tokenizer, NllbTokenizer

        folder = folder or self.folder
        tokenizer = NllbTokenizer if self.kind == "nllb" else M2M100Tokenizer
        return M2M100ForConditionalGeneration.from_pretrained(folder).eval(), tokenizer.from_pretrained(folder)

    def lang_id(self, tok, lang: str) -> int:
        return tok.convert_tokens_to_ids(self.code(lang))


KINDS = {"m2m100": (build, ("en", "de", "cs"), "__{}__"),
         "nllb": (build_nllb, ("eng_Latn", "deu_Latn", "ces_Latn"), "{}")}


@pytest.fixture(scope="module", params=list(KINDS))
def m2m(request, tmp_path_factory) -> Imported:
    """A random M2M-100-shaped model (d_model 256, 2+2 layers) with either tokenizer, and its import."""
    make, langs, code = KINDS[request.param]
    tmp = tmp_path_factory.mktemp(request.param)
    folder = make(tmp / f"{request.param}-toy", **SHAPE)
    result = run_nmtk("import", str(folder), "-o", str(tmp / "run"), "--languages", ",".join(langs))
    assert result.returncode == 0, result.stderr
    assert f"--source-lang {langs[0]} --target-lang {langs[1]}" in result.stdout + result.stderr
    return Imported(request.param, folder, tmp / "run", langs, code)


def _translator(run: Path, src: str, tgt: str):
    from nmtk.decode.load import LoadOptions, load_translator
    from nmtk.model_source import resolve_model
    from nmtk.precision import Precision

    return load_translator(resolve_model(run), LoadOptions(source_lang=src, target_lang=tgt, threads=2,
                                                           precision=Precision.fp32))


def test_the_run_knows_every_pair_and_its_codes(m2m) -> None:
    from nmtk.manifest import Manifest

    langs = m2m.langs
    manifest = Manifest.read(m2m.run / "manifest.json")
    assert manifest.tag_style == "m2m-100" and list(manifest.tags) == list(langs)
    assert manifest.pairs == [f"{a}-{b}" for a in langs for b in langs if a != b]
    translator = _translator(m2m.run, langs[0], langs[1])
    assert translator.src_pipe.prefix == [manifest.tags[langs[0]]]
    assert translator.tgt_pipe.starts == (manifest.tags[langs[1]],)
    _, tok = m2m.transformers()
    hf_ids = translator.src_pipe.subwords.hf_ids
    assert all(hf_ids[manifest.tags[lang]] == m2m.lang_id(tok, lang) for lang in langs)


@pytest.mark.parametrize(("s", "t"), [(0, 1), (1, 2)])
def test_imported_m2m100_gives_transformers_logits(m2m, s, t) -> None:
    from nmtk.vocab import BOS_ID, EOS_ID, PAD_ID

    src, tgt = m2m.langs[s], m2m.langs[t]
    hf, tok = m2m.transformers()
    tok.src_lang = src  # M2M100Tokenizer: "en"; NllbTokenizer: "eng_Latn", its code itself
    translator = _translator(m2m.run, src, tgt)
    model, src_pipe = translator.model, translator.src_pipe
    hf_ids = list(src_pipe.subwords.hf_ids)
    inverse = {h: i for i, h in enumerate(hf_ids)}  # HF </s> -> nmtk </s> (nmtk's <s> is its copy)
    batch = tok(SENTENCES, return_tensors="pt", padding=True)
    ours = [[inverse[int(t)] for t, m in zip(row, mask, strict=True) if m]
            for row, mask in zip(batch.input_ids, batch.attention_mask, strict=True)]
    assert [ids[:-1] for ids in ours] == [src_pipe.encode(s) for s in SENTENCES] and ours[0][-1] == EOS_ID
    hf_tgt = torch.tensor([[hf.config.decoder_start_token_id, m2m.lang_id(tok, tgt), 5, 9, 11, 7]] * len(SENTENCES))
    width = max(map(len, ours))
    with torch.no_grad():
        expected = hf(**batch, decoder_input_ids=hf_tgt).logits
        logits = model(torch.tensor([x + [PAD_ID] * (width - len(x)) for x in ours]),
                       torch.tensor([[BOS_ID] + [inverse[int(t)] for t in row[1:]] for row in hf_tgt]))
    order = torch.tensor([inverse[j] for j in range(expected.size(-1))])
    assert float((logits[..., order] - expected).abs().max()) < 1e-4


@pytest.mark.parametrize(("s", "t"), [(0, 1), (0, 2), (1, 0)])
def test_imported_m2m100_decodes_greedily_as_transformers(m2m, s, t) -> None:
    """200 lines, greedy, 12 new tokens at most (the target code among them): the same tokens."""
    from helpers import synthetic_pairs

    from nmtk.decode.search.config import SearchConfig

    src, tgt = m2m.langs[s], m2m.langs[t]
    hf, tok = m2m.transformers()
    tok.src_lang = src  # M2M100Tokenizer: "en"; NllbTokenizer: "eng_Latn", its code itself
    translator = _translator(m2m.run, src, tgt)
    hf_ids = list(translator.tgt_pipe.subwords.hf_ids)
    lines = [a if s == 0 else b for a, b in synthetic_pairs(200, 11)]
    ours = translator.hypotheses_of_ids(translator.encode(lines), SearchConfig(beam=1, max_len_a=0.0, max_len_b=11))
    same = 0
    for start in range(0, len(lines), 50):
        batch = tok(lines[start : start + 50], return_tensors="pt", padding=True)
        with torch.no_grad():
            generated = hf.generate(**batch, num_beams=1, do_sample=False, max_new_tokens=12,
                                    forced_bos_token_id=m2m.lang_id(tok, tgt))
        for row, hyps in zip(generated, ours[start : start + 50], strict=True):
            expected = [t for t in row[1:].tolist() if t != hf.config.pad_token_id]
            mine = [hf_ids[t] for t in hyps[0].tokens]
            n = min(len(expected), len(mine))
            same += n > 1 and mine[:n] == expected[:n] and mine[0] == m2m.lang_id(tok, tgt)
    assert same >= 0.99 * len(lines), same
    text = translator.detokenize(ours[0][0])
    assert not any(m2m.code(lang) in text for lang in m2m.langs), "language codes (the forced first one, and any " \
        "the model repeats) are not text"


def test_import_then_export_gives_the_m2m100_files_back(m2m, tmp_path) -> None:
    from helpers import assert_same_tensors

    folder, run = m2m.folder, m2m.run
    result = run_nmtk("export", str(run), "-o", str(tmp_path / "hf"), "--format", "hf")
    assert result.returncode == 0 and "output bias" not in result.stderr, result.stderr
    assert_same_tensors(folder, tmp_path / "hf")
    vocabulary = "tokenizer.json" if m2m.kind == "nllb" else "vocab.json"
    for name in (vocabulary, "config.json", "tokenizer_config.json"):
        assert json.loads((tmp_path / "hf" / name).read_text()) == json.loads((folder / name).read_text()), name
    spm = "sentencepiece.bpe.model"
    assert (tmp_path / "hf" / spm).read_bytes() == (folder / spm).read_bytes()
    _, tok = m2m.transformers(tmp_path / "hf")  # transformers reads the folder back
    lang = m2m.langs[1]
    assert m2m.lang_id(tok, lang) == m2m.lang_id(m2m.transformers()[1], lang)


def test_translate_and_bad_requests_of_an_m2m100_run(m2m) -> None:
    run, (en, de, cs) = m2m.run, m2m.langs
    ok = run_nmtk("translate", "-m", str(run), "--source-lang", en, "--target-lang", cs, stdin="a man rides.\n")
    assert ok.returncode == 0 and ok.stdout.strip() and m2m.code(cs) not in ok.stdout, ok.stderr
    cases = [(("--target-lang", de), f"→ {de}: this model has it from {en}, {cs}: say which with --source-lang"),
             (("--source-lang", en, "--target-lang", "fr"), f"{en} → fr: not a pair of this model"),
             (("--source-lang", en), "say which target with --target-lang")]
    for options, message in cases:
        result = run_nmtk("translate", "-m", str(run), *options, stdin="a man rides.\n")
        assert result.returncode == 1 and message in result.stderr, result.stderr
    languages = run_nmtk("import", str(m2m.folder), "-o", str(run.parent / "other"), "--languages", f"{en},fr")
    assert languages.returncode == 1 and "--languages fr: not a language of" in languages.stderr
    ct2 = run_nmtk("export", str(run), "-o", str(run.parent / "ct2"))
    assert ct2.returncode == 1 and "CTranslate2's own converter" in ct2.stderr


def test_an_imported_m2m100_model_fine_tunes(m2m, tmp_path) -> None:
    """The imported run's recipe with [data] pointed at toy corpora of two of its pairs: prepare reuses
    its vocabulary and codes (targets begin with theirs), and training starts from its weights."""
    import tomli_w
    import tomllib
    from helpers import synthetic_pairs, write_lines

    from nmtk.data.binarized import BinarizedSplit
    from nmtk.manifest import Manifest, PreparedData
    from nmtk.pair import Pair

    run, (en, de, _) = m2m.run, m2m.langs
    root = tmp_path / "root"
    for split, n, seed in (("train", 200, 1), ("valid", 20, 2)):
        pairs = synthetic_pairs(n, seed)
        write_lines(root / "toy" / f"{split}.{en}", [a for a, _ in pairs])
        write_lines(root / "toy" / f"{split}.{de}", [b for _, b in pairs])
    recipe = tomllib.loads((run / "recipe.toml").read_text())
    recipe["name"] = "m2m-finetune"
    recipe["data"] = {"pairs": [
        {"source_lang": a, "target_lang": b,
         "train": [{"name": "train", "source": f"toy/train.{a}", "target": f"toy/train.{b}"}],
         "valid": {"name": "valid", "source": f"toy/valid.{a}", "target": f"toy/valid.{b}"}}
        for a, b in ((en, de), (de, en))],
        "clean": {"duplicates": False, "copies": False, "scripts": 1.0, "language": False, "numbers": False}}
    recipe["batching"] = {"batch_tokens": 512}
    recipe["train"] = {"max_updates": 6, "validate_every_updates": 6, "save_every_updates": 3, "keep_last": 5,
                       "precision": "fp32"}
    recipe["average"] = {"last": 1}
    path = tmp_path / "finetune.toml"
    path.write_text(tomli_w.dumps(recipe))
    result = run_nmtk("train", str(path), "--init-from", str(run), "--data", str(tmp_path / "data"),
                      "--run-dir", str(tmp_path / "tuned"), "--data-root", str(root))
    assert result.returncode == 0, result.stderr
    manifest = Manifest.read(tmp_path / "data" / "manifest.json")
    imported = Manifest.read(run / "manifest.json")
    assert manifest.tag_style == "m2m-100" and manifest.tags == {k: imported.tags[k] for k in (en, de)}
    split = BinarizedSplit(PreparedData(tmp_path / "data"), f"train.{en}-{de}", Pair(en, de))
    assert int(split.src[0][0]) == imported.tags[en] and int(split.tgt[0][0]) == imported.tags[de]
    tuned = run_nmtk("translate", "-m", str(tmp_path / "tuned"), "--source-lang", de, "--target-lang", en,
                     stdin="der Hund.\n")
    assert tuned.returncode == 0 and m2m.code(en) not in tuned.stdout, tuned.stderr
    # The fine-tuned run exports to M2M-100 as its source did, saying what of it the format cannot hold.
    exported = run_nmtk("export", str(tmp_path / "tuned"), "-o", str(tmp_path / "hf"), "--format", "hf")
    assert exported.returncode == 0 and "M2M-100 has no output bias" in exported.stderr, exported.stderr
    config = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert config == json.loads((m2m.folder / "config.json").read_text())
    assert m2m.lang_id(m2m.transformers(tmp_path / "hf")[1], de) == m2m.lang_id(m2m.transformers()[1], de)


def test_a_tokenizer_saved_by_todays_transformers_imports_and_translates_as_it(tmp_path) -> None:
    """transformers 5 saves M2M100Tokenizer's 100 codes by name (``language_codes: "m2m100"``), with no list
    of them: nmtk numbers them from its copy of that list, and the import decodes as transformers does."""
    from helpers import synthetic_pairs
    from transformers import M2M100ForConditionalGeneration, M2M100Tokenizer
    from transformers.models.m2m_100.tokenization_m2m_100 import FAIRSEQ_LANGUAGE_CODES

    from nmtk.convert.m2m100.folder import NAMED_CODES
    from nmtk.decode.search.config import SearchConfig

    assert NAMED_CODES == FAIRSEQ_LANGUAGE_CODES  # nmtk's copy of M2M100Tokenizer's lists
    folder = build(tmp_path / "m2m100-saved", **SHAPE, language_codes="m2m100", seed=3)
    saved = json.loads((folder / "tokenizer_config.json").read_text())
    assert saved.get("language_codes") == "m2m100"
    result = run_nmtk("import", str(folder), "-o", str(tmp_path / "run"), "--languages", "en,de,fr")
    assert result.returncode == 0, result.stderr
    hf, tok = M2M100ForConditionalGeneration.from_pretrained(folder).eval(), M2M100Tokenizer.from_pretrained(folder)
    tok.src_lang = "en"
    translator = _translator(tmp_path / "run", "en", "fr")
    lines = [a for a, _ in synthetic_pairs(50, 13)]
    ours = translator.hypotheses_of_ids(translator.encode(lines), SearchConfig(beam=1, max_len_a=0.0, max_len_b=11))
    batch = tok(lines, return_tensors="pt", padding=True)
    with torch.no_grad():
        generated = hf.generate(**batch, num_beams=1, do_sample=False, max_new_tokens=12,
                                forced_bos_token_id=tok.convert_tokens_to_ids("__fr__"))
    hf_ids = list(translator.tgt_pipe.subwords.hf_ids)
    same = 0
    for row, hyps in zip(generated, ours, strict=True):
        expected = [t for t in row[1:].tolist() if t != hf.config.pad_token_id]
        mine = [hf_ids[t] for t in hyps[0].tokens]
        n = min(len(expected), len(mine))
        same += n > 1 and mine[:n] == expected[:n]
    assert same >= 45, same


def test_source_auto_goes_to_each_lines_detected_language(m2m) -> None:
    """``--source-lang auto`` (a model with the target from several sources): each line is translated
    as if its detected language had been named; a server routes each text of a request so, and says
    what it detected (LibreTranslate's ``detectedLanguage``)."""
    import asyncio

    from nmtk.decode.load import LoadOptions
    from nmtk.serve.app import LibreRequest
    from nmtk.serve.server import ServeOptions, build

    en, de, cs = m2m.langs
    lines = {en: "A man is riding his bike down the street.", cs: "Muž jede na kole po ulici a děti si hrají."}
    named = {}
    for lang, line in lines.items():
        result = run_nmtk("translate", "-m", str(m2m.run), "--source-lang", lang, "--target-lang", de, stdin=line)
        assert result.returncode == 0, result.stderr
        named[lang] = result.stdout.rstrip("\n")
    auto = run_nmtk("translate", "-m", str(m2m.run), "--source-lang", "auto", "--target-lang", de,
                    stdin="\n".join([lines[cs], lines[en], ""]) + "\n")
    assert auto.returncode == 0, auto.stderr
    assert auto.stdout.split("\n") == [named[cs], named[en], "", ""]
    app, worker, _ = build(ServeOptions(load=LoadOptions(model=m2m.run, threads=2), workers=1))
    try:
        translate = next(r for r in app.routes if getattr(r, "path", "") == "/translate").endpoint
        answer = asyncio.run(translate(LibreRequest(q=[lines[en], lines[cs]], source="auto", target=de)))
        assert answer["translatedText"] == [named[en], named[cs]]
        assert [d["language"] for d in answer["detectedLanguage"]] == [en, cs]
    finally:
        worker.stop(timeout=30)
