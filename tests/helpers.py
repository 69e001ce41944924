"""Small synthetic corpora and recipes for tests (no real data needed)."""

from __future__ import annotations

import gzip
import random
from pathlib import Path
from typing import Any

LEXICON = {
    "the": "der", "a": "ein", "small": "klein", "big": "gross", "red": "rot", "blue": "blau", "dog": "Hund",
    "cat": "Katze", "man": "Mann", "woman": "Frau", "child": "Kind", "runs": "rennt", "sits": "sitzt",
    "plays": "spielt", "with": "mit", "on": "auf", "in": "in", "under": "unter", "ball": "Ball",
    "street": "Strasse", "park": "Park", "water": "Wasser", "grass": "Gras", "house": "Haus", "car": "Auto",
    "bike": "Fahrrad", "green": "gruen", "yellow": "gelb", "black": "schwarz", "white": "weiss", "old": "alt",
    "young": "jung", "looks": "schaut",
}
WORDS = list(LEXICON)


def synthetic_pairs(n: int, seed: int = 0, min_words: int = 2, max_words: int = 12) -> list[tuple[str, str]]:
    """Source sentences and a deterministic word-by-word 'translation' through a small lexicon."""
    rng = random.Random(seed)
    pairs = []
    for _ in range(n):
        words = [rng.choice(WORDS) for _ in range(rng.randint(min_words, max_words))]
        src = " ".join(words) + "."
        tgt = " ".join(LEXICON[w] for w in words) + "."
        pairs.append((src, tgt))
    return pairs


def assert_same_tensors(folder: Path, exported: Path) -> None:
    """Every tensor of ``folder``'s model.safetensors is in ``exported``'s, bit for bit, and no other."""
    import torch
    from safetensors.torch import load_file

    original, back = load_file(str(folder / "model.safetensors")), load_file(str(exported / "model.safetensors"))
    assert set(back) == set(original)
    for key, tensor in original.items():
        assert torch.equal(back[key], tensor), key


def write_lines(path: Path, lines: list[str]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    data = "".join(line + "\n" for line in lines).encode()
    path.write_bytes(gzip.compress(data) if path.suffix == ".gz" else data)
    return path


def write_corpus(root: Path, name: str, pairs: list[tuple[str, str]], suffix: str = ".gz") -> None:
    write_lines(root / "toy" / f"{name}.en{suffix}", [a for a, _ in pairs])
    write_lines(root / "toy" / f"{name}.de{suffix}", [b for _, b in pairs])


#: `prepare`'s cleaning switched off: the toy corpora are word salad from a 40-word lexicon (no language
#: to identify, copies on purpose, repeated short lines), which the cleaning rules are not meant for.
NO_CLEANING = """
[data.clean]
duplicates = false
copies = false
scripts = 1.0
language = false
numbers = false
"""


def toy_recipe(tmp: Path, extra: str = "", vocab_size: int = 64, name: str = "toy", precision: str = "fp32",
               clean: bool = False, curves: bool = False) -> Path:
    """A recipe over toy/{train,valid,test}.{en,de}.gz under a data root, with a tiny model.

    fp32 unless asked: its trainings are compared with each other to the bit or to 1e-5 (resume, DDP,
    several nodes), which must not hang on the precision `auto` picks on the host. Cleaning only when
    asked (`NO_CLEANING`). No curves.png unless asked: matplotlib's second a validation, in every
    short training of the suite."""
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
{"" if clean else NO_CLEANING}
[tokenizer]
vocab_size = {vocab_size}
normalize_punctuation = false

[batching]
batch_tokens = 256

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
precision = "{precision}"
curves = {str(curves).lower()}
{extra}
""")
    return path


def toy_data(root: Path, n_train: int = 400, seed: int = 0) -> Path:
    write_corpus(root, "train", synthetic_pairs(n_train, seed))
    write_corpus(root, "valid", synthetic_pairs(40, seed + 1))
    write_corpus(root, "test", synthetic_pairs(40, seed + 2))
    return root


def copy_batch(gen, batch: int = 64, min_len: int = 3, max_len: int = 10, vocab: int = 32):
    """Random sequences over ids 4..vocab-1, padded; the target is the source (a copy task)."""
    import torch

    from nmtk.vocab import BOS_ID, EOS_ID, PAD_ID, SPECIAL_SYMBOLS

    lengths = torch.randint(min_len, max_len + 1, (batch,), generator=gen)
    src = torch.full((batch, max_len + 1), PAD_ID)
    tgt = torch.full((batch, max_len + 2), PAD_ID)
    for i, n in enumerate(lengths.tolist()):
        seq = torch.randint(len(SPECIAL_SYMBOLS), vocab, (n,), generator=gen)
        src[i, :n], src[i, n] = seq, EOS_ID
        tgt[i, 0], tgt[i, 1 : n + 1], tgt[i, n + 1] = BOS_ID, seq, EOS_ID
    return src, tgt


def train_copy_models(steps: tuple[int, ...], vocab: int = 32, seed: int = 0, d_model: int = 64,
                      precision: str = "fp32") -> dict:
    """A tiny Transformer trained to copy (the paper's schedule shape, Adam, no dropout), after each of
    ``steps`` updates, from one run (copies, in eval mode): the schedule does not depend on the total,
    so each equals a run of that many updates alone. ``precision`` bf16 trains under autocast
    (tests/measure_spread.py)."""
    import copy

    import torch
    import torch.nn.functional as F

    from nmtk.device import autocast_for
    from nmtk.model import ModelConfig, Transformer
    from nmtk.vocab import PAD_ID

    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    cfg = ModelConfig(src_vocab=vocab, tgt_vocab=vocab, d_model=d_model, heads=4, d_ff=2 * d_model,
                      encoder_layers=2, decoder_layers=2, dropout=0.0)
    model = Transformer(cfg)
    optimizer = torch.optim.Adam(model.parameters(), lr=1.0, betas=(0.9, 0.98), eps=1e-9)
    warmup, peak = 100, 3e-3
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: peak * warmup**0.5 * min((step + 1) ** -0.5, (step + 1) * warmup**-1.5))
    models = {}
    for step in range(1, max(steps) + 1):
        src, tgt = copy_batch(gen, vocab=vocab)
        with autocast_for(torch.device("cpu"), precision):
            logits = model(src, tgt[:, :-1])
        loss = F.cross_entropy(logits.float().reshape(-1, vocab), tgt[:, 1:].reshape(-1), ignore_index=PAD_ID)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        schedule.step()
        if step in steps:
            models[step] = copy.deepcopy(model).eval()
    return models


def copy_outcome(model, vocab: int = 32) -> dict[str, float]:
    """How well a copy model copies 100 held-out sequences (fp32, greedy): the teacher-forced loss, the
    share of target tokens the greedy output gets right position by position, and the sequences copied
    whole."""
    import torch
    import torch.nn.functional as F

    from nmtk.decode.search.beam import SearchConfig, greedy_search
    from nmtk.vocab import EOS_ID, PAD_ID

    src, tgt = copy_batch(torch.Generator().manual_seed(123), batch=100, vocab=vocab)
    with torch.no_grad():
        logits = model(src, tgt[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, vocab), tgt[:, 1:].reshape(-1), ignore_index=PAD_ID)
    hyps = [h[0].tokens for h in greedy_search(model, src, SearchConfig(beam=1))]
    refs = [[t for t in row.tolist() if t not in (PAD_ID, EOS_ID)] for row in src]
    right = sum(sum(a == b for a, b in zip(h, r, strict=False)) for h, r in zip(hyps, refs, strict=True))
    return {"loss": loss.item(), "token_accuracy": right / sum(len(r) for r in refs),
            "sequences": sum(h == r for h, r in zip(hyps, refs, strict=True))}


def toy_prepared(tmp: Path, *overrides: str) -> tuple[Any, Any, tuple[Any, Any]]:
    """The toy recipe (with ``--set`` style ``overrides``), its data prepared under ``tmp``, and its
    (source, target) text pipelines: (recipe, PrepareResult, pipelines)."""
    from nmtk.data.prepare import prepare
    from nmtk.recipe import load_recipe
    from nmtk.text import text_pipelines

    tmp.mkdir(parents=True, exist_ok=True)
    recipe = load_recipe(toy_recipe(tmp), list(overrides))
    out = prepare(recipe, toy_data(tmp / "root"), tmp / "data")
    return recipe, out, text_pipelines(recipe.tokenizer, ("en", "de"), out.manifest.model_paths(out.out_dir))


def toy_trainer(tmp: Path, *overrides: str, info: Any = None) -> Any:
    """A `Trainer` of the toy recipe on CPU, its run directory ``tmp/run`` (created); one process unless
    ``info`` (a `DistInfo` of a torchrun job) says otherwise."""
    import torch

    from nmtk.rundir import RunDir
    from nmtk.train.distributed import DistInfo
    from nmtk.train.trainer import Trainer

    recipe, out, pipelines = toy_prepared(tmp, *overrides)
    run = RunDir(tmp / "run")
    run.path.mkdir()
    return Trainer(recipe, out.data, pipelines, run, torch.device("cpu"), info or DistInfo())


def copy_pairs(n: int, seed: int) -> list[tuple[str, str]]:
    """Sentences of the lexicon's words paired with themselves: a task a small model learns exactly."""
    rng = random.Random(seed)
    lines = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 9))) for _ in range(n)]
    return [(line, line) for line in lines]


def without_key_bias(name: str, tensor: Any) -> Any:
    """``tensor`` with the attention keys' bias zeroed. Softmax does not change when a constant is added
    to every score, so the key bias has no gradient but the rounding of a sum: summed in another
    order (4 batches on one process, 2 + 2 on two) that noise differs, and Adam, dividing by its own
    square root, turns it into steps of the learning rate's size (4e-5 here, where every other
    parameter agrees to 1e-7)."""
    import torch

    if name.endswith("self_attn.qkv.bias"):
        third = tensor.numel() // 3
        return torch.cat([tensor[:third], torch.zeros_like(tensor[third : 2 * third]), tensor[2 * third :]])
    if name.endswith("cross_attn.kv.bias"):
        half = tensor.numel() // 2
        return torch.cat([torch.zeros_like(tensor[:half]), tensor[half:]])
    return tensor
