"""One decoding worker behind a queue: requests that arrive together are decoded together.

A server that decodes each request on its own wastes the batch dimension: 32 one-line requests cost
32 searches of one sentence instead of one search of 32. Here every request becomes a `Job` in a bounded
queue; the worker thread takes the first, keeps gathering until ``max_tokens`` (source tokens × beam)
is reached or ``max_wait_ms`` has passed, then hands the lines of all jobs that share search options to
the translator in one call (`TranslatorBase.hypotheses`: Moses, subwords, length sorting, long-line
splitting and empty lines, as `nmtk translate` does) and gives every job its own lines back.

A job whose lines make the decoder fail is retried alone, so the failure is its own: the others of its
batch still get their translations. `reload` swaps in a new translator between two batches.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field, replace
from typing import Any

from nmtk.decode.base import TranslatorBase
from nmtk.decode.config import Hypothesis


class QueueFull(Exception):
    """The queue holds ``max_queue`` jobs already: the server answers 503."""


@dataclass(frozen=True)
class SearchKey:
    """What jobs must share to be searched together."""

    beam: int
    nbest: int
    alignment: bool


@dataclass
class Job:
    lines: list[str]
    key: SearchKey
    tokens: int  # source tokens × beam: what the job adds to a batch
    future: Future = field(default_factory=Future)


@dataclass
class Stats:
    requests: int = 0
    lines: int = 0
    batches: int = 0  # translator calls: with concurrent clients, fewer than requests
    failed: int = 0
    reloads: int = 0


class Worker:
    """The decoding thread and its queue."""

    def __init__(self, translator: TranslatorBase, *, max_tokens: int, max_wait_ms: float, max_queue: int) -> None:
        self.translator = translator
        self.max_tokens = max_tokens
        self.max_wait = max_wait_ms / 1000.0
        self.queue: queue.Queue[Job | None] = queue.Queue(maxsize=max_queue)
        self.stats = Stats()
        # The torch translator is loaded with alignments on; the worker switches them per search, and
        # a reloaded translator (same options) has the same layer.
        self.align_layer = getattr(translator, "align_layer", None)
        self._thread = threading.Thread(target=self._run, name="nmtk-decoder", daemon=True)
        self._stopping = False

    def start(self) -> None:
        self._thread.start()

    def submit(self, lines: list[str], key: SearchKey) -> Future:
        """Queue ``lines``; the future resolves to one list of hypotheses per line (empty for a blank line)."""
        tokens = sum(len(self.translator.src_pipe.encode(line)) + 1 for line in lines) * key.beam
        job = Job(lines, key, tokens)
        try:
            self.queue.put_nowait(job)
        except queue.Full:
            raise QueueFull from None
        self.stats.requests += 1
        self.stats.lines += len(lines)
        return job.future

    def stop(self, timeout: float | None = None) -> None:
        """Finish every queued job, then end the thread."""
        self._stopping = True
        self.queue.put(None)
        self._thread.join(timeout)

    def reload(self, translator: TranslatorBase) -> None:
        """Use ``translator`` from the next batch on (the batch being decoded finishes with the old one)."""
        self.translator = translator
        self.stats.reloads += 1

    # ---------------------------------------------------------------- the thread

    def _gather(self, first: Job) -> tuple[list[Job], bool]:
        """``first`` and what arrives until the batch is full or no request has come for ``max_wait``
        (at most 20 × ``max_wait`` in all); True when told to stop. Waiting for a gap rather than a fixed
        time lets a burst (the clients whose answers just went out sending their next request) join one
        batch instead of being cut into several."""
        jobs, tokens = [first], first.tokens
        now = time.monotonic()
        gap_end, hard_end = now + self.max_wait, now + 20 * self.max_wait
        while tokens < self.max_tokens:
            remaining = min(gap_end, hard_end) - time.monotonic()
            try:
                job = self.queue.get(timeout=remaining) if remaining > 0 else self.queue.get_nowait()
            except queue.Empty:
                break
            if job is None:
                return jobs, True
            jobs.append(job)
            tokens += job.tokens
            gap_end = time.monotonic() + self.max_wait
        return jobs, False

    def _run(self) -> None:
        stop = False
        while True:
            try:
                first = self.queue.get(timeout=0.1)
            except queue.Empty:
                if stop or self._stopping and self.queue.empty():
                    return
                continue
            if first is None:
                stop = True
                continue
            jobs, told = self._gather(first)
            stop = stop or told
            groups: dict[SearchKey, list[Job]] = {}
            for job in jobs:
                groups.setdefault(job.key, []).append(job)
            for key, group in groups.items():
                self._decode(key, group)

    def _decode(self, key: SearchKey, jobs: list[Job]) -> None:
        translator = self.translator
        try:
            results = self._hypotheses(translator, key, [line for job in jobs for line in job.lines])
        except Exception as exc:  # noqa: BLE001 - one bad request must not fail its neighbours
            if len(jobs) == 1:
                self.stats.failed += 1
                jobs[0].future.set_exception(exc)
                return
            for job in jobs:  # find the job that fails: each alone
                self._decode(key, [job])
            return
        start = 0
        for job in jobs:
            job.future.set_result((results[start : start + len(job.lines)], translator))
            start += len(job.lines)

    def _hypotheses(self, translator: TranslatorBase, key: SearchKey, lines: list[str]) -> list[list[Hypothesis]]:
        self.stats.batches += 1
        base = translator.search
        translator.search = replace(base, beam=key.beam, nbest=key.nbest)
        if hasattr(translator, "align_layer"):  # only this thread uses the translator: set it every search
            translator.align_layer = self.align_layer if key.alignment else None
        try:
            return translator.hypotheses(lines)
        finally:
            translator.search = base


def background(call: Callable[[], Any], done: Callable[[Any], None], failed: Callable[[BaseException], None]) -> None:
    """Run ``call`` on a thread of its own (a reload must not hold up decoding); report how it went."""

    def target() -> None:
        try:
            result = call()
        except BaseException as exc:  # noqa: BLE001 - reported, and the server keeps its old model
            failed(exc)
        else:
            done(result)

    threading.Thread(target=target, name="nmtk-reload", daemon=True).start()
