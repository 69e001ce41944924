"""The TorchScript decoding step (`nmtk.model.script`) is the eager step, bit for bit, where it applies,
and stands aside where it does not."""

from __future__ import annotations

import copy
import threading

import pytest
import torch

from nmtk.errors import NmtkError
from nmtk.model import ModelConfig, Transformer
from nmtk.model.int8 import quantize_for_decoding
from nmtk.model.script import SWITCH_ENV, applies
from nmtk.vocab import PAD_ID as PAD


def tiny(norm: str = "post", activation: str = "relu", **kw: object) -> Transformer:
    cfg = ModelConfig(src_vocab=50, tgt_vocab=50, d_model=32, heads=4, d_ff=64, encoder_layers=2,
                      decoder_layers=2, dropout=0.0, norm=norm, activation=activation, **kw)
    torch.manual_seed(0)
    return Transformer(cfg).eval()


def eager(model: Transformer, monkeypatch: pytest.MonkeyPatch) -> Transformer:
    """A copy of ``model`` that decodes without TorchScript."""
    other = copy.deepcopy(model)
    monkeypatch.setenv(SWITCH_ENV, "0")
    with torch.inference_mode():
        other._scripted.module(other)  # built (as nothing) while the switch is off
    monkeypatch.delenv(SWITCH_ENV)
    return other


@torch.inference_mode()
def steps(model: Transformer, src: torch.Tensor, tgt: torch.Tensor, beams: int) -> list[torch.Tensor]:
    """Logits of every step, with ``beams`` rows per sentence and a reorder of the beams at every step
    (past 16 positions, so the buffers grow), and a sentence leaving the batch halfway."""
    cache = model.start_cache(model.encode(src))
    cache.expand(beams)
    rows, out = src.size(0) * beams, []
    for t in range(tgt.size(1)):
        out.append(model.decode_step(tgt[: rows // beams].repeat_interleave(beams, 0)[:, t], cache))
        flipped = torch.arange(rows).view(-1, beams).flip(1).reshape(-1)
        cache.reorder(flipped, memory=False)
        if t == tgt.size(1) // 2:
            rows -= beams
            cache.reorder(torch.arange(rows))
    return out


@pytest.mark.parametrize(("norm", "activation"), [("post", "relu"), ("pre", "swish"), ("pre", "gelu")])
@pytest.mark.parametrize("beams", [1, 3])
@pytest.mark.parametrize("int8", [False, True])
def test_the_scripted_step_is_the_eager_step(norm: str, activation: str, beams: int, int8: bool,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    model = tiny(norm, activation)
    if int8:
        quantize_for_decoding(model)
    reference = eager(model, monkeypatch)
    torch.manual_seed(1)
    src, tgt = torch.randint(4, 50, (3, 9)), torch.randint(4, 50, (3, 20))
    src[0, 5:] = PAD  # the source mask
    with torch.inference_mode():
        assert model._scripted.module(model) is not None and reference._scripted.module(reference) is None
    for ours, theirs in zip(steps(model, src, tgt, beams), steps(reference, src, tgt, beams), strict=True):
        assert torch.equal(ours, theirs)


def test_it_stands_aside_where_it_does_not_apply(monkeypatch: pytest.MonkeyPatch) -> None:
    model, token = tiny(), torch.tensor([4])
    with torch.inference_mode():
        assert applies(model, token)
        with model.watch_cross_attention(-1) as last:  # alignments read the eager step's weights
            assert not applies(model, token)
            cache = model.start_cache(model.encode(torch.tensor([[5, 6, 2]])))
            model.decode_step(token, cache)
            assert last().shape == (1, 1, 3)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            assert not applies(model, token)
    assert not applies(model, token)  # gradients on
    with torch.inference_mode():
        assert not applies(model.train(), token)


def test_a_product_or_activation_it_has_no_form_for_leaves_the_step_eager() -> None:
    model = tiny()
    model.decoder[0].ffn.activation = torch.tanh  # not one of nmtk's: never run as another
    with torch.inference_mode():
        assert model._scripted.module(model) is None
        cache = model.start_cache(model.encode(torch.tensor([[5, 6, 2]])))
        assert model.decode_step(torch.tensor([4]), cache).shape == (1, 50)


def test_the_switch_is_read_as_a_switch(monkeypatch: pytest.MonkeyPatch) -> None:
    model = tiny()
    monkeypatch.setenv(SWITCH_ENV, "off")
    with torch.inference_mode():
        assert model._scripted.module(model) is None
        model._scripted.reset()
        monkeypatch.setenv(SWITCH_ENV, "maybe")
        with pytest.raises(NmtkError, match="NMTK_TORCHSCRIPT='maybe' in the environment: 1 or 0"):
            model._scripted.module(model)


def test_it_is_built_again_when_the_model_changes() -> None:
    model = tiny()
    with torch.inference_mode():
        first = model._scripted.module(model)
        assert model._scripted.module(model) is first
        model.load_state_dict(tiny("post", "relu").state_dict())
        assert model._scripted.module(model) is not first  # (a state loaded with assign=True would replace the tensors)
        second = model._scripted.module(model)
        quantize_for_decoding(model)
        assert model._scripted.module(model) is not second
    assert "_scripted" not in dict(model.named_modules()) and not any("script" in k for k in model.state_dict())


def test_two_threads_share_one_script() -> None:
    model, built = tiny(), []
    src = torch.randint(4, 50, (2, 6))

    def search() -> None:
        with torch.inference_mode():
            built.append(model._scripted.module(model))
            cache = model.start_cache(model.encode(src))
            for t in range(5):
                model.decode_step(src[:, t], cache)

    threads = [threading.Thread(target=search) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(built) == 2 and built[0] is built[1] is not None
