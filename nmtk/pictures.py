"""Pictures: training curves (`nmtk plot`, and RUN/curves.png during training) and attention maps
(`nmtk attention`), drawn by matplotlib's Agg backend (no display needed) and written atomically.

The attention pictures follow the paper's Figures 3-5: the tokens of a sentence in two columns,
each query token joined to the keys it attends to by lines as opaque as the weight, one colour per
head; or, with ``style="heatmap"``, one heat map per head. Axis labels are the subword pieces as the
model sees them (``▁`` starts a word in sentencepiece, ``##`` continues one in WordPiece).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from nmtk.errors import NmtkError
from nmtk.files import atomic_write
from nmtk.rundir import TRAIN_LOG

TRAIN_PANELS = (("loss", "training loss"), ("valid_loss", "validation loss"), ("bleu", "validation BLEU"),
                ("lr", "learning rate"), ("tgt_tokens_per_s", "target tokens/s"))


def _figure(width_px: int, height_px: int, dpi: int = 100) -> Any:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width_px / dpi, height_px / dpi), dpi=dpi)
    FigureCanvasAgg(fig)
    return fig


def picture_format(out: Path) -> str:
    """The format ``out`` is written in, by its suffix (none: png); one matplotlib cannot write is the
    user's error, said before anything is drawn."""
    from matplotlib.backend_bases import FigureCanvasBase

    fmt = out.suffix.lstrip(".").lower() or "png"
    known = FigureCanvasBase.get_supported_filetypes()
    if fmt not in known:
        raise NmtkError(f"-o {out}: .{fmt} is not a picture format matplotlib writes ({', '.join(sorted(known))})")
    return fmt


#: Written into every picture nmtk draws whose format holds metadata (its creator), so that ``--force``
#: replaces nmtk's own pictures and never a user's file that happens to have the name.
MARK = "nmtk-picture"
_MARK_KEYS = {"png": "Software", "svg": "Creator", "svgz": "Creator", "pdf": "Creator", "ps": "Creator",
              "eps": "Creator"}
_LARGEST_PICTURE = 256 << 20  # a file larger than this is no picture nmtk drew: not read to find out


def _save(fig: Any, out: Path, dpi: int = 100) -> Path:
    fmt = picture_format(out)
    marked = {"metadata": {_MARK_KEYS[fmt]: MARK}} if fmt in _MARK_KEYS else {}
    with atomic_write(out, "wb") as handle:
        fig.savefig(handle, format=fmt, dpi=dpi, **marked)
    return out


def drawn_by_nmtk(path: Path) -> bool:
    """Whether the file ``path`` is a picture nmtk drew (its mark, `MARK`, inside; svgz unpacked)."""
    try:
        if path.stat().st_size > _LARGEST_PICTURE:
            return False
        data = path.read_bytes()
        if data[:2] == b"\x1f\x8b":
            import gzip

            data = gzip.decompress(data)
    except (OSError, EOFError):
        return False
    return MARK.encode() in data


def check_replaceable(out: Path, force: bool) -> None:
    """One line where the picture ``out`` may not be written: a folder there; any file without ``force``;
    with it, a file nmtk did not draw (`drawn_by_nmtk`: the user's, or a format without metadata)."""
    if out.is_dir():
        raise NmtkError(f"-o {out}: a folder, not a picture file")
    if not out.exists():
        return
    if not force:
        raise NmtkError(f"{out}: exists; use --force to overwrite it")
    if not drawn_by_nmtk(out):
        raise NmtkError(f"{out}: exists and is not a picture nmtk drew: --force replaces only nmtk's own; remove it "
                        "or choose another -o")


# ------------------------------------------------------------------------------------ training curves


def plot_runs(runs: list[Path], out: Path, x: str, size: str, force: bool) -> Path:
    """`nmtk plot`: the runs' curves into ``out``; ``size`` is ``WIDTHxHEIGHT`` in pixels."""
    from nmtk.rundir import RunDir

    for run in runs:
        if not RunDir(run).require().log_path.is_file():
            raise NmtkError(f"{run}: no {TRAIN_LOG} yet (train the run first)")
    try:
        width, height = (int(v) for v in size.lower().split("x"))
    except ValueError:
        raise NmtkError(f"--size {size!r}: expected WIDTHxHEIGHT in pixels, e.g. 1500x900") from None
    if not (100 <= width <= 10000 and 100 <= height <= 10000):
        raise NmtkError(f"--size {size}: width and height must lie between 100 and 10000 pixels")
    picture_format(out)
    check_replaceable(out, force)
    return training_curves(runs, out, x, (width, height))


def read_log(run: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(training records, validation records) of a run's train.jsonl; a torn last line is skipped."""
    train, valid = [], []
    path = Path(run) / TRAIN_LOG
    for line in path.read_text(encoding="utf-8").splitlines() if path.is_file() else []:
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        (valid if record.get("validation") else train).append(record)
    return train, valid


def training_curves(runs: list[Path], out: Path, x: str = "updates", size: tuple[int, int] = (1500, 900),
                    names: list[str] | None = None) -> Path:
    """Training loss, validation loss and BLEU, learning rate and tokens/s of ``runs``, overlaid, against
    updates or wall-clock minutes (``x``), as one picture of ``size`` pixels."""
    fig = _figure(*size)
    axes = fig.subplots(2, 3).flatten()
    key = "update" if x == "updates" else "minutes"
    for run, name in zip(runs, names or [Path(r).name for r in runs], strict=True):
        train, valid = read_log(run)
        series = {"loss": train, "lr": train, "tgt_tokens_per_s": train, "valid_loss": valid, "bleu": valid}
        for ax, (field, _) in zip(axes, TRAIN_PANELS, strict=False):
            records = series[field]
            source = "loss" if field == "valid_loss" else field
            points = [(r[key], r[source]) for r in records if key in r and r.get(source) is not None]
            if points:
                xs, ys = zip(*points, strict=True)
                dots = field in ("valid_loss", "bleu") or len(xs) == 1  # one point: a line of it draws nothing
                ax.plot(xs, ys, marker="o" if dots else None, markersize=3, label=name)
        if x == "updates":
            _stage_starts(axes[: len(TRAIN_PANELS)], train)
    for ax, (_, title) in zip(axes, TRAIN_PANELS, strict=False):
        ax.set_title(title)
        ax.set_xlabel("updates" if x == "updates" else "minutes")
        ax.grid(alpha=0.3)
    axes[3].set_yscale("log")
    handles, labels = axes[0].get_legend_handles_labels()
    axes[-1].axis("off")
    if handles:
        axes[-1].legend(handles, labels, loc="center", title="runs")
    fig.tight_layout()
    return _save(fig, out)


def _stage_starts(axes: Any, train: list[dict[str, Any]]) -> None:
    """A dotted line at the update each stage after the first began (`train.jsonl`'s stage lines), in
    the run's colour, named on the first panel: where a curve bends, whether the curriculum did it."""
    lines = axes[0].get_lines()
    colour = lines[-1].get_color() if lines else "grey"
    for record in train:
        if record.get("stage_index", 1) > 1 and "loss" not in record and "update" in record:
            for ax in axes:
                ax.axvline(record["update"], color=colour, linestyle=":", linewidth=1)
            axes[0].text(record["update"], 0.98, f" {record['stage']}", transform=axes[0].get_xaxis_transform(),
                         rotation=90, va="top", ha="left", fontsize=8, color=colour)


# ------------------------------------------------------------------------------------ attention


def _head_colours(heads: int) -> list[Any]:
    from matplotlib import colormaps

    cmap = colormaps["tab10" if heads <= 10 else "tab20"]
    return [cmap(h % cmap.N) for h in range(heads)]


def _lines(ax: Any, weights: np.ndarray, tokens: list[str], colours: list[Any], threshold: float = 0.05) -> None:
    """The paper's picture: query tokens on the left, keys on the right, a line per weight above
    ``threshold``, as opaque as the weight, in the colour of its head."""
    n = len(tokens)
    ys = np.arange(n)[::-1]
    for head, colour in enumerate(colours):
        for i, j in zip(*np.nonzero(weights[head] > threshold), strict=True):
            ax.plot([0, 1], [ys[i], ys[j]], color=colour, alpha=float(min(1.0, weights[head, i, j])), linewidth=1.5)
    for side, align in ((0, "right"), (1, "left")):
        for y, token in zip(ys, tokens, strict=True):
            ax.text(side + (-0.03 if side == 0 else 0.03), y, token, ha=align, va="center", fontsize=8)
    ax.set_xlim(-0.6, 1.6)
    ax.set_ylim(-1, n)
    ax.axis("off")


def _heatmap(ax: Any, weights: np.ndarray, rows: list[str], cols: list[str], title: str) -> None:
    ax.imshow(weights, cmap="viridis", vmin=0.0, vmax=1.0, aspect="auto")
    ax.set_xticks(range(len(cols)), cols, rotation=90, fontsize=7)
    ax.set_yticks(range(len(rows)), rows, fontsize=7)
    ax.set_title(title, fontsize=9)


def attention_picture(weights: np.ndarray, rows: list[str], cols: list[str], out: Path, title: str,
                      style: str = "lines", heads: list[int] | None = None, average: bool = False) -> Path:
    """A picture of one layer's attention ``weights`` (heads, rows, cols).

    ``lines`` (rows and cols the same tokens, as in self-attention): one panel with all heads, each
    in its colour, then one panel per head. ``heatmap``: a heat map per head, and first the average
    over heads when ``average``. ``heads`` picks heads (from 0); all by default.
    """
    chosen = heads if heads is not None else list(range(weights.shape[0]))
    colours = _head_colours(weights.shape[0])
    if style == "lines":
        panels = [("all heads", chosen)] + ([(f"head {h + 1}", [h]) for h in chosen] if len(chosen) > 1 else [])
    else:
        panels = ([("average of heads", None)] if average else []) + [(f"head {h + 1}", [h]) for h in chosen]
    columns = min(len(panels), 4 if style == "lines" else 3)
    grid_rows = math.ceil(len(panels) / columns)
    cell = max(len(rows), len(cols)) * 0.22 + 1.5
    fig = _figure(int(100 * columns * (3.2 if style == "lines" else cell)), int(100 * grid_rows * cell + 60))
    axes = np.atleast_1d(fig.subplots(grid_rows, columns, squeeze=False).flatten())
    for ax, (label, selected) in zip(axes, panels, strict=False):
        if style == "lines":
            masked = np.zeros_like(weights)
            masked[selected] = weights[selected]
            _lines(ax, masked, rows, colours)
            ax.set_title(label, fontsize=9, color=colours[selected[0]] if len(selected) == 1 else "black")
        else:
            shown = weights.mean(axis=0) if selected is None else weights[selected[0]]
            _heatmap(ax, shown, rows, cols, label)
    for ax in axes[len(panels):]:
        ax.axis("off")
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    return _save(fig, out)
