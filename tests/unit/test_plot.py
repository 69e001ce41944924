"""`nmtk plot`'s curves (`nmtk.pictures.training_curves`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest


def test_a_curve_of_one_point_is_drawn_as_a_dot(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A short run logs its training figures once (at its end, before `log_every_updates`): a line through
    one point draws nothing, and the training loss, learning rate and tokens/s panels came out empty."""
    import matplotlib.axes

    from nmtk.pictures import training_curves

    run = tmp_path / "run"
    run.mkdir()
    records = [{"validation": True, "update": 30, "minutes": 0.1, "loss": 7.9, "bleu": 0.1},
               {"validation": True, "update": 60, "minutes": 0.2, "loss": 7.8, "bleu": 0.2},
               {"update": 60, "minutes": 0.2, "loss": 7.9, "lr": 3e-5, "tgt_tokens_per_s": 25407}]
    (run / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    drawn = []
    plot = matplotlib.axes.Axes.plot

    def recorded(self, xs, ys, **kwargs):  # type: ignore[no-untyped-def]
        drawn.append((len(xs), kwargs.get("marker")))
        return plot(self, xs, ys, **kwargs)

    monkeypatch.setattr(matplotlib.axes.Axes, "plot", recorded)
    training_curves([run], tmp_path / "curves.png")
    assert (tmp_path / "curves.png").stat().st_size > 0
    assert drawn == [(1, "o"), (2, "o"), (2, "o"), (1, "o"), (1, "o")]  # loss, valid loss, BLEU, lr, tokens/s
