"""Which `scaled_dot_product_attention` kernel runs for nmtk's attention calls, and what each costs.

The first GPU run (docs/distributed.md) found 5 ms of host time per SDPA call in the eager base model.
This measures the three calls a training step makes, shaped as the GPU's token-bucket batches shape
them (lengths padded to multiples of 8, ~3,125 tokens a batch, a different length every call):

- ``encoder``: self-attention over the source with its (B, 1, 1, S) padding mask;
- ``decoder``: causal self-attention, no mask (what `DecoderLayer` passes);
- ``cross``: target queries over the source with the padding mask.

For each kernel (PyTorch's own choice, then each backend forced), forward + backward in the model's
precision: host milliseconds per call (the clock read without waiting for the device, what the
training thread pays), device milliseconds per call (CUDA events), both as medians over the calls
of a first pass (each shape new to the kernel) and of a second pass (each shape seen before); and
which backend PyTorch picks. Then the whole eager base model, forward + backward, under each choice:
target tokens/s over all shapes, and the share of that time the host took to queue the work (near
100 %: the host, not the GPU, sets the pace). One JSON line.

Usage: python benchmarks/sdpa.py [--device cuda] [--heads 8 --d-model 512] [--tokens 3125]
On a CPU it runs the same measurements small (a check that the script works, not a figure).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
import warnings
from collections.abc import Callable
from contextlib import nullcontext

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from nmtk.model.attention import CUDA_KERNELS, attention

LENGTHS = (16, 24, 32, 40, 48, 64, 80, 96, 128)
BACKENDS = {"pytorch": None, "flash": [SDPBackend.FLASH_ATTENTION], "efficient": [SDPBackend.EFFICIENT_ATTENTION],
            "cudnn": [SDPBackend.CUDNN_ATTENTION], "math": [SDPBackend.MATH]}


def batch_shapes(tokens: int, lengths: tuple[int, ...]) -> list[tuple[int, int, int]]:
    """(B, S, T) per length: B sentences of source length S and target length ~1.05·S, ~``tokens``."""
    return [(max(1, tokens // s), s, (s * 21 // 20 + 7) // 8 * 8) for s in lengths]


def padding_mask(b: int, s: int, device: torch.device) -> torch.Tensor:
    """(B, 1, 1, S), True at real tokens: every sentence a few tokens shorter than the padded length."""
    lengths = s - torch.randint(0, 8, (b,), device=device)
    return (torch.arange(s, device=device)[None, :] < lengths[:, None])[:, None, None, :]


def call_inputs(kind: str, b: int, s: int, t: int, heads: int, d_head: int, dtype: torch.dtype,
                device: torch.device) -> tuple[list[torch.Tensor], dict]:
    """q, k, v (requiring grad) and SDPA's keyword arguments for one of the three calls."""
    tq, tk = {"encoder": (s, s), "decoder": (t, t), "cross": (t, s)}[kind]

    def make(n: int) -> torch.Tensor:  # as `_Heads.split` makes them: (B, T, heads, d) permuted
        return torch.randn(b, n, heads, d_head, device=device, dtype=dtype).transpose(1, 2).requires_grad_()

    q, k, v = make(tq), make(tk), make(tk)
    kwargs = {"is_causal": True} if kind == "decoder" else {"attn_mask": padding_mask(b, s, device)}
    return [q, k, v], kwargs


def chosen(qkv: list[torch.Tensor], kwargs: dict) -> str:
    """The backend PyTorch's dispatcher picks for these inputs."""
    try:
        index = torch._fused_sdp_choice(*qkv, kwargs.get("attn_mask"), 0.0, kwargs.get("is_causal", False))
        return SDPBackend(index).name.lower()
    except (AttributeError, RuntimeError, ValueError):
        return "unknown"


def time_calls(run: Callable[[int], None], calls: int, device: torch.device) -> tuple[float, float | None]:
    """Median host and device milliseconds of ``run(i)`` over ``calls`` calls."""
    host: list[float] = []
    dev: list[float] = []
    for i in range(calls):
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
        t0 = time.perf_counter()
        run(i)
        host.append(1000 * (time.perf_counter() - t0))
        if device.type == "cuda":
            end.record()
            end.synchronize()
            dev.append(start.elapsed_time(end))
    return statistics.median(host), statistics.median(dev) if dev else None


def rounded(ms: float | None) -> float | None:
    return None if ms is None else round(ms, 3)


def why_not(call: tuple[list[torch.Tensor], dict], backends: list[SDPBackend] | None) -> str:
    """The reason PyTorch gives (as warnings) for not running ``backends`` on this call."""
    qkv, kwargs = call
    with warnings.catch_warnings(record=True) as caught, sdpa_kernel(backends):
        warnings.simplefilter("always")
        try:
            F.scaled_dot_product_attention(*qkv, **kwargs)
        except RuntimeError as error:
            reasons = [str(w.message).splitlines()[0] for w in caught] or [str(error).splitlines()[0]]
            return " | ".join(reasons)[:300]
    return "failed once, ran when asked again"


def measure_calls(args: argparse.Namespace, device: torch.device, dtype: torch.dtype) -> dict:
    shapes = batch_shapes(args.tokens, args.lengths)
    d_head = args.d_model // args.heads
    report: dict[str, dict] = {}
    for kind in ("encoder", "decoder", "cross"):
        inputs = [call_inputs(kind, b, s, t, args.heads, d_head, dtype, device) for b, s, t in shapes]
        row: dict[str, object] = {"picked": sorted({chosen(qkv, kw) for qkv, kw in inputs})}
        with sdpa_kernel(CUDA_KERNELS):
            row["picked_by_nmtk"] = sorted({chosen(qkv, kw) for qkv, kw in inputs})

        def ours(i: int, inputs=inputs) -> None:  # nmtk's own call: its kernel choice, its mask handling
            qkv, kwargs = inputs[i % len(inputs)]
            out = attention(*qkv, kwargs.get("attn_mask"), kwargs.get("is_causal", False))
            out.backward(torch.ones_like(out))

        first, again = time_calls(ours, len(inputs), device), time_calls(ours, len(inputs) * args.rounds, device)
        row["nmtk"] = {"host_ms_first": rounded(first[0]), "device_ms_first": rounded(first[1]),
                       "host_ms": rounded(again[0]), "device_ms": rounded(again[1])}
        for name, backends in BACKENDS.items():
            def run(i: int, backends=backends, inputs=inputs) -> None:
                qkv, kwargs = inputs[i % len(inputs)]
                with sdpa_kernel(backends) if backends else nullcontext():
                    out = F.scaled_dot_product_attention(*qkv, **kwargs)
                out.backward(torch.ones_like(out))
            try:
                first = time_calls(run, len(inputs), device)
                again = time_calls(run, len(inputs) * args.rounds, device)
            except RuntimeError:
                row[name] = f"unsupported: {why_not(inputs[0], backends)}"
                continue
            row[name] = {"host_ms_first": rounded(first[0]), "device_ms_first": rounded(first[1]),
                         "host_ms": rounded(again[0]), "device_ms": rounded(again[1])}
        report[kind] = row
    return report


def forward_backward(model: torch.nn.Module, src: torch.Tensor, tgt: torch.Tensor, dtype: torch.dtype) -> None:
    """One teacher-forced forward + backward of ``model`` (the loss over full logits; autocast to
    ``dtype`` unless fp32), its gradients then dropped: the unit both GPU model benchmarks time."""
    autocast = torch.autocast(src.device.type, dtype=dtype) if dtype != torch.float32 else nullcontext()
    with autocast:
        logits = model(src, tgt[:, :-1], src_padded=True)
        loss = F.cross_entropy(logits.float().flatten(0, 1), tgt[:, 1:].flatten(), ignore_index=0)
    loss.backward()
    model.zero_grad(set_to_none=True)


def measure_model(args: argparse.Namespace, device: torch.device, dtype: torch.dtype) -> dict:
    """The eager model, forward + backward (loss over full logits), under each kernel choice."""
    import nmtk.model.attention as nmtk_attention
    from nmtk.model.config import ModelConfig
    from nmtk.model.transformer import Transformer

    cfg = ModelConfig(src_vocab=args.vocab, tgt_vocab=args.vocab, d_model=args.d_model, heads=args.heads,
                      d_ff=4 * args.d_model, encoder_layers=args.layers, decoder_layers=args.layers)
    model = Transformer(cfg).to(device).train()
    batches = []  # twice the calls' batch size: shapes no kernel has seen in `measure_calls`
    for b, s, t in batch_shapes(2 * args.tokens, args.lengths):
        src = torch.randint(4, args.vocab, (b, s), device=device)
        src.masked_fill_(~padding_mask(b, s, device)[:, 0, 0], 0)
        tgt = torch.randint(4, args.vocab, (b, t + 1), device=device)
        batches.append((src, tgt))
    target_tokens = sum(tgt[:, 1:].numel() for _, tgt in batches)
    report = {}
    kernels = {"nmtk": list(nmtk_attention.CUDA_KERNELS),
               "pytorch": [b for name in ("flash", "efficient", "cudnn", "math") for b in BACKENDS[name]],
               **{name: [*BACKENDS[name], SDPBackend.FLASH_ATTENTION] for name in ("efficient", "cudnn", "math")}}
    for name, choice in kernels.items():  # flash stays for the causal call
        if name == "nmtk":  # the device's first use (cuBLAS, allocator) out of every row's first pass
            forward_backward(model, *batches[0], dtype)
        nmtk_attention.CUDA_KERNELS = choice  # what `attention` allows on a GPU, for this row
        try:
            first = time.perf_counter()
            for src, tgt in batches:  # every shape once: what a kernel pays for shapes it has not seen
                forward_backward(model, src, tgt, dtype)
            if device.type == "cuda":
                torch.cuda.synchronize()
            first = time.perf_counter() - first
            times, queued = [], []
            for _ in range(args.rounds):
                if device.type == "cuda":
                    torch.cuda.synchronize()
                t0 = time.perf_counter()
                for src, tgt in batches:
                    forward_backward(model, src, tgt, dtype)
                queued.append(time.perf_counter() - t0)
                if device.type == "cuda":
                    torch.cuda.synchronize()
                times.append(time.perf_counter() - t0)
        except RuntimeError as error:
            report[name] = f"unsupported: {str(error).splitlines()[0][:120]}"
            continue
        report[name] = {"target_tokens_per_s": round(target_tokens / statistics.median(times)),
                        "first_pass_s": round(first, 3),
                        "host_share_pct": round(100 * statistics.median(queued) / statistics.median(times), 1)}
    nmtk_attention.CUDA_KERNELS = kernels["nmtk"]
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--d-model", type=int, default=512)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--layers", type=int, default=6)
    parser.add_argument("--vocab", type=int, default=37_000)
    parser.add_argument("--tokens", type=int, default=3125)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--lengths", type=lambda s: tuple(int(x) for x in s.split(",")), default=LENGTHS)
    args = parser.parse_args()
    device = torch.device(args.device)
    if device.type == "cpu":  # a check that the script runs, sized for a CPU
        args.d_model, args.heads, args.layers, args.vocab, args.tokens = 64, 4, 1, 500, 200
        args.lengths, args.rounds = args.lengths[:3], 1
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    torch.manual_seed(1)
    report = {"benchmark": "sdpa", "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
              "torch": torch.__version__, "dtype": str(dtype).removeprefix("torch."), "d_model": args.d_model,
              "heads": args.heads, "tokens_per_batch": args.tokens, "lengths": list(args.lengths),
              "calls": measure_calls(args, device, dtype), "model": measure_model(args, device, dtype)}
    print(json.dumps(report))


if __name__ == "__main__":
    main()
