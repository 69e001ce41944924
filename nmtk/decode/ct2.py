"""The CTranslate2 engine: an `nmtk export` folder behind the translator contract, without torch.

A deployment pays neither torch's memory (~200 MB) nor its import time: `load_translator` imports
this module, never torch, for an exported folder. The converter that writes such a folder is
`nmtk.convert.ctranslate2`.

Scoring: CTranslate2 normalises a hypothesis' log-probability by |Y|^α and ends a sentence's search
once its beam has finished: nmtk's ``length_penalty_form = "power"``, with which both engines
translate alike. The recipes' default, GNMT's ((5 + |Y|) / 6)^α, CTranslate2 cannot do: such a
search is run as ``power`` with the same α, and said once (docs/decoding.md, "Length penalty").
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from nmtk.console import console
from nmtk.data.batching import length_batches
from nmtk.decode.base import TranslatorBase
from nmtk.decode.search.config import Hypothesis, LineControls, SearchConfig
from nmtk.decode.search.word_alignment import Alignment, hard_alignment
from nmtk.errors import NmtkError
from nmtk.model_source import ModelSource
from nmtk.rundir import ExportDir
from nmtk.text import text_pipelines
from nmtk.text.pairs import model_pipelines
from nmtk.text.subword import word_index
from nmtk.vocab import unhinted_length

#: One CTranslate2 call: its lines (indices into a decode's input), its output limit, its pending results.
Call = tuple[list[int], int, list[Any]]

#: ``--precision`` on an export: CTranslate2's compute type (the stored weights are converted on load).
CT2_COMPUTE_TYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16", "int8": "int8"}


def ct2_device(name: str, gpus: int) -> tuple[str, int]:
    """CTranslate2's (device, index) for ``--device``, checked as `nmtk.device.pick_device` checks torch's."""
    if name == "auto":
        return ("cuda" if gpus else "cpu"), 0
    kind, _, index = name.partition(":")
    if kind not in ("cpu", "cuda") or (index and not index.isdigit()) or (kind == "cpu" and index):
        raise NmtkError(f"--device {name!r}: not a device (use cpu, cuda or cuda:N)")
    if kind == "cuda" and int(index or 0) >= gpus:
        raise NmtkError(f"--device {name}: no such CUDA device is available (CTranslate2 sees {gpus})")
    return kind, int(index or 0)


def thread_layout(device: str, threads: int, searches: int) -> tuple[int, int]:
    """CTranslate2's (intra_threads, inter_threads) for ``threads`` per search and ``searches`` side by side.

    On a CPU, a file's translation (one caller, ``searches`` 1) runs as ``threads`` searches of one thread
    each (all cores when ``threads`` is 0), its batches decoded side by side: one search's threads meet
    at every op, and on 2-core hosts that costs more than the second core gives. Measured on the demo
    model, test_2016_flickr, beam 4, int8 (2-core Intel Xeon, 2026-11-28): 2 threads in one search 255
    sentences/s, one thread 262, two searches of one thread 541; one sentence decoded alone, 5.8 ms a
    step on 2 threads against 0.5 ms on one. A GPU, and a server's own searches, keep what they asked."""
    if device != "cpu" or searches != 1:
        return threads, searches
    return 1, max(1, threads or len(os.sched_getaffinity(0)))


def by_limit(lines: list[int], limits: list[int]) -> list[tuple[list[int], int]]:
    """``lines`` by their own output limit (``limits[i]``), smallest first: one CTranslate2 call each."""
    return [([i for i in lines if limits[i] == limit], limit) for limit in sorted({limits[i] for i in lines})]


@dataclass(kw_only=True)
class Ct2Translator(TranslatorBase):
    """An exported model run by CTranslate2, through the same text pipeline as nmtk's own."""

    engine: ClassVar[str] = "ctranslate2"

    directory: Path
    ct2: Any
    quantization: str = ""
    device: str = "cpu"
    shortlist: bool = False  # search with the export's lexical shortlist (`vmap.txt`, CTranslate2's use_vmap)
    aligns: bool = False  # its attention averages every head of the last decoder layer (`can_align`)
    # ctranslate2.Translator's arguments for one search, where `thread_layout` made several: sampling's
    # generator is per CTranslate2 thread, so a seed samples alike only when one thread draws every call
    one_search: dict[str, Any] = field(default_factory=dict, repr=False)
    _sampler: Any = field(default=None, init=False, repr=False)
    _seeded: set[int] = field(default_factory=set, init=False, repr=False)
    _said_form: bool = field(default=False, init=False, repr=False)

    @classmethod
    def load(cls, source: ModelSource, device: str = "cpu", threads: int = 0, compute_type: str | None = None,
             searches: int = 1, pair: tuple[str | None, str | None, bool] = (None, None, False),
             shortlist: bool = False) -> Ct2Translator:
        """The export ``source`` names (`nmtk.model_source.resolve_model`). ``device``: cpu, cuda, cuda:N, or
        auto (CUDA when CTranslate2 sees a GPU); ``compute_type``: CTranslate2's (None: the type
        exported); ``threads`` per search, ``searches`` run side by side (calls from that many Python
        threads); ``pair``: a multilingual model's (target, source, any pair) as `model_pipelines` takes them;
        ``shortlist``: search with the run's shortlist the export carries (`nmtk shortlist`)."""
        import ctranslate2

        folder, recipe, manifest = ExportDir(source.path), source.recipe, source.manifest
        device, index = ct2_device(device, ctranslate2.get_cuda_device_count())
        try:
            meta = source.export_meta or folder.meta()
            longest = manifest.longest_training_source if manifest else None
            if manifest is None:  # an export written before manifests were copied beside the model
                langs = (recipe.data.source_lang or "", recipe.data.target_lang or "")
                models = {lang: folder.path / name for lang, name in meta["models"].items()}
                pipelines, pairs = text_pipelines(recipe.tokenizer, langs, models), {}
            else:
                pipelines, pairs = model_pipelines(folder.path, recipe, manifest, *pair)
            if compute_type and compute_type not in ctranslate2.get_supported_compute_types(device):
                raise NmtkError(f"--precision: CTranslate2 cannot compute in {compute_type} on this {device} (it can: "
                                f"{', '.join(sorted(ctranslate2.get_supported_compute_types(device)))})")
            intra, inter = thread_layout(device, threads, searches)
            model_args = dict(model_path=str(folder.path), device=device, device_index=index,
                              compute_type=compute_type or "default")
            ct2 = ctranslate2.Translator(**model_args, intra_threads=intra, inter_threads=inter)
            one_search = dict(model_args, intra_threads=intra * inter, inter_threads=1) if inter > searches else {}
        except NmtkError:
            raise
        except (OSError, ValueError, KeyError, RuntimeError) as exc:
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            raise NmtkError(f"{folder.path}: not a complete nmtk export ({first}); run nmtk export again") from None
        if shortlist and not meta.get("shortlist"):
            raise NmtkError(f"--shortlist: {folder.path} carries no shortlist: run `nmtk shortlist RUN` on the run, "
                            "then export it again")
        return cls(directory=folder.path, pipelines=pipelines, pairs=pairs, ct2=ct2,
                   max_positions=int(meta.get("max_positions", 1024)), longest_trained=longest,
                   quantization=compute_type or meta.get("quantization", ""), device=device, shortlist=shortlist,
                   aligns=bool(meta.get("alignment_heads")), one_search=one_search)

    def __post_init__(self) -> None:
        super().__post_init__()
        self.source_pieces = self.src_pipe.subwords.pieces()
        self.target_pieces = self.tgt_pipe.subwords.pieces()
        self.target_ids = {piece: i for i, piece in enumerate(self.target_pieces)}
        # per-target output vocabularies (`nmtk.convert.ctranslate2.vocab_map`): CTranslate2 searches a
        # call's union of its sources' targets, so each call holds one target (its tag, the first piece)
        vmap = ExportDir(self.directory).vocab_map
        self.vocab_map = vmap.is_file() and bool(ExportDir(self.directory).meta().get("vocab_map"))
        self.pieces_by_tag: dict[int, frozenset[int]] = {}
        if self.vocab_map:  # one line per target: its tag's piece, a tab, the pieces it may produce
            source_ids = {piece: i for i, piece in enumerate(self.source_pieces)}
            for row in vmap.read_text(encoding="utf-8").splitlines():
                tag, _, allowed = row.partition("\t")
                self.pieces_by_tag[source_ids[tag]] = frozenset(self.target_ids[p] for p in allowed.split())

    @property
    def can_align(self) -> bool:  # type: ignore[override]  # per export, not per engine
        """Word alignments from CTranslate2's attention (``return_attention``): an export's attention
        averages the heads of its last decoder layer, as nmtk's own alignments do (`--print-alignment`,
        markup, carried spans); one made before nmtk exported them so (its first head alone, which
        disagreed with nmtk on 41 % of the demo model's links) does not align."""
        return self.aligns

    @property
    def arithmetic(self) -> str:
        """CTranslate2's compute type (int8 for an int8 export on a CPU), not nmtk's precision setting."""
        return str(getattr(self.ct2, "compute_type", None) or self.quantization or "default")

    def output_pieces(self) -> frozenset[int] | None:
        return self.pieces_by_tag.get(self.src_pipe.prefix[0]) if self.src_pipe.prefix else None

    def decode_pieces(self, pieces: list[list[int]], search: SearchConfig,
                      controls: list[LineControls | None] | None = None) -> list[list[Hypothesis]]:
        """Length-sorted batches. nmtk limits each sentence to a·|x| + b tokens; CTranslate2 takes one
        maximum per call. A search is cut by its limit only if it runs that far, so a batch is decoded
        once under its largest limit, and only a sentence that produced a hypothesis as long as its own
        limit is decoded again under that limit (few do: those that never end). Cutting every batch
        where the limit changes would instead make one call per distinct source length: a server's
        batches, of mixed lengths, would become a dozen calls of a sentence or two. Sampling is random
        and cannot be decoded twice: it keeps one call per limit. Every call is queued before the first
        is awaited, so the searches of `thread_layout` decode batches side by side (a call's result
        does not depend on which search ran it)."""
        if search.sampling is not None and search.sampling.seed not in self._seeded:
            import ctranslate2  # its generator is seeded from this on a thread's first draw, then continued

            ctranslate2.set_random_seed(search.sampling.seed)
            self._seeded.add(search.sampling.seed)
        controls = controls or [None] * len(pieces)
        if any(c and c.constraints for c in controls):
            raise NmtkError("constraints need nmtk's own engine: CTranslate2 has no constrained search")
        self._say_form(search)
        counted = [unhinted_length(s, self.src_pipe.hint_markers) for s in pieces]  # as nmtk's searches count |x|
        lengths = np.fromiter((n + 1 for n in counted), dtype=np.int64, count=len(pieces))
        limits = [search.output_limit(n, self.max_positions, len(c.prefix) if c else 0)
                  for n, c in zip(counted, controls, strict=True)]
        out: list[list[Hypothesis]] = [[] for _ in pieces]
        first: list[Call] = []  # every batch is queued before any is awaited: several searches take them
        for batch in length_batches(lengths, search.budget(self.device), search.rows):
            for todo in self._call_groups([int(i) for i in batch], pieces, controls):
                groups = [(todo, max(limits[i] for i in todo))] if search.sampling is None else by_limit(todo, limits)
                first += [self._call(pieces, group, limit, search, controls) for group, limit in groups]
        self._collect(out, first, pieces if search.align else None)
        if search.sampling is None:  # the lines a larger limit than their own let run to theirs
            cut = [[i for i in todo if limits[i] < top and any(len(h.tokens) >= limits[i] for h in out[i])]
                   for todo, top, _ in first]  # per first call: its lines share their bans
            again = [self._call(pieces, group, limit, search, controls) for lines in cut
                     for group, limit in by_limit(lines, limits)]
            self._collect(out, again, pieces if search.align else None)
        return out

    def _call_groups(self, batch: list[int], pieces: list[list[int]],
                     controls: list[LineControls | None]) -> list[list[int]]:
        """A batch's lines by what CTranslate2 takes per call: banned phrases (and, with a vocabulary
        map, the target's pieces): lines that differ in them are decoded apart."""
        by_bans: dict[tuple, list[int]] = {}
        for i in batch:
            key = (controls[i].bans if controls[i] else (), pieces[i][0] if self.vocab_map and pieces[i] else None)
            by_bans.setdefault(key, []).append(i)
        return list(by_bans.values())

    def _say_form(self, search: SearchConfig) -> None:
        """The one line that says a GNMT-normalised beam search runs here as CTranslate2's own."""
        if self._said_form or search.length_penalty_form != "gnmt" or not search.length_penalty:
            return
        if search.sampling is None and search.beam > 1:
            self._said_form = True
            console.print(f"notice: CTranslate2 normalises by |Y|^α, not GNMT's ((5+|Y|)/6)^α: beam search runs "
                          f"with α {search.length_penalty} in its form (length_penalty_form = power; "
                          "a run translates alike with --lenpen-form power)")

    def _collect(self, out: list[list[Hypothesis]], calls: list[Call], aligned: list[list[int]] | None = None
                 ) -> None:
        """``out[i]`` for each line of ``calls``, awaited in the order they were queued; with ``aligned``
        (the lines' source pieces), each hypothesis with its word alignment."""
        for group, _, pending in calls:
            for i, result in zip(group, pending, strict=True):
                done = result.result()
                out[i] = [Hypothesis([self.target_ids[p] for p in tokens], score)
                          for tokens, score in zip(done.hypotheses, done.scores, strict=True)]
                if aligned is not None:
                    self._align(aligned[i], out[i], done.attention)

    def _align(self, source: list[int], hyps: list[Hypothesis], attention: list[list[list[float]]]) -> None:
        """Each hypothesis's word alignment from CTranslate2's attention: a row per target token (the
        step that produced it), a column per source token (no EOS), as `hard_alignment` takes them."""
        source_starts, target_starts = self.word_starts
        words = word_index(source_starts, source, self.src_pipe.hint_markers)
        for h, weights in zip(hyps, attention, strict=True):
            h.alignment = Alignment([], 0, 0)
            if source and h.tokens:
                rows = np.asarray(weights, dtype=np.float32)[: len(h.tokens), : len(source)]
                h.alignment = hard_alignment(rows, words, word_index(target_starts, h.tokens))

    def _searcher(self, search: SearchConfig) -> Any:
        """The ctranslate2.Translator for ``search``: sampling's has one search (made on its first use)."""
        if search.sampling is None or not self.one_search:
            return self.ct2
        if self._sampler is None:
            import ctranslate2

            self._sampler = ctranslate2.Translator(**self.one_search)
        return self._sampler

    def _call(self, pieces: list[list[int]], group: list[int], limit: int, search: SearchConfig,
              every: list[LineControls | None]) -> Call:
        """One CTranslate2 call for the lines ``group`` of ``pieces`` under ``limit``, queued: its results
        are awaited by `_collect`, and the next call is queued while it runs."""
        sampling, controls = search.sampling, [every[i] for i in group]
        # at most `limit` tokens besides EOS, as nmtk's searches (which force EOS at the limit): a
        # hypothesis CTranslate2 stops at the limit is the same text
        options: dict[str, Any] = dict(max_decoding_length=max(limit, 1), min_decoding_length=1, max_input_length=0,
                                       return_scores=True, length_penalty=search.length_penalty,
                                       no_repeat_ngram_size=search.no_repeat_ngram_size,
                                       repetition_penalty=search.repetition_penalty,
                                       use_vmap=self.vocab_map or self.shortlist, return_attention=search.align)
        if sampling is None:
            options.update(beam_size=search.beam, num_hypotheses=search.returned)
        else:
            options.update(beam_size=1, num_hypotheses=search.nbest, sampling_topk=sampling.topk,
                           sampling_topp=sampling.topp, sampling_temperature=sampling.temperature)
        words = self.target_pieces
        if any(c and c.prefix for c in controls):
            options["target_prefix"] = [[words[t] for t in c.prefix] if c and c.prefix else None for c in controls]
        # one set per call: the lines' bans (grouped by `_call_groups`) and the doubled terms of them all
        barred = dict.fromkeys([*(controls[0].bans if controls[0] else ()),
                                *(term + term for c in controls if c for term in c.doubled)])
        if barred:
            options["suppress_sequences"] = [[words[t] for t in ban] for ban in barred]
        sources = [[self.source_pieces[t] for t in pieces[i]] for i in group]
        return group, limit, self._searcher(search).translate_batch(sources, asynchronous=True, **options)
