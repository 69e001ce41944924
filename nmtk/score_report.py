"""Rendering of `nmtk score` results: a rich table on stderr, sacreBLEU's one-line form on stdout."""

from __future__ import annotations

from typing import Any

from rich.table import Table

from nmtk.console import console


def render_scores(results: dict[str, dict[str, dict[str, Any]]]) -> None:
    """One row per system, one column per metric; then sacreBLEU's own lines (scripts read those)."""
    metrics = list(next(iter(results.values())))
    table = Table(title="scores", title_justify="left")
    table.add_column("system")
    for metric in metrics:
        table.add_column(metric.upper() if metric != "chrf" else "chrF", justify="right")
    for name, per_metric in results.items():
        table.add_row(name, *(f"{per_metric[m]['score']:.2f}" for m in metrics))
    console.print(table)
    for name, per_metric in results.items():
        for metric in metrics:
            prefix = f"{name}: " if len(results) > 1 else ""
            print(prefix + per_metric[metric]["line"])


def render_significance(sig: dict[str, dict[str, dict[str, float]]], baseline: str) -> None:
    table = Table(title=f"paired bootstrap resampling against {baseline} (95% confidence intervals)",
                  title_justify="left")
    table.add_column("system")
    metrics = list(next(iter(sig.values())))
    for metric in metrics:
        table.add_column(f"{metric} (mean ± ci)", justify="right")
        table.add_column("p", justify="right")
    for name, per_metric in sig.items():
        cells = []
        for metric in metrics:
            r = per_metric[metric]
            cells.append(f"{r['score']:.2f} ({r['mean']:.2f} ± {r['ci']:.2f})")
            cells.append("-" if name == baseline or "p_value" not in r else f"{r['p_value']:.4f}")
        table.add_row(name, *cells)
    console.print(table)
