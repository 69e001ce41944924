"""Benchmark `nmtk serve` on loopback: test_2016_flickr's 1,000 lines, one line per request, from 1, 8
and 64 concurrent clients, against offline `nmtk translate` on the same lines and engine.

For each engine (``torch``: the run directory; ``ct2``: its CTranslate2 export, made first) a server is
started (2 threads, default batching), warmed up with 50 requests, then each client count sends the
lines (1 client: the first ``--single`` lines only, for latency per line). Offline reference: `nmtk
translate -m MODEL -i test -o out` in a fresh process, its load time subtracted (timed from its own
output). Prints one JSON line: per engine and client count, sentences/s, latency p50/p95/p99 (ms),
errors, batches per request, the server's peak RSS; offline sentences/s; served/offline ratio at 64.

Needs a trained run (default: runs/multi30k-en-de, the `make demo` run).
Usage: python benchmarks/serve.py [--run DIR] [--engines torch,ct2] [--clients 1,8,64] [--single 200]
"""

from __future__ import annotations

import argparse
import gzip
import http.client
import json
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from _util import ROOT, _tree_rss_kib, data_root


def _lines() -> list[str]:
    with gzip.open(data_root() / "multi30k" / "test_2016_flickr.en.gz", "rt", encoding="utf-8") as handle:
        return [line.rstrip("\n") for line in handle]


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


_local = threading.local()


def _post(base: str, line: str) -> float:
    """One request on this client thread's own keep-alive connection (as a real client pools them); a
    connection the server closed while idle is opened again."""
    start = time.perf_counter()
    for attempt in range(2):
        if getattr(_local, "connection", None) is None:
            _local.connection = http.client.HTTPConnection(base.split("//")[1], timeout=300)
        try:
            _local.connection.request("POST", "/translate", json.dumps({"q": line}),
                                      {"Content-Type": "application/json"})
            response = _local.connection.getresponse()
            body = response.read()
            break
        except (http.client.HTTPException, ConnectionError):
            _local.connection.close()
            _local.connection = None
            if attempt:
                raise
    if response.status != 200:
        raise RuntimeError(body)
    json.loads(body)
    return time.perf_counter() - start


def _health(base: str) -> dict:
    with urllib.request.urlopen(base + "/health", timeout=10) as response:
        return json.loads(response.read())


def _clients(base: str, lines: list[str], clients: int, peak: list[int], pid: int) -> dict:
    before = _health(base)
    latencies: list[float] = []
    errors = 0
    start = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        futures = [pool.submit(_post, base, line) for line in lines]
        for future in futures:
            try:
                latencies.append(future.result())
            except Exception:  # noqa: BLE001 - counted
                errors += 1
            peak[0] = max(peak[0], _tree_rss_kib(pid))
    seconds = time.perf_counter() - start
    after = _health(base)
    q = statistics.quantiles(latencies, n=100) if len(latencies) > 1 else latencies * 99
    return {"clients": clients, "lines": len(lines), "sent_per_s": round(len(lines) / seconds, 1),
            "p50_ms": round(q[49] * 1000, 1), "p95_ms": round(q[94] * 1000, 1), "p99_ms": round(q[98] * 1000, 1),
            "errors": errors, "batches_per_request": round((after["batches"] - before["batches"]) / len(lines), 3)}


def _offline(model: Path, lines: list[str]) -> float:
    """Sentences/s of `nmtk translate` on ``lines``, model loading excluded (a run of 1 line is subtracted)."""
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "in.en"

        def timed(text: list[str]) -> float:
            src.write_text("\n".join(text) + "\n")
            start = time.perf_counter()
            subprocess.run([sys.executable, "-m", "nmtk", "translate", "-m", str(model), "-i", str(src), "-o",
                            str(Path(tmp) / "out"), "--force", "--threads", "2"], check=True, capture_output=True,
                           cwd=ROOT)
            return time.perf_counter() - start

        load = timed(lines[:1])
        return len(lines) / max(timed(lines) - load, 1e-6)


def bench_engine(model: Path, lines: list[str], client_counts: list[int], single: int, wait_ms: float) -> dict:
    port = _port()
    base = f"http://127.0.0.1:{port}"
    server = subprocess.Popen([sys.executable, "-m", "nmtk", "serve", "-m", str(model), "--port", str(port),
                               "--threads", "2", "--max-wait-ms", str(wait_ms)], cwd=ROOT, stderr=subprocess.DEVNULL)
    try:
        for _ in range(600):
            try:
                _health(base)
                break
            except OSError:
                time.sleep(0.2)
        for line in lines[:50]:
            _post(base, line)
        peak = [0]
        rows = [_clients(base, lines[:single] if n == 1 else lines, n, peak, server.pid) for n in client_counts]
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=120)
    offline = _offline(model, lines)
    at_most = max(client_counts)
    served = next(r["sent_per_s"] for r in rows if r["clients"] == at_most)
    return {"rows": rows, "peak_rss_mib": round(peak[0] / 1024), "offline_sent_per_s": round(offline, 1),
            f"served_vs_offline_at_{at_most}": round(served / offline, 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", type=Path, default=ROOT / "runs" / "multi30k-en-de")
    parser.add_argument("--engines", default="torch,ct2")
    parser.add_argument("--clients", default="1,8,64")
    parser.add_argument("--single", type=int, default=200, help="lines sent by the single client")
    parser.add_argument("--max-wait-ms", type=float, default=5.0, help="the server's --max-wait-ms")
    args = parser.parse_args()
    lines = _lines()
    result: dict = {"benchmark": "serve", "run": str(args.run), "lines": len(lines), "max_wait_ms": args.max_wait_ms}
    for engine in args.engines.split(","):
        model = args.run
        if engine == "ct2":
            model = Path(tempfile.mkdtemp(prefix="nmtk-serve-bench-")) / "export"
            subprocess.run([sys.executable, "-m", "nmtk", "export", str(args.run), "-o", str(model)], check=True,
                           capture_output=True, cwd=ROOT)
        result[engine] = bench_engine(model, lines, [int(c) for c in args.clients.split(",")], args.single,
                                      args.max_wait_ms)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
