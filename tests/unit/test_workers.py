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
