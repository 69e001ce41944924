"""Hugging Face interop: MarianMT models built locally (no network), imported, compared with transformers
on the same batch, exported back; an nmtk-trained run exported and run by transformers alone."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

pytest.importorskip("transformers")
torch = pytest.importorskip("torch")

from conftest import run_nmtk  # noqa: E402
from make_marian import OPUS, SMALL, build  # noqa: E402

pytestmark = pytest.mark.slow
SENTENCES = ["a man rides a green bike.", "two young dogs play in the park near the old house.", "the child sits."]


@pytest.fixture(scope="module", params=["shared", "separate"])
def marian(request, tmp_path_factory) -> tuple[Path, Path]:
    """(transformers folder, imported run): opus-mt's configuration with random weights."""
    tmp = tmp_path_factory.mktemp(f"marian-{request.param}")
    folder = build(tmp / "opus-mt-en-de", **OPUS, separate=request.param == "separate")
    result = run_nmtk("import", str(folder), "-o", str(tmp / "run"))
    assert result.returncode == 0, result.stderr
    return folder, tmp / "run"


def _transformers(folder: Path):
    from transformers import MarianMTModel, MarianTokenizer

    return MarianMTModel.from_pretrained(folder).eval(), MarianTokenizer.from_pretrained(folder)


def _nmtk(run: Path, checkpoint: str = "checkpoint_last.pt"):
    from nmtk.checkpoint import load_model
    from nmtk.rundir import RunDir
    from nmtk.text.pairs import model_pipelines

    rundir = RunDir(run)
    pipes, _ = model_pipelines(run, rundir.recipe(), rundir.manifest())
    return load_model(run / checkpoint, torch.device("cpu")), pipes


def _hf_ids(pipe) -> list[int]:
    """nmtk id -> transformers id (identity for an nmtk-trained model)."""
    subwords = pipe.subwords
    return list(subwords.hf_ids) if hasattr(subwords, "hf_ids") else list(range(subwords.vocab_size))


def _logits_agree(folder: Path, run: Path, checkpoint: str = "checkpoint_last.pt") -> float:
    hf, tok = _transformers(folder)
    model, (src_pipe, tgt_pipe) = _nmtk(run, checkpoint)
    batch = tok(SENTENCES, return_tensors="pt", padding=True)
    src_map, tgt_map = _hf_ids(src_pipe), _hf_ids(tgt_pipe)
    src_inverse = {h: i for i, h in enumerate(src_map)}
    tgt_inverse = {h: i for i, h in enumerate(tgt_map)}
    start = hf.config.decoder_start_token_id
    hf_tgt = torch.tensor([[start, 5, 9, 11, 7, 6]] * len(SENTENCES))
    with torch.no_grad():
        expected = hf(**batch, decoder_input_ids=hf_tgt).logits
        ours_src = [[src_inverse[int(t)] for t, m in zip(row, mask, strict=True) if m] for row, mask in
                    zip(batch.input_ids, batch.attention_mask, strict=True)]
        assert [ids[:-1] for ids in ours_src] == [src_pipe.encode(s) for s in SENTENCES]  # same segmentation
        width = max(map(len, ours_src))
        src = torch.tensor([ids + [0] * (width - len(ids)) for ids in ours_src])
        logits = model(src, torch.tensor([[tgt_inverse[int(t)] for t in row] for row in hf_tgt]))
    order = torch.tensor([tgt_inverse[j] for j in range(expected.size(-1))])
    return float((logits[..., order] - expected).abs().max())


def test_imported_model_gives_transformers_logits(marian) -> None:
    folder, run = marian
    assert _logits_agree(folder, run) < 1e-4


def test_imported_model_decodes_greedily_as_transformers(marian) -> None:
    from nmtk.decode.search.beam import greedy_search
    from nmtk.decode.search.config import SearchConfig

    folder, run = marian
    hf, tok = _transformers(folder)
    model, (src_pipe, tgt_pipe) = _nmtk(run)
    tgt_map = _hf_ids(tgt_pipe)
    for sentence in SENTENCES:
        batch = tok([sentence], return_tensors="pt")
        generated = hf.generate(**batch, num_beams=1, do_sample=False, max_new_tokens=12, forced_eos_token_id=None)
        expected = [t for t in generated[0, 1:].tolist() if t != hf.config.pad_token_id]
        src = torch.tensor([src_pipe.encode(sentence) + [3]])
        ours = greedy_search(model, src, SearchConfig(beam=1, max_len_a=0.0, max_len_b=12))[0][0].tokens
        ours = [tgt_map[t] for t in ours]
        n = min(len(expected), len(ours))
        assert n > 0 and ours[:n] == expected[:n]  # (random weights repeat a token: the trained run's test
        # below compares whole translations)


@pytest.mark.parametrize("controls", [{"no_repeat_ngram_size": 2}, {"repetition_penalty": 1.5}])
def test_repetition_limits_decode_greedily_as_transformers(marian, controls) -> None:
    """Random weights repeat tokens: the limits change those outputs, the same way in both libraries
    (CTranslate2's and transformers' rules, applied to the logits in a greedy search)."""
    from nmtk.decode.search.beam import greedy_search
    from nmtk.decode.search.config import SearchConfig

    folder, run = marian
    hf, tok = _transformers(folder)
    model, (src_pipe, tgt_pipe) = _nmtk(run)
    tgt_map = _hf_ids(tgt_pipe)
    changed = 0
    for sentence in SENTENCES:
        batch = tok([sentence], return_tensors="pt")
        generated = hf.generate(**batch, num_beams=1, do_sample=False, max_new_tokens=12, forced_eos_token_id=None,
                                **controls)
        expected = [t for t in generated[0, 1:].tolist() if t != hf.config.pad_token_id]
        src = torch.tensor([src_pipe.encode(sentence) + [3]])
        cfg = SearchConfig(beam=1, max_len_a=0.0, max_len_b=12)
        ours = [tgt_map[t] for t in greedy_search(model, src, cfg.choose(**controls))[0][0].tokens]
        plain = [tgt_map[t] for t in greedy_search(model, src, cfg)[0][0].tokens]
        n = min(len(expected), len(ours))
        assert n > 0 and ours[:n] == expected[:n], (sentence, ours, expected)
        changed += ours != plain
    assert changed  # the limits did something to compare


def test_import_then_export_gives_the_same_tensors_back(marian, tmp_path) -> None:
    from helpers import assert_same_tensors

    folder, run = marian
    result = run_nmtk("export", str(run), "-o", str(tmp_path / "hf"), "--format", "hf")
    assert result.returncode == 0, result.stderr
    assert_same_tensors(folder, tmp_path / "hf")
    for name in ("vocab.json", "target_vocab.json"):
        if (folder / name).is_file():
            assert json.loads((tmp_path / "hf" / name).read_text()) == json.loads((folder / name).read_text())
    for name in ("source.spm", "target.spm"):
        assert (tmp_path / "hf" / name).read_bytes() == (folder / name).read_bytes()
    config, config_back = (json.loads((d / "config.json").read_text()) for d in (folder, tmp_path / "hf"))
    for field in ("vocab_size", "decoder_vocab_size", "d_model", "pad_token_id", "eos_token_id",
                  "decoder_start_token_id", "activation_function", "share_encoder_decoder_embeddings"):
        assert config_back[field] == config[field], field


def test_a_trained_run_exports_to_a_folder_transformers_runs_alone(copy_run, tmp_path) -> None:
    """The copy run (trained by nmtk, sentencepiece only): transformers' greedy output equals nmtk's."""
    tmp, _, env = copy_run
    out = tmp_path / "hf"
    result = run_nmtk("export", str(tmp / "run"), "-o", str(out), "--format", "hf", cwd=tmp, env=env)
    assert result.returncode == 0, result.stderr
    for name in ("config.json", "model.safetensors", "generation_config.json", "source.spm", "target.spm",
                 "vocab.json", "tokenizer_config.json", "README.md"):
        assert (out / name).is_file(), name
    checkpoint = json.loads((out / "nmtk-export.json").read_text())["checkpoint"]
    assert _logits_agree(out, tmp / "run", checkpoint) < 1e-4
    hf, tok = _transformers(out)
    lines = (tmp / "data" / "test.raw.en").read_text().splitlines()[:20]
    generated = hf.generate(**tok(lines, return_tensors="pt", padding=True), num_beams=1, do_sample=False)
    theirs = tok.batch_decode(generated, skip_special_tokens=True)
    ours = run_nmtk("translate", "-m", str(tmp / "run"), "--checkpoint", str(tmp / "run" / checkpoint), "--beam", "1",
                    "--precision", "fp32",
                    stdin="\n".join(lines) + "\n", cwd=tmp, env=env)
    assert ours.returncode == 0, ours.stderr
    assert ours.stdout.splitlines() == theirs
    _refused(run_nmtk("translate", "-m", str(out), stdin="x\n", cwd=tmp, env=env), "Hugging Face", "nmtk import")
    generation = json.loads((out / "generation_config.json").read_text())
    assert generation["num_beams"] == 4 and generation["decoder_start_token_id"] == 2


def test_fine_tuning_an_imported_model(tmp_path) -> None:
    """import -> prepare with the imported vocabulary (tokenizer.reuse) -> train --init-from -> translate."""
    result = run_nmtk("import", str(build(tmp_path / "opus-mt-en-de", **SMALL)), "-o", str(tmp_path / "runs" / "opus"))
    assert result.returncode == 0, result.stderr
    from helpers import synthetic_pairs, write_corpus
    from make_marian import FINETUNE

    write_corpus(tmp_path / "data", "train", synthetic_pairs(300, 1))
    write_corpus(tmp_path / "data", "valid", synthetic_pairs(10, 2))
    write_corpus(tmp_path / "data", "test", synthetic_pairs(10, 3))
    recipe = tmp_path / "finetune.toml"
    recipe.write_text(FINETUNE.format(run=tmp_path / "runs" / "opus", **SMALL))
    env = {"NMTK_DATA": str(tmp_path / "data")}
    result = run_nmtk("train", str(recipe), "--data", str(tmp_path / "bin"), "--run-dir", str(tmp_path / "runs" / "ft"),
                      "--init-from", str(tmp_path / "runs" / "opus"), "--set", "train.max_updates=10",
                      "--set", "train.validate_at_end=false", env=env)
    assert result.returncode == 0, result.stderr
    assert "--init-from" in result.stderr
    imported = json.loads((tmp_path / "runs" / "opus" / "manifest.json").read_text())["vocab"]["sha256"]
    assert json.loads((tmp_path / "bin" / "manifest.json").read_text())["vocab"]["sha256"] == imported
    out = run_nmtk("translate", "-m", str(tmp_path / "runs" / "ft"), stdin="a man rides a bike.\n")
    assert out.returncode == 0 and out.stdout.strip(), out.stderr


# ------------------------------------------------------------------------------------ bad input


def _refused(result, *needles: str) -> None:
    """Exit 1 and one error line naming ``needles`` (export prints the checkpoint it chose first)."""
    assert result.returncode == 1, result.stderr
    lines = [line for line in result.stderr.strip().splitlines() if not line.startswith("checkpoint: ")]
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]


@pytest.fixture(scope="module")
def small_marian(tmp_path_factory) -> Path:
    return build(tmp_path_factory.mktemp("small") / "opus-mt-en-de", **SMALL)


def _variant(small_marian: Path, tmp_path: Path, edit) -> Path:
    folder = tmp_path / "opus-mt-en-de"
    shutil.copytree(small_marian, folder)
    edit(folder)
    return folder


def _config_edit(**changes):
    def edit(folder: Path) -> None:
        config = json.loads((folder / "config.json").read_text())
        config.update(changes)
        (folder / "config.json").write_text(json.dumps(config))
    return edit


@pytest.mark.parametrize(("edit", "needles"), [
    (lambda f: (f / "config.json").unlink(), ["config.json", "missing"]),
    (_config_edit(model_type="bart"), ["config.json", "model_type 'bart'"]),
    (lambda f: (f / "source.spm").unlink(), ["source.spm", "missing"]),
    (lambda f: (f / "target.spm").write_bytes(b"not a model"), ["target.spm"]),
    (_config_edit(activation_function="gelu_new"), ["config.json", "activation_function 'gelu_new'"]),
    (_config_edit(normalize_before=True), ["config.json", "normalize_before"]),
    (_config_edit(scale_embedding=False), ["config.json", "scale_embedding"]),
    (lambda f: (f / "vocab.json").write_text(json.dumps({"</s>": 0, "<unk>": 1, "<pad>": 2})), ["vocab.json", "rows"]),
    (lambda f: (f / "model.safetensors").write_bytes(b"garbage"), ["model.safetensors"]),
])
def test_import_refuses_what_is_not_a_marian_model_it_can_hold(small_marian, tmp_path, edit, needles) -> None:
    folder = _variant(small_marian, tmp_path, edit)
    result = run_nmtk("import", str(folder), "-o", str(tmp_path / "run"))
    _refused(result, *needles)
    assert not (tmp_path / "run").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".run")]  # no temporary folder left behind


def test_import_keeps_a_folder_it_did_not_write(small_marian, tmp_path) -> None:
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep me")
    _refused(run_nmtk("import", str(small_marian), "-o", str(tmp_path / "mine"), "--force"), "mine",
             "nmtk did not write it")
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep me"


def test_a_moses_run_is_not_exported_to_hf(copy_run, tmp_path) -> None:
    tmp, _, env = copy_run
    run = tmp_path / "run"
    shutil.copytree(tmp / "run", run)
    recipe = run / "recipe.toml"
    recipe.write_text(recipe.read_text().replace('moses = "none"', 'moses = "both"'))
    result = run_nmtk("export", str(run), "-o", str(tmp_path / "hf"), "--format", "hf", cwd=tmp, env=env)
    _refused(result, "Moses", "multi30k-en-de-spm.toml")
    assert not (tmp_path / "hf").exists()


# --------------------------------------------------------------------- a multilingual opus-mt model

TAGS = ("fr", "es", "it")
MANY_SHAPE = dict(layers=2, d_model=256, heads=4, d_ff=512)


@pytest.fixture(scope="module")
def many_marian(tmp_path_factory) -> tuple[Path, Path]:
    """(transformers folder, imported run): a multilingual MarianMT model (target tags >>fr<<, >>es<<,
    >>it<< at the start of the source, as opus-mt-en-ROMANCE), random weights, d_model 256."""
    tmp = tmp_path_factory.mktemp("marian-many")
    folder = build(tmp / "opus-mt-en-ROMANCE", **MANY_SHAPE, tags=TAGS)
    result = run_nmtk("import", str(folder), "-o", str(tmp / "run"))
    assert result.returncode == 0, result.stderr
    assert "en -> fr, es, it" in result.stderr and "--target-lang fr" in result.stderr
    return folder, tmp / "run"


def _pair(run: Path, lang: str):
    from nmtk.checkpoint import load_model
    from nmtk.rundir import RunDir
    from nmtk.text.pairs import model_pipelines

    rundir = RunDir(run)
    pipelines, pairs = model_pipelines(run, rundir.recipe(), rundir.manifest(), lang)
    assert set(pairs) == {("en", t) for t in TAGS}
    return load_model(run / "checkpoint_last.pt", torch.device("cpu")), pipelines


def test_a_multilingual_model_keeps_its_tags_and_gives_transformers_logits(many_marian) -> None:
    from nmtk.manifest import Manifest

    folder, run = many_marian
    manifest = Manifest.read(run / "manifest.json")
    assert manifest.pairs == [f"en-{t}" for t in TAGS] and list(manifest.tags) == list(TAGS)
    hf, tok = _transformers(folder)
    for lang in TAGS:
        model, (src_pipe, tgt_pipe) = _pair(run, lang)
        assert src_pipe.prefix == [manifest.tags[lang]]
        batch = tok([f">>{lang}<< {s}" for s in SENTENCES], return_tensors="pt", padding=True)
        src_inverse = {h: i for i, h in enumerate(_hf_ids(src_pipe))}
        tgt_map = _hf_ids(tgt_pipe)
        tgt_inverse = {h: i for i, h in enumerate(tgt_map)}
        ours_src = [[src_inverse[int(t)] for t, m in zip(row, mask, strict=True) if m]
                    for row, mask in zip(batch.input_ids, batch.attention_mask, strict=True)]
        assert [ids[:-1] for ids in ours_src] == [src_pipe.encode(s) for s in SENTENCES], "the tag is one id, first"
        hf_tgt = torch.tensor([[hf.config.decoder_start_token_id, 5, 9, 11, 7, 6]] * len(SENTENCES))
        width = max(map(len, ours_src))
        with torch.no_grad():
            expected = hf(**batch, decoder_input_ids=hf_tgt).logits
            logits = model(torch.tensor([ids + [0] * (width - len(ids)) for ids in ours_src]),
                           torch.tensor([[tgt_inverse[int(t)] for t in row] for row in hf_tgt]))
        order = torch.tensor([tgt_inverse[j] for j in range(expected.size(-1))])
        assert float((logits[..., order] - expected).abs().max()) < 1e-4, lang


def test_a_multilingual_model_decodes_greedily_as_transformers_in_every_language(many_marian) -> None:
    """200 lines per target, greedy, one length limit for all (12 tokens): the same tokens as transformers'."""
    from helpers import synthetic_pairs

    from nmtk.decode.search.beam import greedy_search
    from nmtk.decode.search.config import SearchConfig
    from nmtk.vocab import EOS_ID, PAD_ID

    folder, run = many_marian
    hf, tok = _transformers(folder)
    lines = [a for a, _ in synthetic_pairs(200, 7)]
    for lang in TAGS:
        model, (src_pipe, tgt_pipe) = _pair(run, lang)
        tgt_map = _hf_ids(tgt_pipe)
        same = 0
        for start in range(0, len(lines), 50):
            chunk = lines[start : start + 50]
            batch = tok([f">>{lang}<< {s}" for s in chunk], return_tensors="pt", padding=True)
            with torch.no_grad():
                generated = hf.generate(**batch, num_beams=1, do_sample=False, max_new_tokens=12,
                                        forced_eos_token_id=None)
            ids = [src_pipe.encode(s) + [EOS_ID] for s in chunk]
            width = max(map(len, ids))
            src = torch.tensor([x + [PAD_ID] * (width - len(x)) for x in ids])
            ours = greedy_search(model, src, SearchConfig(beam=1, max_len_a=0.0, max_len_b=12))
            for row, hyps in zip(generated, ours, strict=True):
                expected = [t for t in row[1:].tolist() if t != hf.config.pad_token_id]
                mine = [tgt_map[t] for t in hyps[0].tokens]
                n = min(len(expected), len(mine))
                same += n > 0 and mine[:n] == expected[:n]
        assert same >= 0.99 * len(lines), (lang, same)


def test_a_multilingual_model_goes_back_to_transformers_bit_for_bit(many_marian, tmp_path) -> None:
    from helpers import assert_same_tensors

    folder, run = many_marian
    result = run_nmtk("export", str(run), "-o", str(tmp_path / "hf"), "--format", "hf")
    assert result.returncode == 0, result.stderr
    assert_same_tensors(folder, tmp_path / "hf")
    assert json.loads((tmp_path / "hf" / "vocab.json").read_text()) == json.loads((folder / "vocab.json").read_text())
    translated = run_nmtk("translate", "-m", str(run), "--target-lang", "es", stdin="a man rides.\n")
    assert translated.returncode == 0 and translated.stdout.strip(), translated.stderr
    unknown = run_nmtk("translate", "-m", str(run), "--target-lang", "de", stdin="a man rides.\n")
    assert unknown.returncode == 1 and "en → fr, en → es, en → it" in unknown.stderr
