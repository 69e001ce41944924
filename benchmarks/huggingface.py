"""nmtk against transformers on a trained model: test_2016_flickr (1,000 lines), greedy and beam 4.

The run (default runs/multi30k-en-de-spm: train recipes/multi30k-en-de-spm.toml first) is exported with
`nmtk export --format hf`; transformers' `generate` translates the test set with the exported
`generation_config.json` (greedy, then beam 4 with the recipe's length penalty: the same α, though
transformers divides by |y|^α and nmtk by GNMT's ((5+|y|)/6)^α); `nmtk translate` does the same on the
run. Then the export is imported back (`nmtk import`) and translated again by nmtk. Prints one JSON
line: per search, identical lines out of 1,000 and sacreBLEU of each system.

``--no-repeat-ngram-size 3`` exports with that setting (written into ``generation_config.json``) and
has `nmtk translate` search with it too: the same repetition limit in both libraries.

Usage: python benchmarks/huggingface.py [--run DIR] [--batch 50] [--no-repeat-ngram-size N] [--beams 1,4]
"""

from __future__ import annotations

import argparse
import gzip
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from _util import ROOT, data_root


def _lines(lang: str) -> list[str]:
    with gzip.open(data_root() / "multi30k" / f"test_2016_flickr.{lang}.gz", "rt", encoding="utf-8") as handle:
        return [line.rstrip("\n") for line in handle]


def _nmtk(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "nmtk", *args], check=True, capture_output=True, text=True, cwd=ROOT)


def _nmtk_translate(model: Path, source: Path, beam: int, *extra: str) -> list[str]:
    out = source.with_suffix(f".{model.name}.b{beam}")
    _nmtk("translate", "-m", str(model), "-i", str(source), "-o", str(out), "--beam", str(beam), "--force", *extra)
    return out.read_text(encoding="utf-8").splitlines()


def _hf_translate(folder: Path, lines: list[str], beam: int, batch: int, a: float, b: int) -> list[str]:
    """transformers' translations, in input order, each under nmtk's limit: nmtk allows a sentence
    a·|x| + b tokens, then forces EOS; transformers has one ``max_new_tokens`` per call (counting the
    EOS, which ``forced_eos_token_id`` puts at the last step). So sentences are batched by that limit,
    and each batch gets limit + 1: a sentence that never ends stops where nmtk stops it."""
    import math

    import torch
    from transformers import MarianMTModel, MarianTokenizer

    tok, model = MarianTokenizer.from_pretrained(folder), MarianMTModel.from_pretrained(folder).eval()
    limits = [math.floor(a * (len(ids) - 1) + b) for ids in tok(lines)["input_ids"]]  # |x| without </s>
    out: list[str] = [""] * len(lines)
    with torch.inference_mode():
        for limit in sorted(set(limits)):
            same = [i for i, n in enumerate(limits) if n == limit]
            for start in range(0, len(same), batch):
                group = same[start : start + batch]
                inputs = tok([lines[i] for i in group], return_tensors="pt", padding=True)
                generated = model.generate(**inputs, num_beams=beam, do_sample=False, max_new_tokens=limit + 1)
                for i, text in zip(group, tok.batch_decode(generated, skip_special_tokens=True), strict=True):
                    out[i] = text
    return out


def _bleu(hyps: list[str], refs: list[str]) -> float:
    import sacrebleu

    return round(sacrebleu.corpus_bleu(hyps, [refs]).score, 2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", type=Path, default=ROOT / "runs" / "multi30k-en-de-spm")
    parser.add_argument("--batch", type=int, default=50)
    parser.add_argument("--no-repeat-ngram-size", type=int, default=0)
    parser.add_argument("--beams", default="1,4")
    args = parser.parse_args()
    extra = ["--no-repeat-ngram-size", str(args.no_repeat_ngram_size)] if args.no_repeat_ngram_size else []
    src, refs = _lines("en"), _lines("de")
    tmp = Path(tempfile.mkdtemp(prefix="nmtk-hf-bench-"))
    source = tmp / "test.en"
    source.write_text("\n".join(src) + "\n", encoding="utf-8")
    hf, back = tmp / "hf", tmp / "imported"
    _nmtk("export", str(args.run), "-o", str(hf), "--format", "hf", *extra)
    _nmtk("import", str(hf), "-o", str(back))
    result: dict = {"benchmark": "huggingface", "run": str(args.run), "lines": len(src),
                    "no_repeat_ngram_size": args.no_repeat_ngram_size}
    from nmtk.rundir import RunDir

    decode = RunDir(args.run).recipe().decode
    for beam in (int(b) for b in args.beams.split(",")):
        print(json.dumps(result), file=sys.stderr, flush=True)  # what is done so far
        ours = _nmtk_translate(args.run, source, beam, *extra)
        theirs = _hf_translate(hf, src, beam, args.batch, decode.max_len_a, decode.max_len_b)
        again = _nmtk_translate(back, source, beam, *extra)
        result["greedy" if beam == 1 else "beam4"] = {
            "identical_nmtk_transformers": sum(a == b for a, b in zip(ours, theirs, strict=True)),
            "identical_nmtk_reimported": sum(a == b for a, b in zip(ours, again, strict=True)),
            "bleu_nmtk": _bleu(ours, refs), "bleu_transformers": _bleu(theirs, refs),
            "bleu_reimported": _bleu(again, refs)}
    print(json.dumps(result))


if __name__ == "__main__":
    main()
