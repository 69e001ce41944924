"""One update (paper §5.3): the model, its optimizer and loss scaler, and what an update does with them.

``update_freq`` batches are forward- and backward-propagated (DDP synchronising on the last only), the
summed label-smoothed loss is scaled by the update's target tokens over all ranks, the learning rate
set from the warm-up schedule, gradients clipped, the optimizer stepped. Nothing here makes the host
wait for the device: the loss sums stay on it.
"""

from __future__ import annotations

import os
from contextlib import nullcontext
from functools import partial
from pathlib import Path
from typing import Protocol

import torch
from torch.nn.parallel import DistributedDataParallel

from nmtk.checkpoint import Checkpoint
from nmtk.data.dataset import Batch
from nmtk.device import autocast_for
from nmtk.errors import NmtkError
from nmtk.model import Transformer
from nmtk.model.languages import LANGUAGE_BUFFERS, merge_allowed
from nmtk.precision import Precision
from nmtk.recipe import Recipe
from nmtk.train.distributed import DistInfo
from nmtk.train.loss import fused_loss_head, projected_label_smoothed_loss
from nmtk.train.schedule import inverse_sqrt_lr
from nmtk.train.state import TrainState
from nmtk.vocab import PAD_ID


class UpdateRunner(Protocol):
    """What runs `UpdateStep.run`'s updates in its place (`nmtk.train.graphs.GraphedMicroBatches`)."""

    def run(self, batches: list[Batch], total_tokens: float) -> tuple[torch.Tensor, torch.Tensor]: ...

    def prepare(self) -> str: ...

    def largest_batch(self) -> Batch: ...

MIN_LOSS_SCALE = 2.0**-14


def compile_for_training(model: Transformer, setting: bool | str, device: torch.device) -> bool:
    """``train.compile`` (``auto``: on a GPU): ``torch.compile`` for training with dynamic shapes (batch and
    length vary; the length buckets bound the variety), each layer (`Transformer.compile_layers`).
    Whether it compiled. For tests and benchmarks, environment variables choose otherwise:
    ``NMTK_COMPILE_BACKEND`` (aot_eager: tracing without code generation), ``NMTK_COMPILE_MODE``
    (reduce-overhead: CUDA graphs) and ``NMTK_COMPILE_SCOPE=model`` (the model's whole forward, loss
    head included, as one graph)."""
    if not (setting is True or (setting == "auto" and device.type == "cuda")):
        return False
    options = {key: os.environ.get(f"NMTK_COMPILE_{key.upper()}") for key in ("backend", "mode")}
    options = {key: value for key, value in options.items() if value}
    if os.environ.get("NMTK_COMPILE_SCOPE") == "model":
        model.compile(dynamic=True, **options)
        model._compiled_whole = True  # `layers_compiled` says so: the loss head is fused as for layers
    else:
        model.compile_layers(dynamic=True, **options)
    return True


def fused_adam(device: torch.device) -> bool | None:
    """Adam's ``fused`` argument: one fused kernel over all parameters where torch has one (CUDA and,
    since torch 2.4, the CPU), else torch's default (None). On a CPU that default is a loop over the
    parameters, a few passes each: on the demo model (65 tensors, 4.7 M parameters, 2-core AMD EPYC
    Zen 3, 2 threads) 16.3 ms an update against 3.6 fused; the same arithmetic, rounded in another order."""
    return True if device.type in ("cuda", "cpu") else None


class UpdateStep:
    """The model and its optimisation. ``state`` is the trainer's (the update counter and the count of
    skipped fp16 updates move here); ``loss_chunk``: target positions projected at a time (None: all)."""

    def __init__(self, model: Transformer, recipe: Recipe, device: torch.device, precision: Precision,
                 loss_chunk: int | None, info: DistInfo, state: TrainState) -> None:
        self.model, self.recipe, self.device, self.precision, self.info = model, recipe, device, precision, info
        self.loss_chunk, self.state = loss_chunk, state
        # A compiled model's loss head on a GPU: the chunk body fused into one or two kernels (`loss.py`).
        fuse = device.type == "cuda" and model.layers_compiled
        self.loss_body = fused_loss_head(os.environ.get("NMTK_COMPILE_BACKEND")) if fuse else None
        optim = recipe.optim
        self.peak_lr = optim.peak_lr(model.cfg.d_model)
        optimizer_cls = torch.optim.AdamW if optim.weight_decay > 0 else torch.optim.Adam
        self.optimizer = optimizer_cls(model.parameters(), lr=0.0, betas=optim.betas, eps=optim.eps,
                                       weight_decay=optim.weight_decay, fused=fused_adam(device))
        self.scaler = torch.amp.GradScaler(device.type) if precision == "fp16" else None
        self._skipped = torch.zeros((), dtype=torch.int64, device=device)  # fp16 updates skipped, unread
        self.ddp: DistributedDataParallel | None = None
        self.graphs: UpdateRunner | None = None  # `train.cuda_graphs`: `run` hands over to it

    @property
    def module(self) -> torch.nn.Module:
        """What the forward runs through: DDP's wrapper on several ranks, else the model."""
        return self.ddp or self.model

    def lr(self, update: int) -> float:
        return inverse_sqrt_lr(update, self.recipe.optim.warmup, self.peak_lr)

    def loss(self, batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
        """Summed label-smoothed loss and NLL of a batch, projected and scored a chunk at a time."""
        head = partial(projected_label_smoothed_loss, target=batch.tgt_out,
                       epsilon=self.recipe.optim.label_smoothing, pad_id=PAD_ID, chunk=self.loss_chunk,
                       body=self.loss_body)
        with autocast_for(self.device, self.precision, cache=self.graphs is None):
            return self.module(batch.src, batch.tgt_in, head=head, src_padded=batch.src_padded,
                               src_first=batch.src_first)

    def run(self, batches: list[Batch], total_tokens: float) -> tuple[torch.Tensor, torch.Tensor]:
        """One update over ``batches`` (the rank's ``update_freq``), ``total_tokens`` the update's target
        tokens over all ranks; returns the local (loss sum, nll sum), on the device."""
        if self.graphs is not None:
            return self.graphs.run(batches, total_tokens)
        scale = self.info.world_size / total_tokens  # token losses / all tokens; DDP averages over ranks
        loss_sum = torch.zeros((), device=self.device)
        nll_sum = torch.zeros((), device=self.device)
        self.model.train()
        for i, batch in enumerate(batches):
            sync = self.ddp is None or i == len(batches) - 1
            with nullcontext() if sync else self.ddp.no_sync():
                loss, nll = self.loss(batch.to(self.device))
                scaled = loss * scale
                (self.scaler.scale(scaled) if self.scaler else scaled).backward()
            loss_sum += loss.detach()
            nll_sum += nll.detach()
        self.apply()
        return loss_sum, nll_sum

    def apply(self) -> None:
        """Set the learning rate, clip, step (through the loss scaler in fp16), advance the counter.

        An fp16 update whose gradients overflowed is skipped as fairseq skips it: the scale halves, and
        at the next `reconcile` the counter goes back by it and ``skipped_updates`` up.
        """
        for group in self.optimizer.param_groups:
            group["lr"] = self.lr(self.state.update + 1)
        if self.scaler is not None:
            self.scaler.unscale_(self.optimizer)
        if self.recipe.optim.clip_norm > 0:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.recipe.optim.clip_norm)
        if self.scaler is None:
            self.optimizer.step()
        else:
            self._scaled_step()
        # Under DDP the gradients are views of its buckets (gradient_as_bucket_view): zeroed in place they
        # stay so; set to None, the reducer would allocate and copy fresh ones every update. Graphs add into
        # the gradients they were captured with: those too stay.
        self.optimizer.zero_grad(set_to_none=self.ddp is None and self.graphs is None)
        self.state.update += 1
        t, update = self.recipe.train, self.state.update
        if self.scaler is not None and (update % t.log_every_updates == 0 or update == t.max_updates):
            self.reconcile()

    def _scaled_step(self) -> None:
        """The loss scaler's step. Whether it skipped the update (inf/NaN gradients: the scale went down)
        is added up on the device and read by `reconcile`, at log points, not here: a read per update
        would stall a GPU's launch queue."""
        before = self.scaler._get_scale_async().clone()  # the scale as a device tensor (no public view)
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self._skipped += self.scaler._get_scale_async() < before

    def reconcile(self) -> None:
        """fp16: take the updates the scaler skipped since the last call off the counter (one read), so a
        skipped update moves neither the counter nor, from then on, the schedule; between two calls they
        run ahead by those updates. Stops a run whose scale collapsed. Called at log points, before a
        save, and at ``max_updates``."""
        if self.scaler is None:
            return
        skipped = int(self._skipped.item())
        if skipped:
            self._skipped.zero_()
            self.state.update -= skipped
            self.state.skipped_updates += skipped
        if self.scaler.get_scale() < MIN_LOSS_SCALE:
            raise NmtkError(
                f"fp16 loss scale collapsed to {self.scaler.get_scale():g} after "
                f"{self.state.skipped_updates} overflowing updates: the model diverges in fp16; "
                'use --set train.precision=bf16 (or fp32), or lower the learning rate'
            )

    def wrap(self) -> None:
        """DDP as fairseq and Megatron configure it: the sinusoidal table is a constant, not a buffer to
        broadcast every step; gradients live in the communication buckets (no copy); the graph is
        declared static where it is; bucket size and gradient compression from the recipe."""
        if not self.info.enabled or self.graphs is not None:  # graphs all-reduce after their replays
            return
        t = self.recipe.train
        ids = [self.device.index] if self.device.type == "cuda" else None
        # A static graph whose first backward runs under no_sync trips an internal assert in DDP
        # (pytorch#143580): declared static only where no micro-batch is accumulated without syncing.
        static = t.ddp_static_graph and t.update_freq == self.info.world_size
        self.ddp = DistributedDataParallel(self.model, device_ids=ids, broadcast_buffers=False,
                                           gradient_as_bucket_view=True, static_graph=static,
                                           bucket_cap_mb=t.ddp_bucket_mb)
        if self.model.layers_compiled:
            # Dynamo's DDP optimizer splits a compiled graph at bucket boundaries so that all-reduces
            # start while the backward goes on. Our graphs are one layer each (`compile_layers`), far
            # smaller than a bucket, so their boundaries already give that overlap; the splitting pass,
            # with dynamic shapes, would be one more path that has never run on a GPU. Off, on purpose.
            import torch._dynamo

            torch._dynamo.config.optimize_ddp = False
        if t.ddp_grad_dtype == "bf16":
            from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

            self.ddp.register_comm_hook(None, default_hooks.bf16_compress_hook)

    def fits(self, batch: Batch, share: float = 0.9) -> bool:
        """Whether a forward and backward of ``batch``, with Adam's two moments allocated, runs within
        ``share`` of the device's memory (a CPU: always). Leaves no trace: parameters, optimizer and
        random state are as they were, gradients zero (exact resume is unaffected). Under DDP (after
        `wrap`) the backward all-reduces, as the training's first one does (a first backward under
        ``no_sync`` trips DDP's static graph, pytorch#143580): every rank must call it alike. Adam's
        state does not exist before the first step, so tensors of its size stand in for it (on a resumed
        run they exist already and count as they are)."""
        cuda = self.device.type == "cuda"
        devices = [self.device] if cuda else []
        params = [p for p in self.model.parameters() if p.requires_grad and p not in self.optimizer.state]
        moments: list[torch.Tensor] = []
        try:
            if cuda:
                torch.cuda.reset_peak_memory_stats(self.device)
            moments = [torch.empty_like(p, dtype=torch.float32) for p in params for _ in range(2)]
            with torch.random.fork_rng(devices=devices):
                self.loss(batch.to(self.device))[0].backward()
            if cuda:
                total = torch.cuda.get_device_properties(self.device).total_memory
                return torch.cuda.max_memory_allocated(self.device) <= share * total
            return True
        except torch.OutOfMemoryError:
            return False
        finally:
            del moments
            self.model.zero_grad(set_to_none=True)
            if cuda:
                torch.cuda.empty_cache()

    def check_memory(self, batch: Batch) -> None:
        """`fits` on ``batch`` (the largest an update runs; with graphs, their largest shape), so that an
        out-of-memory error shows at once rather than hours later."""
        batch = self.graphs.largest_batch() if self.graphs is not None else batch
        if not self.fits(batch, share=1.0):
            raise NmtkError(
                f"out of memory on the largest batch ({batch.src.shape[0]} sentences, batching.batch_tokens = "
                f"{self.recipe.batching.batch_tokens}): lower batching.batch_tokens and raise train.update_freq "
                "to keep the same tokens per update (or set train.micro_batch_tokens lower)"
            )

    def load(self, checkpoint: Checkpoint) -> None:
        """A resume: parameters, optimizer moments and loss scale as they were."""
        self.model.load_state_dict(checkpoint.model)
        self.optimizer.load_state_dict(checkpoint.optimizer or {})
        fused = fused_adam(self.device)  # the saved groups' kernel choice is the saving device's
        for group in self.optimizer.param_groups:
            group["foreach"], group["fused"] = None, fused
        if self.scaler is not None and checkpoint.scaler:
            self.scaler.load_state_dict(checkpoint.scaler)

    def init_from(self, path: Path, vocab_hash: dict[str, str]) -> None:
        """Fine-tuning: another run's weights, fresh optimizer and schedule. The vocabulary must be the
        one the weights were trained with (``tokenizer.reuse`` makes prepare copy it)."""
        checkpoint = Checkpoint.read(path)
        if checkpoint.vocab not in (None, vocab_hash):
            raise NmtkError(f"--init-from {path}: its model was trained with another vocabulary than this data's; "
                            "set tokenizer.reuse to its run directory so that prepare uses that vocabulary")
        # per-language output vocabularies are this recipe's choice, from this data (`run._restrict_outputs`): the
        # original's, if it had them, add their pieces to each target's (`merge_allowed`)
        state = {k: v for k, v in checkpoint.model.items() if k not in LANGUAGE_BUFFERS}
        own = {k: v for k, v in self.model.state_dict().items() if k not in LANGUAGE_BUFFERS}
        for name, tensor in state.items():
            if name in own and own[name].shape != tensor.shape:
                raise NmtkError(f"--init-from {path}: {name} has shape {tuple(tensor.shape)}, "
                                f"this recipe's model needs {tuple(own[name].shape)}")
        missing = set(own) - set(state)
        if missing:
            raise NmtkError(f"--init-from {path}: checkpoint lacks {sorted(missing)[0]} (a different model?)")
        extra = set(state) - set(own)
        if extra:
            raise NmtkError(f"--init-from {path}: checkpoint has {sorted(extra)[0]}, which this recipe's model lacks "
                            "(a different model?)")
        self.model.load_state_dict(state, strict=False)
        if self.model.language_table is not None and LANGUAGE_BUFFERS[0] in checkpoint.model:
            tags = self.model.output_tags.clone()
            merged = merge_allowed(tags, self.model.output_allowed, *(checkpoint.model[k] for k in LANGUAGE_BUFFERS))
            self.model.set_output_languages(tags, merged)
