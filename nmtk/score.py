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
from typing import Any

from sacrebleu.metrics import BLEU, CHRF, TER
from sacremoses import MosesTokenizer

from nmtk.errors import NmtkError

METRICS = ("bleu", "chrf", "ter")
_COMPOUND = re.compile(r"(\S)-(\S)")


def check_lengths(name: str, hyps: list[str], refs: dict[str, list[str]]) -> None:
    if not hyps:
        raise NmtkError(f"{name}: the hypothesis is empty (no lines to score)")
    for ref_name, ref in refs.items():
        if len(ref) != len(hyps):
            raise NmtkError(f"{name} has {len(hyps):,} lines but reference {ref_name} has {len(ref):,}")


def paper_tokenize(lines: list[str], lang: str) -> list[str]:
    """Moses-tokenise and split hyphenated compounds as the paper-era WMT14 scripts did."""
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

    def _inputs(self, metric: str, hyps: list[str], refs: list[list[str]]) -> tuple[list[str], list[list[str]]]:
        if metric == "bleu" and self.paper_bleu:
            return paper_tokenize(hyps, self.lang), [paper_tokenize(r, self.lang) for r in refs]
        return hyps, refs

    def score(self, hyps: list[str], refs: list[list[str]]) -> dict[str, dict[str, Any]]:
        """Each metric's score, signature and (BLEU) n-gram precisions and brevity penalty."""
        results = {}
        for name, metric in self.metric_objects().items():
            h, r = self._inputs(name, hyps, refs)
            result = metric.corpus_score(h, r)
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
        """Paired bootstrap resampling (sacreBLEU) of every system against the first."""
        from sacrebleu.significance import PairedTest

        if self.paper_bleu:
            systems = [(n, paper_tokenize(h, self.lang)) for n, h in systems]
            refs = [paper_tokenize(r, self.lang) for r in refs]
        test = PairedTest(systems, {m.upper(): obj for m, obj in self.metric_objects().items()}, refs,
                          test_type="bs", n_samples=samples)
        _, results = test()
        out: dict[str, dict[str, dict[str, float]]] = {}
        per_metric = [v for k, v in results.items() if k != "System"]
        for metric, per_system in zip(self.metrics, per_metric, strict=True):
            for (name, _), result in zip(systems, per_system, strict=True):
                out.setdefault(name, {})[metric] = {
                    "score": round(float(result.score), 4), "mean": round(float(result.mean), 4),
                    "ci": round(float(result.ci), 4),
                    **({"p_value": round(float(result.p_value), 4)} if result.p_value is not None else {}),
                }
        return out


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
