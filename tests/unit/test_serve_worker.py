"""The serve worker's batching, with a stand-in translator (no model): who decodes what, and when."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from nmtk.decode.search.config import Hypothesis, SearchConfig
from nmtk.errors import NmtkError
from nmtk.serve.worker import Worker

KEY = SearchConfig(beam=4)


class RecordingTranslator:
    """Translates a line to its length; records each batch, and takes ``seconds`` per batch."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.batches: list[list[str]] = []
        self.lock = threading.Lock()
        self.text_only = False

    def keep_text_only(self) -> None:
        self.text_only = True

    def encode(self, lines: list[str]) -> list[list[int] | None]:
        return [list(range(len(line.split()))) for line in lines]

    def hypotheses(self, lines: list[str], search: SearchConfig,
                   ids: list[list[int] | None]) -> list[list[Hypothesis]]:
        assert search == KEY
        with self.lock:
            self.batches.append(list(lines))
        time.sleep(self.seconds)
        return [[Hypothesis(list(x or ()), -1.0)] for x in ids]


def test_a_burst_is_shared_among_idle_threads_in_length_order() -> None:
    """64 lines arriving together while both threads are idle: each thread takes about half, the
    shorter lines together and the longer ones together, instead of one thread taking all 64."""
    translator = RecordingTranslator(seconds=0.2)
    # max_wait 200 ms: a submitting loop descheduled on a busy host must not look like the burst's end
    worker = Worker(translator, gather_tokens=100_000, max_wait_ms=200, max_queue=100, workers=2)
    worker.start()
    time.sleep(0.3)  # both threads idle, waiting for work
    key = KEY
    lines = [" ".join(["w"] * (1 + i % 16)) for i in range(64)]
    futures = [worker.submit([line], key) for line in lines]
    results = [future.result(timeout=10)[0][0][0].tokens for future in futures]
    worker.stop(timeout=10)
    assert results == [list(range(1 + i % 16)) for i in range(64)]  # every job got its own line back
    sizes = sorted(len(batch) for batch in translator.batches)
    assert len(sizes) == 2 and sum(sizes) == 64 and sizes[0] >= 20, sizes
    first, second = translator.batches
    assert max(map(len, first)) <= min(map(len, second)) or max(map(len, second)) <= min(map(len, first))


@pytest.mark.parametrize("workers", [1, 2])
def test_a_lone_idle_thread_takes_the_whole_burst(workers: int) -> None:
    """With the other thread busy (or no other thread), the idle one keeps the burst whole."""
    translator = RecordingTranslator(seconds=1.5)
    worker = Worker(translator, gather_tokens=100_000, max_wait_ms=100, max_queue=100, workers=workers)
    worker.start()
    key = KEY
    busy = worker.submit(["a long first line"], key)  # gathered for 0.1 s, then occupies a thread for 1.5 s
    time.sleep(0.5)  # margins of 0.4 s and 1 s on each side: a host's stalls cannot reorder them
    futures = [worker.submit([f"line {i}"], key) for i in range(32)]
    for future in [busy, *futures]:
        future.result(timeout=10)
    worker.stop(timeout=10)
    assert sorted(len(batch) for batch in translator.batches) == [1, 32]


def test_clients_coming_back_slowly_still_make_one_batch() -> None:
    """Lines answered together come back together, if slowly (gaps longer than --max-wait-ms): the
    thread waits for as many as its last batch had instead of cutting the batch at the first gap."""
    translator = RecordingTranslator(seconds=0.05)
    worker = Worker(translator, gather_tokens=100_000, max_wait_ms=100, max_queue=100, workers=1)
    worker.start()
    key = KEY
    for future in [worker.submit([f"first {i}"], key) for i in range(8)]:
        future.result(timeout=10)
    futures = []
    for i in range(8):  # 150 ms apart (a sleep only ever runs long): each gap longer than max_wait, all
        futures.append(worker.submit([f"again {i}"], key))  # within 20 × max_wait = 2 s with 0.8 s to spare
        time.sleep(0.15)
    for future in futures:
        future.result(timeout=10)
    worker.stop(timeout=10)
    assert [len(batch) for batch in translator.batches] == [8, 8]


def test_a_single_client_is_not_held_back() -> None:
    """One client, one line at a time: each batch closes after the first gap, not 20 × max_wait."""
    translator = RecordingTranslator(seconds=0.0)
    worker = Worker(translator, gather_tokens=100_000, max_wait_ms=50, max_queue=100, workers=2)
    worker.start()
    key = KEY
    waits = []
    for i in range(6):
        start = time.monotonic()
        worker.submit([f"line {i}"], key).result(timeout=10)
        waits.append(time.monotonic() - start)
    worker.stop(timeout=10)
    assert max(waits) < 0.5, waits  # ~0.05 s each; a held line would wait 20 × 50 ms = 1 s


class Unpicklable(Exception):
    def __init__(self) -> None:
        super().__init__("holds a lock")
        self.lock = threading.Lock()


class FailingTranslator(RecordingTranslator):
    """Fails a batch that holds the line "boom" (or "odd", with an exception that does not pickle);
    ends its whole process on the line "die"."""

    def hypotheses(self, lines: list[str], search: SearchConfig,
                   ids: list[list[int] | None]) -> list[list[Hypothesis]]:
        if "boom" in lines:
            raise ValueError("boom: no translation")
        if "odd" in lines:
            raise Unpicklable
        if "die" in lines:
            os._exit(3)
        return super().hypotheses(lines, search, ids)


def failing_translator() -> FailingTranslator:
    """What a decoding process loads (module-level, so that it pickles by name)."""
    return FailingTranslator(seconds=0.0)


def slow_translator() -> FailingTranslator:
    """A decoding process that takes a second to load, as a real model does."""
    time.sleep(1.0)
    return failing_translator()


def _tokens(future) -> list[int]:  # noqa: ANN001 - a job's future
    return future.result(timeout=60)[0][0][0].tokens


@pytest.mark.parametrize("processes", [False, True], ids=["threads", "processes"])
def test_a_line_that_fails_in_the_search_fails_its_request_only(processes: bool) -> None:
    """The four jobs are one batch; the search fails on it, and each job is retried alone: the
    failing one gets the search's own exception (through the pipe, from a process), the others
    their lines, and the worker goes on serving."""
    worker = Worker(failing_translator(), gather_tokens=100_000, max_wait_ms=200, max_queue=100, workers=1,
                    child_loader=failing_translator if processes else None)
    worker.start()
    futures = {line: worker.submit([line], KEY) for line in ["a b", "boom", "c d e", "odd"]}
    assert _tokens(futures["a b"]) == [0, 1] and _tokens(futures["c d e"]) == [0, 1, 2]
    with pytest.raises(ValueError, match="boom: no translation"):
        futures["boom"].result(timeout=60)
    with pytest.raises(Unpicklable if not processes else RuntimeError, match="holds a lock"):
        futures["odd"].result(timeout=60)  # from a process: a RuntimeError naming it
    assert _tokens(worker.submit(["x"], KEY)) == [0]
    worker.stop(timeout=60)
    assert worker.stats.failed == 2 and worker.stats.batches == 6  # the batch, each job alone, then "x"


def test_a_decoding_process_that_ends_is_replaced_without_failing_a_request() -> None:
    """Killed from outside, a child is replaced and its batch sent again; a line that ends its child
    fails its own request only, and a live child serves the next."""
    worker = Worker(failing_translator(), gather_tokens=100_000, max_wait_ms=200, max_queue=100, workers=1,
                    child_loader=failing_translator)
    worker.start()
    killed = worker._children[0].process
    os.kill(killed.pid, signal.SIGKILL)
    killed.join(10)
    assert _tokens(worker.submit(["a b"], KEY)) == [0, 1]
    futures = {line: worker.submit([line], KEY) for line in ["a b", "die", "c d e"]}
    assert _tokens(futures["a b"]) == [0, 1] and _tokens(futures["c d e"]) == [0, 1, 2]
    with pytest.raises(NmtkError, match=r"the decoding process ended \(exit code 3\)"):
        futures["die"].result(timeout=60)
    live = worker._children[0]
    assert live.alive() and live.process is not killed
    worker.stop(timeout=60)
    assert not live.process.is_alive()  # stop ends the children


def test_with_decoding_processes_the_servers_translator_keeps_only_its_text_pipelines() -> None:
    """The children search, so the server's own translator (and a reload's) frees its weights; with
    decoding threads it is the one that searches, and keeps them."""
    threads = Worker(RecordingTranslator(seconds=0.0), gather_tokens=100, max_wait_ms=1, max_queue=10)
    assert not threads.translator.text_only
    threads.reload(RecordingTranslator(seconds=0.0))
    assert not threads.translator.text_only
    worker = Worker(failing_translator(), gather_tokens=100_000, max_wait_ms=1, max_queue=100, workers=1,
                    child_loader=failing_translator)
    assert worker.translator.text_only
    worker.start()
    worker.reload(failing_translator(), failing_translator)
    assert worker.translator.text_only
    assert _tokens(worker.submit(["a b"], KEY)) == [0, 1]  # searched by the new child
    worker.stop(timeout=60)


def test_a_reload_loading_when_the_server_stops_leaves_no_process_behind() -> None:
    """SIGTERM while `POST /reload` loaded its children: the server said "stopped", then "reloaded",
    and never exited (the children, installed after stop, kept multiprocessing's exit waiting on
    them for ever). Now stop waits for the reload, ends its children, and a later reload keeps nothing."""
    import multiprocessing

    worker = Worker(failing_translator(), gather_tokens=100_000, max_wait_ms=1, max_queue=100, workers=1,
                    child_loader=failing_translator)
    worker.start()
    kept: list[bool] = []
    reload = threading.Thread(target=lambda: kept.append(worker.reload(failing_translator(), slow_translator)))
    reload.start()
    time.sleep(0.3)  # its children are loading
    worker.stop(timeout=60)
    assert not reload.is_alive() and kept == [True]
    assert worker.reload(failing_translator(), slow_translator) is False  # after stop: nothing started
    assert [p for p in multiprocessing.active_children() if p.name == "nmtk-search"] == []
