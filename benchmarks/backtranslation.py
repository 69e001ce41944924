"""Benchmark tagged back-translation on Multi30k: does German-only data help an en->de model?

Multi30k en-de train is cut in two halves: the first stays parallel, the second keeps only its German
("monolingual" data). The demo recipe (recipes/multi30k-en-de.toml, reversed) trains de->en on the
first half; that model back-translates the German half into synthetic English twice: with beam search
(beam 4) and with sampling (`--sampling`, the full distribution, Edunov et al. 2018). Then en->de
trains, each for the same minutes:

- ``half``: the first half alone;
- ``full``: all of Multi30k's parallel data (the ceiling: the second half's real English);
- ``bt_{beam,sampling}_{tagged,untagged}``: the first half plus the back-translated half, its sources
  with the corpus tag ``<BT>`` (Caswell et al. 2019) or without;
- ``staged``: two stages (``[[train.stages]]``, OpusTrainer's curriculum): the first half plus the beam
  back-translation (untagged) until the back-translation has been seen twice (``--staged-epochs``), then
  the first half only. With another ``--staged-epochs`` its run is ``run-staged_e<N>``; with
  ``--staged-bt sampling`` the sampled back-translation instead (``run-staged_sampling``); with
  ``--staged-updates N`` the first stage ends after N updates instead (``run-staged_u<N>``).

``--models`` picks some of them; ``--seed`` trains the en->de models from another seed (runs named
``run-<model>-s<seed>``; the de->en model and its back-translations are seed 1's, made once).

Each is scored on test_2016_flickr (beam 4, the recipe's settings, last 5 checkpoints averaged) with
sacreBLEU. Prints one JSON line: BLEU and updates per model, the back-translation's sentences/s.
A run already trained is not trained again (`nmtk train` finds it finished).

Usage: python benchmarks/backtranslation.py [--minutes 10] [--work DIR] [--seed 1] [--models half,staged,...]
       [--staged-epochs 2 | --staged-updates N] [--staged-bt beam|sampling]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import tomli_w
import tomllib
from _util import ROOT, data_root, multi30k_lines, nmtk, test_bleu, train

MODELS = ("half", "full", "bt_beam_tagged", "bt_beam_untagged", "bt_sampling_tagged", "bt_sampling_untagged", "staged")
#: The staged model's first stage ends when the back-translation was seen this often (run ``run-staged``).
STAGED_EPOCHS = 2.0


def stages(epochs: float, kind: str = "beam", updates: int | None = None) -> list[dict]:
    """The staged model's curriculum: original + the ``kind`` back-translation until it was seen ``epochs``
    times (or for ``updates`` updates), then original only."""
    end = {"updates": updates} if updates else {"epochs": epochs, "corpus": f"bt-{kind}"}
    return [{"name": "mixed", **end}, {"name": "original", "weights": {f"bt-{kind}": 0.0}}]


def staged_name(epochs: float, kind: str, updates: int | None = None) -> str:
    """The staged model's run and data name: ``staged``, with what differs from the default appended."""
    end = f"_u{updates}" if updates else f"_e{epochs:g}" if epochs != STAGED_EPOCHS else ""
    return "staged" + end + ("_sampling" if kind == "sampling" else "")


def write_root(work: Path) -> Path:
    """A data root: Multi30k (valid, test, full train), the first half (``half/``), the German of the
    second (``mono/train.de``)."""
    root = work / "root"
    for folder in ("half", "mono", "bt"):
        (root / folder).mkdir(parents=True, exist_ok=True)
    if not (root / "multi30k").exists():
        (root / "multi30k").symlink_to((data_root() / "multi30k").resolve())  # NMTK_DATA may be relative
    en, de = multi30k_lines("train.en.gz"), multi30k_lines("train.de.gz")
    middle = len(en) // 2
    for lang, lines in (("en", en), ("de", de)):
        (root / "half" / f"train.{lang}").write_text("".join(x + "\n" for x in lines[:middle]), encoding="utf-8")
    (root / "mono" / "train.de").write_text("".join(x + "\n" for x in de[middle:]), encoding="utf-8")
    return root


def corpus(name: str, src: str, tgt: str, **extra: object) -> dict:
    return {"name": name, "source": src, "target": tgt, **extra}


def recipe(work: Path, name: str, train_corpora: list[dict], reverse: bool = False,
           stages: list[dict] | None = None) -> Path:
    """The demo recipe with other training corpora (and de->en when ``reverse``; ``stages``: a curriculum)."""
    data = tomllib.loads((ROOT / "recipes" / "multi30k-en-de.toml").read_text())
    data["name"] = name
    if stages:
        data["train"]["stages"] = stages
    section = data["data"]
    section["train"] = train_corpora
    if reverse:
        section["source_lang"], section["target_lang"] = "de", "en"
        for c in [section["valid"], *section["test"]]:
            c["source"], c["target"] = c["target"], c["source"]
    path = work / f"{name}.toml"
    path.write_text(tomli_w.dumps(data))
    return path


def back_translate(run: Path, root: Path, sampling: bool, seed: int) -> float | None:
    """The German half into English with ``run``; returns sentences/s (None: made by an earlier call,
    not timed: JSON has no NaN)."""
    out = root / "bt" / f"{'sampling' if sampling else 'beam'}.en"
    if out.exists():
        return None
    checkpoint = run / "checkpoint_avg_last5.pt"
    start = time.perf_counter()
    nmtk("translate", "-m", str(run), "-i", str(root / "mono" / "train.de"), "-o", str(out),
         *(["--checkpoint", str(checkpoint)] if checkpoint.exists() else []),
         *(["--sampling", "--seed", str(seed)] if sampling else []))
    lines = len(out.read_text(encoding="utf-8").splitlines())
    return round(lines / (time.perf_counter() - start), 1)


def training_corpora(model: str, staged_kind: str = "beam") -> list[dict]:
    half = corpus("half", "half/train.en", "half/train.de")
    if model == "half":
        return [half]
    if model == "full":
        return [corpus("train", "multi30k/train.en.gz", "multi30k/train.de.gz")]
    if model == "staged":
        return [half, corpus(f"bt-{staged_kind}", f"bt/{staged_kind}.en", "mono/train.de")]
    _, kind, tagging = model.split("_")
    return [half, corpus(f"bt-{kind}", f"bt/{kind}.en", "mono/train.de",
                         **({"tag": "<BT>"} if tagging == "tagged" else {}))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--work", type=Path, default=ROOT / "runs" / "bench-backtranslation")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--models", default=",".join(MODELS), help="comma-separated, of " + ", ".join(MODELS))
    parser.add_argument("--staged-epochs", type=float, default=STAGED_EPOCHS,
                        help="the staged model's first stage ends when the back-translation was seen this often")
    parser.add_argument("--staged-updates", type=int, default=None,
                        help="the staged model's first stage ends after this many updates instead")
    parser.add_argument("--staged-bt", choices=("beam", "sampling"), default="beam",
                        help="the back-translation the staged model's first stage mixes in")
    args = parser.parse_args()
    models = args.models.split(",")
    if set(models) - set(MODELS):
        parser.error(f"unknown model(s): {', '.join(sorted(set(models) - set(MODELS)))}")
    work = args.work.resolve()
    work.mkdir(parents=True, exist_ok=True)
    root = write_root(work)
    result: dict = {"benchmark": "backtranslation", "minutes": args.minutes, "seed": args.seed}

    def trained(name: str, path: Path, seed: int = args.seed, data: str = "") -> Path:
        run = work / (f"run-{name}" if seed == 1 else f"run-{name}-s{seed}")
        updates = train(path, run, work / f"data-{data or name}", args.minutes, [5], seed, root)
        result.setdefault("updates", {})[name] = updates
        return run

    reverse = trained("de_en", recipe(work, "bt-de-en", [corpus("half", "half/train.de", "half/train.en")],
                                      reverse=True), seed=1)
    result["de_en_bleu"] = test_bleu(reverse, work / "data-de_en", "de", "en")
    kinds = {m.split("_")[1] for m in models if m.startswith("bt_")}
    kinds |= {args.staged_bt} if "staged" in models else set()
    result["bt_sentences_per_s"] = {kind: back_translate(reverse, root, kind == "sampling", 1)
                                    for kind in sorted(kinds)}
    result["bleu"] = {}
    for model in models:
        staged = model == "staged"
        name = staged_name(args.staged_epochs, args.staged_bt, args.staged_updates) if staged else model
        data = staged_name(STAGED_EPOCHS, args.staged_bt) if staged else model  # its corpora: epochs change none
        run = trained(name, recipe(work, f"bt-{name}", training_corpora(model, args.staged_bt),
                                   stages=stages(args.staged_epochs, args.staged_bt, args.staged_updates)
                                   if staged else None), data=data)
        result["bleu"][name] = test_bleu(run, work / f"data-{data}", "en", "de")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
