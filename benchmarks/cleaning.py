"""Benchmark `prepare`'s cleaning on Multi30k with injected noise: what each rule removes, and BLEU.

Multi30k en-de train (29,000 pairs) gets the noise of web-crawled corpora, each line labelled with
what was done to it: 10 % of targets shuffled (another line's German), 5 % targets in another language
of Multi30k (the same caption's French or Czech, alternately), 2 % copies (the English source as
target), and 5 % more lines that repeat clean pairs exactly; then the lines are shuffled. A line equal
to an earlier one is labelled a duplicate (Multi30k's own few included), the earlier one clean.

The noisy corpus is prepared twice with the demo recipe (recipes/multi30k-en-de.toml): with every
cleaning rule on (the default) and with every rule off. From the first, ``dropped.tsv`` gives each
rule's drops by label: recall per injected kind (share of its lines dropped), and false drops (clean
lines dropped) -- precision on clean pairs is 1 minus their share. Then the demo recipe trains on each
for the same minutes and test_2016_flickr is translated (beam 4, the recipe's settings, last 5
checkpoints averaged) and scored with sacreBLEU. Prints one JSON line.

Usage: python benchmarks/cleaning.py [--minutes 10] [--work DIR] [--seed 1] [--no-train]
"""

from __future__ import annotations

import argparse
import json
import random
from collections import Counter
from pathlib import Path

import tomli_w
import tomllib
from _util import ROOT, data_root, multi30k_lines, nmtk, test_bleu, train

KINDS = ("shuffled", "other_language", "copy", "duplicate")


def noisy_corpus(seed: int) -> tuple[list[tuple[str, str]], list[str]]:
    """Multi30k en-de train with the noise above, and each line's label (``clean`` or a kind)."""
    en, de, fr, cs = (multi30k_lines(f"train.{lang}.gz") for lang in ("en", "de", "fr", "cs"))
    n, rng = len(en), random.Random(seed)
    order = list(range(n))
    rng.shuffle(order)
    cut = [0, n // 10, n // 10 + n // 20, n // 10 + n // 20 + n // 50]
    shuffled, other, copies = (order[cut[i]:cut[i + 1]] for i in range(3))
    pairs, labels = list(zip(en, de, strict=True)), ["clean"] * n
    for a, b in zip(shuffled, shuffled[1:] + shuffled[:1], strict=True):  # a rotation: no line keeps its own
        pairs[a], labels[a] = (en[a], de[b]), "shuffled"
    for k, i in enumerate(other):
        pairs[i], labels[i] = (en[i], (fr if k % 2 == 0 else cs)[i]), "other_language"
    for i in copies:
        pairs[i], labels[i] = (en[i], en[i]), "copy"
    clean = order[cut[3]:]
    rows = [(p, label) for p, label in zip(pairs, labels, strict=True)]
    rows += [(pairs[i], "duplicate") for i in rng.sample(clean, n // 20)]
    rng.shuffle(rows)
    seen: set[tuple[str, str]] = set()
    out_pairs, out_labels = [], []
    for pair, label in rows:  # after the shuffle: the first of equal pairs is the one a reader keeps
        out_labels.append("duplicate" if pair in seen else ("clean" if label == "duplicate" else label))
        out_pairs.append(pair)
        seen.add(pair)
    return out_pairs, out_labels


def write_root(work: Path, pairs: list[tuple[str, str]]) -> Path:
    """A data root holding Multi30k (for valid and test) and the noisy training corpus."""
    root = work / "root"
    (root / "noisy").mkdir(parents=True, exist_ok=True)
    if not (root / "multi30k").exists():
        (root / "multi30k").symlink_to(data_root() / "multi30k")
    for side, lang in ((0, "en"), (1, "de")):
        (root / "noisy" / f"train.{lang}").write_text("".join(p[side] + "\n" for p in pairs), encoding="utf-8")
    return root


def recipe(work: Path, clean: bool) -> Path:
    """The demo recipe on the noisy corpus, cleaning on or off."""
    data = tomllib.loads((ROOT / "recipes" / "multi30k-en-de.toml").read_text())
    data["name"] = f"noisy-{'cleaned' if clean else 'raw'}"
    data["data"]["train"] = [{"name": "noisy", "source": "noisy/train.en", "target": "noisy/train.de"}]
    if not clean:
        data["data"]["clean"] = {"duplicates": False, "copies": False, "scripts": 1.0, "language": False,
                                 "numbers": False}
    path = work / f"{data['name']}.toml"
    path.write_text(tomli_w.dumps(data))
    return path


def rule_report(dropped: Path, labels: list[str]) -> dict:
    """Per rule: its drops by label; per kind: recall; clean lines: false drops and precision."""
    rows = [line.split("\t") for line in dropped.read_text().splitlines()[1:]]
    by_rule: dict[str, Counter] = {}
    for _, line, rule in rows:
        by_rule.setdefault(rule, Counter())[labels[int(line) - 1]] += 1
    total = Counter(labels)
    dropped_by_label = Counter(labels[int(line) - 1] for _, line, _ in rows)
    return {
        "lines": len(labels), "injected": {k: total[k] for k in KINDS},
        "by_rule": {rule: dict(counts) for rule, counts in sorted(by_rule.items())},
        "recall": {k: round(dropped_by_label[k] / total[k], 4) for k in KINDS if total[k]},
        "false_drops": dropped_by_label["clean"], "clean_lines": total["clean"],
        "precision_on_clean": round(1 - dropped_by_label["clean"] / total["clean"], 4),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--work", type=Path, default=ROOT / "runs" / "bench-cleaning")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--no-train", action="store_true", help="only the rules' precision and recall")
    args = parser.parse_args()
    work = args.work.resolve()
    work.mkdir(parents=True, exist_ok=True)
    pairs, labels = noisy_corpus(args.seed)
    root = write_root(work, pairs)
    result: dict = {"benchmark": "cleaning", "seed": args.seed}
    for clean in (True, False):
        name = "cleaned" if clean else "raw"
        data = work / f"data-{name}"
        nmtk("prepare", str(recipe(work, clean)), "--data-root", str(root), "--out", str(data), "--force")
        kept = json.loads((data / "manifest.json").read_text())["splits"]["train"]["kept"]
        result[f"{name}_pairs"] = kept
        if clean:
            result["rules"] = rule_report(data / "dropped.tsv", labels)
    if not args.no_train:
        result["minutes"] = args.minutes
        for name in ("raw", "cleaned"):
            run = work / f"run-{name}"
            updates = train(recipe(work, name == "cleaned"), run, work / f"data-{name}", args.minutes, [5],
                            args.seed, root)
            result[f"{name}_updates"] = updates
            result[f"{name}_bleu"] = test_bleu(run, work / f"data-{name}")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
