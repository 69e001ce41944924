"""Benchmark robustness to real input, and terminology from the input: the demo recipe's run against the
robust recipe's (recipes/multi30k-en-de-robust.toml: typos corrected) and the terms recipe's
(recipes/multi30k-en-de-terms.toml: terminology hints), on Multi30k test_2016_flickr, beam 4,
2 threads.

One JSON line:

- ``bleu``: per run, BLEU on the test set as it is (``clean``), in capitals (``upper``, references in
  capitals too), in title case (``title``; references too where the target language writes titles so,
  as English does; German's stay as they are) and with typos (``typos``: OpusTrainer's
  typo classes, each word hit with probability 0.1, seed 1; references as they are), with a run of 2-4
  words in capitals inside each line of 4 words or more (``shouted``, seed 1; references as they are),
  with one word of 3+ letters in capitals in each line (``shouted_word``, seed 1);
  and each variant's
  loss against clean. As `translate` reads lines by default (capitals and title case folded to
  sentence case and the case given back; typos corrected where the run's recipe has
  ``tokenizer.correct_typos``), and in ``bleu_as_typed`` as they came (``--as-typed``).
- ``terms``: a glossary per line from its reference, as benchmarks/constraints.py builds its terms:
  1–2 (source word, reference word) pairs per line that eflomal aligns in both directions (content
  words of 3+ letters, the target word absent from the terms run's plain output). Term recall, BLEU and
  sentences/s with nothing, with inline hints (`--terms inline`) and with constrained decoding (nmtk's
  engine), and with nothing and inline hints in the terms run's CTranslate2 int8 export; target tokens
  (+ EOS) and tokens/s too, since outputs holding the reference's terms are longer. Speeds are
  medians of ``--repeat`` rounds in one process, alone, an engine's modes taking turns in each round.
  eflomal's sampler takes no seed, so the glossaries are kept beside the run
  (``benchmark-glossaries.json``) and drawn again only when the run's plain output changes: two passes
  of the benchmark measure the same terms.
- ``phrases``: the same for two-word terms (`phrase_glossaries`: "green grass" → "grünes Gras"), one
  a line, kept as ``benchmark-phrases.json``; recall and BLEU, one untimed pass each.

Usage: python benchmarks/robustness.py [--plain runs/multi30k-en-de] [--robust runs/multi30k-en-de-robust]
       [--terms runs/multi30k-en-de-terms] [--repeat 3] [--threads 2] [--terms-only]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _util import ROOT
from constraints import has
from translate import test_lines

TYPO_RATE, SEED = 0.1, 1
FUNCTION_WORDS = frozenset("a an the and or of in on at to with from by for is are was were be his her its their "
                           "this that these those while who which as into near up down out over".split())
#: OpusTrainer's typo classes that apply to one word (the space-removing one needs two)
WORD_TYPOS = ("char_swap", "missing_char", "extra_char", "nearby_char", "similar_char", "random_space",
              "repeated_char", "unichar")


def title(line: str) -> str:
    """OpusTrainer's TitleCase: each space-separated word's first letter in capitals."""
    return " ".join(w[0].upper() + w[1:] for w in line.split())


def with_typos(lines: list[str], rate: float = TYPO_RATE, seed: int = SEED) -> list[str]:
    """Each word, with probability ``rate``, hit by one of OpusTrainer's typo classes (the `typo` package
    OpusTrainer uses), seeded."""
    import typo

    rng = random.Random(seed)
    out = []
    for line in lines:
        words = []
        for word in line.split():
            if len(word) > 1 and rng.random() < rate:
                errer = typo.StrErrer(word, seed=rng.getrandbits(32))
                word = getattr(errer, rng.choice(WORD_TYPOS))().result
            words.append(word)
        out.append(" ".join(words))
    return out


def shouted(lines: list[str], seed: int = SEED) -> list[str]:
    """Each line of 4 words or more with a run of 2-4 of its words in capitals ("A MAN IN A red shirt"),
    seeded: emphasis typed inside a sentence, which is not a line in capitals."""
    rng = random.Random(seed)
    out = []
    for line in lines:
        words = line.split()
        if len(words) >= 4:
            n = rng.randint(2, min(4, len(words) - 1))
            start = rng.randrange(len(words) - n + 1)
            words[start:start + n] = [w.upper() for w in words[start:start + n]]
        out.append(" ".join(words))
    return out


def shouted_word(lines: list[str], seed: int = SEED) -> list[str]:
    """Each line with one of its words of 3 letters or more in capitals ("A man in a RED shirt."), seeded."""
    rng = random.Random(seed)
    out = []
    for line in lines:
        words = line.split()
        picked = [i for i, w in enumerate(words) if sum(c.isalpha() for c in w) >= 3]
        if picked:
            i = rng.choice(picked)
            words[i] = words[i].upper()
        out.append(" ".join(words))
    return out


def bleu(outputs: list[str], refs: list[str]) -> float:
    from sacrebleu.metrics import BLEU

    return round(BLEU().corpus_score(outputs, [refs]).score, 2)


class Texts(list):
    """Translations, and the target tokens (+ EOS) their search wrote: hinted lines' outputs hold the
    reference's terms and are longer, so speed is also said per target token."""

    tokens: int = 0


def texts(translator: Any, lines: list[str], search: Any, ids: list | None = None, guides: list | None = None
          ) -> Texts:
    hyps = translator.hypotheses(lines, search, ids=ids, guides=guides)
    out = Texts(translator.detokenize(h[0]) if h else "" for h in hyps)
    out.tokens = sum(len(h[0].tokens) + 1 for h in hyps if h)
    return out


def robustness(run: Path, threads: int, sources: list[str], refs: list[str], as_typed: bool = False
               ) -> dict[str, float]:
    """BLEU of ``run`` on the test set clean, in capitals, title case and with typos, and each one's loss;
    ``as_typed``: translate's ``--as-typed``."""
    from nmtk.text.casing import TITLE_CASE_LANGS
    from nmtk.text.langid import base_language

    translator, search = load(run, threads, as_typed=as_typed)
    titled = base_language(translator.tgt_pipe.moses.lang) in TITLE_CASE_LANGS  # German's titles: sentence case
    variants = {"clean": (sources, refs), "upper": ([s.upper() for s in sources], [r.upper() for r in refs]),
                "title": ([title(s) for s in sources], [title(r) for r in refs] if titled else refs),
                "typos": (with_typos(sources), refs), "shouted": (shouted(sources), refs),
                "shouted_word": (shouted_word(sources), refs)}
    scores = {name: bleu(texts(translator, src, search), ref) for name, (src, ref) in variants.items()}
    return scores | {f"{name}_loss": round(scores["clean"] - scores[name], 2) for name in variants if name != "clean"}


def load(run: Path, threads: int, **options: Any) -> tuple[Any, Any]:
    import torch

    from nmtk.decode.load import LoadOptions, load_translator
    from nmtk.decode.search.config import SearchConfig
    from nmtk.model_source import resolve_model

    torch.set_num_threads(threads)
    source = resolve_model(run)
    return (load_translator(source, LoadOptions(threads=threads, **options)),
            SearchConfig.from_recipe(source.recipe.decode, beam=4))


def aligned(translator: Any, sources: list[str], refs: list[str]) -> list[tuple[list[str], list[str], list]]:
    """Per line, its source and reference words (Moses tokens) and the links eflomal finds both ways."""
    from nmtk.data.alignment import align

    src_tok, tgt_tok = translator.src_pipe.moses.tokenize, translator.tgt_pipe.moses.tokenize
    tokenized = [src_tok(s) for s in sources], [tgt_tok(r) for r in refs]
    return [(s.split(), t.split(), pairs) for s, t, pairs in zip(*tokenized, align(*tokenized), strict=True)]


def glossaries(translator: Any, sources: list[str], refs: list[str], plain: list[str]) -> list[list[tuple[str, str]]]:
    """Per line, 1–2 (source word, reference word) pairs eflomal aligns both ways, the reference word absent
    from the plain output (content words of 3+ letters; seed 1)."""
    rng = random.Random(SEED)
    out = []
    for (ws, wt, pairs), output in zip(aligned(translator, sources, refs), plain, strict=False):
        candidates = [(ws[s], wt[t]) for s, t in pairs if ws[s].isalpha() and wt[t].isalpha() and len(wt[t]) >= 3
                      and ws[s].lower() not in FUNCTION_WORDS and not has(output, wt[t]) and ws[s] != wt[t]]
        candidates = list(dict.fromkeys(candidates))
        out.append(rng.sample(candidates, min(len(candidates), rng.choice((1, 2)))) if candidates else [])
    return out


def phrase_glossaries(translator: Any, sources: list[str], refs: list[str], plain: list[str]
                      ) -> list[list[tuple[str, str]]]:
    """Per line, at most one two-word term: two adjacent source words that eflomal links (both directions)
    to two adjacent reference words in the same order ("red car", "rotes Auto"), neither source word
    a function word, the reference phrase absent from the plain output (seed 1). Single-word hints alone never
    teach a model to copy such a term whole."""
    rng = random.Random(SEED)
    out = []
    for (ws, wt, pairs), output in zip(aligned(translator, sources, refs), plain, strict=True):
        linked = set(pairs)
        candidates = [(f"{ws[s]} {ws[s + 1]}", f"{wt[t]} {wt[t + 1]}") for s, t in pairs
                      if (s + 1, t + 1) in linked and all(w.isalpha() for w in (*ws[s:s + 2], *wt[t:t + 2]))
                      and not {ws[s].lower(), ws[s + 1].lower()} & FUNCTION_WORDS
                      and not has(output, f"{wt[t]} {wt[t + 1]}")]
        out.append([rng.choice(candidates)] if candidates else [])
    return out


def kept_glossaries(run: Path, translator: Any, sources: list[str], refs: list[str], plain: list[str],
                    draw: Callable[..., list[list[tuple[str, str]]]] = glossaries,
                    name: str = "benchmark-glossaries.json") -> list[list[tuple[str, str]]]:
    """``draw``'s glossaries (`glossaries`, `phrase_glossaries`), drawn once per plain output of the run
    and kept beside it as ``name`` (eflomal's links vary from draw to draw: term recall moved 89.7–90.6 %
    and inline speed 0.83–1.00x between draws)."""
    path = run / name
    key = hashlib.sha256("\n".join([*sources, *refs, *plain]).encode()).hexdigest()
    if path.is_file() and (kept := json.loads(path.read_text(encoding="utf-8")))["key"] == key:
        return [[(a, b) for a, b in line] for line in kept["glossaries"]]
    from nmtk.files import write_text_atomic

    wanted = draw(translator, sources, refs, plain)
    write_text_atomic(path, json.dumps({"key": key, "glossaries": wanted}, ensure_ascii=False))
    return wanted


def hinted(engine: Any, sources: list[str], wanted: list[list[tuple[str, str]]]) -> list:
    """Each line encoded with its own glossary's hints (one glossary a line: each line's terms)."""
    from nmtk.decode.guide import Glossary

    return [engine.encode([s], 1, Glossary(tuple(g)))[0] if g else engine.encode([s])[0]
            for s, g in zip(sources, wanted, strict=True)]


def preferred(wanted: list[list[tuple[str, str]]]) -> list:
    """Each line's hinted target terms, which `translate --terms inline` prefers among the finished
    hypotheses (`nmtk.decode.guide.preferring`), as it does."""
    from nmtk.decode.guide import Guidance

    return [Guidance(hinted=tuple(t for _, t in g)) if g else None for g in wanted]


def constraints(wanted: list[list[tuple[str, str]]]) -> list:
    """Each line's target terms as constraints (nmtk's engine)."""
    from nmtk.decode.guide import Guidance

    return [Guidance(constraints=tuple(t for _, t in g)) if g else None for g in wanted]


def recall(outputs: list[str], wanted: list[list[tuple[str, str]]]) -> float:
    """The share of the target terms asked for that the outputs hold, in %."""
    asked = [(i, t) for i, g in enumerate(wanted) for _, t in g]
    return round(100 * sum(has(outputs[i], t) for i, t in asked) / max(len(asked), 1), 2)


Engines = tuple[Any, Any, Any, Any]
"""The terms run's nmtk translator and search, and its CTranslate2 int8 export's (`load`, `exported`)."""


def terms(run: Path, engines: Engines, repeat: int, sources: list[str], refs: list[str]) -> dict[str, Any]:
    """Term recall, BLEU and speed with nothing, inline hints and constraints (nmtk), nothing and inline (CT2 int8)."""
    translator, search, ct2, ct2_search = engines
    texts(translator, sources[:50], search)  # warm-up
    plain = texts(translator, sources, search)
    wanted = kept_glossaries(run, translator, sources, refs, plain)
    ids = hinted(translator, sources, wanted)
    guides, hints = constraints(wanted), preferred(wanted)
    (plain, plain_s), (inline, inline_s), (constrained, constrained_s) = alternated(
        (lambda: texts(translator, sources, search),
         lambda: texts(translator, sources, search, ids=hinted(translator, sources, wanted), guides=hints),
         lambda: texts(translator, sources, search, guides=guides)), repeat)
    texts(ct2, sources[:50], ct2_search)
    (ct2_plain, ct2_plain_s), (ct2_inline, ct2_inline_s) = alternated(
        (lambda: texts(ct2, sources, ct2_search),
         lambda: texts(ct2, sources, ct2_search, ids=hinted(ct2, sources, wanted), guides=hints)), repeat)
    n = len(sources)

    def row(outs: Texts, s: float, base: float, base_outs: Texts) -> dict[str, float]:
        return {"term_recall_pct": recall(outs, wanted), "bleu": bleu(outs, refs), "sentences_per_s": round(n / s, 1),
                "speed_vs_plain": round(base / s, 3), "tgt_tokens": outs.tokens,
                "tgt_tokens_per_s": round(outs.tokens / s), "token_speed_vs_plain": round(
                    outs.tokens / s / (base_outs.tokens / base), 3)}

    return {"lines_with_terms": sum(1 for g in wanted if g), "terms": sum(len(g) for g in wanted),
            "examples": [g for g in wanted if g][:5],
            "hinted_example": next(translator.src_pipe.subwords.decode(i)
                                   for i, g in zip(ids, wanted, strict=True) if g),
            "nmtk": {"nothing": row(plain, plain_s, plain_s, plain), "inline": row(inline, inline_s, plain_s, plain),
                     "constrained": row(constrained, constrained_s, plain_s, plain)},
            "ct2_int8": {"nothing": row(ct2_plain, ct2_plain_s, ct2_plain_s, ct2_plain),
                         "inline": row(ct2_inline, ct2_inline_s, ct2_plain_s, ct2_plain)}}


def phrases(run: Path, engines: Engines, sources: list[str], refs: list[str]) -> dict[str, Any]:
    """Recall and BLEU of two-word terms (`phrase_glossaries`): nothing, inline hints and constrained
    decoding in nmtk's engine, nothing and inline hints in CTranslate2 int8 (one pass each, untimed)."""
    translator, search, ct2, ct2_search = engines
    plain = texts(translator, sources, search)
    wanted = kept_glossaries(run, translator, sources, refs, plain, phrase_glossaries, "benchmark-phrases.json")
    picked = [i for i, g in enumerate(wanted) for _ in g]

    def row(outputs: list[str]) -> dict[str, float]:
        return {"term_recall_pct": recall(outputs, wanted), "bleu": bleu(outputs, refs),
                "bleu_lines_with_terms": bleu([outputs[i] for i in picked], [refs[i] for i in picked])}

    return {"terms": len(picked), "examples": [g for g in wanted if g][:5],
            "nmtk": {"nothing": row(plain),
                     "inline": row(texts(translator, sources, search, ids=hinted(translator, sources, wanted),
                                         guides=preferred(wanted))),
                     "constrained": row(texts(translator, sources, search, guides=constraints(wanted)))},
            "ct2_int8": {"nothing": row(texts(ct2, sources, ct2_search)),
                         "inline": row(texts(ct2, sources, ct2_search, ids=hinted(ct2, sources, wanted),
                                             guides=preferred(wanted)))}}


def alternated(calls: tuple[Callable[[], list[str]], ...], repeat: int) -> list[tuple[list[str], float]]:
    """Each call's result and median seconds over ``repeat`` rounds, the calls taking turns in each round:
    a machine that slows down or speeds up through the benchmark moves every figure alike (timed one
    after the other, the inline/plain ratio of one model moved 0.84–0.98 between passes)."""
    times: list[list[float]] = [[] for _ in calls]
    results: list[list[str]] = [[] for _ in calls]
    for _ in range(repeat):
        for i, call in enumerate(calls):
            start = time.perf_counter()
            results[i] = call()
            times[i].append(time.perf_counter() - start)
    return [(result, statistics.median(t)) for result, t in zip(results, times, strict=True)]


def exported(run: Path, threads: int) -> tuple[Any, Any]:
    """The run's CTranslate2 int8 export (made once, beside the run), loaded."""
    run = run.resolve()  # the export runs in the repository's folder
    export = run / "export-int8"
    if not (export / "model.bin").is_file():
        subprocess.run([sys.executable, "-m", "nmtk", "export", str(run), "-o", str(export), "--quantization", "int8",
                        "--force"], check=True, cwd=ROOT, capture_output=True)
    return load(export, threads)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--plain", type=Path, default=ROOT / "runs" / "multi30k-en-de")
    parser.add_argument("--robust", type=Path, default=ROOT / "runs" / "multi30k-en-de-robust")
    parser.add_argument("--terms", type=Path, default=ROOT / "runs" / "multi30k-en-de-terms")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--terms-only", action="store_true", help="only the terms run's glossaries (no BLEU rows)")
    args = parser.parse_args()
    sources, refs = test_lines("en"), test_lines("de")
    report: dict[str, Any] = {"benchmark": "robustness", "sentences": len(sources), "beam": 4,
                              "threads": args.threads, "typo_rate": TYPO_RATE}
    for key, as_typed in (() if args.terms_only else (("bleu", False), ("bleu_as_typed", True))):
        report[key] = {name: robustness(run, args.threads, sources, refs, as_typed)
                       for name, run in (("plain", args.plain), ("robust", args.robust), ("terms", args.terms))}
    engines = (*load(args.terms, args.threads), *exported(args.terms, args.threads))  # loaded once for both
    report["terms"] = terms(args.terms, engines, args.repeat, sources, refs)
    report["phrases"] = phrases(args.terms, engines, sources, refs)
    print(json.dumps(report, ensure_ascii=False))


if __name__ == "__main__":
    main()
