"""What `nmtk prepare` does to one pair's corpora: Moses in worker processes, the subword model(s),
cleaning, and binarised splits (`Preparer`); `nmtk.data.prepare` decides when, and where it goes.
"""

from __future__ import annotations

import multiprocessing
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path
from typing import Any, TextIO

from nmtk.data.binarized import SideWriter, id_dtype
from nmtk.data.corpus import read_parallel
from nmtk.data.fetch import ensure_file, sha256_file
from nmtk.data.stages import Stages
from nmtk.errors import NmtkError
from nmtk.manifest import Manifest, raw_text, split_prefix
from nmtk.recipe import Corpus, Recipe
from nmtk.text.moses import Moses
from nmtk.text.pipeline import TextPipeline, moses_for
from nmtk.text.subword import learn_subwords, model_file_name

FORMAT_VERSION = 1
PAIRS_PER_CHUNK = 4000  # sentence pairs per unit of work of the Moses workers


@dataclass
class SplitStats:
    """What happened to one split's pairs."""

    name: str
    pairs_in: int = 0
    kept: int = 0
    dropped: dict[str, int] = field(default_factory=lambda: {"empty": 0, "too_long": 0, "ratio": 0})
    words: dict[str, int] = field(default_factory=dict)
    sides: dict[str, dict[str, float]] = field(default_factory=dict)
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"pairs_in": self.pairs_in, "kept": self.kept, "dropped": self.dropped, "words": self.words,
                "sides": self.sides, "seconds": round(self.seconds, 2)}


def chunked(pairs: Iterable[tuple[str, str]], size: int) -> Iterator[list[tuple[str, str]]]:
    it = iter(pairs)
    while chunk := list(islice(it, size)):
        yield chunk


def text_file(path: Path, mode: str) -> TextIO:
    """A UTF-8 text file whose only line break is ``\\n``."""
    return open(path, mode, encoding="utf-8", newline="\n")


# Worker-side state for the process pool: Moses objects are built once per process.
_WORKER: dict[str, Moses] = {}


def _init_worker(src: Moses, tgt: Moses) -> None:
    _WORKER["src"], _WORKER["tgt"] = src, tgt


def _tokenize_chunk(chunk: list[tuple[str, str]]) -> list[tuple[str, str]]:
    src, tgt = _WORKER["src"], _WORKER["tgt"]
    return [(src.tokenize(a), tgt.tokenize(b)) for a, b in chunk]


class _Pool:
    """Moses tokenisation of chunks in worker processes (sacremoses is pure Python, so one per core)."""

    def __init__(self, src: Moses, tgt: Moses, workers: int) -> None:
        self.pool = None
        if workers > 1:
            methods = multiprocessing.get_all_start_methods()
            context = multiprocessing.get_context("fork" if "fork" in methods else "spawn")
            self.pool = context.Pool(workers, initializer=_init_worker, initargs=(src, tgt))
        else:
            _init_worker(src, tgt)

    def map(self, chunks: Iterable[list[tuple[str, str]]]) -> Iterator[list[tuple[str, str]]]:
        if self.pool is None:
            return map(_tokenize_chunk, chunks)
        return self.pool.imap(_tokenize_chunk, chunks)

    def close(self) -> None:
        if self.pool is not None:
            self.pool.terminate()


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
        self.workers = workers or min(os.cpu_count() or 1, 8)

    @contextmanager
    def moses_pool(self) -> Iterator[_Pool]:
        """Worker processes for the Moses steps; none when no side has any (the text passes through)."""
        busy = any(m.enabled for m in self.moses.values())
        pool = _Pool(self.moses[self.src_lang], self.moses[self.tgt_lang], self.workers if busy else 1)
        try:
            yield pool
        finally:
            pool.close()

    def corpus_paths(self, corpus: Corpus) -> tuple[Path, Path]:
        return ensure_file(corpus.source, self.root), ensure_file(corpus.target, self.root)

    def _pairs(self, corpora: list[Corpus], stats: SplitStats, drop_empty: bool) -> Iterator[tuple[str, str]]:
        for corpus in corpora:
            src, tgt = self.corpus_paths(corpus)
            for a, b in read_parallel(src, tgt, self.recipe.data.encoding_errors):
                stats.pairs_in += 1
                if drop_empty and (not a.strip() or not b.strip()):
                    stats.dropped["empty"] += 1
                    continue
                yield a, b

    def tokenize_training_text(self, work: Path, pool: _Pool, stats: SplitStats) -> tuple[Path, Path]:
        """The training corpora through the Moses steps (if any), one file per side (subwords learn on them).

        Files are written and read back with ``\\n`` as the only line break: a ``\\r`` inside a line
        stays inside it.
        """
        paths = work / f"train.tok.{self.src_lang}", work / f"train.tok.{self.tgt_lang}"
        words = [0, 0]
        steps = "Moses-tokenise" if any(m.enabled for m in self.moses.values()) else "read"
        with (text_file(paths[0], "w") as fs, text_file(paths[1], "w") as ft,
              self.stages.stage(f"{steps} the {self.label + ' ' if self.label else ''}training pairs") as advance):
            for chunk in pool.map(chunked(self._pairs(self.recipe.data.train, stats, True), PAIRS_PER_CHUNK)):
                advance(len(chunk))
                for a, b in chunk:
                    fs.write(a + "\n")
                    ft.write(b + "\n")
                    words[0] += a.count(" ") + 1
                    words[1] += b.count(" ") + 1
        stats.words = {self.src_lang: words[0], self.tgt_lang: words[1]}
        return paths

    def learn(self, out: Path, tok_files: tuple[Path, Path]) -> dict[str, str]:
        """Learn the subword model(s); returns the model file name for each language.

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
        langs = (self.src_lang, self.tgt_lang)
        if tok.joint:
            names = dict.fromkeys(langs, model_file_name(tok.type))
            jobs = {names[self.src_lang]: list(tok_files)}
        else:
            names = {lang: model_file_name(tok.type, lang) for lang in langs}
            jobs = {names[lang]: [path] for lang, path in zip(langs, tok_files, strict=True)}
        with ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn")) as child:
            for name, inputs in jobs.items():
                try:
                    with self.stages.stage(f"learn {name} ({tok.type}, {tok.vocab_size:,} pieces)"):
                        child.submit(learn_subwords, inputs, out / name, **options).result()
                except ValueError as exc:
                    raise NmtkError(f"tokenizer.vocab_size: {exc}") from None
        return names

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

    def binarize(self, out: Path, split: str, tokenized: Iterable[list[tuple[str, str]]],
                 pipes: dict[str, TextPipeline], stats: SplitStats, clean: bool) -> None:
        """Encode Moses-tokenised pairs with sentencepiece, drop over-long pairs, write memmap files."""
        dtype = id_dtype(max(p.vocab_size for p in pipes.values()))
        writers = {lang: SideWriter(split_prefix(out, split, lang), dtype) for lang in (self.src_lang, self.tgt_lang)}
        with self.stages.stage(f"encode and binarise {split}") as advance:
            self._binarize(writers, tokenized, pipes, stats, clean, advance)
        for lang, writer in writers.items():
            writer.close()
            stats.sides[lang] = writer.stats()
        stats.kept = writers[self.src_lang].sentences

    def _binarize(self, writers: dict[str, SideWriter], tokenized: Iterable[list[tuple[str, str]]],
                  pipes: dict[str, TextPipeline], stats: SplitStats, clean: bool,
                  advance: Callable[[int], None]) -> None:
        max_len, max_ratio = self.recipe.data.max_len, self.recipe.data.max_ratio
        for chunk in tokenized:
            advance(len(chunk))
            src_ids = pipes[self.src_lang].encode_tokenized([a for a, _ in chunk])
            tgt_ids = pipes[self.tgt_lang].encode_tokenized([b for _, b in chunk])
            if clean:
                keep_src, keep_tgt = [], []
                for s, t in zip(src_ids, tgt_ids, strict=True):
                    ls, lt = len(s), len(t)
                    if ls > max_len or lt > max_len:
                        stats.dropped["too_long"] += 1
                    elif max(ls, lt) > max_ratio * max(1, min(ls, lt)):
                        stats.dropped["ratio"] += 1
                    else:
                        keep_src.append(s)
                        keep_tgt.append(t)
                src_ids, tgt_ids = keep_src, keep_tgt
            writers[self.src_lang].add(src_ids)
            writers[self.tgt_lang].add(tgt_ids)

    def eval_split(self, out: Path, split: str, corpus: Corpus, pool: _Pool,
                   pipes: dict[str, TextPipeline]) -> SplitStats:
        """A valid/test set: every line kept (BLEU needs them all), raw text kept beside for scoring."""
        stats = SplitStats(corpus.name)
        start = time.perf_counter()
        langs = (self.src_lang, self.tgt_lang)
        raw = {lang: open(raw_text(out, split, lang), "w", encoding="utf-8") for lang in langs}
        try:
            def chunks() -> Iterator[list[tuple[str, str]]]:
                for chunk in chunked(self._pairs([corpus], stats, False), PAIRS_PER_CHUNK):
                    for a, b in chunk:
                        raw[self.src_lang].write(a + "\n")
                        raw[self.tgt_lang].write(b + "\n")
                    yield chunk

            self.binarize(out, split, pool.map(chunks()), pipes, stats, clean=False)
        finally:
            for handle in raw.values():
                handle.close()
        stats.seconds = time.perf_counter() - start
        return stats

    def build(self, out: Path) -> dict[str, Any]:
        """Everything into ``out`` (an empty folder); returns the manifest (without inputs)."""
        work = Path(tempfile.mkdtemp(prefix="work-", dir=out))
        try:
            start = time.perf_counter()
            train = SplitStats("train")
            with self.moses_pool() as pool:
                tok_files = self.tokenize_training_text(work, pool, train)
            if train.pairs_in - train.dropped["empty"] == 0:
                raise NmtkError("data.train: the training corpora have no non-empty sentence pairs")
            models = self.learn(out, tok_files)
            pipes = {lang: TextPipeline(self.moses[lang], out / name) for lang, name in models.items()}

            def tokenized_train() -> Iterator[list[tuple[str, str]]]:
                with text_file(tok_files[0], "r") as fs, text_file(tok_files[1], "r") as ft:
                    pairs = ((a.rstrip("\n"), b.rstrip("\n")) for a, b in zip(fs, ft, strict=True))
                    yield from chunked(pairs, PAIRS_PER_CHUNK)

            self.binarize(out, "train", tokenized_train(), pipes, train, clean=True)
            if train.kept == 0:
                raise NmtkError("data.train: every training pair was dropped by cleaning (see data.max_len, max_ratio)")
            train.seconds = time.perf_counter() - start
            with self.moses_pool() as pool:
                splits = {"train": train, "valid": self.eval_split(out, "valid", self.recipe.data.valid, pool, pipes)}
                for corpus in self.recipe.data.test:
                    splits[corpus.name] = self.eval_split(out, corpus.name, corpus, pool, pipes)
        finally:
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
        }
