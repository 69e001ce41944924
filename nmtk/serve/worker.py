"""Decoding threads behind one queue: requests that arrive together are decoded together.

A server that decodes each request on its own wastes the batch dimension: 32 one-line requests cost
32 searches of one sentence instead of one search of 32. Here every request becomes a `Job` in a bounded
queue; a decoding thread takes the first, keeps gathering until ``gather_tokens`` (source tokens × beam)
is reached or ``max_wait_ms`` has passed, then hands the lines of all jobs that share one search (an
equal `SearchConfig`) to the translator in one call (`TranslatorBase.hypotheses`: Moses, subwords,
length sorting, long-line splitting and empty lines, as `nmtk translate` does) and gives every job
its own lines back.

``workers`` threads do this side by side over one model (its weights shared), each search on its own
share of the CPU threads. Requests arriving one by one make batches of mixed lengths: a batch runs as
long as its longest sentence, its last steps on a few rows. With two searches at once, one fills the
cores while the other finishes its stragglers; measured on 2 cores (test_2016_flickr, beam 4, batches
of 64 random lines), 2 searches × 1 thread translated 74 sentences/s where 1 search × 2 threads did 54.

With ``child_loader`` (the torch engine on a CPU), each thread hands its batches to a child process of
its own (`nmtk.serve.process`): two searches in one interpreter take turns at its lock. The server's
own translator then frees its weights (`keep_text_only`): it encodes and detokenizes only.

A job whose lines make the decoder fail is retried alone, so the failure is its own: the others of its
batch still get their translations. `reload` swaps in a new translator between two batches.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from nmtk import interrupts
from nmtk.console import console
from nmtk.decode.base import TranslatorBase
from nmtk.decode.guide import Guidance
from nmtk.decode.search.config import Hypothesis, LineControls, SearchConfig
from nmtk.pair import Pair
from nmtk.serve.process import Loader, SearchProcess, searched


class QueueFull(Exception):
    """The queue holds ``max_queue`` jobs already: the server answers 503."""


@dataclass
class Job:
    lines: list[str]
    search: SearchConfig  # jobs of equal searches are decoded together
    ids: list[list[int] | None]  # the lines encoded once, at submission: they size the batch, then are decoded
    tokens: int  # source tokens × beam: what the job adds to a batch
    controls: list[LineControls | None] | None = None  # per line: prefix, constraints, bans (as ids)
    text: TranslatorBase | None = None  # what encoded the lines, and detokenizes them: its pair's pipelines
    future: Future = field(default_factory=Future)


@dataclass
class Stats:
    requests: int = 0
    lines: int = 0
    batches: int = 0  # translator calls: with concurrent clients, fewer than requests
    failed: int = 0
    reloads: int = 0


class Worker:
    """The decoding threads and their queue."""

    def __init__(self, translator: TranslatorBase, *, gather_tokens: int, max_wait_ms: float, max_queue: int,
                 workers: int = 1, child_loader: Loader | None = None) -> None:
        # With ``child_loader`` (how the first children load the translator; each child keeps its loader for a
        # restart): each thread's child; a reload's new children wait in _fresh until their thread takes them.
        # The children search; this translator only encodes and detokenizes, so its weights are freed.
        self.child_loader = child_loader
        self.translator = self._text(translator)
        self._children: list[SearchProcess | None] = [None] * workers
        self._fresh: list[SearchProcess | None] = [None] * workers
        self.gather_tokens = gather_tokens
        self.max_wait = max_wait_ms / 1000.0
        self.queue: queue.Queue[Job | None] = queue.Queue(maxsize=max_queue)
        self.stats = Stats()
        self._counting = threading.Lock()  # Stats are updated by several threads
        self._gathering = threading.Lock()
        # Per thread in `_take` (guarded by _counting): its previous batch's lines, clients that may send again.
        self._last: dict[int, int] = {}
        self._left: list[Job] = []  # what a gatherer left for the idle threads behind it (guarded by _gathering)
        self._threads = [threading.Thread(target=self._run, args=(i,), name=f"nmtk-decoder-{i}", daemon=True)
                         for i in range(workers)]
        self._stopping = False
        self._stopped = False  # stop() has ended the threads: a reload finishing later keeps nothing
        self._reloading = threading.Lock()

    def start(self) -> None:
        if self.child_loader is not None:
            self._children = _started(self.child_loader, len(self._threads))
        for thread in self._threads:
            thread.start()

    def submit(self, lines: list[str], search: SearchConfig, guides: list[Guidance | None] | None = None,
               pair: Pair | None = None, ids: list[list[int] | None] | None = None) -> Future:
        """Queue ``lines``; the future resolves to one list of hypotheses per line (empty for a blank line)
        and the translator that detokenizes them. ``guides``: per line, its prefix, constraints and banned
        phrases, checked here (`NmtkError`). ``pair``: a multilingual model's (source, target); lines of
        different targets are batched together (their tags are in their ids). ``ids``: the lines already
        encoded by that pair's pipeline (markup: `nmtk.decode.markup`)."""
        text = self.translator if pair is None else self.translator.for_pair(pair)
        ids = text.encode(lines) if ids is None else ids  # a reload keeps the run's subword model: still valid
        controls = text.controls(guides, ids, search) if guides is not None and any(guides) else None
        job = Job(lines, search, ids, sum(len(x or ()) + 1 for x in ids) * search.rows, controls, text)
        try:
            self.queue.put_nowait(job)
        except queue.Full:
            raise QueueFull from None
        with self._counting:
            self.stats.requests += 1
            self.stats.lines += len(lines)
        return job.future

    def stop(self, timeout: float | None = None) -> None:
        """Finish every queued job, then end the threads, and a reload's children no thread took up.
        A reload loading its children meanwhile is waited for: children left to the interpreter's exit
        keep it waiting for ever (they ignore the SIGTERM multiprocessing ends them with)."""
        self._stopping = True
        for _ in self._threads:
            self.queue.put(None)
        deadline = None if timeout is None else time.monotonic() + timeout
        for thread in self._threads:
            interrupts.join(thread, None if deadline is None else max(0.0, deadline - time.monotonic()))
        with self._reloading:
            self._stopped = True
            fresh, self._fresh = self._fresh, [None] * len(self._threads)
        for child in fresh:
            if child is not None:
                child.close()

    def reload(self, translator: TranslatorBase, child_loader: Loader | None = None) -> bool:
        """Use ``translator`` from the next batch on (batches being decoded finish with the old one).
        With child processes, ``child_loader`` loads the new model in new children first (on the caller's
        thread: a reload's), then each decoding thread swaps its child between two batches. False, and
        nothing loaded or kept, once the worker has stopped."""
        with self._reloading:  # one reload at a time, and `stop` waits for it
            if self._stopped:
                return False
            translator = self._text(translator)  # before new children load: one full copy fewer meanwhile
            if self.child_loader is not None and child_loader is not None:
                fresh = _started(child_loader, len(self._threads))
                with self._counting:
                    old, self._fresh = self._fresh, fresh
                for child in old:  # a reload before the previous one was taken up
                    if child is not None:
                        child.close()
            self.translator = translator
            with self._counting:
                self.stats.reloads += 1
            return True

    def _text(self, translator: TranslatorBase) -> TranslatorBase:
        if self.child_loader is not None:
            translator.keep_text_only()
        return translator

    # ---------------------------------------------------------------- the thread

    def _gather(self, first: Job) -> tuple[list[Job], bool]:
        """``first`` and what arrives until the batch is full or no request has come for ``max_wait``
        (at most 20 × ``max_wait`` in all); True when told to stop. Waiting for a gap rather than a fixed
        time lets a burst (the clients whose answers just went out sending their next request) join one
        batch instead of being cut into several. A gap does not end the batch while it holds fewer lines
        than an idle thread's last batch did: under load those lines' clients are coming back, and a
        batch cut short makes the next one short too (measured: runs stuck at 13 lines a batch). The
        largest such batch counts, not their sum: one client must not wait for a second."""
        jobs, tokens, lines = [first], first.tokens, len(first.lines)
        now = time.monotonic()
        gap_end, hard_end = now + self.max_wait, now + 20 * self.max_wait
        while tokens < self.gather_tokens:
            with self._counting:
                expected = max(self._last.values(), default=0)
            end = hard_end if lines < expected else min(gap_end, hard_end)
            remaining = end - time.monotonic()
            try:
                job = self.queue.get(timeout=remaining) if remaining > 0 else self.queue.get_nowait()
            except queue.Empty:
                break
            if job is None:
                return jobs, True
            jobs.append(job)
            tokens += job.tokens
            lines += len(job.lines)
            gap_end = time.monotonic() + self.max_wait
        return jobs, False

    def _take(self, last: int) -> tuple[list[Job], bool] | None:
        """The next batch, and whether a stop marker came with it; None when nothing came for 0.1 s.
        One thread gathers at a time, so a burst makes one batch, not two halves; but when other
        threads are idle too, the burst is shared among them (`_share`). ``last``: the lines of this
        thread's previous batch."""
        me = threading.get_ident()
        with self._counting:
            self._last[me] = last
        try:
            with self._gathering:
                if self._left:
                    jobs, stop = self._left, False
                else:
                    try:
                        first = self.queue.get(timeout=0.1)
                    except queue.Empty:
                        return None
                    if first is None:
                        return [], True
                    jobs, stop = self._gather(first)
                return self._share(jobs), stop
        finally:
            with self._counting:
                del self._last[me]

    def _share(self, jobs: list[Job]) -> list[Job]:
        """This thread's part of ``jobs``; the rest is left for the idle threads waiting behind it.

        Without this, 64 clients whose answers went out together send their next lines together, one
        thread takes all 64 and the other has nothing (measured: a whole run alternating so, one core
        idle). The jobs are sorted by length and cut into parts of equal tokens, one per idle thread:
        each part is also of more even lengths, so its search has fewer stragglers."""
        with self._counting:
            parts = len(self._last)  # the idle threads, this one included
        if parts <= 1 or len(jobs) == 1:
            self._left = []
            return jobs
        jobs = sorted(jobs, key=lambda job: job.tokens / max(1, len(job.lines)))
        share, tokens = sum(job.tokens for job in jobs) / parts, 0
        for i, job in enumerate(jobs):
            tokens += job.tokens
            if tokens >= share:
                self._left = jobs[i + 1 :]
                return jobs[: i + 1]
        self._left = []
        return jobs

    def _run(self, index: int) -> None:
        try:
            self._loop(index)
        finally:
            if self._children[index] is not None:
                self._children[index].close()

    def _loop(self, index: int) -> None:
        stop, last = False, 0
        while True:
            taken = self._take(last)
            self._swap(index)
            if taken is None:  # nothing for 0.1 s: no client is waiting to send again
                if stop or self._stopping and self.queue.empty() and not self._left:
                    return
                last = 0
                continue
            jobs, told = taken
            stop, last = stop or told, sum(len(job.lines) for job in jobs)
            groups: dict[SearchConfig, list[Job]] = {}
            for job in jobs:
                groups.setdefault(job.search, []).append(job)
            for search, group in groups.items():
                self._decode(search, group, index)

    def _swap(self, index: int) -> None:
        """Take this thread's child loaded by a reload, if there is one, and end the old one."""
        with self._counting:
            fresh, self._fresh[index] = self._fresh[index], None
        if fresh is not None:
            old, self._children[index] = self._children[index], fresh
            old.close()

    def _decode(self, search: SearchConfig, jobs: list[Job], index: int) -> None:
        translator = self.translator
        try:
            controls = None
            if any(job.controls for job in jobs):  # lines of different controls share one search
                controls = [c for job in jobs for c in (job.controls or [None] * len(job.lines))]
            results = self._hypotheses(translator, search, [line for job in jobs for line in job.lines],
                                       [x for job in jobs for x in job.ids], index, controls)
        except Exception as exc:  # noqa: BLE001 - one bad request must not fail its neighbours
            if len(jobs) == 1:
                with self._counting:
                    self.stats.failed += 1
                jobs[0].future.set_exception(exc)
                return
            for job in jobs:  # find the job that fails: each alone
                self._decode(search, [job], index)
            return
        start = 0
        for job in jobs:
            job.future.set_result((results[start : start + len(job.lines)], job.text or translator))
            start += len(job.lines)

    def _hypotheses(self, translator: TranslatorBase, search: SearchConfig, lines: list[str],
                    ids: list[list[int] | None], index: int,
                    controls: list[LineControls | None] | None = None) -> list[list[Hypothesis]]:
        """One search: in this thread's child process, else here. A child that ended (killed from
        outside, out of memory) is replaced and the batch sent again; when the new one ends on it too,
        the batch fails, and `_decode`'s jobs retried alone find the line that ends it."""
        with self._counting:
            self.stats.batches += 1
        child = self._children[index]
        if child is None:
            return searched(translator, search, lines, ids, controls)
        try:
            return child.hypotheses(search, lines, ids, controls)
        except Exception as exc:
            if child.alive():
                raise
            child = self._restart(index, exc)
        try:
            return child.hypotheses(search, lines, ids, controls)
        except Exception as exc:
            if not child.alive():  # it ended twice on this batch: one of its lines ends it
                self._restart(index, exc)
            raise

    def _restart(self, index: int, why: Exception) -> SearchProcess:
        child = self._children[index]
        console.print(f"[yellow]warning:[/yellow] {why}; starting another")
        child.close()
        self._children[index] = SearchProcess(child.load).ready()
        return self._children[index]


def _started(load: Loader, count: int) -> list[SearchProcess | None]:
    """``count`` children loading side by side; returned once every one is ready."""
    children = [SearchProcess(load) for _ in range(count)]
    try:
        return [child.ready() for child in children]
    except BaseException:
        for child in children:
            child.close()
        raise


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
