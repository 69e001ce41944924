"""Decoding many sentences: length-sorted batches of at most ``beam_tokens`` (source tokens × beam),
results in input order; on a CPU, batches searched side by side on one-thread searches."""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from nmtk.console import console
from nmtk.data.batching import length_batches
from nmtk.data.dataset import pad_multiple, pad_sequences
from nmtk.data.shortlist import Shortlist
from nmtk.decode.search.choose import search
from nmtk.decode.search.config import Hypothesis, LineControls, SearchConfig
from nmtk.decode.search.contract import Decoder
from nmtk.device import autocast_for
from nmtk.interrupts import get
from nmtk.precision import Precision
from nmtk.vocab import BOS_ID, EOS_ID, SPECIAL_SYMBOLS, unhinted_length

__all__ = ["decode_ids", "length_batches"]


def decode_ids(model: Decoder, sources: Sequence[Sequence[int]], cfg: SearchConfig, *,
               device: torch.device | None = None, precision: Precision = Precision.fp32,
               generator: torch.Generator | None = None, pad_to: int | None = None,
               controls: Sequence[LineControls | None] | None = None,
               shortlist: Shortlist | None = None, aligner: Aligner | None = None,
               searches: int = 1) -> list[list[Hypothesis]]:
    """Hypotheses for each source (ids without EOS), in input order.

    Each batch is searched as `nmtk.decode.search.choose.search_for` chooses (``generator``: sampling's
    random stream), and holds at most ``cfg.budget(device)`` source tokens times the rows a source takes
    (`SearchConfig.rows`). ``pad_to``: pad source lengths to a multiple of it (default `pad_multiple`: 8 on
    a GPU). ``controls``: per source, its prefix, constraints and banned phrases (`LineControls`), or None.
    ``shortlist``: each batch projects onto its sources' candidates (`Shortlist.candidates`, with the
    pieces of their prefixes and constraints) instead of the whole vocabulary. ``aligner``: its layer's
    cross-attention is watched through the search, and its function called with each batch's sources,
    hypotheses and the encoder's output for them (`Encoded`: the search's own), to attach alignments.
    A source's length counts its words, not hints' markup (``cfg.hint_markers``, `unhinted_length`): its
    translation is about as long as the line's without hints. ``searches`` > 1 on a CPU: that many
    one-thread searches take the batches side by side (`side_by_side`; sampling keeps one search, so
    that a seed draws the same samples whatever the threads' timing).
    """
    device = device or next(model.parameters()).device
    lengths = np.fromiter((unhinted_length(s, cfg.hint_markers) + 1 for s in sources), dtype=np.int64,
                          count=len(sources))
    results: list[list[Hypothesis]] = [[] for _ in sources]
    run = _BatchSearch(model, sources, cfg, generator, device, precision,
                       pad_multiple(device) if pad_to is None else pad_to, controls, shortlist, aligner)
    was_training = model.training
    model.eval()
    batches = [[int(i) for i in batch] for batch in length_batches(lengths, cfg.budget(device.type), cfg.rows)]
    alone = searches < 2 or device.type != "cpu" or generator is not None or len(batches) < 2
    try:
        for batch, hyps in (((b, run.search(b)) for b in batches) if alone else
                            side_by_side(run.search, batches, searches)):
            for i, h in zip(batch, hyps, strict=True):
                results[i] = h
    finally:
        model.train(was_training)
    return results


Searched = tuple[list[int], list[list[Hypothesis]]]


def side_by_side(search: Callable[[list[int]], list[list[Hypothesis]]], batches: list[list[int]], searches: int
                 ) -> Iterator[Searched]:
    """Each batch with its hypotheses, as they finish (not in order), searched by ``searches`` threads of
    one torch thread each, every thread taking the next batch as it is free.

    Why: one search of 2 threads meets at every op of a step, hundreds a step, and waits there for the
    slower thread; two one-thread searches never wait for each other, and their Python (which takes
    turns at the interpreter lock) overlaps the other's kernels. Same batches, each searched as one
    search on one thread searches it (a search of 2 threads may sum some ops in another order: on an
    AMD EPYC Zen 4, 8 of 1,000 greedy scores moved in their last bits; the translations of the demo
    model were byte-identical on both CPUs, beam 4 and greedy). The demo model, test_2016_flickr,
    beam 4, fp32 (2-core Intel Xeon, 2026-11-29, medians of 3 in turns): 109.0 sentences/s as one
    search of 2 threads, 149.4 as two of one in a busy hour; 234.9 and 233.5 in a quiet one (the
    interpreter lock bounds it there); 2-core AMD EPYC Zen 4: 107.1 and 158.5. The
    waits are `nmtk.interrupts.get`'s, so Ctrl-C ends them at once; the threads are daemons that take
    no new batch after an error or interrupt (the batch in hand runs out on its own)."""
    todo: queue.SimpleQueue[list[int]] = queue.SimpleQueue()
    for batch in batches:
        todo.put(batch)
    done: queue.Queue[tuple[list[int], list[list[Hypothesis]] | None, BaseException | None]] = queue.Queue()
    stop, taking = threading.Event(), threading.Lock()

    def take() -> list[int] | None:
        with taking:  # no batch is taken once `halt` has run (``stop`` is set under the same lock)
            return None if stop.is_set() or todo.empty() else todo.get_nowait()

    def halt() -> None:
        with taking:
            stop.set()

    def work() -> None:
        torch.set_num_threads(1)  # this thread's own (OpenMP and MKL keep one per thread)
        while (batch := take()) is not None:
            try:
                done.put((batch, search(batch), None))
            except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread, raised there
                halt()  # at once, not when the caller wakes: the other search takes no new batch
                done.put((batch, None, exc))
                return

    threads = torch.get_num_threads()
    for k in range(min(searches, len(batches))):
        threading.Thread(target=work, name=f"nmtk-search-{k}", daemon=True).start()
    try:
        for _ in batches:
            batch, hyps, error = get(done)
            if error is not None:
                raise error
            yield batch, hyps
    finally:
        halt()  # an interrupt or the caller's exit: as after a failure
        torch.set_num_threads(threads)  # the count new threads start with is torch's one global: this thread's


@dataclass
class _BatchSearch:
    """One batch of `decode_ids` searched; halved where the device runs out of memory."""

    model: Decoder
    sources: Sequence[Sequence[int]]
    cfg: SearchConfig
    generator: torch.Generator | None  # sampling's random stream
    device: torch.device
    precision: Precision
    multiple: int
    controls: Sequence[LineControls | None] | None
    shortlist: Shortlist | None = None
    aligner: Aligner | None = None
    halved: int = 0  # batches that ran out of memory

    def search(self, batch: list[int]) -> list[list[Hypothesis]]:
        """The hypotheses of ``batch`` (indices into ``sources``). A batch that runs out of memory (a GPU
        beside training's reserved memory, a budget too large for the card) is searched again in two
        halves, down to one sentence, with one warning per call: a rank of a distributed validation goes
        on instead of failing while the others wait for it. (A sampled batch searched again draws other
        samples.)"""
        try:
            src = pad_sequences([np.asarray(self.sources[i], dtype=np.int64) for i in batch], suffix=EOS_ID,
                                multiple=self.multiple).to(self.device)
            steer = None if self.controls is None else [self.controls[i] for i in batch]
            with autocast_for(self.device, self.precision), self._shortlisted(batch, steer):
                if self.aligner is None:
                    return search(self.model, src, self.cfg, steer, self.generator)
                layer, attach = self.aligner
                model = _Remembering(self.model)
                with _members(self.model)[0].watch_cross_attention(layer) as watch:
                    hyps = search(model, src, self.cfg, steer, self.generator, watch)
                attach([self.sources[i] for i in batch], hyps, model.encoded)
                return hyps
        except torch.OutOfMemoryError:
            if len(batch) == 1:
                raise
        if self.device.type == "cuda":  # after the except block: the failed search's tensors are gone
            torch.cuda.empty_cache()
        if not self.halved:
            console.print(f"warning: decoding ran out of {self.device.type} memory on a batch of {len(batch):,} "
                          "sentences: searching it in halves (set decode.beam_tokens lower to avoid this)")
        self.halved += 1
        half = len(batch) // 2
        return self.search(batch[:half]) + self.search(batch[half:])

    @contextmanager
    def _shortlisted(self, batch: list[int], steer: list[LineControls | None] | None) -> Iterator[None]:
        """The batch's search with the shortlist's candidates of its sources, and of its lines' prefixes
        and constraints, as the only outputs (nothing restricted without a shortlist)."""
        if self.shortlist is None:
            yield
            return
        extra = [t for c in steer or () if c is not None for t in (*c.prefix, *(x for term in c.constraints
                                                                                  for x in term))]
        ids = torch.from_numpy(self.shortlist.candidates((self.sources[i] for i in batch), extra)).to(self.device)
        members = _members(self.model)
        for member in members:
            member.restrict_output(ids)
        try:
            yield
        finally:
            for member in members:
                member.restrict_output(None)


def _members(model: Decoder) -> list:
    """The Transformers behind ``model``: an ensemble's members, or the model itself."""
    return list(getattr(model, "models", [model]))


#: Word alignments for a batch's hypotheses: the decoder layer whose cross-attention aligns (beam search
#: keeps it for each hypothesis), and what attaches them (given the sources, their hypotheses and the
#: encoder's output, for those the search did not keep it for).
Aligner = tuple[int, Callable[[list[Sequence[int]], list[list[Hypothesis]], Any], None]]


class _Remembering:
    """A model that keeps what it last encoded (a batch's `Encoded`, which the search makes once), for the
    alignment pass after the search; everything else is the model's."""

    def __init__(self, model: Decoder) -> None:
        self.model, self.encoded = model, None

    def encode(self, src: torch.Tensor) -> Any:
        self.encoded = self.model.encode(src)
        return self.encoded

    def __getattr__(self, name: str) -> Any:
        return getattr(self.model, name)


PROBE_SOURCES, PROBE_BEAM, PROBE_STEPS = 16, 4, 8


def step_probe(model: Decoder, device: torch.device) -> Callable[[bool], None]:
    """A fixed amount of this model's decoding, for `auto` precision to time (`nmtk.bf16_probe`): 16
    random sources of 20 tokens encoded, expanded to beam 4, then 8 steps of ``decode_step``,
    log-softmax, the beam's top-k and a cache reorder, in bf16 autocast or fp32 as the search runs.
    Fixed: unlike a real search, no sentence ends early in one precision and not the other."""
    generator = torch.Generator().manual_seed(0)
    src = torch.randint(len(SPECIAL_SYMBOLS), model.cfg.src_vocab, (PROBE_SOURCES, 20), generator=generator)
    src[:, -1] = EOS_ID
    src = src.to(device)
    rows = PROBE_SOURCES * PROBE_BEAM
    within = (torch.arange(rows, device=device).view(PROBE_SOURCES, PROBE_BEAM).flip(1)).flatten()

    @torch.inference_mode()
    def run(bf16: bool) -> None:
        was_training = model.training
        model.eval()
        try:
            with autocast_for(device, Precision.bf16 if bf16 else Precision.fp32):
                cache = model.start_cache(model.encode(src))
                cache.expand(PROBE_BEAM)
                tokens = torch.full((rows,), BOS_ID, dtype=torch.long, device=device)
                for _ in range(PROBE_STEPS):
                    lprobs = torch.log_softmax(model.decode_step(tokens, cache).float(), dim=-1)
                    lprobs.view(PROBE_SOURCES, -1).topk(2 * PROBE_BEAM, dim=-1)
                    tokens = lprobs.argmax(dim=-1)
                    cache.reorder(within, memory=False)
        finally:
            model.train(was_training)

    return run
