"""`nmtk ARGS` run inside the test process: the real command line (`nmtk.cli.main`: parsing, one-line
errors, exit codes), its stdin, stdout and stderr, its working directory and environment; without
the 2-3 s that a new Python process pays to import torch and nmtk (most of the suite's time, issue 61).

What a command changes in the process for itself is put back afterwards: the working directory, the
environment, argv, stdin/stdout/stderr, torch's thread count, the signal handlers. What only a real
process shows (signals, pipes read as they come, torchrun, a server, import time) is tested with real
processes: `needs_a_process` says which command lines those are.
"""

from __future__ import annotations

import importlib
import io
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

#: Command lines that need a process of their own: launchers, servers, and anything that sets what a
#: process holds for good (the multi-process launcher; the server's event loop and signals).
PROCESS_ONLY = {"serve"}


def needs_a_process(args: tuple[str, ...], env: dict[str, str] | None) -> bool:
    command = next((a for a in args if not a.startswith("-")), "")
    return (command in PROCESS_ONLY or any(a == "--nproc" or a.startswith("--nproc=") for a in args)
            or bool(env and "WORLD_SIZE" in env))


@contextmanager
def _process_state(cwd: Path | None, env: dict[str, str] | None, argv: list[str]) -> Iterator[None]:
    import torch

    saved_env, saved_cwd, saved_argv = dict(os.environ), os.getcwd(), sys.argv
    saved_threads = torch.get_num_threads()
    saved_handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    try:
        if env is not None:
            os.environ.clear()
            os.environ.update(env)
        if cwd is not None:
            os.chdir(cwd)
        sys.argv = argv
        yield
    finally:
        os.chdir(saved_cwd)
        os.environ.clear()
        os.environ.update(saved_env)
        sys.argv = saved_argv
        torch.set_num_threads(saved_threads)
        for sig, handler in saved_handlers.items():
            signal.signal(sig, handler)


def run_in_process(*args: str, stdin: str | bytes | None = None, cwd: Path | None = None,
                   env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """`nmtk ARGS` in this process, as `subprocess.run(..., capture_output=True, text=True)` returns it."""
    from nmtk.console import console

    cli = importlib.import_module("nmtk.cli.app")  # the module (`nmtk.cli.app` is also the Typer object's name)

    data = stdin.encode() if isinstance(stdin, str) else (stdin or b"")
    fake_in = io.TextIOWrapper(io.BytesIO(data), encoding="utf-8")
    out, err = io.BytesIO(), io.BytesIO()
    fake_out = io.TextIOWrapper(out, encoding="utf-8", write_through=True)
    fake_err = io.TextIOWrapper(err, encoding="utf-8", write_through=True)
    streams = sys.stdin, sys.stdout, sys.stderr
    code = 0
    with _process_state(cwd, env, ["nmtk", *args]):
        sys.stdin, sys.stdout, sys.stderr = fake_in, fake_out, fake_err
        cli._state["debug"] = False
        quiet = console.quiet
        try:
            cli.main()
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        finally:
            console.quiet = quiet
            fake_out.flush()
            fake_err.flush()
            sys.stdin, sys.stdout, sys.stderr = streams
    return subprocess.CompletedProcess(["nmtk", *args], code, out.getvalue().decode("utf-8", "replace"),
                                       err.getvalue().decode("utf-8", "replace"))


def run_nmtk(*args: str, stdin: str | bytes | None = None, cwd: Path | None = None, env: dict[str, str] | None = None,
             process: bool = False, timeout: float = 600) -> subprocess.CompletedProcess:
    """`nmtk ARGS`: in this process, unless ``process`` is asked or the command line `needs_a_process`."""
    if process or needs_a_process(args, env):
        text = not isinstance(stdin, bytes)
        result = subprocess.run([sys.executable, "-m", "nmtk", *args], input=stdin, capture_output=True, text=text,
                                cwd=cwd, env=env, timeout=timeout)
        if not text:
            result.stdout, result.stderr = (x.decode("utf-8", "replace") for x in (result.stdout, result.stderr))
        return result
    return run_in_process(*args, stdin=stdin, cwd=cwd, env=env)
