"""Graphed micro-batches (`nmtk.train.shapes`, `nmtk.train.graphs`), the parts a CPU can check: the shape
chooser on a recorded length histogram, padding to a shape changes no loss or gradient, the static-shape
path (``NMTK_GRAPHS_EAGER=1``) trains what ordinary training trains and resumes across the setting, and
the model keeps no tensor made in its training forward (what a captured graph would free or overwrite)."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest
import torch

from nmtk.data.batching import BatchingPlan
from nmtk.data.dataset import rounded_up
from nmtk.errors import NmtkError
from nmtk.train.shapes import ShapeSet, choose_bounds, pad_into

#: Multi30k en-de's training pairs by the longer side's length in tokens (joint BPE, + EOS/BOS), recorded
#: from `nmtk prepare recipes/multi30k-en-de.toml` (28,994 pairs, lengths 5 to 52).
MULTI30K_EN_DE = [0, 0, 0, 0, 0, 2, 9, 57, 361, 832, 1281, 1853, 2347, 2562, 2564, 2453, 2362, 2068, 1816, 1517,
                  1349, 1066, 933, 711, 584, 465, 399, 318, 222, 180, 155, 119, 82, 76, 46, 38, 38, 20, 22, 14, 13,
                  15, 10, 5, 10, 4, 3, 5, 1, 1, 2, 2, 2]


def cost(counts: np.ndarray, bounds: list[tuple[int, int]]) -> float:
    """What `choose_bounds` minimises: Σ tokens of each group × hi / lo."""
    lengths = np.arange(len(counts))
    return sum(float((counts * lengths)[lo : hi + 1].sum()) * hi / lo for lo, hi in bounds)


def expanded(counts: list[int]) -> np.ndarray:
    return np.repeat(np.arange(len(counts)), counts).astype(np.int32)


def test_the_chooser_covers_every_length_within_the_ratio_and_is_optimal() -> None:
    counts = np.array(MULTI30K_EN_DE)
    for groups in (4, 8, 16):
        bounds = choose_bounds(counts, groups)
        assert len(bounds) == groups and bounds[0][0] == 5 and bounds[-1][1] == 52
        assert all(a[1] < b[0] for a, b in itertools.pairwise(bounds))  # disjoint, in order
        assert all(counts[lo] and counts[hi] and hi / lo <= 2.0 for lo, hi in bounds)
        covered = {n for lo, hi in bounds for n in range(lo, hi + 1)}
        assert set(np.flatnonzero(counts)) <= covered
    # more groups never cost more; two groups cannot span 5..52 within a ratio of 2: as few more as needed
    assert cost(counts, choose_bounds(counts, 16)) < cost(counts, choose_bounds(counts, 8))
    assert len(choose_bounds(counts, 2)) == 4
    # against every way of cutting a small histogram into at most three groups
    small = np.array([0, 0, 3, 5, 0, 9, 4, 1, 2, 6])
    present = np.flatnonzero(small)
    best = min(cost(small, [(int(present[a]), int(present[b - 1])) for a, b in itertools.pairwise((0, *cuts,
                                                                                                    len(present)))])
               for k in range(0, 3) for cuts in itertools.combinations(range(1, len(present)), k)
               if all(present[b - 1] / present[a] <= 2.0 for a, b in itertools.pairwise((0, *cuts, len(present)))))
    assert cost(small, choose_bounds(small, 3)) == pytest.approx(best)


@pytest.mark.parametrize(("tokens", "groups", "multiple", "most_padding"),
                         [(3125, 16, 1, 0.20), (25000, 16, 1, 0.40), (3125, 16, 8, 0.40), (25000, 16, 8, 0.50)])
def test_every_batch_of_an_epoch_fits_a_shape(tokens: int, groups: int, multiple: int, most_padding: float) -> None:
    """The recorded data's token-bucket batches (the paper's 3,125 per GPU, and 25,000) each fit a shape,
    and the shapes' padding stays bounded (measured: 15.3 % and 31.4 %). With lengths rounded up to 8 as
    a GPU's batch tensors hold them, while the plan fills its batches by unrounded lengths (failed on
    an H200: most micro-batches fitted no shape and ran eagerly)."""
    lengths = expanded(MULTI30K_EN_DE)
    shapes = ShapeSet.chosen(lengths, lengths, tokens, groups, multiple, rounded_batches=False)
    assert len(shapes.shapes) == min(groups, len(np.unique(rounded_up(lengths, multiple))))
    batches = BatchingPlan(lengths, lengths, tokens).epoch_batches(0)
    held = rounded_up(lengths, multiple)
    dims = [(len(b), int(held[b].max()), int(held[b].max()), int(2 * lengths[b].sum())) for b in batches]
    assert all(shapes.shape_for(rows, src) is not None for rows, src, _, _ in dims)
    padding = shapes.padding(dims)
    assert 0.0 < padding < most_padding
    assert shapes.line(padding) == f"{len(shapes.shapes)} shapes, padding {100 * padding:.1f} % of tokens"
    assert max(s.tokens for s in shapes.shapes) <= 2 * tokens  # a shape's memory: at most two micro-batches'


def test_padding_to_a_shape_gives_the_loss_and_gradients_of_the_batch(tmp_path: Path) -> None:
    """fp32, no dropout: a batch copied into a larger shape's buffers (padded positions, and rows that
    repeat the first sentence with <pad> targets) has the unpadded batch's loss, NLL and gradients (1e-5)."""
    from helpers import toy_trainer

    from nmtk.data.dataset import collate
    from nmtk.train.graphs import StaticPass
    from nmtk.train.shapes import Shape

    trainer = toy_trainer(tmp_path, "model.dropout=0.0", "train.precision=fp32")
    batch = collate(trainer.train_split, trainer.plan.epoch_batches(0)[0])
    rows, length = batch.src.size(0), max(batch.src.size(1), batch.tgt_in.size(1))
    static = StaticPass(Shape(rows + 5, length + 7), torch.device("cpu"))
    pad_into(batch, static.src, static.tgt_in, static.tgt_out)
    assert static.tgt_out[rows:].eq(0).all() and static.src[rows:].eq(static.src[0]).all()
    results = []
    for run in (batch, static.batch()):
        trainer.model.zero_grad(set_to_none=True)
        loss, nll = trainer.step.loss(run)
        loss.backward()
        results.append((loss.detach(), nll, [p.grad.clone() for p in trainer.model.parameters()]))
    (loss_a, nll_a, grads_a), (loss_b, nll_b, grads_b) = results
    torch.testing.assert_close(loss_b, loss_a, rtol=1e-5, atol=0)
    torch.testing.assert_close(nll_b, nll_a, rtol=1e-5, atol=0)
    for a, b in zip(grads_a, grads_b, strict=True):  # relative to each gradient's largest element
        torch.testing.assert_close(b, a, rtol=0, atol=1e-5 * float(a.abs().max()))
    with pytest.raises(ValueError, match="does not fit"):
        pad_into(batch, *(t[:rows - 1] for t in (static.src, static.tgt_in, static.tgt_out)))
    trainer.metrics.close()


def test_graphed_updates_train_what_plain_updates_train_and_resume_across_the_setting(tmp_path: Path,
                                                                                     monkeypatch) -> None:
    """train.cuda_graphs=true on a CPU (NMTK_GRAPHS_EAGER=1: the static shapes, buffers and in-place
    accumulation, replayed eagerly) gives the losses of plain updates (fp32, no dropout) on the same
    sentences, a validation between graphed updates changing none of them, and a run graphed for 4 updates
    resumes without graphs to the uninterrupted run's state."""
    from helpers import toy_prepared, toy_recipe, without_key_bias

    from nmtk.checkpoint import Checkpoint
    from nmtk.recipe import load_recipe
    from nmtk.rundir import RunDir
    from nmtk.train.distributed import DistInfo
    from nmtk.train.trainer import Trainer

    monkeypatch.setenv("NMTK_GRAPHS_EAGER", "1")
    common = ["batching.batch_tokens=256", "train.update_freq=2", "train.validate_every_updates=3",
              "train.validate_at_end=false", "train.save_every_updates=4", "model.dropout=0.0",
              "train.precision=fp32", "train.graph_shapes=6"]
    _, out, pipelines = toy_prepared(tmp_path / "prep", *common)

    def trainer(name: str, *extra: str) -> tuple[Trainer, list[float]]:
        recipe = load_recipe(toy_recipe(tmp_path / "prep"), [*common, *extra])
        run = RunDir(tmp_path / name)
        run.path.mkdir()
        made = Trainer(recipe, out.data, pipelines, run, torch.device("cpu"), DistInfo())
        made.line = made.plan_micro_batches()
        made.step.wrap()
        made.check_memory()
        if made.step.graphs is not None:
            made.step.graphs.prepare()
        losses, step = [], made.train_step

        def train_step(group, *args):
            result = step(group, *args)
            losses.append(float(result[0]) / result[2])
            return result

        made.train_step = train_step
        return made, losses

    plain, plain_losses = trainer("plain", "train.max_updates=8")
    assert plain.step.graphs is None
    plain.train()
    graphed, graphed_losses = trainer("graphed", "train.max_updates=4", "train.cuda_graphs=true")
    assert graphed.step.graphs is not None and "6 shapes, padding" in graphed.line
    graphed.train()
    assert graphed.step.graphs.eager_batches == 0
    assert '"validation": true, "update": 3' in graphed.run.log_path.read_text()  # validated between them
    torch.testing.assert_close(graphed_losses, plain_losses[:4], rtol=1e-5, atol=0)
    resumed, resumed_losses = trainer("resumed", "train.max_updates=8", "train.cuda_graphs=false")
    resumed.resume(Checkpoint.read(graphed.run.last))
    resumed.train()
    torch.testing.assert_close(resumed_losses, plain_losses[4:], rtol=1e-4, atol=0)
    for (name, a), b in zip(plain.model.state_dict().items(), resumed.model.state_dict().values(), strict=True):
        torch.testing.assert_close(without_key_bias(name, b), without_key_bias(name, a), rtol=1e-4, atol=1e-6,
                                   msg=name)
    for made in (plain, graphed, resumed):
        made.metrics.close()


def test_cuda_graphs_true_says_what_it_needs(tmp_path: Path, monkeypatch) -> None:
    from helpers import toy_trainer

    monkeypatch.delenv("NMTK_GRAPHS_EAGER", raising=False)
    with pytest.raises(NmtkError, match=r"train.cuda_graphs = true needs a CUDA GPU \(this run is on cpu\)"):
        toy_trainer(tmp_path / "a", "train.cuda_graphs=true")
    monkeypatch.setenv("NMTK_GRAPHS_EAGER", "1")
    with pytest.raises(NmtkError, match="not fp16"):
        toy_trainer(tmp_path / "b", "train.cuda_graphs=true", "train.precision=fp16")
    trainer = toy_trainer(tmp_path / "c")  # auto: a CPU has nothing to capture
    assert not trainer.graphed
    trainer.metrics.close()


def test_a_failed_capture_says_how_to_train_without_graphs(tmp_path: Path, monkeypatch) -> None:
    """A capture that fails (out of memory, an op a graph cannot hold) is one line naming the way out,
    not a traceback: with ``auto`` now on by default on a GPU, a run must not die in a graph's error."""
    import contextlib

    from helpers import toy_trainer

    monkeypatch.setenv("NMTK_GRAPHS_EAGER", "1")
    trainer = toy_trainer(tmp_path, "train.cuda_graphs=true")
    trainer.plan_micro_batches()
    graphs = trainer.step.graphs
    monkeypatch.setattr(torch.random, "fork_rng", lambda **_: contextlib.nullcontext())  # a CPU has no CUDA state
    for error, hint in ((torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB\nmore"),
                         r"CUDA out of memory\. Tried to allocate 2\.00 GiB\): train with fewer train.graph_shapes"),
                        (RuntimeError("CUDA error: operation not permitted when stream is capturing"),
                         r"stream is capturing\): train with --set train.cuda_graphs=false$")):
        def fails(shape: object, error: Exception = error) -> None:
            raise error

        monkeypatch.setattr(graphs, "_captured", fails)
        with pytest.raises(NmtkError, match=r"^capturing micro-batches as CUDA graphs failed \(.*" + hint):
            graphs._capture_all()
    trainer.metrics.close()


def test_auto_graphs_the_plans_small_batches_on_a_gpu_only() -> None:
    """``auto`` as measured on an H200 (docs/distributed.md): on for the plan's own batches up to 12,500
    tokens (the paper's update on 2 to 8 GPUs), off where nmtk re-cuts them into larger micro-batches,
    and never where a graph cannot run (a CPU, fp16, per-language outputs); ``true`` always."""
    from nmtk.train.graphs import AUTO_MOST_TOKENS, graphs_pay, use_graphs

    cuda, cpu = torch.device("cuda"), torch.device("cpu")
    assert use_graphs("auto", cuda, "bf16", 0) and use_graphs("auto", cuda, "fp32", 0)
    assert not use_graphs("auto", cpu, "fp32", 0)
    assert not use_graphs("auto", cuda, "fp16", 0) and not use_graphs("auto", cuda, "bf16", 3)
    assert not use_graphs(False, cuda, "bf16", 0)
    assert graphs_pay("auto", True, 3125) and graphs_pay("auto", True, AUTO_MOST_TOKENS)
    assert not graphs_pay("auto", True, AUTO_MOST_TOKENS + 1) and not graphs_pay("auto", False, 3125)
    assert graphs_pay(True, False, 25_000)


def _tensors_kept(model: torch.nn.Module) -> dict[tuple[str, str], int]:
    """Every module attribute that holds a tensor (itself, in a container, or in an object's fields) and
    is neither a parameter nor a buffer: (module, attribute) -> id of the value."""

    def holds(value: object, depth: int = 0) -> bool:
        if isinstance(value, torch.Tensor):
            return True
        if depth > 3:
            return False
        if isinstance(value, dict):
            return any(holds(v, depth + 1) for v in value.values())
        if isinstance(value, (list, tuple)):
            return any(holds(v, depth + 1) for v in value)
        return hasattr(value, "__dict__") and not isinstance(value, torch.nn.Module) and holds(vars(value), depth + 1)

    return {(name, key): id(value) for name, module in model.named_modules() for key, value in vars(module).items()
            if key not in ("_parameters", "_buffers", "_modules") and holds(value)}


@pytest.mark.parametrize("languages", [0, 2])
def test_the_training_forward_keeps_no_tensor_it_made(languages: int) -> None:
    """A captured graph's tensors live in its pool: one made inside the forward and kept on the model
    (a cache, a table) would be freed memory at the next replay. After a resume's load (buffers copied
    in place), a training forward and backward leave every kept tensor as it was."""
    from nmtk.model import ModelConfig, Transformer
    from nmtk.train.loss import projected_label_smoothed_loss

    cfg = ModelConfig(src_vocab=40, tgt_vocab=40, d_model=32, heads=4, d_ff=64, encoder_layers=1, decoder_layers=1,
                      dropout=0.0, output_languages=languages)
    model = Transformer(cfg)
    if languages:
        allowed = torch.ones(languages, 40, dtype=torch.bool)
        allowed[0, 20:] = False
        model.set_output_languages(torch.tensor([5, 6]), allowed)
    model.load_state_dict(model.state_dict())  # as `UpdateStep.load` does on a resume
    src = torch.tensor([[5, 9, 10, 3], [6, 11, 3, 0]])
    tgt_in, tgt_out = torch.tensor([[2, 8, 9], [2, 7, 0]]), torch.tensor([[8, 9, 3], [7, 3, 0]])
    before = _tensors_kept(model)
    model.train()
    loss, _ = model(src, tgt_in, head=lambda h, w, **kw: projected_label_smoothed_loss(h, w, tgt_out, 0.1, 0, **kw))
    loss.backward()
    assert _tensors_kept(model) == before
