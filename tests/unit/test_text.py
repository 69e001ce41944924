"""The text pipelines of the paper recipes: lossless on the target side, BPE and WordPiece alike."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from helpers import synthetic_pairs

from nmtk.recipe import load_recipe
from nmtk.text import moses_for
from nmtk.text.pipeline import TextPipeline
from nmtk.text.subword import learn_subwords, load_subword_model, model_file_name

ROOT = Path(__file__).resolve().parents[2]

GERMAN = [
    "„Ich bin kein Berliner“, sagte er – und ging.",
    "Sie antwortete: ‚Vielleicht‘ … und schwieg.",
    "Der Preis stieg um 5,5 % auf 12,3\u00a0Mio. Euro.",
    "Das gilt z.B. für Häuser, Straßen usw., aber nicht für Bäume.",
    "Mehr unter https://www.example.de/nachrichten/2014-06-01?id=42&lang=de oder bei info@example.de.",
    "Am 3.\u00a0Oktober – dem Feiertag – bleibt es still; „Warum?“, fragt sie.",
]
FRENCH = [
    "« Je ne suis pas d'accord », a-t-il dit\u00a0: l'homme d'aujourd'hui paie 5,5\u00a0% de plus.",
    "C'est-à-dire, p.\u00a0ex. sur https://www.exemple.fr/actualites/2014?id=7&l=fr … voilà\u00a0!",
    "L'été dernier, 12,3\u00a0millions d'euros ont été dépensés – « trop », selon elle.",
]


def corpus(tmp_path: Path, lines: list[str], name: str) -> Path:
    path = tmp_path / name
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8", newline="\n")
    return path


def learn_for(recipe_name: str, tmp_path: Path, lines: list[str], vocab_size: int) -> TextPipeline:
    """The recipe's own tokenizer settings (only the vocabulary smaller), learned on ``lines``."""
    recipe = load_recipe(ROOT / "recipes" / f"{recipe_name}.toml", [f"tokenizer.vocab_size={vocab_size}"])
    tok = recipe.tokenizer
    model = tmp_path / model_file_name(tok.type)
    learn_subwords([corpus(tmp_path, lines, "train.txt")], model, model_type=tok.type, vocab_size=vocab_size,
                   character_coverage=tok.character_coverage, input_sentence_size=tok.input_sentence_size,
                   seed=tok.seed, normalization=tok.normalization, byte_fallback=tok.byte_fallback)
    return TextPipeline(moses_for(tok, recipe.data.target_lang, "target"), model)


def test_wmt14_en_de_target_pipeline_is_lossless(tmp_path: Path) -> None:
    """Learned on plain text without any of these characters: byte fallback spells them exactly."""
    german = [b for _, b in synthetic_pairs(3000)]
    pipe = learn_for("wmt14-en-de-base", tmp_path, german, vocab_size=400)
    for line in GERMAN:
        ids = pipe.encode(line)
        assert pipe.decode(ids) == line
    assert 1 not in pipe.encode(GERMAN[0])  # no <unk>: unseen characters became byte pieces


def test_wmt14_en_fr_wordpiece_target_pipeline_is_lossless(tmp_path: Path) -> None:
    french_words = " ".join(FRENCH).split(" ")
    training = [" ".join(french_words[i:] + french_words[:i]) for i in range(len(french_words))] * 20
    training += [b for _, b in synthetic_pairs(2000)]
    pipe = learn_for("wmt14-en-fr-big", tmp_path, training, vocab_size=300)
    model = pipe.subwords
    assert [model.pieces()[i] for i in range(4)] == ["<pad>", "<unk>", "<s>", "</s>"]
    assert any(p.startswith("##") for p in model.pieces())  # WordPiece continuation pieces
    for line in FRENCH:
        assert pipe.decode(pipe.encode(line)) == line
    # Greedy longest match first: a known whole word is one piece; an unknown character makes its word <unk>.
    whole = next(p for p in model.pieces()[4:] if len(p) > 3 and not p.startswith("##"))
    assert model.encode(whole) == [model.pieces().index(whole)]
    assert model.encode("Ǆ voilà")[0] == 1 and model.decode(model.encode("voilà")) == "voilà"


@pytest.mark.parametrize("model_type", ["bpe", "wordpiece"])
def test_model_files_load_by_suffix(tmp_path: Path, model_type: str) -> None:
    model = tmp_path / model_file_name(model_type, "de")
    learn_subwords([corpus(tmp_path, [b for _, b in synthetic_pairs(500)], "t.txt")], model, model_type=model_type,
                   vocab_size=60, character_coverage=1.0, input_sentence_size=1000, seed=1)
    loaded = load_subword_model(model)
    assert loaded.vocab_size == 60 and len(loaded.pieces()) == 60
    assert model.name == ("wordpiece.de.json" if model_type == "wordpiece" else "spm.de.model")


def test_sacremoses_is_imported_only_when_a_side_uses_moses() -> None:
    """Its import costs every command ~0.5 s: a recipe without Moses (the default) never pays it."""
    code = ("import sys; from nmtk.text.moses import Moses; import nmtk.score, nmtk.decode.load, nmtk.train.run; "
            "off = Moses('en', tokenize=False, normalize=False); assert off.tokenize('a, b') == 'a, b'; "
            "assert off.detokenize('a , b') == 'a , b'; assert 'sacremoses' not in sys.modules; "
            "assert Moses('en').tokenize('a, b') == 'a , b' and 'sacremoses' in sys.modules")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 0, result.stderr[-2000:]


LETTER_WORDS = {"en": "shirt green grass ǅemal", "de": "Straße Hemd grünes Gras Fußgängerüberweg",
                "fr": "été garçon", "cs": "žluťoučký kůň", "tr": "İstanbul", "ru": "Привет мир",
                "el": "Καλημέρα", "ar": "العربية", "zh": "中文翻译", "ja": "日本語のテキスト", "ga": "hÉireann"}


@pytest.mark.parametrize("lang", sorted(LETTER_WORDS))
def test_words_of_letters_pass_moses_as_sacremoses_leaves_them(lang: str) -> None:
    """Glossary terms are mostly such words, and Moses is most of a per-line glossary's cost: they skip
    sacremoses, which must give them back unchanged (checked against it, one word and all together)."""
    from sacremoses import MosesPunctNormalizer, MosesTokenizer

    from nmtk.text.moses import Moses

    norm, tok = MosesPunctNormalizer(lang=lang), MosesTokenizer(lang=lang)
    moses = Moses(lang)
    text = LETTER_WORDS[lang]
    for piece in [*text.split(), text, f"  {text}  "]:
        by_sacremoses = tok.tokenize(norm.normalize(" ".join(piece.split())), aggressive_dash_splits=True,
                                     escape=False, return_str=True)
        assert moses.tokenize(piece) == by_sacremoses == " ".join(piece.split())
    assert moses.tokenize("shirt.") == "shirt ." and moses.tokenize("T-shirt") == "T @-@ shirt"


def test_moses_reads_accents_typed_apart_as_one_letter() -> None:
    """``e`` + U+0301 (macOS, some keyboards) is the "é" of a corpus: sacremoses split the accent off as a
    token of its own, in training data and input alike."""
    from nmtk.text.moses import Moses

    assert Moses("en").tokenize("A cafe\u0301.") == "A caf\u00e9 ." == Moses("en").tokenize("A caf\u00e9.")
    assert Moses("de", tokenize=False).tokenize("Mu\u0308ller") == "M\u00fcller"
    assert Moses("de").tokenize("Silben\u00adtren\u00adnung der Web\u200bseite") == "Silbentrennung der Webseite"
    assert Moses("de", tokenize=False, normalize=False).tokenize("Mu\u0308ller") == "Mu\u0308ller"  # off: as it is
