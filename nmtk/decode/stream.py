"""`nmtk translate`: text streamed from input to output through a translator, n-best and score formats.

The typer command only parses; everything it parsed arrives here as one `TranslateOptions`: what to
load (`nmtk.decode.load.LoadOptions`, which also carries the search) and how to read and write.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, TextIO

from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeRemainingColumn

from nmtk.console import console
from nmtk.decode.base import TranslatorBase
from nmtk.decode.config import Hypothesis
from nmtk.decode.load import LoadOptions, load_translator
from nmtk.errors import NmtkError
from nmtk.files import InvalidUtf8, atomic_write, buffered, decode_lines


@dataclass(frozen=True)
class TranslateOptions:
    """Everything `nmtk translate` was asked to do."""

    load: LoadOptions = field(default_factory=LoadOptions)
    input: Path | None = None
    output: Path | None = None
    force: bool = False
    buffer_size: int = 10000
    errors: InvalidUtf8 = InvalidUtf8.error
    print_scores: bool = False

    @property
    def nbest(self) -> int:
        return self.load.search.nbest

    @property
    def print_alignment(self) -> bool:
        return self.load.align


def output_lines(index: int, hyps: list[Hypothesis], translator: TranslatorBase,
                 o: TranslateOptions) -> list[str]:
    """The line(s) one input line gives: the translation, ``SCORE<TAB>TEXT``, or n-best rows; with
    ``--print-alignment`` a tab and the ``i-j`` pairs follow the text."""
    def text(h: Hypothesis) -> str:
        return translator.detokenize(h) + (f"\t{h.alignment or ''}" if o.print_alignment else "")

    empty = "\t" if o.print_alignment else ""
    if o.nbest > 1:  # an empty input line still gets one line, so every input is accounted for
        return [f"{index}\t{h.score:.4f}\t{text(h)}" for h in hyps[: o.nbest]] or [f"{index}\t\t{empty}"]
    if not hyps:
        return ["\t" + empty if o.print_scores else empty]
    return [f"{hyps[0].score:.4f}\t{text(hyps[0])}" if o.print_scores else text(hyps[0])]


def translate(o: TranslateOptions) -> None:
    """Run `nmtk translate`: refuse to overwrite, load, then stream input to output."""
    if o.output is not None and o.output.exists() and not o.force:
        raise NmtkError(f"{o.output}: exists; use --force to overwrite it")
    translator = load_translator(o.load)
    source: BinaryIO = open(o.input, "rb") if o.input else sys.stdin.buffer
    try:
        if o.output is None:
            _stream(translator, o, source, sys.stdout)
        else:
            with atomic_write(o.output, "w") as sink:
                _stream(translator, o, source, sink)
    finally:
        if o.input:
            source.close()


def _input_lines(o: TranslateOptions, source: BinaryIO) -> Iterator[str]:
    name = str(o.input or "stdin")
    return decode_lines(source, name, o.errors.value, hint="use --errors replace to substitute U+FFFD")


def count_lines(path: Path) -> int:
    """Lines of a file (a last line without a newline counts), read in blocks: ~0.1 s per 100 MB."""
    count, last = 0, b"\n"
    with open(path, "rb") as handle:
        while block := handle.read(1 << 20):
            count += block.count(b"\n")
            last = block[-1:]
    return count + (last != b"\n")


def _progress(o: TranslateOptions) -> tuple[Progress, int | None]:
    """A progress display on stderr when it is a terminal (and stdout is not the translations' terminal):
    sentences, sentences/s and, for ``-i FILE``, a bar and the time left."""
    show = (o.output is not None or not sys.stdout.isatty()) and console.is_terminal
    total = count_lines(o.input) if o.input is not None and show else None
    columns = [SpinnerColumn(), TextColumn("{task.completed:,}" + (f" of {total:,}" if total else "") + " sentences"),
               TextColumn("{task.fields[rate]}")]
    if total:
        columns += [BarColumn(), TimeRemainingColumn()]
    return Progress(*columns, console=console, disable=not show), total


def _stream(translator: TranslatorBase, o: TranslateOptions, source: BinaryIO, sink: TextIO) -> None:
    """Translate ``--buffer-size`` lines at a time (one at a time from a terminal), flushing each chunk.

    Memory is bounded by the buffer, not the input: lines are read, translated and written a buffer
    at a time (benchmarks/translate.py --lines measures 20,000 against 200,000 lines).
    """
    interactive = o.input is None and sys.stdin.isatty()
    progress, total = _progress(o)
    index = 0
    with progress:
        task = progress.add_task("translate", total=total, rate="")
        start = time.perf_counter()
        for chunk in buffered(_input_lines(o, source), 1 if interactive else o.buffer_size):
            for hyps in translator.hypotheses(chunk, first_line=index + 1):
                index += 1
                for line in output_lines(index, hyps, translator, o):
                    sink.write(line + "\n")
            sink.flush()
            rate = f"{index / max(time.perf_counter() - start, 1e-9):.1f} sentences/s"
            progress.update(task, advance=len(chunk), rate=rate)
