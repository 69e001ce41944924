"""The size rules of the house, checked: functions fit on a screen, no class outgrows its one job."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "nmtk"
MAX_FUNCTION, MAX_CLASS, MAX_TRAINER = 60, 300, 250


def _definitions() -> list[tuple[str, ast.AST, int]]:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                found.append((f"{path.relative_to(PACKAGE.parent)}:{node.lineno} {node.name}", node,
                              node.end_lineno - node.lineno + 1))
    return found


def test_no_function_over_60_lines_and_no_class_over_300() -> None:
    """Typer commands count too: their shared options are named once at module level (`cli/app.py`)."""
    long = [f"{where} ({lines} lines)" for where, node, lines in _definitions()
            if lines > (MAX_CLASS if isinstance(node, ast.ClassDef) else MAX_FUNCTION)]
    assert not long, long


def test_the_trainer_stays_a_loop() -> None:
    """`Trainer` calls `UpdateStep`, `StopPolicy` and `CheckpointKeeper`; it does not grow their jobs back."""
    trainer = [lines for where, node, lines in _definitions() if where.endswith(" Trainer")]
    assert trainer and trainer[0] <= MAX_TRAINER, trainer
