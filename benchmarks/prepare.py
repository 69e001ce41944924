"""Benchmark `nmtk prepare` at WMT14 size: synthetic pairs of news-like length, the base recipe's text pipeline.

Multi30k sentences are recombined (two or three joined per line, ~25 words on average) so that the
corpus has realistic vocabulary and length. `prepare` runs with recipes/wmt14-en-de-base.toml's
tokenizer and cleaning settings (BPE 37k, raw text, byte fallback; every `[data.clean]` rule on, unless
--set turns one off) on 1M and 4.5M pairs by default.
Prints one JSON line: per size wall time, pairs/s, peak RSS of the whole `prepare` process tree,
prepared bytes on disk; and the time, disk and memory projected for WMT14 en-fr's 36M pairs from the
measured scaling (linear in pairs above the fixed cost of learning the subword model).

Usage: python benchmarks/prepare.py [--pairs 1000000,4500000] [--keep DIR] [--set KEY=VALUE ...]
  --keep DIR  also keeps the largest prepared folder (DIR/data) and its corpus (DIR/root), which
              benchmarks/scale.py trains on.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import tempfile
from pathlib import Path

from _util import ROOT, multi30k_lines, run_measured

EN_FR_PAIRS = 36_000_000


def build_corpus(out: Path, pairs: int, seed: int = 1) -> None:
    en, de = multi30k_lines("train.en.gz"), multi30k_lines("train.de.gz")
    rng = random.Random(seed)
    (out / "synth").mkdir(parents=True, exist_ok=True)
    with open(out / "synth" / "train.en", "w") as fe, open(out / "synth" / "train.de", "w") as fd:
        for _ in range(pairs):
            picks = [rng.randrange(len(en)) for _ in range(rng.choice((2, 2, 3)))]
            fe.write(" ".join(en[i] for i in picks) + "\n")
            fd.write(" ".join(de[i] for i in picks) + "\n")
    for split, n in (("valid", 3000), ("test", 3000)):
        with open(out / "synth" / f"{split}.en", "w") as fe, open(out / "synth" / f"{split}.de", "w") as fd:
            for i in range(n):
                fe.write(en[i] + "\n")
                fd.write(de[i] + "\n")


def recipe_text(model: str = "base") -> str:
    """wmt14-en-de-<model>.toml with its corpora replaced by the synthetic ones."""
    base = (ROOT / "recipes" / f"wmt14-en-de-{model}.toml").read_text()
    head, rest = base.split("[data]", 1)
    rest = rest[rest.index("[tokenizer]"):]
    return f"""{head}[data]
source_lang = "en"
target_lang = "de"
[[data.train]]
name = "synth"
source = "synth/train.en"
target = "synth/train.de"
[data.valid]
name = "valid"
source = "synth/valid.en"
target = "synth/valid.de"
[[data.test]]
name = "test"
source = "synth/test.en"
target = "synth/test.de"

{rest}"""


def measure(root: Path, pairs: int, out: Path, overrides: list[str]) -> dict[str, float]:
    build_corpus(root, pairs)
    recipe = root / "wmt-size.toml"
    recipe.write_text(recipe_text())
    cmd = [sys.executable, "-m", "nmtk", "prepare", str(recipe), "--data-root", str(root), "--out", str(out),
           *(arg for item in overrides for arg in ("--set", item))]
    wall, peak_mib, result = run_measured(cmd, cwd=ROOT)
    if result.returncode:
        sys.exit(f"prepare failed: {result.stderr.strip()}")
    manifest = json.loads((out / "manifest.json").read_text())
    train = manifest["splits"]["train"]
    return {"pairs": pairs, "kept": train["kept"], "dropped": train["dropped"], "wall_s": round(wall, 1),
            "pairs_per_s": round(pairs / wall),
            "peak_rss_mib": round(peak_mib), "disk_mib": round(sum(p.stat().st_size for p in out.iterdir()) / 2**20),
            "corpus_mib": round(sum(p.stat().st_size for p in (root / "synth").iterdir()) / 2**20),
            "tokens_en": train["sides"]["en"]["tokens"], "tokens_de": train["sides"]["de"]["tokens"]}


def project(runs: list[dict[str, float]], pairs: int) -> dict[str, float]:
    """Time and disk at ``pairs`` from the two largest measured sizes (a line through them)."""
    a, b = sorted(runs, key=lambda r: r["pairs"])[-2:]
    per_pair_s = (b["wall_s"] - a["wall_s"]) / (b["pairs"] - a["pairs"])
    per_pair_disk = (b["disk_mib"] - a["disk_mib"]) / (b["pairs"] - a["pairs"])
    per_pair_corpus = b["corpus_mib"] / b["pairs"]
    return {"pairs": pairs, "wall_h": round((b["wall_s"] + per_pair_s * (pairs - b["pairs"])) / 3600, 2),
            "prepared_gib": round((b["disk_mib"] + per_pair_disk * (pairs - b["pairs"])) / 1024, 1),
            "raw_corpus_gib": round(per_pair_corpus * pairs / 1024, 1),
            "peak_rss_mib": max(r["peak_rss_mib"] for r in runs)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", default="1000000,4500000", help="comma-separated corpus sizes")
    parser.add_argument("--keep", type=Path, default=None)
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="a recipe override for prepare (e.g. data.clean.language=false)")
    args = parser.parse_args()
    sizes = sorted(int(n) for n in args.pairs.split(","))
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        for pairs in sizes:
            root, out = Path(tmp) / f"root-{pairs}", Path(tmp) / f"out-{pairs}"
            runs.append(measure(root, pairs, out, args.set))
            if args.keep and pairs == sizes[-1]:
                args.keep.mkdir(parents=True, exist_ok=True)
                for src, name in ((out, "data"), (root, "root")):
                    shutil.rmtree(args.keep / name, ignore_errors=True)
                    shutil.move(src, args.keep / name)
            else:
                shutil.rmtree(root)
                shutil.rmtree(out)
    report = {"benchmark": "prepare", "recipe": "wmt14-en-de-base (synthetic corpus)", "overrides": args.set,
              "runs": runs}
    if len(runs) >= 2:
        report["projected_en_fr"] = project(runs, EN_FR_PAIRS)
    print(json.dumps(report))


if __name__ == "__main__":
    main()
