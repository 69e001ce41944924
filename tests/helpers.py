"""Small synthetic corpora and recipes for tests (no real data needed)."""

from __future__ import annotations

import gzip
import random
from pathlib import Path

WORDS = ("the a small big red blue dog cat man woman child runs sits plays with on in under ball "
         "street park water grass house car bike green yellow black white old young looks").split()


def synthetic_pairs(n: int, seed: int = 0, min_words: int = 2, max_words: int = 12) -> list[tuple[str, str]]:
    """Source sentences and a deterministic 'translation' (words reversed, upper-cased first letter)."""
    rng = random.Random(seed)
    pairs = []
    for _ in range(n):
        words = [rng.choice(WORDS) for _ in range(rng.randint(min_words, max_words))]
        src = " ".join(words) + "."
        tgt = " ".join(w.capitalize() for w in reversed(words)) + "."
        pairs.append((src, tgt))
    return pairs


def write_lines(path: Path, lines: list[str]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    data = "".join(line + "\n" for line in lines).encode()
    path.write_bytes(gzip.compress(data) if path.suffix == ".gz" else data)
    return path


def write_corpus(root: Path, name: str, pairs: list[tuple[str, str]], suffix: str = ".gz") -> None:
    write_lines(root / "toy" / f"{name}.en{suffix}", [a for a, _ in pairs])
    write_lines(root / "toy" / f"{name}.de{suffix}", [b for _, b in pairs])


def toy_recipe(tmp: Path, extra: str = "", vocab_size: int = 64, name: str = "toy") -> Path:
    """A recipe over toy/{train,valid,test}.{en,de}.gz under a data root, with a tiny model."""
    path = tmp / f"{name}.toml"
    path.write_text(f"""
[data]
source_lang = "en"
target_lang = "de"
max_len = 100
[[data.train]]
name = "train"
source = "toy/train.en.gz"
target = "toy/train.de.gz"
[data.valid]
name = "valid"
source = "toy/valid.en.gz"
target = "toy/valid.de.gz"
[[data.test]]
name = "test"
source = "toy/test.en.gz"
target = "toy/test.de.gz"

[tokenizer]
vocab_size = {vocab_size}
normalize_punctuation = false

[batching]
max_tokens = 256

[model]
layers = 2
d_model = 32
heads = 4
d_ff = 64
dropout = 0.0

[optim]
warmup = 50
lr = 0.003
label_smoothing = 0.0

[train]
max_updates = 100
save_every_minutes = 60
validate_every_updates = 50
keep_last = 5
{extra}
""")
    return path


def toy_data(root: Path, n_train: int = 400, seed: int = 0) -> Path:
    write_corpus(root, "train", synthetic_pairs(n_train, seed))
    write_corpus(root, "valid", synthetic_pairs(40, seed + 1))
    write_corpus(root, "test", synthetic_pairs(40, seed + 2))
    return root
