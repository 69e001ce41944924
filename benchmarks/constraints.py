"""Benchmark decoding controls on Multi30k test_2016_flickr (1,000 sentences), beam 4, 2 CPU threads.

On the `make demo` run (default runs/multi30k-en-de), in one process, one JSON line:

- ``terminology``: the papers' protocol. For each sentence, 1–2 phrases of 1–3 words taken from its
  reference and absent from the unconstrained output (seed 1; a line with no such phrase gets none).
  Term recall over the lines that finish within their length limit and over all lines; BLEU with
  and without; sentences/s with and without (medians of ``--repeat``).
- ``glossary``: 50 term pairs (an English word and the German word that co-occurs with it most by
  Dice's coefficient over the training pairs, among frequent content words); recall of the target
  term on the lines whose source holds the source term, by `translate`'s code and through `nmtk
  serve`'s app (the glossary sent with each request of 50 lines).
- ``prefix``: each line's first two reference words as its prefix: share of outputs that start with
  it, and outputs equal between the torch engine and the CTranslate2 export (greedy, beam 4 with the
  recipe's GNMT length penalty, with α = 0, and with ``length_penalty_form = "power"``).
- ``repetition``: ``no_repeat_ngram_size = 3``: repeated subword trigrams in the output (must be 0),
  and outputs equal between torch and CTranslate2.
- ``plain``: decoding without controls, sentences/s (to compare with a run of the previous version).

``--shortlist`` decodes every part with the run's lexical shortlist (a term's pieces join the candidates).

Usage: python benchmarks/constraints.py [--run DIR] [--repeat 3] [--threads 2] [--device cuda] [--shortlist]
       [--parts terminology,glossary,prefix,repetition]  (plain and terminology always run)
"""

from __future__ import annotations

import argparse
import json
import random
import re
import statistics
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from _util import ROOT, data_root
from translate import test_lines

WORD = re.compile(r"^\w[\w-]*$")
PARTS = ("terminology", "glossary", "prefix", "repetition")


def timed(call, repeat: int) -> tuple[object, float]:
    """The result of ``call()`` and its median seconds over ``repeat`` runs."""
    times, result = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        result = call()
        times.append(time.perf_counter() - start)
    return result, statistics.median(times)


def reference_terms(refs: list[str], outputs: list[str], seed: int = 1) -> list[tuple[str, ...]]:
    """1–2 phrases of 1–3 reference words per line, each absent from that line's output."""
    rng = random.Random(seed)
    terms = []
    for ref, out in zip(refs, outputs, strict=True):
        words = [w.strip(".,;:!?\"'") for w in ref.split()]
        chosen: list[str] = []
        for _ in range(rng.choice((1, 2))):
            for _attempt in range(10):
                n = rng.choice((1, 2, 3))
                if len(words) < n:
                    continue
                start = rng.randrange(len(words) - n + 1)
                phrase = words[start : start + n]
                text = " ".join(phrase)
                if all(WORD.match(w) for w in phrase) and f" {text} " not in f" {out} " and \
                        not any(text in c or c in text for c in chosen):
                    chosen.append(text)
                    break
        terms.append(tuple(chosen))
    return terms


def has(output: str, phrase: str) -> bool:
    """``phrase`` in ``output`` as whole words (punctuation around them aside): as `translate` tests a
    hinted term (`nmtk.decode.guide.held`)."""
    from nmtk.decode.guide import held

    return held(output, phrase)


def glossary_pairs(count: int = 50) -> list[tuple[str, str]]:
    """``count`` (English, German) word pairs from the training data by Dice's coefficient."""
    import gzip

    def read(lang: str) -> list[set[str]]:
        with gzip.open(data_root() / "multi30k" / f"train.{lang}.gz", "rt", encoding="utf-8") as handle:
            return [{w.strip(".,;:!?\"'") for w in line.split()} for line in handle]

    en, de = read("en"), read("de")
    en_count, de_count = Counter(w for s in en for w in s), Counter(w for s in de for w in s)
    content = [w for w, c in en_count.most_common(400) if len(w) > 3 and w.isalpha() and w.islower()][:120]
    pairs = []
    for word in content:
        together: Counter[str] = Counter()
        for e, d in zip(en, de, strict=True):
            if word in e:
                together.update(w for w in d if len(w) > 2 and w.isalpha())
        dice = {w: 2 * c / (en_count[word] + de_count[w]) for w, c in together.items()}
        best = max(dice, key=dice.get)
        if dice[best] > 0.5 and best not in {p[1] for p in pairs}:
            pairs.append((word, best))
        if len(pairs) == count:
            break
    return pairs


def glossary_served(args: argparse.Namespace, pairs: list[tuple[str, str]], sources: list[str]) -> list[str]:
    """The test set through `nmtk serve`'s app (in process, one decoding thread), 50 lines a request,
    each request carrying the glossary."""
    from fastapi.testclient import TestClient

    from nmtk.decode.load import LoadOptions
    from nmtk.precision import Precision
    from nmtk.serve.server import ServeOptions, build

    options = ServeOptions(load=LoadOptions(model=args.run, precision=Precision.fp32, threads=args.threads), workers=1)
    app, worker, _ = build(options)
    out: list[str] = []
    try:
        client = TestClient(app)
        for start in range(0, len(sources), 50):
            answer = client.post("/translate", json={"q": sources[start : start + 50], "beam": 4,
                                                     "glossary": [list(p) for p in pairs]})
            answer.raise_for_status()
            out += answer.json()["translatedText"]
    finally:
        worker.stop()
    return out


def repeated_trigrams(tokens: list[int]) -> int:
    grams = [tuple(tokens[i : i + 3]) for i in range(len(tokens) - 2)]
    return len(grams) - len(set(grams))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", type=Path, default=ROOT / "runs" / "multi30k-en-de")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--device", default="cpu", help="cpu, or cuda for the GPU's figures")
    parser.add_argument("--shortlist", action="store_true", help="decode with the run's lexical shortlist (`nmtk "
                        "shortlist`): terms must still be met")
    parser.add_argument("--parts", default=",".join(PARTS),
                        help=f"comma-separated, of {', '.join(PARTS)} (plain and terminology always run)")
    args = parser.parse_args()
    parts = set(args.parts.split(",")) | {"terminology"}
    if parts - set(PARTS):
        parser.error(f"unknown part(s): {', '.join(sorted(parts - set(PARTS)))}")

    import torch

    from nmtk.decode.load import LoadOptions, load_translator
    from nmtk.decode.search.config import SearchConfig
    from nmtk.model_source import resolve_model
    from nmtk.precision import Precision

    torch.set_num_threads(args.threads)
    source = resolve_model(args.run)
    engine = load_translator(source, LoadOptions(precision=Precision.fp32, threads=args.threads, device=args.device,
                                                 shortlist=args.shortlist))
    bench = Bench(args, source, engine, SearchConfig.from_recipe(source.recipe.decode, beam=4),
                  test_lines("en"), test_lines("de"))
    report: dict[str, object] = {"benchmark": "constraints", "run": str(args.run), "sentences": len(bench.sources),
                                 "beam": 4, "threads": args.threads, "device": args.device, "shortlist": args.shortlist}
    report |= terminology(bench)
    if "glossary" in parts:
        report["glossary"] = glossary(bench)
    if "prefix" in parts or "repetition" in parts:
        ct2 = exported(bench)
        if "prefix" in parts:
            report["prefix"] = prefix(bench, ct2)
        if "repetition" in parts:
            report["repetition"] = repetition(bench, ct2)
    print(json.dumps(report))


@dataclass
class Bench:
    """What every part measures with: the run, its torch engine, beam 4 and the test set."""

    args: argparse.Namespace
    source: Any  # nmtk.rundir.ModelSource
    engine: Any  # the torch translator
    search: Any  # SearchConfig, beam 4
    sources: list[str]
    refs: list[str]

    def texts(self, lines: list[str], cfg: Any = None, guides: list | None = None, engine: Any = None) -> list[str]:
        hyps = (engine or self.engine).hypotheses(lines, cfg or self.search, guides=guides)
        return [self.engine.detokenize(h[0]) if h else "" for h in hyps]

    def bleu(self, outputs: list[str]) -> float:
        from sacrebleu.metrics import BLEU

        return round(BLEU().corpus_score(outputs, [self.refs]).score, 2)

    def config(self, **overrides: Any) -> Any:
        from nmtk.decode.search.config import SearchConfig

        return SearchConfig.from_recipe(self.source.recipe.decode, **overrides)


def terminology(bench: Bench) -> dict[str, object]:
    """Plain decoding's speed, then the papers' protocol: constraints from the references."""
    from nmtk.decode.guide import Guidance

    sources, engine, repeat = bench.sources, bench.engine, bench.args.repeat
    bench.texts(sources[:50])  # warm-up
    plain, plain_s = timed(lambda: bench.texts(sources), repeat)
    terms = reference_terms(bench.refs, plain)
    guides = [Guidance(constraints=t) if t else None for t in terms]
    search = bench.search
    limits = [int(search.max_len_a * len(engine.src_pipe.encode(s)) + search.max_len_b) for s in sources]
    hyps, cons_s = timed(lambda: engine.hypotheses(sources, search, guides=guides), repeat)
    outs = [engine.detokenize(h[0]) for h in hyps]
    asked = [i for i, t in enumerate(terms) if t]
    within = [i for i in asked if len(hyps[i][0].tokens) < limits[i]]
    met = {i for i in asked if all(has(outs[i], p) for p in terms[i])}
    return {"plain": {"sentences_per_s": round(len(sources) / plain_s, 1)}, "terminology": {
        "lines_with_terms": len(asked), "terms": sum(len(t) for t in terms),
        "recall_within_limit_pct": round(100 * len(met & set(within)) / max(len(within), 1), 2),
        "lines_within_limit": len(within),
        "recall_all_lines_pct": round(100 * sum(has(outs[i], p) for i in asked for p in terms[i])
                                      / max(sum(len(terms[i]) for i in asked), 1), 2),
        "bleu_without": bench.bleu(plain), "bleu_with": bench.bleu(outs),
        "sentences_per_s_without": round(len(sources) / plain_s, 1),
        "sentences_per_s_with": round(len(sources) / cons_s, 1),
        "speed_ratio": round(plain_s / cons_s, 3)}}


def glossary(bench: Bench) -> dict[str, object]:
    """50 Dice-chosen term pairs as a glossary, through `translate`'s code and through the server."""
    from nmtk.decode.guide import Glossary, Guidance

    sources = bench.sources
    pairs = glossary_pairs()
    tokenize = bench.engine.src_pipe.moses.tokenize
    guides = [Glossary(tuple(pairs)).guide(s, Guidance(), tokenize) or None for s in sources]
    outs = bench.texts(sources, guides=guides)
    wanted = [(i, t) for i, g in enumerate(guides) if g for t in g.constraints]
    served = glossary_served(bench.args, pairs, sources)

    def recall(outputs: list[str]) -> float:
        return round(100 * sum(has(outputs[i], t) for i, t in wanted) / max(len(wanted), 1), 2)

    return {"pairs": len(pairs), "lines_with_a_term": sum(1 for g in guides if g),
            "term_recall_pct": recall(outs), "bleu": bench.bleu(outs), "examples": pairs[:5],
            "served_term_recall_pct": recall(served),
            "served_equals_translate_pct": round(100 * sum(a == b for a, b in zip(served, outs, strict=True))
                                                 / len(served), 2)}


def exported(bench: Bench) -> Any:
    """The run's CTranslate2 export (made once), loaded."""
    from nmtk.decode.load import LoadOptions, load_translator
    from nmtk.model_source import resolve_model

    export = bench.args.run / "export-float32"
    if not (export / "model.bin").is_file():
        subprocess.run([sys.executable, "-m", "nmtk", "export", str(bench.args.run), "-o", str(export), "--force"],
                       check=True, cwd=ROOT, capture_output=True)
    return load_translator(resolve_model(export), LoadOptions(threads=bench.args.threads))


#: (name, beam, α, length penalty form): None keeps the recipe's; "power" is CTranslate2's own search
SETTINGS = (("beam1", 1, None, None), ("beam4", 4, None, None), ("beam4_alpha0", 4, 0.0, None),
            ("beam4_power", 4, None, "power"))


def same_pct(ours: list[str], theirs: list[str]) -> float:
    return round(100 * sum(a == b for a, b in zip(ours, theirs, strict=True)) / len(ours), 2)


def prefix(bench: Bench, ct2: Any) -> dict[str, object]:
    """Each line's first two reference words as its prefix, torch against CTranslate2."""
    from nmtk.decode.guide import Guidance

    prefixes = [" ".join(r.split()[:2]) for r in bench.refs]
    guides = [Guidance(prefix=p) for p in prefixes]
    report: dict[str, object] = {}
    for name, beam, alpha, form in SETTINGS:
        cfg = bench.config(beam=beam, length_penalty=alpha, length_penalty_form=form)
        ours = bench.texts(bench.sources, cfg, guides)
        theirs = bench.texts(bench.sources, cfg, guides, engine=ct2)
        report[name] = {"starts_with_prefix_pct": round(100 * sum(o.startswith(p) for o, p in
                                                                  zip(ours, prefixes, strict=True)) / len(ours), 2),
                        "torch_equals_ctranslate2_pct": same_pct(ours, theirs)}
    return report


def repetition(bench: Bench, ct2: Any) -> dict[str, object]:
    """``no_repeat_ngram_size = 3``: repeated trigrams with and without, torch against CTranslate2."""
    sources = bench.sources
    hyps = bench.engine.hypotheses(sources, bench.config(beam=4, no_repeat_ngram_size=3))
    report: dict[str, object] = {
        "no_repeat_ngram_size": 3, "repeated_trigrams": sum(repeated_trigrams(h[0].tokens) for h in hyps),
        "repeated_trigrams_without": sum(repeated_trigrams(h[0].tokens)
                                         for h in bench.engine.hypotheses(sources, bench.search)),
        "bleu": bench.bleu([bench.engine.detokenize(h[0]) for h in hyps])}
    for name, beam, alpha, form in SETTINGS:
        cfg = bench.config(beam=beam, length_penalty=alpha, length_penalty_form=form, no_repeat_ngram_size=3)
        report[f"torch_equals_ctranslate2_pct_{name}"] = same_pct(bench.texts(sources, cfg),
                                                                  bench.texts(sources, cfg, engine=ct2))
    return report


if __name__ == "__main__":
    main()
