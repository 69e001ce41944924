"""Ctrl-C and SIGTERM end every blocking wait of nmtk at once (issue 61), whichever thread the kernel
hands the signal to: `translate` waiting for input from a pipe or a terminal, with ``-o`` or stdout.

The kernel delivers a signal sent to a process to any of its threads that does not block it; a
`translate` that let torch's worker thread take a Ctrl-C went on waiting for input (1 in ~500 tries
on one CPU, none on another). `tgkill` sends the signal to one thread the way the kernel sometimes
does, so these tests catch that on every CPU, every time. Uses the trained copy run of conftest.py."""

from __future__ import annotations

import ctypes
import fcntl
import os
import pty
import signal
import subprocess
import sys
import termios
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from cli_runner import run_nmtk
from helpers import copy_pairs

pytestmark = [pytest.mark.slow, pytest.mark.skipif(sys.platform != "linux", reason="tgkill and /proc: Linux")]

#: A signal must end the command within this many seconds (it takes under one where nothing is wrong).
PROMPT_S = 10.0


def tgkill(pid: int, tid: int, sig: int) -> None:
    """Send ``sig`` to thread ``tid`` of process ``pid``: what the kernel does with a signal sent to the
    process when it picks that thread."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.syscall(234, pid, tid, sig):  # SYS_tgkill on x86_64
        raise OSError(ctypes.get_errno(), "tgkill")


def other_threads(pid: int, sig: int = signal.SIGINT) -> list[int]:
    """The process's threads but the main one that do not block ``sig``: those the kernel may hand a
    signal sent to the process (it never picks one that blocks it; one told by `tgkill` would keep it
    pending for ever, a hang of the test's making)."""
    found = []
    for tid in sorted(int(t) for t in os.listdir(f"/proc/{pid}/task") if int(t) != pid):
        try:
            status = open(f"/proc/{pid}/task/{tid}/status").read()
        except OSError:  # the thread ended meanwhile
            continue
        blocked = int(next(line.split()[1] for line in status.splitlines() if line.startswith("SigBlk:")), 16)
        if not blocked >> (sig - 1) & 1:
            found.append(tid)
    return found


def _take_terminal() -> None:
    """In the child: the terminal on stdin becomes its controlling terminal (it leads a new session), so
    that ^C typed there signals it as a shell's foreground job."""
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


@dataclass
class Waiting:
    """A `translate` that translated its first line and waits for the next."""

    proc: subprocess.Popen
    how: str  # "pipe" or "terminal"
    send: str  # "thread" (to a thread that is not the main one), "process", or "^C" (typed on the terminal)
    sig: int
    out: Path | None  # -o, or None: stdout
    writer: int  # where the test types (the pipe's write end, the terminal's master)
    started: float = 0.0

    def ready(self) -> bool:
        if self.out is not None:
            partial = self.out.with_name(self.out.name + ".partial")
            return partial.is_file() and partial.read_text().count("\n") == 1
        return bool(os.read(self.proc.stdout.fileno(), 1 << 16)) if _readable(self.proc.stdout) else False

    def interrupt(self) -> None:
        self.started = time.monotonic()
        if self.send == "^C":
            os.write(self.writer, b"\x03")
        elif self.send == "thread":
            threads = other_threads(self.proc.pid, self.sig)
            assert threads, "translate runs no thread besides the main one: nothing to test"
            tgkill(self.proc.pid, threads[-1], self.sig)
        else:
            self.proc.send_signal(self.sig)


def _readable(stream) -> bool:
    import select

    return bool(select.select([stream], [], [], 0)[0])


def start(copy_run, tmp: Path, index: int, how: str, send: str, sig: int, to_file: bool) -> Waiting:
    folder, _, env = copy_run
    out = tmp / f"out{index}.de" if to_file else None
    cmd = [sys.executable, "-m", "nmtk", "translate", "-m", str(folder / "run"), "--beam", "1", "--threads", "2",
           *(["-o", str(out)] if out else [])]
    err = open(tmp / f"err{index}.txt", "w")
    if how == "pipe":
        read, write = os.pipe()
        proc = subprocess.Popen(cmd, stdin=read, stdout=subprocess.PIPE, stderr=err, cwd=folder, env=env)
        os.close(read)
    else:
        write, read = pty.openpty()
        proc = subprocess.Popen(cmd, stdin=read, stdout=subprocess.PIPE, stderr=err, cwd=folder, env=env,
                                start_new_session=True, preexec_fn=_take_terminal)
        os.close(read)
    err.close()
    os.write(write, f"{copy_pairs(1, index)[0][0]}\n".encode())
    return Waiting(proc, how, send, sig, out, write)


# Ten tries, every combination the issue names: a pipe and a terminal, -o and stdout, SIGINT and SIGTERM,
# and the signal taken by a thread other than the main one (the hang), by the process, or typed as ^C.
TRIES = [("pipe", "thread", signal.SIGINT, True), ("pipe", "thread", signal.SIGTERM, True),
         ("pipe", "thread", signal.SIGINT, False), ("pipe", "thread", signal.SIGTERM, False),
         ("pipe", "process", signal.SIGINT, True), ("pipe", "process", signal.SIGTERM, False),
         ("terminal", "^C", signal.SIGINT, True), ("terminal", "^C", signal.SIGINT, False),
         ("terminal", "thread", signal.SIGINT, True), ("terminal", "thread", signal.SIGTERM, False)]


@pytest.mark.parametrize("attempt", range(int(os.environ.get("NMTK_INTERRUPT_REPEAT", "1"))))
def test_ctrl_c_and_sigterm_end_a_translate_waiting_for_input_at_once(copy_run, tmp_path: Path, attempt: int) -> None:
    """Ten `translate`s waiting for their second line, side by side; each signalled as `TRIES` says ends
    within `PROMPT_S` seconds, exit 130 (SIGINT) or 143 (SIGTERM), one line saying how to go on, its
    finished line kept (``-o``: in the partial file)."""
    waiting = [start(copy_run, tmp_path, i, *try_) for i, try_ in enumerate(TRIES)]
    try:
        deadline = time.monotonic() + 300  # a hang, not a speed: ten models load on two cores
        pending = list(waiting)
        while pending:
            assert time.monotonic() < deadline, [w.how for w in pending]
            for w in list(pending):
                assert w.proc.poll() is None, (tmp_path / f"err{waiting.index(w)}.txt").read_text()
                if w.ready():
                    pending.remove(w)
            time.sleep(0.05)
        for w in waiting:
            w.interrupt()
        for i, w in enumerate(waiting):
            try:
                w.proc.wait(timeout=max(0.1, PROMPT_S - (time.monotonic() - w.started)))
            except subprocess.TimeoutExpired:
                pytest.fail(f"try {i} {TRIES[i]}: still waiting {PROMPT_S:.0f} s after the signal")
            _record("ten", time.monotonic() - w.started)
            err = (tmp_path / f"err{i}.txt").read_text()
            code = 143 if w.sig == signal.SIGTERM else 130
            assert w.proc.returncode == code and "Traceback" not in err, (TRIES[i], err)
            assert "the first 1 input lines are translated" in err and "--skip 1" in err, (TRIES[i], err)
            if w.out is not None:
                assert (w.out.with_name(w.out.name + ".partial")).read_text().count("\n") == 1
                assert not w.out.exists()
    finally:
        for w in waiting:
            if w.proc.poll() is None:
                w.proc.kill()
            os.close(w.writer)


@pytest.mark.parametrize("attempt", range(int(os.environ.get("NMTK_INTERRUPT_REPEAT", "1"))))
def test_ctrl_c_keeps_the_finished_lines_and_says_how_to_go_on(copy_run, tmp_path: Path, attempt: int) -> None:
    """Ctrl-C while translate waits for more input, taken by one of its worker threads: the test holds
    its stdin open after 100 lines, so translate can neither finish nor be caught mid-buffer, however
    fast or slow the machine is. Going on with --skip appends to the finished lines."""
    tmp, _, env = copy_run
    source = tmp_path / "big.en"
    lines = [a for a, _ in copy_pairs(150, 21)]
    source.write_text("".join(f"{line}\n" for line in lines))
    out = tmp_path / "out.de"
    out.write_text("an earlier translation\n")
    partial = tmp_path / "out.de.partial"
    err = open(tmp_path / "err.txt", "w")
    proc = subprocess.Popen([sys.executable, "-m", "nmtk", "translate", "-m", str(tmp / "run"), "-o", str(out),
                             "--force", "--buffer-size", "50", "--beam", "1", "--threads", "2"],
                            stdin=subprocess.PIPE, stderr=err, text=True, cwd=tmp, env=env)
    err.close()  # (a file, not a pipe nobody reads: translate's messages can never block it)
    proc.stdin.write("".join(f"{line}\n" for line in lines[:100]))
    proc.stdin.flush()
    deadline = time.monotonic() + 300  # a hang, not a speed: the lines are there long before
    while not (partial.is_file() and partial.read_text().count("\n") == 100):
        assert proc.poll() is None and time.monotonic() < deadline, "translate ended while its input was open"
        time.sleep(0.05)
    signalled = time.monotonic()
    tgkill(proc.pid, other_threads(proc.pid)[-1], signal.SIGINT)  # translate is blocked reading line 101
    proc.wait(timeout=PROMPT_S)
    _record("partial", time.monotonic() - signalled)
    message = (tmp_path / "err.txt").read_text()
    proc.stdin.close()
    assert proc.returncode == 130 and "Traceback" not in message, message
    assert out.read_text() == "an earlier translation\n"  # the earlier file is intact
    done = partial.read_text().splitlines()
    assert len(done) == 100 and "the first 100 input lines are translated" in message
    assert "--skip 100" in message and str(partial) in message
    whole = _run(env, tmp, "translate", "-m", str(tmp / "run"), "--beam", "1", stdin="".join(f"{x}\n" for x in lines))
    assert done == whole.stdout.splitlines()[:100]
    # Going on as the message says (the same command, --force included, and --skip 100) appends to the
    # 100 finished lines instead of starting over; a wrong --skip is refused and keeps them.
    again = ["translate", "-m", str(tmp / "run"), "-o", str(out), "--force", "--buffer-size", "50", "--beam", "1"]
    wrong = _run(env, tmp, *again, "--skip", "90", stdin="".join(f"{line}\n" for line in lines))
    assert wrong.returncode == 1 and "--skip 100" in wrong.stderr and partial.read_text().splitlines() == done
    fresh = _run(env, tmp, *again[:5], "--beam", "1", stdin="x\n")  # no --force, no --skip
    assert fresh.returncode == 1 and "--skip 100" in fresh.stderr and partial.read_text().splitlines() == done
    went_on = _run(env, tmp, *again, "--skip", "100", stdin="".join(f"{line}\n" for line in lines))
    assert went_on.returncode == 0 and "going on from" in went_on.stderr, went_on.stderr
    assert out.read_text() == whole.stdout and not partial.exists()


def _record(test: str, seconds: float) -> None:
    """With NMTK_INTERRUPT_LOG=FILE, each signal's time to exit appended to FILE (the stress run's figures)."""
    if log := os.environ.get("NMTK_INTERRUPT_LOG"):
        with open(log, "a") as handle:
            handle.write(f"{test}\t{seconds:.3f}\n")


def _run(env: dict, cwd: Path, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    """A command that needs no signal: in this process (`cli_runner`), without a new interpreter's start."""
    return run_nmtk(*args, stdin=stdin, cwd=cwd, env=env)
