"""What `nmtk prepare` does to one pair's corpora: Moses in worker processes, the subword model(s),
cleaning, and binarised splits (`Preparer`); `nmtk.data.prepare` decides when, and where it goes.
"""

from __future__ import annotations

import os
import random
import shutil
import tempfile
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nmtk.data.alignment import align, write_alignments
from nmtk.data.binarized import SideReader, SideWriter, id_dtype
from nmtk.data.cleaning import RULES, Cleaner, CorpusCounts, DropLog, dropped_text
from nmtk.data.corpus import columns, read_parallel
from nmtk.data.fetch import ensure_file, sha256_file
from nmtk.data.stages import Stages
from nmtk.data.training_text import (
    PAIRS_PER_CHUNK,
    TrainingText,
    WorkerPool,
    chunked,
    clean_and_tokenize_chunk,
    text_file,
    tokenize_chunk,
)
from nmtk.errors import NmtkError
from nmtk.manifest import ALIGNMENT, DROPPED, Manifest, raw_text, split_prefix, words_file
from nmtk.recipe import Corpus, Recipe
from nmtk.text.pipeline import TextPipeline, moses_for
from nmtk.text.subword import learn_subwords, load_subword_model, model_file_name
from nmtk.text.typos import count_words, write_words
from nmtk.vocab import HINT_SYMBOLS
from nmtk.workers import in_child

FORMAT_VERSION = 1


@dataclass
class SplitStats:
    """What happened to one split's pairs (a training split's per corpus too)."""

    name: str
    pairs_in: int = 0
    kept: int = 0
    dropped: dict[str, int] = field(default_factory=lambda: {"empty": 0, "too_long": 0, "ratio": 0})
    words: dict[str, int] = field(default_factory=dict)
    sides: dict[str, dict[str, float]] = field(default_factory=dict)
    seconds: float = 0.0
    corpora: list[CorpusCounts] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        out = {"pairs_in": self.pairs_in, "kept": self.kept, "dropped": self.dropped, "words": self.words,
               "sides": self.sides, "seconds": round(self.seconds, 2)}
        if self.corpora:
            out["corpora"] = [c.to_dict() for c in self.corpora]
        return out

    def total(self) -> None:
        """The split's counts from its corpora's."""
        self.pairs_in = sum(c.pairs_in for c in self.corpora)
        self.kept = sum(c.kept for c in self.corpora)
        for rule in RULES:
            count = sum(c.dropped[rule] for c in self.corpora)
            if count or rule in self.dropped:
                self.dropped[rule] = count


class Preparer:
    """Builds one prepared-data folder for a recipe."""

    def __init__(self, recipe: Recipe, root: Path, workers: int | None = None, stages: Stages | None = None,
                 label: str = "") -> None:
        """``label``: the pair this preparer's stages name (a multilingual recipe prepares one per pair)."""
        self.recipe, self.label = recipe, label
        self.stages = stages or Stages(show=False)
        self.root = root
        self.src_lang, self.tgt_lang = recipe.data.source_lang, recipe.data.target_lang
        tok = recipe.tokenizer
        self.moses = {self.src_lang: moses_for(tok, self.src_lang, "source"),
                      self.tgt_lang: moses_for(tok, self.tgt_lang, "target")}
        self.cleaner = Cleaner.of(self.src_lang, self.tgt_lang, recipe.data.clean)
        self.workers = workers or min(os.cpu_count() or 1, 8)

    @contextmanager
    def worker_pool(self, cleaning: bool = False) -> Iterator[WorkerPool]:
        """Worker processes for the per-sentence steps (Moses; with ``cleaning``, the raw-text rules);
        none when there are none (the text passes through)."""
        clean = self.recipe.data.clean
        busy = any(m.enabled for m in self.moses.values()) or cleaning and (clean.language or clean.scripts < 1.0)
        pool = WorkerPool(self.moses[self.src_lang], self.moses[self.tgt_lang], self.cleaner,
                          self.workers if busy else 1)
        try:
            yield pool
        finally:
            pool.close()

    def corpus_paths(self, corpus: Corpus) -> tuple[Path, Path]:
        return ensure_file(corpus.source, self.root), ensure_file(corpus.target, self.root)

    def corpus_pairs(self, corpus: Corpus) -> Iterator[tuple[str, str]]:
        """A corpus's (source, target) lines, each side's column where it names one."""
        return read_parallel(*self.corpus_paths(corpus), self.recipe.data.encoding_errors, columns(corpus))

    def corpus_label(self, corpus: Corpus) -> str:
        """How ``dropped.tsv`` names a corpus: its name (a multilingual recipe's: ``en-de/name``)."""
        return f"{self.label}/{corpus.name}" if self.label else corpus.name

    def _pairs(self, corpora: list[Corpus], stats: SplitStats) -> Iterator[tuple[str, str]]:
        for corpus in corpora:
            for a, b in self.corpus_pairs(corpus):
                stats.pairs_in += 1
                yield a, b

    def _training_items(self, counts: list[CorpusCounts]) -> Iterator[tuple[int, int, str, str]]:
        """Every training pair as ``(corpus, line, source, target)``, counted per corpus."""
        for index, corpus in enumerate(self.recipe.data.train):
            for line, (a, b) in enumerate(self.corpus_pairs(corpus), 1):
                counts[index].pairs_in += 1
                yield index, line, a, b

    def tokenize_training_text(self, work: Path, pool: WorkerPool, stats: SplitStats, drops: DropLog) -> TrainingText:
        """The training corpora through the raw-text rules and the Moses steps (if any), one file per side
        (subwords learn on them). Files are written and read back with ``\n`` as the only line break: a
        ``\r`` inside a line stays inside it."""
        stats.corpora = [CorpusCounts(self.corpus_label(c)) for c in self.recipe.data.train]
        text = TrainingText(work / f"train.tok.{self.src_lang}", work / f"train.tok.{self.tgt_lang}",
                            work / "train.meta", stats.corpora)
        steps = "clean and Moses-tokenise" if any(m.enabled for m in self.moses.values()) else "read and clean"
        what = f"{steps} the {self.label + ' ' if self.label else ''}training pairs"
        with self.stages.stage(what, detail=lambda: _dropped_text(stats.corpora)) as advance:
            items = chunked(self._training_items(stats.corpora), PAIRS_PER_CHUNK)
            text.write(pool.map_beside(clean_and_tokenize_chunk, items), drops, advance)
        stats.total()
        return text

    def corpus_tags(self) -> list[str]:
        """The training corpora's tags (``<BT>``), each once: vocabulary items of their own."""
        return list(dict.fromkeys(c.tag for c in self.recipe.data.train if c.tag))

    def learn(self, out: Path, text: TrainingText) -> dict[str, str]:
        """Learn the subword model(s); returns the model file name for each language. Corpus tags are
        symbols of the source's model (`learn_subwords`), never produced by segmenting text.

        Each model is learned in a child process: the learner's sample (up to ``input_sentence_size``
        sentences and the learner's own structures, the largest memory of `prepare`) is gone when it
        exits, and this process never grows by it.
        """
        tok = self.recipe.tokenizer
        if tok.reuse is not None:
            return self.reuse(out, Path(tok.reuse))
        options = dict(model_type=tok.type, vocab_size=tok.vocab_size, character_coverage=tok.character_coverage,
                       input_sentence_size=tok.input_sentence_size, seed=tok.seed, normalization=tok.normalization,
                       byte_fallback=tok.byte_fallback, threads=self.workers)
        langs, files, tags = (self.src_lang, self.tgt_lang), (text.src_path, text.tgt_path), tuple(self.corpus_tags())
        cased = [cased_copy(path, self.recipe.casing, tok.seed) for path in files] if self.recipe.casing else []
        if tok.joint:
            names = dict.fromkeys(langs, model_file_name(tok.type))
            jobs = {names[self.src_lang]: ([*files, *cased], tags)}
        else:
            names = {lang: model_file_name(tok.type, lang) for lang in langs}
            jobs = {names[self.src_lang]: ([files[0], *cased[:1]], tags),
                    names[self.tgt_lang]: ([files[1], *cased[1:]], ())}
        words = HINT_SYMBOLS if self.recipe.uses_terms else ()  # the source's (or the joint) model holds them
        for k, (name, (inputs, symbols)) in enumerate(jobs.items()):
            try:
                with self.stages.stage(f"learn {name} ({tok.type}, {tok.vocab_size:,} pieces)"):
                    in_child(learn_subwords, inputs, out / name, **options, symbols=symbols,
                             words=words if k == 0 else ())
            except ValueError as exc:
                raise NmtkError(f"tokenizer.vocab_size: {exc}") from None
        return names

    def _nothing_left(self, train: SplitStats) -> str:
        """Why no training pair is left after the raw-text rules, in the message itself: the prepared
        data (and its ``dropped.tsv``) is not written when this stops `prepare`."""
        files = ", ".join(f"{c.source.path} / {c.target.path}" for c in self.recipe.data.train)
        if train.pairs_in == 0:
            return f"data.train: the training corpora have no sentence pairs ({files})"
        return (f"data.train: no training pair is left of {train.pairs_in:,} after cleaning "
                f"({_dropped_text(train.corpora)}); [data.clean] switches rules off")

    def reuse(self, out: Path, folder: Path) -> dict[str, str]:
        """Copy the subword model(s) of ``folder`` (a run, an imported model, prepared data) instead of
        learning: fine-tuning needs the vocabulary the model was trained with, id for id."""
        manifest = Manifest.in_folder(folder) if folder.is_dir() else None
        if manifest is None:
            raise NmtkError(f"tokenizer.reuse: {folder}: not a folder")
        names = {}
        for lang in (self.src_lang, self.tgt_lang):
            if lang not in manifest.vocab.models:
                raise NmtkError(f"tokenizer.reuse: {folder} has no subword model for {lang!r} "
                                f"(it has {', '.join(sorted(manifest.vocab.models))})")
            names[lang] = manifest.vocab.models[lang]
        for name in set(names.values()):
            if not (folder / name).is_file():
                raise NmtkError(f"tokenizer.reuse: {folder / name}: missing")
            shutil.copyfile(folder / name, out / name)
        return names

    def tag_ids(self, source: TextPipeline) -> list[int | None]:
        """Each training corpus's tag as an id of the source's subword model (None: untagged)."""
        pieces = {piece: i for i, piece in enumerate(load_subword_model(source.model_path).pieces())}
        ids = []
        for corpus in self.recipe.data.train:
            if corpus.tag is not None and corpus.tag not in pieces:
                raise NmtkError(f"corpus {corpus.name}: tag {corpus.tag!r} is not a piece of {source.model_path.name} "
                                "(tokenizer.reuse: the reused vocabulary must have it)")
            ids.append(pieces[corpus.tag] if corpus.tag is not None else None)
        return ids

    def binarize(self, out: Path, split: str, tokenized: Iterable[list[tuple[str, str]]],
                 pipes: dict[str, TextPipeline], stats: SplitStats) -> None:
        """A validation or test split: every Moses-tokenised pair encoded and written (BLEU needs them all)."""
        writers = self._writers(out, split, pipes)
        with self.stages.stage(f"encode and binarise {split}") as advance:
            for chunk in tokenized:
                advance(len(chunk))
                writers[self.src_lang].add(pipes[self.src_lang].encode_tokenized([a for a, _ in chunk]))
                writers[self.tgt_lang].add(pipes[self.tgt_lang].encode_tokenized([b for _, b in chunk]))
        self._close(writers, stats)

    def binarize_training(self, out: Path, split: str, text: TrainingText, pipes: dict[str, TextPipeline],
                          stats: SplitStats, drops: DropLog) -> None:
        """The training split: duplicates, over-long and bad-ratio pairs dropped (each counted and listed),
        each corpus's tag put after the source's prefix (a multilingual model's target tag), memmap files."""
        writers = self._writers(out, split, pipes)
        source, target = pipes[self.src_lang], pipes[self.tgt_lang]
        tags, at = self.tag_ids(source), len(source.prefix)
        max_len, max_ratio = self.recipe.data.max_len, self.recipe.data.max_ratio
        earlier = [Counter(c.dropped) for c in stats.corpora]  # the stage line counts its own drops only
        detail = lambda: _dropped_text(stats.corpora, earlier)  # noqa: E731
        words = [0, 0]  # the kept pairs' (Moses) words: the table's subwords per word
        with self.stages.stage(f"encode and binarise {split}", detail=detail) as advance:
            for chunk in text.chunks(self.recipe.data.clean.duplicates):
                advance(len(chunk))
                src_ids = source.encode_tokenized([a for a, *_ in chunk])
                tgt_ids = target.encode_tokenized([b for _, b, *_ in chunk])
                keep_src, keep_tgt = [], []
                for s, t, (a, b, corpus, line, first) in zip(src_ids, tgt_ids, chunk, strict=True):
                    if (tag := tags[corpus]) is not None:
                        s = s[:at] + [tag] + s[at:]
                    rule = _length_rule(len(s), len(t), max_len, max_ratio) if first else "duplicate"
                    counts = stats.corpora[corpus]
                    if rule is not None:
                        counts.dropped[rule] += 1
                        drops.add(counts.name, line, rule)
                        continue
                    counts.kept += 1
                    keep_src.append(s)
                    keep_tgt.append(t)
                    words[0] += a.count(" ") + 1
                    words[1] += b.count(" ") + 1
                writers[self.src_lang].add(keep_src)
                writers[self.tgt_lang].add(keep_tgt)
        stats.words = {self.src_lang: words[0], self.tgt_lang: words[1]}
        self._close(writers, stats)
        stats.total()

    def align_training(self, out: Path, pipes: dict[str, TextPipeline]) -> None:
        """The kept training pairs' word alignments (`nmtk.data.alignment`), for the ``terms`` modifier:
        each side's ids decoded back to its Moses tokens (exactly the text they were encoded from)."""
        sides, dtype = [], id_dtype(max(p.vocab_size for p in pipes.values()))
        for lang in (self.src_lang, self.tgt_lang):
            reader, subwords = SideReader(split_prefix(out, "train", lang), dtype), pipes[lang].subwords
            sides.append([subwords.decode(reader[i].tolist()) for i in range(len(reader))])
        with self.stages.stage("align words (eflomal, for the terms modifier)") as advance:
            links = align(*sides)
            advance(len(links))
        write_alignments(split_prefix(out, "train", ALIGNMENT), links)

    def _writers(self, out: Path, split: str, pipes: dict[str, TextPipeline]) -> dict[str, SideWriter]:
        dtype = id_dtype(max(p.vocab_size for p in pipes.values()))
        return {lang: SideWriter(split_prefix(out, split, lang), dtype) for lang in (self.src_lang, self.tgt_lang)}

    def _close(self, writers: dict[str, SideWriter], stats: SplitStats) -> None:
        for lang, writer in writers.items():
            writer.close()
            stats.sides[lang] = writer.stats()
        stats.kept = writers[self.src_lang].sentences

    def eval_split(self, out: Path, split: str, corpus: Corpus, pool: WorkerPool,
                   pipes: dict[str, TextPipeline]) -> SplitStats:
        """A valid/test set: every line kept (BLEU needs them all), raw text kept beside for scoring."""
        stats = SplitStats(corpus.name)
        start = time.perf_counter()
        langs = (self.src_lang, self.tgt_lang)
        raw = {lang: open(raw_text(out, split, lang), "w", encoding="utf-8") for lang in langs}
        try:
            def chunks() -> Iterator[list[tuple[str, str]]]:
                for chunk in chunked(self._pairs([corpus], stats), PAIRS_PER_CHUNK):
                    for a, b in chunk:
                        raw[self.src_lang].write(a + "\n")
                        raw[self.tgt_lang].write(b + "\n")
                    yield chunk

            self.binarize(out, split, pool.map(tokenize_chunk, chunks()), pipes, stats)
        finally:
            for handle in raw.values():
                handle.close()
        if (split == "valid" or split.startswith("valid.")) and stats.pairs_in == 0:  # (train would fail there)
            raise NmtkError(f"data.valid: {corpus.source.path} has no sentence pairs; validation (loss, BLEU, the "
                            "best checkpoint, early stopping) needs at least one")
        stats.seconds = time.perf_counter() - start
        return stats

    def build(self, out: Path) -> dict[str, Any]:
        """Everything into ``out`` (an empty folder); returns the manifest (without inputs)."""
        work = Path(tempfile.mkdtemp(prefix="work-", dir=out))
        drops = DropLog(out / DROPPED)
        try:
            start = time.perf_counter()
            train = SplitStats("train")
            with self.worker_pool(cleaning=True) as pool:
                text = self.tokenize_training_text(work, pool, train, drops)
            if text.lines == 0:
                raise NmtkError(self._nothing_left(train))
            models = self.learn(out, text)
            pipes = {lang: TextPipeline(self.moses[lang], out / name) for lang, name in models.items()}
            self.binarize_training(out, "train", text, pipes, train, drops)
            if train.kept == 0:
                raise NmtkError("data.train: every training pair was dropped by cleaning (see data.max_len, max_ratio)")
            if self.recipe.uses_terms:
                self.align_training(out, pipes)
            if self.recipe.tokenizer.correct_typos:
                with text_file(text.src_path, "r") as lines:
                    write_words(out / words_file(self.src_lang), count_words(lines))
            train.seconds = time.perf_counter() - start
            with self.worker_pool() as pool:
                splits = {"train": train, "valid": self.eval_split(out, "valid", self.recipe.data.valid, pool, pipes)}
                for corpus in self.recipe.data.test:
                    splits[corpus.name] = self.eval_split(out, corpus.name, corpus, pool, pipes)
        finally:
            drops.close()
            shutil.rmtree(work, ignore_errors=True)
        return {
            "format": FORMAT_VERSION,
            "source_lang": self.src_lang,
            "target_lang": self.tgt_lang,
            "dtype": str(id_dtype(max(p.vocab_size for p in pipes.values()))),
            "vocab": {"joint": len(set(models.values())) == 1, "models": models,
                      "size": {lang: p.vocab_size for lang, p in pipes.items()},
                      "sha256": {name: sha256_file(out / name) for name in set(models.values())}},
            "splits": {name: {"corpus": s.name, **s.to_dict()} for name, s in splits.items()},
            "test_sets": [c.name for c in self.recipe.data.test],
            "hints": self.recipe.uses_terms,
            "words": {self.src_lang: words_file(self.src_lang)} if self.recipe.tokenizer.correct_typos else {},
        }


#: The share of training lines the subword learner also sees in capitals, and in title case, when training
#: uses those modifiers: an uppercased Multi30k sentence 4.0x -> 1.35x the tokens, a clean one +2 %.
CASED_SHARE = 0.05


def cased_copy(path: Path, casing: list[str], seed: int) -> Path:
    """``path``'s lines as the casing modifiers will make some of them (OpusTrainer's ``uppercase``:
    ``str.upper``; ``titlecase``: each word's first letter), `CASED_SHARE` of the lines each (seeded), in a
    file beside it: the subword learner reads it with the text, so capitals get pieces of their own. A
    fixed share, not the modifiers' own: changing a probability does not make new data."""
    rng = random.Random(seed)
    out = path.with_name(path.name + ".cased")
    with open(path, encoding="utf-8", newline="\n") as lines, open(out, "w", encoding="utf-8", newline="\n") as sink:
        for line in lines:
            if "uppercase" in casing and rng.random() < CASED_SHARE:
                sink.write(line.upper())
            if "titlecase" in casing and rng.random() < CASED_SHARE:
                sink.write(" ".join(w[:1].upper() + w[1:] for w in line.split()) + "\n")
    return out


def _length_rule(ls: int, lt: int, max_len: int, max_ratio: float) -> str | None:
    """``too_long`` or ``ratio`` for a pair of ``ls`` and ``lt`` subwords (Moses' clean-corpus-n), else None."""
    if ls > max_len or lt > max_len:
        return "too_long"
    if max(ls, lt) > max_ratio * max(1, min(ls, lt)):
        return "ratio"
    return None


def _dropped_text(corpora: list[CorpusCounts], earlier: list[Counter] | None = None) -> str:
    """``dropped 120 (duplicate 100, copy 20)``, per corpus where there are several: the stage line's end;
    with ``earlier`` (each corpus's counts before the stage), only what the stage dropped."""
    parts = []
    for index, counts in enumerate(corpora):
        dropped = counts.dropped - earlier[index] if earlier else counts.dropped
        total = sum(dropped.values())
        if total:
            rules = dropped_text(dropped)
            parts.append(f"{counts.name + ': ' if len(corpora) > 1 else ''}dropped {total:,} ({rules})")
    return "; ".join(parts)
