"""Benchmark `nmtk prepare` at WMT14 en-de size: 4.5M synthetic pairs of news-like length.

Multi30k sentences are recombined (two or three joined per line, ~25 words on average) so that
the corpus has realistic vocabulary and length. Prints one JSON line: wall time, pairs/s and the
peak RSS of the whole `prepare` process tree. Usage: python benchmarks/prepare.py [--pairs N]
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
import sys
import tempfile
from pathlib import Path

from _util import ROOT, data_root, run_measured


def build_corpus(out: Path, pairs: int, seed: int = 1) -> None:
    def lines(lang: str) -> list[str]:
        with gzip.open(data_root() / "multi30k" / f"train.{lang}.gz", "rt", encoding="utf-8") as handle:
            return [line.rstrip("\n") for line in handle]

    en, de = lines("en"), lines("de")
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


RECIPE = """
[data]
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
[tokenizer]
vocab_size = 37000
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--pairs", type=int, default=4_500_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        build_corpus(root, args.pairs)
        recipe = root / "wmt-size.toml"
        recipe.write_text(RECIPE)
        cmd = [sys.executable, "-m", "nmtk", "prepare", str(recipe), "--data-root", str(root),
               "--out", str(root / "out")]
        wall, peak_mib, result = run_measured(cmd, cwd=ROOT)
        if result.returncode:
            sys.exit(f"prepare failed: {result.stderr.strip()}")
        manifest = json.loads((root / "out" / "manifest.json").read_text())
    train = manifest["splits"]["train"]
    print(json.dumps({
        "benchmark": "prepare", "pairs": args.pairs, "kept": train["kept"],
        "wall_s": round(wall, 1), "pairs_per_s": round(args.pairs / wall),
        "peak_rss_mib": round(peak_mib), "tokens_en": train["sides"]["en"]["tokens"],
        "tokens_de": train["sides"]["de"]["tokens"], "vocab": 37000,
    }))


if __name__ == "__main__":
    main()
