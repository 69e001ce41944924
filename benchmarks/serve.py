"""Benchmark `nmtk serve` on loopback: test_2016_flickr's 1,000 lines, one line per request, from 1, 8
and 64 concurrent clients, against offline `nmtk translate` on the same lines and engine.

For each engine (``torch``: the run directory; ``ct2``: its CTranslate2 export, made first) a server is
started (2 threads, default batching), warmed up with 50 requests, then each client count sends the
lines (1 client: the first ``--single`` lines only, for latency per line; the others
``--lines-per-request`` lines a request, default 1). Offline reference: `nmtk
translate -m MODEL -i test -o out` in a fresh process, less the time of a 1-line run (model loading)
made just before it. The largest client count runs ``--repeat`` times (default 3), each run between
two offline runs: the host's speed drifts by tens of percent within minutes, so each served run is
divided by the mean of the offline runs around it, and the ratio reported is the median of those
(each run's figures are in ``*_runs``). Prints one JSON line: per engine and client count,
sentences/s, latency p50/p95/p99 (ms), errors, batches per request, CPU ms per request of the server
and of the clients (asyncio, one thread), the server's peak RSS; offline sentences/s and CPU ms per
sentence (medians); served/offline ratio at 64.

Also per engine, ``in_process_sent_per_s``: the same lines decoded without a server, in random batches
of (largest client count × lines per request / 2) lines taken by the server's 2 threads from one queue,
as 64 one-line clients at most let the server batch them (the lines' order shuffled with a fixed seed);
each thread searches in a decoding process of its own for a run, as the server does
(`nmtk.serve.process`). It is what batching the lines in flight allows with no HTTP and no thread ever
waiting for clients: the served rate is measured against it (``served_vs_in_process``) as well as
against offline, whose batches are the whole file sorted by length.

Needs a trained run (default: runs/multi30k-en-de, the `make demo` run).
Usage: python benchmarks/serve.py [--run DIR] [--engines torch,ct2] [--clients 1,8,64] [--single 200] [--repeat 3]
                                 [--lines-per-request 1]
       python benchmarks/serve.py --in-process MODEL --batch 32   (one in-process figure, as sent/s)
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import itertools
import json
import os
import resource
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import httptools
from _util import ROOT, _tree_rss_kib, data_root, tree_pids


def _lines() -> list[str]:
    with gzip.open(data_root() / "multi30k" / "test_2016_flickr.en.gz", "rt", encoding="utf-8") as handle:
        return [line.rstrip("\n") for line in handle]


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class _Response:
    """httptools' callbacks for one response on a keep-alive connection."""

    def __init__(self) -> None:
        self.body, self.done = bytearray(), False

    def on_body(self, data: bytes) -> None:
        self.body += data

    def on_message_complete(self) -> None:
        self.done = True


async def _client(port: int, lines: list[str], next_line: Iterator[int], per_request: int, latencies: list[float],
                  errors: list[str], fmt: str = "text") -> None:
    """One client: a keep-alive connection, ``per_request`` lines per request (a string when 1, else a
    list), the next ones once answered.

    asyncio streams and httptools' parser rather than a thread per client with http.client: the load
    generator shares the server's 2 cores, and 64 client threads took ~0.55 ms of CPU per request
    (6 % of the machine at the CTranslate2 server's rate), time the server did not get."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        while taken := list(itertools.islice(next_line, per_request)):
            q = lines[taken[0]] if per_request == 1 else [lines[i] for i in taken]
            body = json.dumps({"q": q} if fmt == "text" else {"q": q, "format": fmt}).encode()
            start = time.perf_counter()
            writer.write(b"POST /translate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                         b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
            response = _Response()
            parser = httptools.HttpResponseParser(response)
            while not response.done:
                data = await reader.read(65536)
                if not data:
                    raise ConnectionError("the server closed the connection")
                parser.feed_data(data)
            latencies.append(time.perf_counter() - start)
            if parser.get_status_code() != 200:
                errors.append(bytes(response.body).decode(errors="replace"))
            else:
                answer = json.loads(response.body)["translatedText"]
                if per_request > 1 and len(answer) != len(taken):
                    errors.append(f"{len(taken)} lines sent, a different number answered")
    finally:
        writer.close()


def _send(port: int, lines: list[str], clients: int, per_request: int = 1,
          fmt: str = "text") -> tuple[list[float], list[str], float]:
    """Send every line from ``clients`` concurrent clients, ``per_request`` lines at a time (``fmt``:
    LibreTranslate's ``format``); the requests' latencies, errors and the seconds it took."""
    latencies: list[float] = []
    errors: list[str] = []
    next_line = iter(range(len(lines)))  # shared: each client takes the next line not yet sent

    async def run() -> None:
        results = await asyncio.gather(*(_client(port, lines, next_line, per_request, latencies, errors, fmt)
                                         for _ in range(clients)),
                                       return_exceptions=True)
        errors.extend(str(r) for r in results if isinstance(r, BaseException))

    start = time.perf_counter()
    asyncio.run(run())
    return latencies, errors, time.perf_counter() - start


def _health(base: str) -> dict:
    with urllib.request.urlopen(base + "/health", timeout=10) as response:
        return json.loads(response.read())


def _cpu_seconds(pid: int) -> float:
    """User + system CPU time of a running process and its descendants (the decoding processes), all
    their threads (Linux /proc)."""
    total = 0
    for p in tree_pids(pid):
        try:
            with open(f"/proc/{p}/stat") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError):
            continue
        total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


def _clients(base: str, lines: list[str], clients: int, peak: list[int], pid: int, per_request: int) -> dict:
    before = _health(base)
    cpu, server_cpu = resource.getrusage(resource.RUSAGE_SELF), _cpu_seconds(pid)
    watching = threading.Event()

    def watch() -> None:  # the server's peak memory, sampled while the clients run
        while not watching.wait(0.05):
            peak[0] = max(peak[0], _tree_rss_kib(pid))

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        latencies, errors, seconds = _send(int(base.rsplit(":", 1)[1]), lines, clients, per_request)
    finally:
        watching.set()
        watcher.join()
    used, server_used = resource.getrusage(resource.RUSAGE_SELF), _cpu_seconds(pid)
    after = _health(base)
    requests = -(-len(lines) // per_request)
    q = statistics.quantiles(latencies, n=100) if len(latencies) > 1 else latencies * 99
    return {"clients": clients, "lines": len(lines), "lines_per_request": per_request,
            "sent_per_s": round(len(lines) / seconds, 1),
            "p50_ms": round(q[49] * 1000, 1), "p95_ms": round(q[94] * 1000, 1), "p99_ms": round(q[98] * 1000, 1),
            "errors": len(errors), "batches_per_request": round((after["batches"] - before["batches"]) / requests, 3),
            "server_cpu_ms_per_request": round(1000 * (server_used - server_cpu) / requests, 3),
            "client_cpu_ms_per_request": round(1000 * (used.ru_utime + used.ru_stime - cpu.ru_utime - cpu.ru_stime)
                                               / requests, 3)}


def _offline(model: Path, lines: list[str]) -> tuple[float, float]:
    """Sentences/s of `nmtk translate` on ``lines`` and its CPU milliseconds per sentence, model loading
    excluded (a run of 1 line is subtracted)."""
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "in.en"

        def timed(text: list[str]) -> tuple[float, float]:
            src.write_text("\n".join(text) + "\n")
            before, start = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
            subprocess.run([sys.executable, "-m", "nmtk", "translate", "-m", str(model), "-i", str(src), "-o",
                            str(Path(tmp) / "out"), "--force", "--threads", "2"], check=True, capture_output=True,
                           cwd=ROOT)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            return (time.perf_counter() - start,
                    after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)

        (load, load_cpu), (full, full_cpu) = timed(lines[:1]), timed(lines)
        return len(lines) / max(full - load, 1e-6), 1000 * (full_cpu - load_cpu) / len(lines)


def in_process(model: Path, lines: list[str], batch: int, threads: int = 2) -> tuple[float, list[str]]:
    """Sentences/s of ``lines`` shuffled into batches of ``batch``, decoded by ``threads`` threads of one
    core each taking the next batch from one queue: the server's decoding with requests already there
    (for a run, each thread's searches in a process of its own, as the server's). Text in and out as
    the server does it (encoding, search, detokenizing); one warm-up batch per search first. Also the
    translations, in input order."""
    import queue
    import random
    from functools import partial

    from nmtk.decode.load import LoadOptions, load_translator
    from nmtk.decode.search.config import SearchConfig
    from nmtk.model_source import resolve_model
    from nmtk.serve.process import SearchProcess

    source = resolve_model(model)
    load = LoadOptions(threads=1, searches=threads)
    translator = load_translator(source, load)
    key = SearchConfig.from_recipe(source.recipe.decode)
    children = [] if source.is_export else [SearchProcess(partial(load_translator, source, load))
                                            for _ in range(threads)]
    searches = ([child.ready().hypotheses for child in children]
                or [lambda key, text, ids: translator.hypotheses(text, key, ids=ids)] * threads)
    order = list(range(len(lines)))
    random.Random(1).shuffle(order)
    todo: queue.Queue[list[int]] = queue.Queue()
    for start in range(0, len(order), batch):
        todo.put(order[start : start + batch])
    out = [""] * len(lines)

    def decode(hypotheses) -> None:  # noqa: ANN001 - one search's (key, lines, ids) -> hypotheses
        while True:
            try:
                chunk = todo.get_nowait()
            except queue.Empty:
                return
            text = [lines[i] for i in chunk]
            for i, hyps in zip(chunk, hypotheses(key, text, translator.encode(text)), strict=True):
                out[i] = translator.detokenize(hyps[0]) if hyps else ""

    warm = lines[:batch]
    for hypotheses in searches:
        hypotheses(key, warm, translator.encode(warm))
    workers = [threading.Thread(target=decode, args=(hypotheses,)) for hypotheses in searches]
    start = time.perf_counter()
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    rate = len(lines) / (time.perf_counter() - start)
    for child in children:
        child.close()
    return rate, out


def _in_process_child(model: Path, batch: int) -> float:
    """`in_process` in a fresh process (its own thread settings, nothing else loaded)."""
    done = subprocess.run([sys.executable, __file__, "--in-process", str(model), "--batch", str(batch)], check=True,
                          capture_output=True, text=True, cwd=ROOT)
    return float(done.stdout.split()[-1])


def bench_engine(model: Path, lines: list[str], client_counts: list[int], single: int, wait_ms: float,
                 repeat: int, per_request: int = 1) -> dict:
    """The rows of every client count; at the largest, ``repeat`` runs, each between two offline runs.
    Clients send ``per_request`` lines a request, but for the single client (latency per line).

    The host's speed drifts by tens of percent within minutes, so each served run is divided by the
    mean of the offline runs just before and just after it (the server idles meanwhile), and the
    ratio is the median of those."""
    port = _port()
    base = f"http://127.0.0.1:{port}"
    server = subprocess.Popen([sys.executable, "-m", "nmtk", "serve", "-m", str(model), "--port", str(port),
                               "--threads", "2", "--max-wait-ms", str(wait_ms)], cwd=ROOT, stderr=subprocess.DEVNULL)
    at_most = max(client_counts)
    try:
        for _ in range(600):
            try:
                _health(base)
                break
            except OSError:
                time.sleep(0.2)
        _send(port, lines[:50], 1)  # warm-up
        peak = [0]
        rows = [_clients(base, lines[:single], 1, peak, server.pid, 1) if n == 1 else
                _clients(base, lines, n, peak, server.pid, per_request) for n in client_counts if n != at_most]
        offline_runs = [_offline(model, lines)]
        served_runs = []
        for _ in range(repeat):
            served_runs.append(_clients(base, lines, at_most, peak, server.pid, per_request))
            offline_runs.append(_offline(model, lines))
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=120)
    rates = [r["sent_per_s"] for r in served_runs]
    ratios = [rate / ((offline_runs[i][0] + offline_runs[i + 1][0]) / 2) for i, rate in enumerate(rates)]
    median_run = sorted(served_runs, key=lambda r: r["sent_per_s"])[len(served_runs) // 2]
    rows.append({**median_run, "sent_per_s_runs": rates})
    in_flight = max(1, at_most * per_request // 2)  # the lines each of the 2 threads can have
    batched = _in_process_child(model, in_flight)
    offline_rate = statistics.median(r[0] for r in offline_runs)
    return {"rows": rows, "peak_rss_mib": round(peak[0] / 1024), "offline_sent_per_s": round(offline_rate, 1),
            "offline_sent_per_s_runs": [round(r[0], 1) for r in offline_runs],
            "offline_cpu_ms_per_sentence": round(statistics.median(r[1] for r in offline_runs), 3),
            f"served_vs_offline_at_{at_most}": round(statistics.median(ratios), 3),
            f"served_vs_offline_at_{at_most}_runs": [round(x, 3) for x in ratios],
            "in_process_sent_per_s": round(batched, 1), "in_process_batch": in_flight,
            f"served_vs_in_process_at_{at_most}": round(median_run["sent_per_s"] / batched, 3),
            "in_process_vs_offline": round(batched / offline_rate, 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", type=Path, default=ROOT / "runs" / "multi30k-en-de")
    parser.add_argument("--engines", default="torch,ct2")
    parser.add_argument("--clients", default="1,8,64")
    parser.add_argument("--single", type=int, default=200, help="lines sent by the single client")
    parser.add_argument("--max-wait-ms", type=float, default=5.0, help="the server's --max-wait-ms")
    parser.add_argument("--lines-per-request", type=int, default=1,
                        help="lines in each request (a list when above 1), but for the single client")
    parser.add_argument("--repeat", type=int, default=3, help="served runs at the largest client count")
    parser.add_argument("--in-process", type=Path, metavar="MODEL", help="print `in_process`'s figure for MODEL")
    parser.add_argument("--batch", type=int, default=32, help="with --in-process: lines per batch")
    args = parser.parse_args()
    if args.repeat < 1 or args.lines_per_request < 1:
        parser.error("--repeat and --lines-per-request must be at least 1")
    lines = _lines()
    if args.in_process:
        print(f"{in_process(args.in_process, lines, args.batch)[0]:.1f}")
        return
    result: dict = {"benchmark": "serve", "run": str(args.run), "lines": len(lines), "max_wait_ms": args.max_wait_ms,
                    "repeat": args.repeat, "lines_per_request": args.lines_per_request}
    for engine in args.engines.split(","):
        model = args.run
        if engine == "ct2":
            model = Path(tempfile.mkdtemp(prefix="nmtk-serve-bench-")) / "export"
            subprocess.run([sys.executable, "-m", "nmtk", "export", str(args.run), "-o", str(model)], check=True,
                           capture_output=True, cwd=ROOT)
        result[engine] = bench_engine(model, lines, [int(c) for c in args.clients.split(",")], args.single,
                                      args.max_wait_ms, args.repeat, args.lines_per_request)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
