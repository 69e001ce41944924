"""What `prepare` is doing, while it does it: one stage at a time, with counts and rates.

On 400k pairs `prepare` runs for minutes (Moses is pure Python); a person must see that it moves and how
fast. A terminal gets a live line per stage (spinner, count, rate); every stream, a log file included,
gets one line per finished stage, so a log records where the time went.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from nmtk.console import console, is_main_process


def _rate(count: int, seconds: float, unit: str) -> str:
    return f"{count / seconds:,.0f} {unit}/s" if seconds > 0 and count else ""


class Stages:
    """Reports ``prepare``'s stages; ``show=False`` (the library called from tests or other code) is silent."""

    def __init__(self, show: bool = True) -> None:
        self.show = show and is_main_process()

    @contextmanager
    def stage(self, name: str, unit: str = "pairs", detail: Callable[[], str] | None = None
              ) -> Iterator[Callable[[int], None]]:
        """Yields ``advance(n)``; on leaving, one line: the stage, its count, time and rate, then what
        ``detail()`` says then (what cleaning dropped)."""
        start, count = time.perf_counter(), 0
        live = Progress(SpinnerColumn(), TextColumn(f"{name}: " + "{task.completed:,} " + unit),
                        TextColumn("{task.fields[rate]}"), TimeElapsedColumn(), console=console,
                        transient=True, disable=not (self.show and console.is_terminal))
        task = live.add_task(name, total=None, rate="")

        def advance(n: int) -> None:
            nonlocal count
            count += n
            live.update(task, completed=count, rate=_rate(count, time.perf_counter() - start, unit))

        with live:
            yield advance
        if self.show:
            seconds = time.perf_counter() - start
            done = f": {count:,} {unit}" if count else ""
            rate = _rate(count, seconds, unit)
            said = detail() if detail else ""
            console.print(f"[dim]prepare[/] {name}{done} in {seconds:.1f} s" + (f" ({rate})" if rate else "")
                          + (f"; {said}" if said else ""))
