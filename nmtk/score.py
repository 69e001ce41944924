"""Scoring through sacreBLEU's Python API: BLEU, chrF, TER, the paper's tokenized BLEU, significance.

Nothing here re-implements a metric. ``paper_bleu`` only reproduces the *pre-processing* of the
fairseq / tensor2tensor WMT14 en-de scripts (Moses tokenisation, then ``a-b`` -> ``a ##AT##-##AT## b``)
before handing the tokens to sacreBLEU with ``tokenize="none"`` — the number the paper's 27.3 / 28.4
can be set beside.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from sacrebleu.metrics import BLEU, CHRF, TER

from nmtk.errors import NmtkError

METRICS = ("bleu", "chrf", "ter")
_COMPOUND = re.compile(r"(\S)-(\S)")


#: What `translate` writes beside its translations, and how to keep them alone: --nbest's numbered
#: hypotheses, --print-scores' score before each, --print-alignment's pairs after it.
_ANNOTATED = (
    (re.compile(r"\d+\t-?\d+(?:\.\d+)?(?:e-?\d+)?\t"), "N<TAB>SCORE<TAB>HYPOTHESIS (translate --nbest)",
     "translate without --nbest"),
    (re.compile(r"-?\d+(?:\.\d+)?(?:e-?\d+)?\t"), "SCORE<TAB>TRANSLATION (translate --print-scores)",
     "cut -f2- FILE"),
    (re.compile(r"[^\t]*\t(?:\d+-\d+(?: \d+-\d+)*)?$"), "TRANSLATION<TAB>ALIGNMENT (translate --print-alignment)",
     "cut -f1 FILE"),
)


def check_lengths(name: str, hyps: list[str], refs: dict[str, list[str]]) -> None:
    """A hypothesis to score: lines, as many as each reference's, and translations alone (a file of
    `translate --print-scores` was scored with its numbers as words, silently: on 20 test lines BLEU 34.63
    and chrF 56.54 against the translations' 34.71 and 57.88)."""
    if not hyps:
        raise NmtkError(f"{name}: the hypothesis is empty (no lines to score)")
    for pattern, what, instead in _ANNOTATED:
        if all(pattern.match(line) for line in hyps):
            raise NmtkError(f"{name}: every line is {what}, not a translation alone: score the translations "
                            f"({instead.replace(' FILE', '' if name == 'stdin' else f' {name}')})")
    for ref_name, ref in refs.items():
        if len(ref) != len(hyps):
            lines = "line" if len(hyps) == 1 else "lines"
            raise NmtkError(f"{name} has {len(hyps):,} {lines} but reference {ref_name} has {len(ref):,}")


def paper_tokenize(lines: list[str], lang: str) -> list[str]:
    """Moses-tokenise and split hyphenated compounds as the paper-era WMT14 scripts did."""
    from sacremoses import MosesTokenizer  # imported here: ~0.3 s that only this option needs

    moses = MosesTokenizer(lang=lang)
    out = []
    for line in lines:
        tokens = moses.tokenize(line, escape=False, return_str=True)
        out.append(_COMPOUND.sub(r"\1 ##AT##-##AT## \2", tokens))
    return out


@dataclass
class Scorer:
    """Which metrics, with which options; builds sacreBLEU metric objects."""

    metrics: tuple[str, ...] = ("bleu", "chrf")
    lowercase: bool = False
    tokenize: str | None = None
    paper_bleu: bool = False
    lang: str = "en"

    def __post_init__(self) -> None:
        unknown = [m for m in self.metrics if m not in METRICS]
        if unknown:
            raise NmtkError(f"--metrics: unknown metric {', '.join(unknown)} (choose from {', '.join(METRICS)})")
        if self.paper_bleu and self.tokenize:
            raise NmtkError(f"--tokenize {self.tokenize} with --paper-bleu: the paper's BLEU tokenises with Moses "
                            "and splits compounds itself; use one or the other")

    def metric_objects(self) -> dict[str, Any]:
        objects: dict[str, Any] = {}
        for name in self.metrics:
            if name == "bleu":
                tokenize = "none" if self.paper_bleu else self.tokenize
                objects[name] = BLEU(lowercase=self.lowercase, tokenize=tokenize, force=self.paper_bleu)
            elif name == "chrf":
                objects[name] = CHRF(lowercase=self.lowercase)
            else:
                objects[name] = TER(case_sensitive=not self.lowercase)
        return objects

    def _text(self, metric: str, lines: list[str]) -> list[str]:
        """What ``metric`` scores: Moses tokens with split compounds for BLEU under ``paper_bleu``, else the text."""
        return paper_tokenize(lines, self.lang) if metric == "bleu" and self.paper_bleu else lines

    def score(self, hyps: list[str], refs: list[list[str]]) -> dict[str, dict[str, Any]]:
        """Each metric's score, signature and (BLEU) n-gram precisions and brevity penalty."""
        results = {}
        for name, metric in self.metric_objects().items():
            result = metric.corpus_score(self._text(name, hyps), [self._text(name, r) for r in refs])
            signature = str(metric.get_signature())
            entry: dict[str, Any] = {"score": round(result.score, 4), "signature": signature,
                                     "line": result.format(signature=signature)}
            if name == "bleu":
                entry.update(precisions=[round(p, 4) for p in result.precisions], bp=round(result.bp, 4),
                             sys_len=result.sys_len, ref_len=result.ref_len, paper_bleu=self.paper_bleu)
            results[name] = entry
        return results

    def significance(self, systems: list[tuple[str, list[str]]], refs: list[list[str]],
                     samples: int = 1000) -> dict[str, dict[str, dict[str, float]]]:
        """Paired bootstrap resampling (Koehn, 2004) of every system against the first.

        Each metric sees the same text as in `score`: with ``paper_bleu`` only BLEU is computed on
        Moses tokens with split compounds; chrF and TER score the raw text. The scores, means and 95 %
        intervals are sacreBLEU's (its sufficient statistics and `estimate_ci`); the p-value is
        `bootstrap_p_value`'s, not sacreBLEU's (see there).
        """
        import numpy as np
        from sacrebleu.significance import estimate_ci

        lines = len(refs[0])
        picks = np.random.default_rng(BOOTSTRAP_SEED).choice(lines, size=(samples, lines), replace=True)
        out: dict[str, dict[str, dict[str, float]]] = {}
        for metric, obj in self.metric_objects().items():
            ref_text = [self._text(metric, r) for r in refs]
            base: np.ndarray | None = None
            for name, hyps in systems:
                stats = np.asarray(obj._extract_corpus_statistics(self._text(metric, hyps), ref_text), dtype=float)
                resampled = np.array([obj._compute_score_from_stats(list(stats[row].sum(0))).score for row in picks])
                mean, ci = estimate_ci(resampled)
                entry = {"score": round(float(obj._compute_score_from_stats(list(stats.sum(0))).score), 4),
                         "mean": round(float(mean), 4), "ci": round(float(ci), 4)}
                if base is None:
                    base = resampled
                else:
                    entry["p_value"] = round(bootstrap_p_value(resampled - base, lower_is_better=metric == "ter"), 4)
                out.setdefault(name, {})[metric] = entry
        return out


BOOTSTRAP_SEED = 12345  # sacreBLEU's default: the same resamples on every run


def bootstrap_p_value(differences: Any, lower_is_better: bool = False) -> float:
    """The paired bootstrap's p-value from a system's score minus the baseline's on each resample.

    Koehn (2004): a system is better than the baseline with confidence 1 − p when it scores better
    on that share of the resampled test sets; so p is the share of resamples on which it does *not*
    (ties included), counted with the usual +1 so that it is never 0: (c + 1) / (n + 1). Two identical
    systems tie on every resample: p = 1. sacreBLEU 2.6 instead counts the resamples whose absolute
    difference, centred on its own mean, exceeds the observed one, which gives identical systems
    1 / (n + 1) = 0.001 ("significant"); on systems that really differ the two agree (tests/unit/test_score.py).
    """
    import numpy as np

    diffs = -np.asarray(differences) if lower_is_better else np.asarray(differences)
    not_better = int((diffs <= 0).sum())
    if not_better > len(diffs) / 2:  # the other system is the better one: test that direction instead
        not_better = int((diffs >= 0).sum())
    return (not_better + 1) / (len(diffs) + 1)


_LANG = re.compile(r"^[a-z]{2,3}$")


def target_language(lang: str | None, refs: list[Path], langpair: str | None, run_lang: str | None) -> str:
    """The language --paper-bleu tokenises for: ``--lang``, else the run's target language, else the
    language pair's, else the reference file name's language suffix (``ref.de``, ``...-ref.de.sgm``)."""
    if lang:
        return lang
    if run_lang:
        return run_lang
    if langpair and "-" in langpair:
        return langpair.split("-", 1)[1]
    for ref in refs:
        parts = [p for p in ref.name.lower().split(".") if p not in ("gz", "sgm", "txt", "raw")]
        if len(parts) > 1 and _LANG.match(parts[-1]):
            return parts[-1]
    names = ", ".join(p.name for p in refs)
    raise NmtkError(f"--paper-bleu needs the target language for Moses: pass --lang (or -m RUN); "
                    f"it cannot be read from the reference name ({names})")


def sacrebleu_references(test_set: str, langpair: str) -> list[Path]:
    """Reference files from sacreBLEU's own test-set cache (downloaded by sacreBLEU if it can)."""
    from sacrebleu.dataset import DATASETS

    if test_set not in DATASETS:
        raise NmtkError(f"--test-set: unknown test set {test_set!r}")
    dataset = DATASETS[test_set]
    if langpair not in dataset.langpairs:
        known = ", ".join(sorted(dataset.langpairs)[:12])
        raise NmtkError(f"--langpair: {test_set} has no {langpair} (it has {known})")
    try:
        return [Path(p) for p in dataset.get_reference_files(langpair)]
    except Exception as exc:  # sacrebleu raises URLError, OSError, SystemExit...
        raise NmtkError(
            f"{test_set} {langpair} is not in sacreBLEU's cache and cannot be downloaded ({exc}): "
            f"give the reference file with -r REF instead"
        ) from None
    except SystemExit:
        raise NmtkError(f"{test_set} {langpair}: sacreBLEU could not get the reference; use -r REF") from None


@dataclass(frozen=True)
class ScoreRequest:
    """What `nmtk score` was asked: hypothesis files (none: stdin), references, metrics and options."""

    hyps: list[Path]
    refs: list[Path]
    metrics: str = "bleu,chrf"
    lowercase: bool = False
    tokenize: str | None = None
    paper_bleu: bool = False
    lang: str | None = None
    model: Path | None = None
    significance: bool = False
    samples: int = 1000
    test_set: str | None = None
    langpair: str | None = None


def score_files(r: ScoreRequest, stdin: BinaryIO) -> tuple[list[str], dict[str, dict[str, Any]], Any]:
    """`nmtk score`: (system names, their scores, the significance table or None)."""
    from nmtk.files import decode_lines, read_lines
    from nmtk.rundir import RunDir

    ref_paths = list(r.refs)
    if r.test_set:
        if not r.langpair:
            raise NmtkError("--test-set needs --langpair, e.g. --langpair en-de")
        ref_paths += sacrebleu_references(r.test_set, r.langpair)
    if not ref_paths:
        raise NmtkError("no reference: give -r REF (or --test-set NAME --langpair xx-yy)")
    lang = r.lang
    if r.model is not None and not RunDir(r.model).is_run():  # `-m bleu` meant --metrics bleu, say
        raise NmtkError(f"-m {r.model}: not an nmtk run directory (-m names the run whose target language "
                        "--paper-bleu uses; the metrics are chosen with --metrics)")
    if r.paper_bleu:
        run_lang = None
        if r.model is not None:
            run_lang = RunDir(r.model).require().recipe().data.target_lang
        lang = target_language(lang, ref_paths, r.langpair, run_lang)
    scorer = Scorer(tuple(m.strip() for m in r.metrics.split(",") if m.strip()), r.lowercase, r.tokenize,
                    r.paper_bleu, lang or "en")
    refs = {str(p): read_lines(p, "reference") for p in ref_paths}
    if r.hyps:
        systems = [(str(p), read_lines(p, "hypothesis")) for p in r.hyps]
    else:
        systems = [("stdin", list(decode_lines(stdin, "stdin")))]
    for name, lines in systems:
        check_lengths(name, lines, refs)
    if r.significance and len(systems) < 2:
        raise NmtkError("--significance compares systems: give at least two hypothesis files")
    ref_lists = list(refs.values())
    results = {name: scorer.score(lines, ref_lists) for name, lines in systems}
    sig = scorer.significance(systems, ref_lists, r.samples) if r.significance else None
    return [name for name, _ in systems], results, sig
