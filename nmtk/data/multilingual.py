"""`nmtk prepare` for a recipe with several pairs (``[[data.pairs]]``): one model, many directions.

Each pair is prepared as a one-pair recipe would be (its own Moses languages, cleaning, raw references),
into splits named by the pair: ``train.en-de``, ``valid.en-de``, ``test_2016_flickr.en-de``, whose
sides keep their real languages (``train.en-de.en.bin``). What is shared:

* **one subword model** over all languages, learned on an equal share of each language's training
  text (up to ``tokenizer.input_sentence_size`` / languages lines each), so that no language, however
  large its corpora or however many pairs it is in, takes the vocabulary;
* **target-language tags** ``>>de<<``: vocabulary items of their own, never produced by segmenting
  text, put by id before every source of a pair (`TextPipeline.prefix`).

With ``tokenizer.reuse`` (fine-tuning an imported multilingual model) the subword model(s) and tags
are the model's, and so is the way it reads them: an M2M-100 model's sources begin with their own
language's code and its targets with theirs.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

from nmtk.data.binarized import id_dtype
from nmtk.data.cleaning import DropLog
from nmtk.data.fetch import sha256_file
from nmtk.data.preparer import Preparer, SplitStats
from nmtk.data.stages import Stages
from nmtk.data.training_text import TrainingText
from nmtk.errors import NmtkError
from nmtk.manifest import DROPPED, Manifest
from nmtk.recipe import Corpus, DataSection, LanguagePair, Recipe, target_tag
from nmtk.text.pipeline import TextPipeline, moses_for
from nmtk.text.subword import learn_subwords, load_subword_model, model_file_name, sample_lines
from nmtk.workers import in_child


def pair_recipe(recipe: Recipe, pair: LanguagePair) -> Recipe:
    """``recipe`` as the one-pair recipe of ``pair``: what each pair is prepared with."""
    data = recipe.data
    one = DataSection(source_lang=pair.source_lang, target_lang=pair.target_lang, train=pair.train,
                      valid=pair.valid, test=pair.test, max_len=data.max_len, max_ratio=data.max_ratio,
                      encoding_errors=data.encoding_errors, clean=data.clean)
    return recipe.model_copy(update={"data": one})


class MultilingualPreparer:
    """Builds one prepared-data folder for a recipe with several pairs, pair by pair (`Preparer`)."""

    def __init__(self, recipe: Recipe, root: Path, workers: int | None = None, stages: Stages | None = None) -> None:
        if not recipe.tokenizer.joint and recipe.tokenizer.reuse is None:
            raise NmtkError("tokenizer.joint = false: [[data.pairs]] learn one subword model for all languages")
        self.recipe, self.root = recipe, root
        self.stages = stages or Stages(show=False)
        self.pairs = recipe.data.language_pairs()
        self.views = {p.name: Preparer(pair_recipe(recipe, p), root, workers, self.stages, p.name) for p in self.pairs}

    def corpus_paths(self, corpus: Corpus) -> tuple[Path, Path]:
        return next(iter(self.views.values())).corpus_paths(corpus)

    def build(self, out: Path) -> dict[str, Any]:
        """Everything into ``out`` (an empty folder); returns the manifest's fields (without inputs)."""
        work = Path(tempfile.mkdtemp(prefix="work-", dir=out))
        drops = DropLog(out / DROPPED)
        try:
            texts, stats = {}, {}
            for pair in self.pairs:
                view, folder = self.views[pair.name], work / pair.name
                folder.mkdir()
                stats[pair.name] = SplitStats(f"train.{pair.name}")
                with view.worker_pool(cleaning=True) as pool:
                    texts[pair.name] = view.tokenize_training_text(folder, pool, stats[pair.name], drops)
                if texts[pair.name].lines == 0:
                    raise NmtkError(f"data.pairs: {pair.name}: the training corpora have no non-empty sentence "
                                    f"pairs left after cleaning (see {DROPPED}, [data.clean])")
            if self.recipe.tokenizer.reuse is None:
                models, style = self.learn(out, work, texts), "opus-mt"
                tags = self.learned_tags(out / next(iter(models.values())))
            else:
                models, tags, style = self.reuse(out, Path(self.recipe.tokenizer.reuse))
            pipes = self.pipelines(out, models)
            splits = {}
            for pair in self.pairs:
                splits.update(self.prepare_pair(out, pair, texts[pair.name], stats[pair.name], pipes, tags, style,
                                                drops))
        finally:
            drops.close()
            shutil.rmtree(work, ignore_errors=True)
        sizes = {lang: pipe.vocab_size for (lang, _), pipe in pipes.items()}
        return {
            "format": 1, "source_lang": "+".join(dict.fromkeys(p.source_lang for p in self.pairs)),
            "target_lang": "+".join(self.recipe.data.targets()), "dtype": str(id_dtype(max(sizes.values()))),
            "vocab": {"joint": len(set(models.values())) == 1, "models": models, "size": sizes,
                      "sha256": {name: sha256_file(out / name) for name in set(models.values())}},
            "splits": splits, "pairs": [p.name for p in self.pairs], "tags": tags, "tag_style": style,
            "test_sets": [f"{c.name}.{p.name}" for p in self.pairs for c in p.test],
        }

    def reuse(self, out: Path, folder: Path) -> tuple[dict[str, str], dict[str, int], str]:
        """The subword model(s) and tags of ``folder`` (an imported multilingual model, a run, prepared
        data): fine-tuning needs its vocabulary and tags, id for id. Every language of the recipe must be
        one the folder's model has."""
        manifest = Manifest.in_folder(folder) if folder.is_dir() else None
        if manifest is None:
            raise NmtkError(f"tokenizer.reuse: {folder}: not a folder")
        if not manifest.pairs:
            raise NmtkError(f"tokenizer.reuse: {folder} is a one-pair model; [[data.pairs]] need a multilingual one")
        langs = self.recipe.data.languages()
        tagged = langs if manifest.tag_style == "m2m-100" else self.recipe.data.targets()
        for lang in langs:
            if lang not in manifest.vocab.models or (lang in tagged and lang not in manifest.tags):
                raise NmtkError(f"tokenizer.reuse: {folder} has no {lang!r} (its pairs: {', '.join(manifest.pairs)})")
        models = {lang: manifest.vocab.models[lang] for lang in langs}
        for name in set(models.values()):
            shutil.copyfile(folder / name, out / name)
        return models, {lang: manifest.tags[lang] for lang in tagged}, manifest.tag_style

    def learn(self, out: Path, work: Path, texts: dict[str, TrainingText]) -> dict[str, str]:
        """The joint subword model, learned on an equal share of every language's training text; returns
        its file name for every language."""
        tok = self.recipe.tokenizer
        by_lang: dict[str, list[Path]] = {}
        for pair in self.pairs:
            src, tgt = texts[pair.name].src_path, texts[pair.name].tgt_path
            by_lang.setdefault(pair.source_lang, []).append(src)
            by_lang.setdefault(pair.target_lang, []).append(tgt)
        share = max(1, tok.input_sentence_size // len(by_lang))
        samples = []
        for lang, files in by_lang.items():
            samples.append(work / f"sample.{lang}")
            with open(samples[-1], "w", encoding="utf-8", newline="\n") as handle:
                for line in sample_lines(files, share, tok.seed):
                    handle.write(line + "\n")
        name = model_file_name(tok.type)
        corpus_tags = [tag for view in self.views.values() for tag in view.corpus_tags()]
        tags = tuple(dict.fromkeys([*(target_tag(lang) for lang in self.recipe.data.targets()), *corpus_tags]))
        options = dict(model_type=tok.type, vocab_size=tok.vocab_size, character_coverage=tok.character_coverage,
                       input_sentence_size=tok.input_sentence_size, seed=tok.seed, normalization=tok.normalization,
                       byte_fallback=tok.byte_fallback, threads=next(iter(self.views.values())).workers, symbols=tags)
        try:
            what = f"learn {name} ({tok.type}, {tok.vocab_size:,} pieces, {len(by_lang)} languages)"
            with self.stages.stage(what):
                in_child(learn_subwords, samples, out / name, **options)
        except ValueError as exc:
            raise NmtkError(f"tokenizer.vocab_size: {exc}") from None
        return dict.fromkeys(self.recipe.data.languages(), name)

    def learned_tags(self, model: Path) -> dict[str, int]:
        """Each target language's tag id in a model learned here."""
        pieces = load_subword_model(model).pieces()
        return {lang: pieces.index(target_tag(lang)) for lang in self.recipe.data.targets()}

    def pipelines(self, out: Path, models: dict[str, str]) -> dict[tuple[str, str], TextPipeline]:
        """Every (language, side)'s pipeline with its subword model."""
        tok, pipes = self.recipe.tokenizer, {}
        for pair in self.pairs:
            for lang, side in ((pair.source_lang, "source"), (pair.target_lang, "target")):
                if (lang, side) not in pipes:
                    pipes[lang, side] = TextPipeline(moses_for(tok, lang, side), out / models[lang])
        return pipes

    def prepare_pair(self, out: Path, pair: LanguagePair, text: TrainingText, train: SplitStats,
                     pipes: dict[tuple[str, str], TextPipeline], tags: dict[str, int], style: str,
                     drops: DropLog) -> dict[str, Any]:
        """One pair's training, validation and test splits: its sources begin with the target's tag
        (opus-mt's and nmtk's way), or with the source's code and its targets with the target's
        (M2M-100's: the code the search forces first is then what training taught)."""
        view, (src, tgt) = self.views[pair.name], (pair.source_lang, pair.target_lang)
        source, target = pipes[src, "source"], pipes[tgt, "target"]
        m2m = style == "m2m-100"
        mine = {src: TextPipeline(source.moses, source.model_path, (tags[src if m2m else tgt],)),
                tgt: TextPipeline(target.moses, target.model_path, (tags[tgt],)) if m2m else target}
        view.binarize_training(out, f"train.{pair.name}", text, mine, train, drops)
        if train.kept == 0:
            raise NmtkError(f"data.pairs: {pair.name}: every training pair was dropped by cleaning "
                            "(see data.max_len, max_ratio)")
        splits = {f"train.{pair.name}": train}
        with view.worker_pool() as pool:
            for split, corpus in ((f"valid.{pair.name}", pair.valid),
                                  *((f"{c.name}.{pair.name}", c) for c in pair.test)):
                splits[split] = view.eval_split(out, split, corpus, pool, mine)
        return {name: {"corpus": s.name, **s.to_dict()} for name, s in splits.items()}
