"""One multilingual model against one-pair models of the same size (docs/multilingual.md).

From ``recipes/multi30k-en-many.toml`` (en -> de, fr, cs): each pair alone as a one-pair recipe (the
same tokenizer settings and model; `nmtk.data.multilingual.pair_recipe`) with the one-pair demo's
optimiser and schedule (``recipes/multi30k-en-de.toml``: the multilingual recipe stretches them by its
number of pairs) trained ``--pair-minutes`` (10), then the multilingual model trained ``--many-minutes``
(30), one after the other, on this machine. Each run is averaged (its recipe's last 5 checkpoints),
then translates the pair's test_2016_flickr (beam 4, the recipe's decoding settings; with
``--lenpen``, also with the length penalty its own valid set scores best with, and with ``--average``,
with the number of averaged checkpoints and length penalty it does) and is scored with sacreBLEU.
Prints one JSON line: per direction its BLEU figures, update counts and parameter counts (the layers are
the same; the multilingual vocabulary is larger).

Nothing else may run meanwhile: the comparison is one of training speed as much as of quality.
A run already trained for its minutes is not trained again (`nmtk train` finds it finished), so a
benchmark that stopped part-way goes on where it stopped.

Usage: python benchmarks/multilingual.py [--pair-minutes 10] [--many-minutes 30] [--out runs/bench-multilingual]
       [--lenpen 0.6,0.8,1.0] [--average 5,10] [--seed 2] [--alone-vocab 16000]
       [--many-report runs/bench.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

from _util import ROOT, bleu, train

from nmtk.data.multilingual import pair_recipe
from nmtk.model.transformer import parameter_count
from nmtk.recipe import LanguagePair, Recipe, load_recipe, model_config, recipe_to_toml

RECIPE = ROOT / "recipes" / "multi30k-en-many.toml"
ONE_PAIR = ROOT / "recipes" / "multi30k-en-de.toml"


def evaluate(run: Path, files: Callable[[str], tuple[Path, Path]], alphas: list[float], windows: list[int],
             *options: str) -> dict:
    """Test BLEU of ``run`` (``files(split)``: its source and reference) with the recipe's averaging
    (its first window: ``windows[0]``) and α (``alphas[0]``); then, where there is a choice, with the α
    that scores best on the valid set for that averaging, and with the (window, α) that does."""
    def settings(last: int, alpha: float) -> list[str]:
        average = run / f"checkpoint_avg_last{last}.pt"  # absent after a smoke run: translate's default
        return [*(["--checkpoint", str(average)] if average.exists() else []), "--lenpen", str(alpha), *options]

    test = partial(bleu, run, *files("test_2016_flickr"))
    result: dict = {"bleu": test(*settings(windows[0], alphas[0]))}
    if len(alphas) == 1 and len(windows) == 1:
        return result
    valid = {(n, a): bleu(run, *files("valid"), *settings(n, a)) for n in windows for a in alphas}
    result["valid_bleu"] = {f"last{n}/{a}": score for (n, a), score in valid.items()}
    alpha = max(alphas, key=lambda a: valid[windows[0], a])  # the first of equals
    result["lenpen"] = {"lenpen": alpha, "bleu": test(*settings(windows[0], alpha))}
    last, alpha2 = max(valid, key=lambda k: valid[k])
    result["window_lenpen"] = {"last": last, "lenpen": alpha2, "bleu": test(*settings(last, alpha2))}
    return result


def alone_recipe(many: Recipe, pair: LanguagePair, one_pair: Recipe, vocab_size: int) -> Recipe:
    """``pair`` of ``many`` alone, with ``vocab_size`` pieces (the one-pair demo's, or the multilingual
    recipe's, which gives both models the same parameter count), the one-pair demo's optimiser, schedule
    and checkpoint spacing, and one softmax over its whole vocabulary, as the demo's."""
    one = pair_recipe(many, pair)
    train = one.train.model_copy(update={"save_every_updates": one_pair.train.save_every_updates})
    tokenizer = one.tokenizer.model_copy(update={"vocab_size": vocab_size})
    model = one.model.model_copy(update={"output_vocab": "all"})
    return one.model_copy(update={"name": f"multi30k-{pair.name}-alone", "optim": one_pair.optim, "train": train,
                                  "tokenizer": tokenizer, "model": model})


def train_many(many: Recipe, run: Path, minutes: float, windows: list[int], seed: int,
               alphas: list[float]) -> dict[str, dict]:
    """Train the multilingual recipe into ``run`` and evaluate it on each of its pairs."""
    data = ROOT / "data-bin" / many.name
    updates = train(RECIPE, run, data, minutes, windows, seed)
    parameters = parameter_count(model_config(many))
    figures = {}
    for pair in many.data.language_pairs():
        files = partial(lambda p, split: (data / f"{split}.{p.name}.raw.{p.source_lang}",
                                          data / f"{split}.{p.name}.raw.{p.target_lang}"), pair)
        figures[pair.name] = {"updates": updates, "parameters": parameters,
                              **evaluate(run, files, alphas, windows, "--target-lang", pair.target_lang)}
    return figures


def earlier_many(report: Path, seed: int, recipe_seed: int) -> dict[str, dict]:
    """The multilingual model's figures from an earlier report of this seed: one-pair models of another
    vocabulary size are compared with the same multilingual run, not a retrained one. A report without
    a seed was trained from the recipe's (``recipe_seed``)."""
    earlier = json.loads(report.read_text(encoding="utf-8"))
    if (trained := earlier.get("seed", recipe_seed)) != seed:
        sys.exit(f"{report}: its runs were trained from seed {trained}, not {seed}")
    return {name: entry["many"] for name, entry in earlier["pairs"].items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pair-minutes", type=float, default=10.0)
    parser.add_argument("--many-minutes", type=float, default=30.0)
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / "bench-multilingual")
    parser.add_argument("--lenpen", default=None, help="length penalties α to choose from on each run's valid "
                        "set, e.g. 0.6,0.8,1.0 (default: the recipes' α, no choice)")
    parser.add_argument("--average", default=None, help="numbers of last checkpoints to average to choose from on "
                        "each run's valid set, e.g. 5,10 (default: the recipes' average.last, no choice)")
    parser.add_argument("--seed", type=int, default=None, help="training seed of every run (default: the "
                        "multilingual recipe's); a second sitting with another seed measures the spread")
    parser.add_argument("--alone-vocab", type=int, default=None, help="vocabulary size of the one-pair models "
                        "(default: the one-pair demo's, 8,000; the multilingual recipe's, 16,000, gives every model "
                        "the same number of parameters)")
    parser.add_argument("--many-report", type=Path, default=None, help="an earlier report of this seed whose "
                        "multilingual figures to compare with (its run is neither trained nor evaluated again)")
    args = parser.parse_args()
    many, one_pair = load_recipe(RECIPE), load_recipe(ONE_PAIR)
    alphas = [float(a) for a in args.lenpen.split(",")] if args.lenpen else [many.decode.length_penalty]
    windows = [int(n) for n in args.average.split(",")] if args.average else [many.average.last]
    if alphas[0] != many.decode.length_penalty or windows[0] != many.average.last:
        sys.exit(f"--lenpen and --average begin with the recipes' own ({many.decode.length_penalty}, "
                 f"{many.average.last}): the first figure of each run is the recipe's")
    seed = many.train.seed if args.seed is None else args.seed
    alone_vocab = args.alone_vocab or one_pair.tokenizer.vocab_size
    args.out.mkdir(parents=True, exist_ok=True)
    report: dict = {"benchmark": "multilingual", "date": time.strftime("%Y-%m-%d"), "seed": seed,
                    "alone_vocab": alone_vocab, "pairs": {}}
    for pair in many.data.language_pairs():
        one = alone_recipe(many, pair, one_pair, alone_vocab)
        path = args.out / f"{one.name}.toml"
        path.write_text(recipe_to_toml(one), encoding="utf-8")
        run, data = args.out / pair.name, args.out / f"data-{pair.name}"
        updates = train(path, run, data, args.pair_minutes, windows, seed)
        files = partial(lambda d, p, split: (d / f"{split}.raw.{p.source_lang}", d / f"{split}.raw.{p.target_lang}"),
                        data, pair)
        report["pairs"][pair.name] = {"alone": {"updates": updates, "parameters": parameter_count(model_config(one)),
                                                **evaluate(run, files, alphas, windows)}}
    many_figures = earlier_many(args.many_report, seed, many.train.seed) if args.many_report else train_many(
        many, args.out / "many", args.many_minutes, windows, seed, alphas)
    report["many_updates"] = next(iter(many_figures.values()))["updates"]
    for pair in many.data.language_pairs():
        entry = report["pairs"][pair.name]
        entry["many"] = many_figures[pair.name]
        entry["many_at_least_alone"] = {key: entry["many"][key]["bleu"] >= entry["alone"][key]["bleu"]
                                        for key in ("lenpen", "window_lenpen") if key in entry["many"]}
        entry["many_at_least_alone"]["recipe"] = entry["many"]["bleu"] >= entry["alone"]["bleu"]
    print(json.dumps(report))


if __name__ == "__main__":
    main()
