"""`auto` precision on a CPU: bf16 only where this CPU is measured faster in it (nmtk.bf16_probe), cached;
and the test-only switch that makes one machine run the suite as a host of the other kind would."""

from __future__ import annotations

import json

import pytest
import torch


@pytest.fixture
def cpu_auto(monkeypatch, tmp_path):
    """`auto` on a CPU as a user has it: no test switch, a cache folder of the test's own, bf16 hardware."""
    import nmtk.device

    monkeypatch.delenv("NMTK_TEST_AUTO_PRECISION", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(nmtk.device, "cpu_has_bf16_hardware", lambda: True)
    return tmp_path / "nmtk" / "precision.json"


def timed(monkeypatch, fp32_s: float, bf16_s: float) -> list:
    """Make the products probe 'measure' these times; returns the shapes it was asked to measure."""
    import nmtk.bf16_probe

    calls = []

    def fake(shapes):
        calls.append(shapes)
        return nmtk.bf16_probe.Measured(fp32_s, bf16_s)

    monkeypatch.setattr(nmtk.bf16_probe, "measure", fake)
    return calls


@pytest.mark.parametrize(("fp32_s", "bf16_s", "expected"), [(2.0, 1.0, "bf16"), (1.0, 1.6, "fp32"),
                                                            (1.1, 1.0, "fp32")])  # 1.1x: a tie goes to fp32
def test_auto_on_a_bf16_cpu_follows_the_measurement(cpu_auto, monkeypatch, fp32_s, bf16_s, expected) -> None:
    import torch

    from nmtk.bf16_probe import Shapes
    from nmtk.device import resolve_precision

    calls = timed(monkeypatch, fp32_s, bf16_s)
    shapes = Shapes(256, 1024, 8000)
    precision, why = resolve_precision("auto", torch.device("cpu"), shapes, "decode")
    assert precision == expected and f"{fp32_s / bf16_s:.2f}x" in why and "measured now" in why, why
    again, why = resolve_precision("auto", torch.device("cpu"), shapes, "decode")  # the cache answers
    assert again == expected and "cached" in why and calls == [shapes]
    resolve_precision("auto", torch.device("cpu"), shapes, "train")  # training measures for itself
    assert calls == [shapes, shapes]
    assert len(json.loads(cpu_auto.read_text())) == 2


def test_a_broken_cache_is_ignored_and_rewritten_and_threads_are_part_of_the_key(cpu_auto, monkeypatch) -> None:
    import torch

    from nmtk.bf16_probe import Shapes
    from nmtk.device import resolve_precision

    cpu_auto.parent.mkdir(parents=True)
    calls = timed(monkeypatch, 2.0, 1.0)
    for broken in ("{not json", "[1, 2]", '{"x": {"fp32_s": "fast"}}'):
        cpu_auto.write_text(broken)
        assert resolve_precision("auto", torch.device("cpu"), Shapes(64, 128, 100))[0] == "bf16"
    assert len(calls) == 3 and "fp32_s" in cpu_auto.read_text()
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1 if threads > 1 else 2)
        resolve_precision("auto", torch.device("cpu"), Shapes(64, 128, 100))
    finally:
        torch.set_num_threads(threads)
    assert len(calls) == 4


def test_no_bf16_hardware_means_fp32_without_measuring(cpu_auto, monkeypatch) -> None:
    import torch

    import nmtk.device
    from nmtk.device import resolve_precision

    monkeypatch.setattr(nmtk.device, "cpu_has_bf16_hardware", lambda: False)
    calls = timed(monkeypatch, 2.0, 1.0)
    precision, why = resolve_precision("auto", torch.device("cpu"))
    assert precision == "fp32" and "no bf16 hardware" in why and calls == [] and not cpu_auto.exists()


@pytest.mark.parametrize("forced", ["fp32", "bf16"])
def test_the_test_switch_forces_auto_both_ways(cpu_auto, monkeypatch, forced) -> None:
    import torch

    from nmtk.device import resolve_precision

    calls = timed(monkeypatch, 1.0, 1.0 if forced == "bf16" else 0.1)  # the measurement would say otherwise
    monkeypatch.setenv("NMTK_TEST_AUTO_PRECISION", forced)
    precision, why = resolve_precision("auto", torch.device("cpu"))
    assert precision == forced and "NMTK_TEST_AUTO_PRECISION" in why and calls == []
    assert resolve_precision("fp32", torch.device("cpu"))[0] == "fp32"  # an explicit choice stays the user's
    monkeypatch.setenv("NMTK_TEST_AUTO_PRECISION", "fp16")
    with pytest.raises(Exception, match="fp32 or bf16"):
        resolve_precision("auto", torch.device("cpu"))


def test_the_real_probe_answers_for_both_purposes(cpu_auto) -> None:
    """The real measurement (no timing asserted: speed goals live in benchmarks/): positive times, and
    an answer the cache then gives back."""
    from nmtk.bf16_probe import Shapes, bf16_speed

    for purpose in ("train", "decode"):
        measured, cached = bf16_speed(Shapes(64, 256, 1000, rows=256), purpose)
        assert measured.fp32_s > 0 and measured.bf16_s > 0 and not cached
        assert bf16_speed(Shapes(64, 256, 1000, rows=256), purpose) == (measured, True)


def test_decoding_times_the_models_own_steps_when_given(cpu_auto, monkeypatch) -> None:
    """Products alone said bf16 decoded 1.62x faster on an AMD EPYC where the demo model decoded at the
    same speed in both: the decoder's workload, when given, is what is timed (and cached apart)."""
    import torch

    import nmtk.bf16_probe
    from nmtk.bf16_probe import Measured, Shapes
    from nmtk.device import resolve_precision

    products = timed(monkeypatch, 1.0, 0.5)  # what the products would say: bf16 twice as fast
    timed_workloads = []

    def fake_fastest(workload):
        timed_workloads.append(workload)
        return Measured(1.0, 0.99)

    monkeypatch.setattr(nmtk.bf16_probe, "fastest", fake_fastest)
    steps = object()
    precision, why = resolve_precision("auto", torch.device("cpu"), Shapes(256, 512, 8000), "decode", workload=steps)
    assert precision == "fp32" and "decoding steps" in why and timed_workloads == [steps] and products == []


def test_the_step_probe_runs_a_model_in_both_precisions() -> None:
    import torch

    from nmtk.bf16_probe import fastest
    from nmtk.decode.search.batches import step_probe
    from nmtk.model import ModelConfig, Transformer

    torch.manual_seed(0)
    model = Transformer(ModelConfig(src_vocab=40, tgt_vocab=40, d_model=32, heads=4, d_ff=64, encoder_layers=1,
                                    decoder_layers=1, dropout=0.0))
    measured = fastest(step_probe(model, torch.device("cpu")))
    assert measured.fp32_s > 0 and measured.bf16_s > 0 and model.training  # the model's mode is given back


def test_decoding_asks_more_of_bf16_than_training(cpu_auto, monkeypatch) -> None:
    """1.3x: enough for training (bar 1.15), not for decoding (bar 1.5: its probe overstates the search)."""
    import torch

    from nmtk.bf16_probe import Shapes
    from nmtk.device import resolve_precision

    timed(monkeypatch, 1.3, 1.0)
    cpu = torch.device("cpu")
    assert resolve_precision("auto", cpu, Shapes(256, 512, 8000), "train")[0] == "bf16"
    precision, why = resolve_precision("auto", cpu, Shapes(256, 512, 8000), "decode")
    assert precision == "fp32" and "bf16 needs 1.50x" in why


def test_an_explicit_bf16_where_it_is_emulated_is_warned_about(monkeypatch) -> None:
    """`nmtk recipe validate`'s warning: a CPU without AVX-512 BF16/AMX (or a GPU before Ampere) emulates
    bf16; the shipped recipes say "auto" instead."""
    from pathlib import Path

    import torch

    import nmtk.device as device_module
    from nmtk.device import explicit_bf16_warning
    from nmtk.recipe import load_recipe

    recipes = Path(__file__).resolve().parents[2] / "recipes"
    cpu = torch.device("cpu")
    monkeypatch.setattr(device_module, "cpu_has_bf16_hardware", lambda: False)
    assert "emulates bf16" in explicit_bf16_warning("bf16", cpu) and "here: fp32" in explicit_bf16_warning("bf16", cpu)
    assert explicit_bf16_warning("auto", cpu) is None and explicit_bf16_warning("fp32", cpu) is None
    monkeypatch.setattr(device_module, "cpu_has_bf16_hardware", lambda: True)
    assert explicit_bf16_warning("bf16", cpu) is None
    for name in ("wmt14-en-de-base", "wmt14-en-de-big", "wmt14-en-fr-big", "multi30k-en-de"):
        assert load_recipe(recipes / f"{name}.toml").train.precision == "auto", name


def test_int8_is_a_cpu_decoding_precision() -> None:
    """`--precision int8` decodes on a CPU; training in it, or decoding on a GPU, is one line."""
    from nmtk.device import resolve_precision
    from nmtk.errors import NmtkError
    from nmtk.precision import Precision

    assert resolve_precision("int8", torch.device("cpu"), purpose="decode") == (Precision.int8, "asked for")
    with pytest.raises(NmtkError, match="train in fp32, bf16 or fp16"):
        resolve_precision("int8", torch.device("cpu"), purpose="train")
    with pytest.raises(NmtkError, match="use bf16 on a GPU, or an int8 CTranslate2 export"):
        resolve_precision("int8", torch.device("cuda"), purpose="decode")


def test_an_int8_model_decodes_as_its_fp32_self_within_quantisation_error() -> None:
    """Every linear layer of the encoder and decoder and the output projection in int8: a decoding step's
    logits within a few percent of fp32's, on the whole vocabulary and on a shortlist's columns."""
    from nmtk.model import ModelConfig, Transformer
    from nmtk.model.int8 import Int8Linear, quantize_for_decoding

    torch.manual_seed(0)
    model = Transformer(ModelConfig(src_vocab=60, tgt_vocab=60, d_model=64, heads=4, d_ff=128, encoder_layers=2,
                                    decoder_layers=2, dropout=0.0)).eval()
    src = torch.randint(4, 60, (5, 9))
    ids = torch.tensor([0, 1, 2, 3, 7, 11, 30, 59])

    def steps() -> tuple[torch.Tensor, torch.Tensor]:
        with torch.inference_mode():
            full = model.decode_step(torch.full((5,), 1), model.start_cache(model.encode(src)))
            model.restrict_output(ids)
            short = model.decode_step(torch.full((5,), 1), model.start_cache(model.encode(src)))
            model.restrict_output(None)
        return full, short

    full, short = steps()
    quantize_for_decoding(model)
    assert isinstance(model.decoder[0].self_attn.qkv, Int8Linear) and isinstance(model.encoder[1].self_attn.out,
                                                                                     Int8Linear)
    assert model._projection._int8 is not None  # on every CPU, 7-bit inputs (AVX2) or 8-bit (VNNI)
    full8, short8 = steps()
    for a, b in ((full, full8), (short, short8)):
        assert a.shape == b.shape
        assert float((a - b).abs().max()) <= 0.05 * float(a.abs().max())
    torch.testing.assert_close(short8, full8[:, ids], rtol=0, atol=1e-5)  # the same int8 rows either way
