"""One multilingual model against one-pair models of the same size (docs/multilingual.md).

From ``recipes/multi30k-en-many.toml`` (en -> de, fr, cs): each pair alone as a one-pair recipe (the
same tokenizer settings, model, optimiser and schedule; `nmtk.data.multilingual.pair_recipe`) trained
``--pair-minutes`` (10), then the multilingual model trained ``--many-minutes`` (30), one after the
other, on this machine. Each run is averaged (its recipe's last 5 checkpoints), then translates the
pair's test_2016_flickr (beam 4, the recipe's decoding settings) and is scored with sacreBLEU.
Prints one JSON line: per direction both BLEU figures and both update counts.

Nothing else may run meanwhile: the comparison is one of training speed as much as of quality.
Usage: python benchmarks/multilingual.py [--pair-minutes 10] [--many-minutes 30] [--out runs/bench-multilingual]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from _util import ROOT, data_root

RECIPE = ROOT / "recipes" / "multi30k-en-many.toml"


def nmtk(*args: str) -> subprocess.CompletedProcess[str]:
    result = subprocess.run([sys.executable, "-m", "nmtk", *args], capture_output=True, text=True, cwd=ROOT,
                            env={**os.environ, "NMTK_DATA": str(data_root())})
    if result.returncode:
        sys.exit(f"nmtk {' '.join(args)} failed:\n{result.stderr[-2000:]}")
    return result


def train(recipe: Path, run: Path, data: Path, minutes: float) -> int:
    """Train ``recipe`` into ``run`` for ``minutes``, average its last checkpoints; returns the updates."""
    nmtk("train", str(recipe), "--run-dir", str(run), "--data", str(data), "--set", f"train.max_minutes={minutes}")
    if len(list(run.glob("checkpoint_[0-9]*.pt"))) >= 5:  # a smoke run (--pair-minutes 0.2) has fewer
        nmtk("average", str(run), "--force")
    lines = (run / "train.jsonl").read_text().splitlines()
    return max(json.loads(line)["update"] for line in lines)


def bleu(run: Path, source: Path, reference: Path, *options: str) -> float:
    hypothesis = run / f"{source.name}.hyp"
    nmtk("translate", "-m", str(run), "-i", str(source), "-o", str(hypothesis), "--force", *options)
    score = nmtk("score", "-r", str(reference), str(hypothesis), "--metrics", "bleu", "--json")
    return round(json.loads(score.stdout)["bleu"]["score"], 2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pair-minutes", type=float, default=10.0)
    parser.add_argument("--many-minutes", type=float, default=30.0)
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / "bench-multilingual")
    args = parser.parse_args()
    from nmtk.data.multilingual import pair_recipe
    from nmtk.recipe import load_recipe, recipe_to_toml

    many = load_recipe(RECIPE)
    args.out.mkdir(parents=True, exist_ok=True)
    report: dict = {"benchmark": "multilingual", "date": time.strftime("%Y-%m-%d"), "pairs": {}}
    many_data = ROOT / "data-bin" / many.name
    for pair in many.data.language_pairs():
        one = pair_recipe(many, pair).model_copy(update={"name": f"multi30k-{pair.name}-alone"})
        path = args.out / f"{one.name}.toml"
        path.write_text(recipe_to_toml(one), encoding="utf-8")
        run, data = args.out / pair.name, args.out / f"data-{pair.name}"
        updates = train(path, run, data, args.pair_minutes)
        test = data / f"test_2016_flickr.raw.{pair.source_lang}", data / f"test_2016_flickr.raw.{pair.target_lang}"
        report["pairs"][pair.name] = {"alone": {"updates": updates, "bleu": bleu(run, *test)}}
    run = args.out / "many"
    report["many_updates"] = train(RECIPE, run, many_data, args.many_minutes)
    for pair in many.data.language_pairs():
        test = (many_data / f"test_2016_flickr.{pair.name}.raw.{pair.source_lang}",
                many_data / f"test_2016_flickr.{pair.name}.raw.{pair.target_lang}")
        entry = report["pairs"][pair.name]
        entry["many"] = {"updates": report["many_updates"], "bleu": bleu(run, *test, "--target-lang", pair.target_lang)}
        entry["many_at_least_alone"] = entry["many"]["bleu"] >= entry["alone"]["bleu"]
    print(json.dumps(report))


if __name__ == "__main__":
    main()
