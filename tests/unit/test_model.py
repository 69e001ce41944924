"""The Transformer core: shapes, masking, padding invariance, cache equivalence, weight tying."""

from __future__ import annotations

import math
import subprocess
import sys

import pytest
import torch

from nmtk.errors import NmtkError
from nmtk.model import ModelConfig, Transformer, onednn, parameter_count
from nmtk.model.attention import attention
from nmtk.model.transformer import sinusoidal_positions
from nmtk.vocab import PAD_ID as PAD


def tiny(share: str = "all", norm: str = "post", **kw) -> Transformer:
    cfg = ModelConfig(src_vocab=50, tgt_vocab=50 if share == "all" else 60, d_model=32, heads=4, d_ff=64,
                      encoder_layers=2, decoder_layers=2, dropout=0.0, share_embeddings=share, norm=norm, **kw)
    torch.manual_seed(0)
    return Transformer(cfg).eval()


def tokens(*shape: int, vocab: int = 50) -> torch.Tensor:
    return torch.randint(4, vocab, shape)


@pytest.mark.parametrize("share", ["all", "decoder", "none"])
@pytest.mark.parametrize("norm", ["post", "pre"])
def test_output_shapes(share: str, norm: str) -> None:
    model = tiny(share, norm)
    logits = model(tokens(3, 7), tokens(3, 5))
    assert logits.shape == (3, 5, model.cfg.tgt_vocab)
    memory = model.encode(tokens(3, 7)).memory
    assert memory.shape == (3, 7, 32)


def test_weight_tying_and_parameter_count() -> None:
    all_, dec, none = tiny("all"), tiny("decoder"), tiny("none")
    assert all_.src_embed.table is all_.tgt_embed.table
    assert dec.src_embed.table is not dec.tgt_embed.table and dec.output is None
    emb = 32
    assert parameter_count(dec) - parameter_count(all_) == 60 * emb
    assert parameter_count(none) - parameter_count(dec) == 60 * emb
    for model in (all_, dec, none):
        assert parameter_count(model.cfg) == parameter_count(model)


@pytest.mark.parametrize("share", ["all", "decoder", "none"])
def test_an_empty_model_with_a_state_loaded_is_that_model(share: str) -> None:
    """`Transformer.empty` skips initialization for loading: once a state is loaded, every buffer (the
    unsaved sinusoid tables too) and every output equal the model's, and tied tables stay one."""
    model = tiny(share)
    empty = Transformer.empty(model.cfg, torch.device("cpu"))
    empty.load_state_dict(model.state_dict())
    empty.eval()
    buffers = dict(empty.named_buffers())
    assert buffers.keys() == dict(model.named_buffers()).keys()
    assert all(torch.equal(buffers[name], b) for name, b in model.named_buffers())
    assert (empty.src_embed.table is empty.tgt_embed.table) == (share == "all")
    src, tgt = tokens(3, 7), tokens(3, 5)
    assert torch.equal(empty(src, tgt), model(src, tgt))


def test_counting_parameters_computes_nothing() -> None:
    """A model built on the meta device for its shapes draws no weights and computes no sinusoids:
    torch's meta kernels for those import its compiler, 1.2 s of every `nmtk recipe show`."""
    code = ("import sys, torch; from nmtk.model import ModelConfig, parameter_count; "
            "before = 'torch._dynamo' in sys.modules; "
            "cfg = ModelConfig(src_vocab=50, tgt_vocab=60, d_model=32, heads=4, d_ff=64, encoder_layers=1, "
            "decoder_layers=1, share_embeddings='none'); "
            "print(parameter_count(cfg), before, 'torch._dynamo' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    count, before, after = done.stdout.split()
    if before == "True":
        pytest.skip("this torch imports its compiler on import")
    assert int(count) > 0 and after == "False"


def test_positional_encoding_matches_paper_formula() -> None:
    pe = sinusoidal_positions(50, 16)
    pos, i = 7, 3
    angle = torch.tensor(pos / 10000 ** (2 * i / 16))
    assert pe[pos, 2 * i].item() == pytest.approx(torch.sin(angle).item(), abs=1e-6)
    assert pe[pos, 2 * i + 1].item() == pytest.approx(torch.cos(angle).item(), abs=1e-6)


@pytest.mark.parametrize("norm", ["post", "pre"])
def test_decoder_is_causal(norm: str) -> None:
    """Changing a later target token leaves earlier decoder outputs unchanged."""
    model = tiny(norm=norm)
    src, tgt = tokens(2, 6), tokens(2, 8)
    changed = tgt.clone()
    changed[:, 5] = (changed[:, 5] + 1 - 4) % 46 + 4
    a, b = model(src, tgt), model(src, changed)
    torch.testing.assert_close(a[:, :5], b[:, :5], atol=1e-6, rtol=0)
    assert not torch.allclose(a[:, 5:], b[:, 5:])


@pytest.mark.parametrize("norm", ["post", "pre"])
def test_padding_invariance(norm: str) -> None:
    """Padding the source and target leaves outputs at real positions unchanged."""
    model = tiny(norm=norm)
    src, tgt = tokens(1, 6), tokens(1, 4)
    pad_src = torch.cat([src, torch.full((1, 5), PAD)], dim=1)
    pad_tgt = torch.cat([tgt, torch.full((1, 3), PAD)], dim=1)
    torch.testing.assert_close(model(pad_src, pad_tgt)[:, :4], model(src, tgt), atol=1e-5, rtol=0)
    # In a batch with a longer neighbour the short sentence is padded; its outputs must not change.
    other_src, other_tgt = tokens(1, 11), tokens(1, 7)
    batch = model(torch.cat([pad_src, other_src]), torch.cat([pad_tgt, other_tgt]))
    torch.testing.assert_close(batch[:1, :4], model(src, tgt), atol=1e-5, rtol=0)


@pytest.mark.parametrize("share", ["all", "none"])
@pytest.mark.parametrize("norm", ["post", "pre"])
def test_incremental_decoding_equals_full_forward(share: str, norm: str) -> None:
    model = tiny(share, norm)
    src = tokens(3, 9)
    src[0, 6:] = PAD  # a padded source row exercises the memory mask in the cache
    tgt = tokens(3, 7, vocab=model.cfg.tgt_vocab)
    full = torch.log_softmax(model(src, tgt), dim=-1)
    cache = model.start_cache(model.encode(src))
    steps = [torch.log_softmax(model.decode_step(tgt[:, t], cache), dim=-1) for t in range(tgt.size(1))]
    torch.testing.assert_close(torch.stack(steps, dim=1), full, atol=1e-5, rtol=0)


@pytest.mark.parametrize("gemm", ["mkl", "onednn"])
@pytest.mark.parametrize(("share", "bias"), [("all", False), ("none", True)])
def test_decoding_projection_follows_the_weights(share: str, bias: bool, gemm: str,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """Without autograd on a CPU, `project` multiplies by its own (d, V) copy of the matrix (or, where
    oneDNN is preferred, a copy packed for it, its rows padded: 12 here): it must equal the plain
    projection, and follow in-place updates (optimizer steps between validations, a loaded state) and a
    replaced weight."""
    if gemm == "onednn" and not hasattr(torch.ops.mkldnn, "_reorder_linear_weight"):
        pytest.skip("this torch has no oneDNN packed product")
    monkeypatch.setattr(onednn, "preferred", lambda: gemm == "onednn")
    model = tiny(share, output_bias=bias)
    weight, h = model.output_weight, torch.randn(3, 4, 32)

    def plain() -> torch.Tensor:
        return torch.nn.functional.linear(h, model.output_weight, model.output_bias)

    with torch.inference_mode():
        torch.testing.assert_close(model.project(h), plain(), atol=1e-6, rtol=0)
    with torch.no_grad():
        weight.mul_(2.0)  # as an optimizer step does
        torch.testing.assert_close(model.project(h), plain(), atol=1e-6, rtol=0)
    other = tiny(share, output_bias=bias)
    with torch.no_grad():
        other.output_weight.normal_()
    model.load_state_dict(other.state_dict())
    with torch.inference_mode():
        torch.testing.assert_close(model.project(h), plain(), atol=1e-6, rtol=0)
    model.to(torch.float64)  # a replaced weight (new storage, new dtype)
    h = h.double()
    with torch.inference_mode():
        torch.testing.assert_close(model.project(h), plain(), atol=1e-9, rtol=0)
    with torch.enable_grad():  # training: autograd through the weight itself
        model.project(h).sum().backward()
    assert model.output_weight.grad is not None
    assert model._projection._columns is None  # the plain path lets the copy go (no stale matrix kept)
    with torch.inference_mode():
        model.project(h)
    assert model._projection._columns is not None
    model.train()  # training mode frees it too: the optimizer steps would make it stale
    assert model._projection._columns is None


def test_the_cpu_gemm_is_chosen_by_vendor_unless_the_environment_says(monkeypatch: pytest.MonkeyPatch) -> None:
    """oneDNN's packed projection on AVX-512 and AVX2 CPUs not Intel's, MKL on Intel's and on older ones;
    ``NMTK_CPU_GEMM`` overrides, and a value it does not know is a one-line error naming it."""
    if not hasattr(torch.ops.mkldnn, "_reorder_linear_weight"):
        pytest.skip("this torch has no oneDNN packed product")
    avx512, avx2 = {"avx2", "avx512f"}, {"avx2"}
    for vendor, flags, env, expected in [("AuthenticAMD", avx512, "", True), ("AuthenticAMD", avx2, "", True),
                                         ("AuthenticAMD", {"sse4_2", "avx"}, "", False),
                                         ("GenuineIntel", avx2, "", False),
                                         ("GenuineIntel", avx512, "", False), ("", set(), "", False),
                                         ("GenuineIntel", avx512, "onednn", True),
                                         ("AuthenticAMD", avx512, "MKL", False)]:
        onednn.preferred.cache_clear()
        monkeypatch.setattr(onednn, "cpu", lambda v=vendor, f=flags: (v, frozenset(f)))
        monkeypatch.setenv(onednn.CHOICE_ENV, env)
        assert onednn.preferred() is expected, (vendor, flags, env)
    onednn.preferred.cache_clear()
    monkeypatch.setenv(onednn.CHOICE_ENV, "blas")
    with pytest.raises(NmtkError, match="NMTK_CPU_GEMM='blas'"):
        onednn.preferred()
    onednn.preferred.cache_clear()


@pytest.mark.parametrize("capacity", [32, 2])
def test_cache_reorder_selects_rows(capacity: int) -> None:
    """Reordering the cache mid-sequence equals decoding the selected rows from the start; with a
    capacity of 2 positions the buffers grow twice, around the reorders (the spare must follow)."""
    model = tiny()
    src, tgt = tokens(3, 5), tokens(3, 7)
    src[2, 3:] = PAD
    cache = model.start_cache(model.encode(src))
    for layer in cache.layers:
        layer.capacity = capacity
    for t in range(3):
        model.decode_step(tgt[:, t], cache)
    index = torch.tensor([2, 0, 2])
    cache.reorder(index)
    out = [model.decode_step(tgt[index, t], cache) for t in range(3, 5)]
    again = torch.tensor([1, 1, 0])
    cache.reorder(again)
    index = index[again]
    out = torch.stack([o[again] for o in out] + [model.decode_step(tgt[index, t], cache) for t in range(5, 7)], dim=1)
    expected = model(src[index], tgt[index])[:, 3:]
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=0)


def test_dropout_only_in_training() -> None:
    cfg = ModelConfig(src_vocab=50, tgt_vocab=50, d_model=32, heads=4, d_ff=64, encoder_layers=1,
                      decoder_layers=1, dropout=0.3, attention_dropout=0.1, relu_dropout=0.1)
    model = Transformer(cfg)
    src, tgt = tokens(2, 5), tokens(2, 5)
    model.train()
    assert not torch.equal(model(src, tgt), model(src, tgt))
    model.eval()
    assert torch.equal(model(src, tgt), model(src, tgt))


def test_config_checks() -> None:
    with pytest.raises(ValueError, match="divisible"):
        ModelConfig(src_vocab=10, tgt_vocab=10, d_model=30, heads=4)
    with pytest.raises(ValueError, match="one vocabulary"):
        ModelConfig(src_vocab=10, tgt_vocab=12)


def test_too_long_sequence_is_a_clear_error() -> None:
    model = tiny(max_positions=8)
    with pytest.raises(ValueError, match="max_positions=8"):
        model(tokens(1, 9), tokens(1, 3))


def reference_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None,
                        causal: bool) -> torch.Tensor:
    """Equation (1) of the paper, transcribed: softmax(Q Kᵀ / √d_k) V, masked positions at -∞."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    if causal:
        scores = scores.masked_fill(torch.ones(q.size(-2), k.size(-2), dtype=torch.bool).triu(1), float("-inf"))
    return scores.softmax(dim=-1) @ v


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("padded", [False, True])
@pytest.mark.parametrize("grad", [True, False], ids=["sdpa", "inference"])
def test_attention_is_the_papers_formula(causal: bool, padded: bool, grad: bool) -> None:
    """Both paths: SDPA (training) and the plain ops decoding on a CPU takes (no gradient)."""
    torch.manual_seed(0)
    q, k, v = (torch.randn(3, 4, 7, 8) for _ in range(3))  # (batch, heads, positions, d_k)
    mask = None
    if padded:  # rows with 7, 5 and 2 real keys, as Transformer.source_mask builds them
        mask = (torch.arange(7)[None, :] < torch.tensor([7, 5, 2])[:, None])[:, None, None, :]
    with torch.set_grad_enabled(grad):
        got = attention(q, k, v, mask, causal)
    torch.testing.assert_close(got, reference_attention(q, k, v, mask, causal), atol=1e-5, rtol=1e-5)


def test_attention_on_a_gpu_leaves_cudnn_out() -> None:
    """On CUDA, SDPA may not pick cuDNN's kernel (PyTorch's first pick on an H100): it builds a plan
    for every new shape, ~100 ms each (benchmarks/sdpa.py). The choice holds inside the call only."""
    from types import SimpleNamespace

    from nmtk.model.attention import _kernels

    flags = torch.backends.cuda
    with _kernels(SimpleNamespace(device=torch.device("cuda"))):  # the flags are the same on a CPU build
        assert not flags.cudnn_sdp_enabled()
        assert flags.flash_sdp_enabled() and flags.mem_efficient_sdp_enabled() and flags.math_sdp_enabled()
    assert flags.cudnn_sdp_enabled()


def test_kept_attention_weights_are_per_thread() -> None:
    """One thread keeps weights (an alignment) while another runs plain forwards (a search), as the
    server's two decoding threads do: each gets its own results, never the other's."""
    import threading

    torch.manual_seed(0)
    model = tiny().eval()
    src_a, tgt_a, src_b, tgt_b = tokens(2, 7), tokens(2, 5), tokens(3, 9), tokens(3, 4)
    with torch.no_grad():
        with model.attention_weights() as alone:
            model(src_a, tgt_a)
        out_b = model(src_b, tgt_b)
    failures: list[str] = []

    def keeper() -> None:
        for _ in range(30):
            with torch.no_grad(), model.attention_weights() as kept:
                model(src_a, tgt_a)
            if not all(torch.equal(w, r) for w, r in zip(kept["cross"], alone["cross"], strict=True)):
                failures.append("kept weights changed")

    def searcher() -> None:
        for _ in range(30):
            with torch.no_grad():
                if not torch.allclose(model(src_b, tgt_b), out_b, atol=1e-6):
                    failures.append("plain forward changed")

    threads = [threading.Thread(target=keeper), threading.Thread(target=searcher)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []
    assert all(m.keep_weights == 0 for m in model.modules() if hasattr(m, "keep_weights"))
