"""`nmtk.workers`: worker processes that keep order, raise their errors here, and never hang on a death."""

from __future__ import annotations

import os
import signal

import pytest

from nmtk.errors import NmtkError
from nmtk.workers import Workers, in_child

_STATE: dict[str, int] = {}


def _setup(offset: int) -> None:
    _STATE["offset"] = offset


def _shifted(x: int) -> int:
    if x == 13:
        raise ValueError("thirteen is refused")
    return x + _STATE["offset"]


def _die(_: int) -> int:
    os.kill(os.getpid(), signal.SIGKILL)
    return 0


def _power(base: int, exponent: int = 2) -> int:
    return base**exponent


def test_results_come_in_order_from_workers_set_up_once() -> None:
    with Workers(2, _setup, (100,)) as workers:
        assert list(workers.imap(_shifted, range(12))) == [x + 100 for x in range(12)]
        assert list(workers.imap(_shifted, [])) == []
        with pytest.raises(ValueError, match="thirteen"):  # the worker's own exception, here
            list(workers.imap(_shifted, range(10, 20)))
        processes = [p for p, _ in workers.workers]
    assert not any(p.is_alive() for p in processes)


def test_a_worker_that_dies_is_an_error_not_a_hang() -> None:
    with Workers(2) as workers, pytest.raises(NmtkError, match="ended unexpectedly"):
        list(workers.imap(_die, range(4)))


def test_in_child_returns_raises_and_takes_keywords() -> None:
    assert in_child(_power, 3, exponent=3) == 27
    with pytest.raises(TypeError):
        in_child(_power, 3, unknown=1)


def test_arrays_reach_files_without_numpys_path_check(tmp_path) -> None:
    """numpy's ``tofile``/``fromfile`` ask whether their argument is a path with an ``isinstance`` check
    that runs Python code; a signal handler's exception raised there came out of `prepare` as "TypeError:
    expected str, bytes or os.PathLike object, not BufferedWriter". nmtk writes and reads arrays through
    `write_array`/`read_array`, where such an exception stays itself (here: one raised by that check)."""
    import io
    from pathlib import Path

    import numpy as np

    from nmtk.files import read_array, write_array

    class Boom(Exception):
        pass

    class Checked(type):
        @property
        def __mro__(cls):  # what an ABC check reads: a signal handler may raise there
            raise Boom

    class Handle(io.BytesIO, metaclass=Checked):
        pass

    handle = Handle()
    write_array(handle, np.arange(3, dtype=np.int64))  # no isinstance check: nothing raised
    assert np.frombuffer(handle.getvalue(), dtype=np.int64).tolist() == [0, 1, 2]
    with open(tmp_path / "a.bin", "wb") as out:
        write_array(out, np.arange(4, dtype=np.int32))
    assert read_array(tmp_path / "a.bin", np.int32).tolist() == [0, 1, 2, 3]
    sources = Path(__file__).resolve().parents[2] / "nmtk"
    assert not [p for p in sources.rglob("*.py") if ".tofile(" in p.read_text() or "np.fromfile(" in p.read_text()]
