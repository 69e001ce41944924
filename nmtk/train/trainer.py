"""The training loop (paper §5): token batches, Adam with the warm-up schedule, label smoothing,
gradient accumulation, mixed precision, DDP, validation, checkpoints and exact resume.

Determinism: the model is initialised from ``train.seed``; batch order is a function of
``(seed, epoch)``; every random generator is saved in checkpoints. A run interrupted after update k
and resumed therefore reproduces the uninterrupted run bit for bit on CPU in fp32.
"""

from __future__ import annotations

import os
import signal
import time
from contextlib import nullcontext
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.nn.parallel import DistributedDataParallel

from nmtk import __version__
from nmtk.bf16_probe import Shapes
from nmtk.checkpoint import (
    BackgroundWriter,
    SnapshotBuffers,
    link_atomic,
    load_checkpoint,
    rng_state,
    save_atomic,
    set_rng_state,
)
from nmtk.console import console
from nmtk.data.batching import BatchingPlan
from nmtk.data.binarized import BinarizedSplit
from nmtk.data.dataset import Batch, Prefetcher, collate, split_lengths
from nmtk.device import autocast_for, resolve_precision, use_tf32
from nmtk.errors import NmtkError
from nmtk.manifest import Manifest
from nmtk.model import Transformer
from nmtk.recipe import Recipe, model_config
from nmtk.rundir import RunDir
from nmtk.text import TextPipeline
from nmtk.train.distributed import DistInfo, all_reduce_sum, barrier
from nmtk.train.loss import CHUNK_POSITIONS, projected_label_smoothed_loss
from nmtk.train.metrics import MetricsLog, MetricsWindow, Progress, training_record
from nmtk.train.schedule import inverse_sqrt_lr
from nmtk.train.validate import Validator
from nmtk.vocab import PAD_ID

MIN_LOSS_SCALE = 2.0**-14
#: Updates between the cross-rank agreements on stopping (signal, max_minutes) and timed saves.
AGREE_EVERY = 10
TRAIN_KEYS = ("loss", "nll", "ppl", "lr", "tgt_tokens_per_s")
VALID_KEYS = ("loss", "nll", "ppl", "bleu")


@dataclass
class TrainState:
    """Where training is; saved in every checkpoint."""

    update: int = 0
    epoch: int = 0  # current epoch, from 0 (shown from 1)
    batch: int = 0  # next batch of this rank within the epoch
    seconds: float = 0.0  # training time of all sessions so far
    best_bleu: float | None = None
    bad_validations: int = 0
    skipped_updates: int = 0  # fp16 overflows
    stop_reason: str | None = None
    validated_update: int = 0  # the update of the last validation (0: none yet)


class _StopSignal:
    """SIGINT/SIGTERM set a flag; the loop finishes the update, saves, and exits cleanly."""

    def __init__(self) -> None:
        self.received: str | None = None
        self._old: dict[int, Any] = {}

    def __enter__(self) -> _StopSignal:
        for sig in (signal.SIGINT, signal.SIGTERM):
            self._old[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum: int, frame: Any) -> None:
        self.received = signal.Signals(signum).name

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._old.items():
            signal.signal(sig, handler)


def compile_report() -> str:
    """What ``torch.compile`` did in this process: graphs compiled and recompilations (few is right: the
    length buckets bound the shapes, and dynamic shapes cover the rest)."""
    from torch._dynamo.utils import counters

    graphs = counters["stats"].get("unique_graphs", 0)
    recompiles = sum(counters["recompiles"].values()) if "recompiles" in counters else 0
    return f"{graphs} graph(s) compiled, {recompiles} recompilation(s)"


class Trainer:
    """Trains one recipe's model on prepared data into a run directory.

    ``manifest`` is the prepared data's manifest and ``pipelines`` the (source, target) text pipelines
    (validation cuts over-long sources and detokenises with them); both come from the caller, loaded.
    """

    def __init__(self, recipe: Recipe, data_dir: Path, manifest: Manifest,
                 pipelines: tuple[TextPipeline, TextPipeline], run: RunDir, device: torch.device,
                 info: DistInfo) -> None:
        self.recipe, self.run, self.device, self.info = recipe, run, device, info
        self.vocab_hash: dict[str, str] = manifest.vocab.sha256
        src_lang, tgt_lang = recipe.data.source_lang, recipe.data.target_lang
        self.train_split = BinarizedSplit(data_dir, "train", src_lang, tgt_lang, manifest.dtype)
        src_len, tgt_len = split_lengths(self.train_split)
        b = recipe.batching
        self.plan = BatchingPlan(src_len, tgt_len, b.max_tokens, b.bucket_width, b.max_sentences, recipe.train.seed)
        self.tgt_lengths = tgt_len
        sizes = manifest.vocab.size
        self.cfg = model_config(recipe, sizes[src_lang], sizes[tgt_lang])
        torch.manual_seed(recipe.train.seed)
        self.model = Transformer(self.cfg).to(device)
        self.ddp: DistributedDataParallel | None = None
        o = recipe.optim
        self.peak_lr = o.peak_lr(self.cfg.d_model)
        optimizer_cls = torch.optim.AdamW if o.weight_decay > 0 else torch.optim.Adam
        fused = {"fused": True} if device.type == "cuda" else {}
        self.optimizer = optimizer_cls(self.model.parameters(), lr=0.0, betas=o.betas, eps=o.eps,
                                       weight_decay=o.weight_decay, **fused)
        shapes = Shapes(self.cfg.d_model, self.cfg.d_ff, self.cfg.tgt_vocab, rows=b.max_tokens)
        self.precision, self.precision_reason = resolve_precision(recipe.train.precision, device, shapes)
        use_tf32(device, self.precision)
        t = recipe.train
        # the loss head sized for the device: bounded memory on a CPU, one large product on a GPU
        self.loss_chunk = t.loss_chunk_tokens or (CHUNK_POSITIONS if device.type == "cpu" else None)
        self.compiled = t.compile is True or (t.compile == "auto" and device.type == "cuda")
        if self.compiled:  # dynamic shapes: batch and length vary; the length buckets bound the variety
            backend = os.environ.get("NMTK_COMPILE_BACKEND")  # e.g. aot_eager: tracing without codegen (tests)
            self.model.compile_layers(dynamic=True, **({"backend": backend} if backend else {}))
        self.scaler = torch.amp.GradScaler(device.type) if self.precision == "fp16" else None
        self.state = TrainState()
        self._validator_args = (data_dir, manifest, recipe, pipelines, device)
        self._validator: Validator | None = None
        self.metrics = MetricsLog(run.log_path, run.path / "tensorboard", enabled=info.is_main)
        self.writer = BackgroundWriter()
        self.buffers = SnapshotBuffers()
        self.window = MetricsWindow()
        self.session_tokens, self.session_seconds = 0.0, 0.0  # this session, for its average speed

    # ------------------------------------------------------------------ setup

    @property
    def validator(self) -> Validator:
        """Built at the first validation: a run that never validates (a benchmark) never reads the valid set."""
        if self._validator is None:
            self._validator = Validator.for_split(*self._validator_args)
        return self._validator

    def lr(self, update: int) -> float:
        return inverse_sqrt_lr(update, self.recipe.optim.warmup, self.peak_lr)

    def resume(self, checkpoint: dict[str, Any]) -> None:
        self.model.load_state_dict(checkpoint["model"])
        self.optimizer.load_state_dict(checkpoint["optimizer"])
        if self.scaler is not None and checkpoint.get("scaler"):
            self.scaler.load_state_dict(checkpoint["scaler"])
        self.state = TrainState(**checkpoint["state"])
        self.state.stop_reason = None
        rngs = checkpoint["rng"]
        set_rng_state(rngs[self.info.rank] if self.info.rank < len(rngs) else rngs[0])

    def init_from(self, path: Path) -> None:
        """Fine-tuning: another run's weights, fresh optimizer and schedule. The vocabulary must be the
        one the weights were trained with (``tokenizer.reuse`` makes prepare copy it)."""
        checkpoint = load_checkpoint(path)
        if checkpoint.get("vocab") not in (None, self.vocab_hash):
            raise NmtkError(f"--init-from {path}: its model was trained with another vocabulary than this data's; "
                            "set tokenizer.reuse to its run directory so that prepare uses that vocabulary")
        state = checkpoint["model"]
        own = self.model.state_dict()
        for name, tensor in state.items():
            if name in own and own[name].shape != tensor.shape:
                raise NmtkError(f"--init-from {path}: {name} has shape {tuple(tensor.shape)}, "
                                f"this recipe's model needs {tuple(own[name].shape)}")
        missing = set(own) - set(state)
        if missing:
            raise NmtkError(f"--init-from {path}: checkpoint lacks {sorted(missing)[0]} (a different model?)")
        self.model.load_state_dict(state)

    def check_memory(self) -> None:
        """Forward and backward once on the largest batch, with Adam's two moments allocated, so that
        an out-of-memory error shows at once rather than hours later.

        Runs after DDP wrapping (its gradient buckets count) and inside ``fork_rng``, and zeroes the
        gradients afterwards: it leaves no trace on parameters, optimizer or random state (exact
        resume is unaffected). Adam's state does not exist before the first step, so tensors of its
        size stand in for it (on a resumed run they exist already and count as they are).
        """
        batches = self.plan.epoch_batches(0)
        largest = max(batches, key=lambda b: len(b) * int(self.tgt_lengths[b].max()))
        batch = collate(self.train_split, largest).to(self.device)
        devices = [self.device] if self.device.type == "cuda" else []
        params = [p for p in self.model.parameters() if p.requires_grad and p not in self.optimizer.state]
        moments = []
        try:
            moments = [torch.empty_like(p, dtype=torch.float32) for p in params for _ in range(2)]
            with torch.random.fork_rng(devices=devices):
                self._loss(self.ddp or self.model, batch)[0].backward()
        except torch.OutOfMemoryError:
            raise NmtkError(
                f"out of memory on the largest batch ({len(largest)} sentences, batching.max_tokens = "
                f"{self.recipe.batching.max_tokens}): lower batching.max_tokens and raise train.update_freq "
                "to keep the same tokens per update"
            ) from None
        finally:
            del moments
            self.model.zero_grad(set_to_none=True)
            if self.device.type == "cuda":
                torch.cuda.empty_cache()

    def wrap(self) -> None:
        """DDP as fairseq and Megatron configure it: the sinusoidal table is a constant, not a buffer to
        broadcast every step; gradients live in the communication buckets (no copy); the graph is
        declared static where it is; bucket size and gradient compression from the recipe."""
        if not self.info.enabled:
            return
        t = self.recipe.train
        ids = [self.device.index] if self.device.type == "cuda" else None
        self.ddp = DistributedDataParallel(self.model, device_ids=ids, broadcast_buffers=False,
                                           gradient_as_bucket_view=True, static_graph=t.ddp_static_graph,
                                           bucket_cap_mb=t.ddp_bucket_mb)
        if t.ddp_grad_dtype == "bf16":
            from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

            self.ddp.register_comm_hook(None, default_hooks.bf16_compress_hook)

    # ------------------------------------------------------------------- step

    def _loss(self, module: torch.nn.Module, batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
        """Summed label-smoothed loss and NLL of a batch, projected and scored a chunk at a time."""
        head = partial(projected_label_smoothed_loss, target=batch.tgt_out,
                       epsilon=self.recipe.optim.label_smoothing, pad_id=PAD_ID, chunk=self.loss_chunk)
        with autocast_for(self.device, self.precision):
            return module(batch.src, batch.tgt_in, head=head, src_padded=batch.src_padded)

    def train_step(self, group: list[np.ndarray], total_tokens: int | None = None,
                   batches: list[Batch] | None = None) -> tuple[torch.Tensor, torch.Tensor, int]:
        """One update over ``update_freq`` batches; returns local (loss sum, nll sum, target tokens).

        The sums stay on the device (read once per log interval, `_log`): nothing here makes the host
        wait for the device. ``total_tokens`` is the update's target tokens over all ranks, which the
        training loop counts from the batching plan; without it they are summed across ranks here.
        ``batches``: the group already collated (the prefetcher's). In fp16 the update may be skipped
        (gradients overflowed): `state.update` then stays put.
        """
        module = self.ddp or self.model
        local_tokens = int(sum(int(self.tgt_lengths[b].sum()) for b in group))
        if total_tokens is None:
            (total_tokens,) = all_reduce_sum([float(local_tokens)], self.device, self.info)
        # Sum of token losses / all target tokens of the update; DDP averages over ranks, hence · world.
        scale = self.info.world_size / total_tokens
        loss_sum = torch.zeros((), device=self.device)
        nll_sum = torch.zeros((), device=self.device)
        self.model.train()
        for i, indices in enumerate(group):
            batch = (batches[i] if batches else collate(self.train_split, indices)).to(self.device)
            sync = self.ddp is None or i == len(group) - 1
            with nullcontext() if sync else self.ddp.no_sync():
                loss, nll = self._loss(module, batch)
                scaled = loss * scale
                (self.scaler.scale(scaled) if self.scaler else scaled).backward()
            loss_sum += loss.detach()
            nll_sum += nll.detach()
        self.apply_update()
        return loss_sum, nll_sum, local_tokens

    def apply_update(self) -> None:
        """Set the learning rate, clip, step (through the loss scaler in fp16), advance the counter.

        An fp16 update whose gradients overflowed is skipped as fairseq skips it: neither the update
        counter nor the learning-rate schedule moves, only ``skipped_updates`` (and the scale halves).
        """
        for group in self.optimizer.param_groups:
            group["lr"] = self.lr(self.state.update + 1)
        if self.scaler is not None:
            self.scaler.unscale_(self.optimizer)
        if self.recipe.optim.clip_norm > 0:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.recipe.optim.clip_norm)
        applied = True
        if self.scaler is None:
            self.optimizer.step()
        else:
            applied = self._scaled_step()
        self.optimizer.zero_grad(set_to_none=True)
        if applied:
            self.state.update += 1

    def _scaled_step(self) -> bool:
        """The loss scaler's step; False when it skipped the update for inf/NaN gradients."""
        before = self.scaler.get_scale()
        self.scaler.step(self.optimizer)
        self.scaler.update()
        if self.scaler.get_scale() >= before:
            return True
        self.state.skipped_updates += 1
        if self.scaler.get_scale() < MIN_LOSS_SCALE:
            raise NmtkError(
                f"fp16 loss scale collapsed to {self.scaler.get_scale():g} after "
                f"{self.state.skipped_updates} overflowing updates: the model diverges in fp16; "
                'use --set train.precision=bf16 (or fp32), or lower the learning rate'
            )
        return False

    # --------------------------------------------------------------- checkpoints

    def checkpoint_state(self, full: bool = True) -> dict[str, Any]:
        """The parameters and what describes them; with ``full``, all a resume needs besides (optimizer,
        loss scaler, every rank's random state: gathering those is a collective, so every rank calls this)."""
        state = {
            "model": self.model.state_dict(),
            "state": asdict(self.state),
            "recipe": self.recipe.model_dump(mode="json"),
            "recipe_hash": self.recipe.hash(),
            "vocab": self.vocab_hash,
            "model_config": self.cfg.to_dict(),
            "world_size": self.info.world_size,
            "nmtk": __version__,
            "full": full,
        }
        if full:
            rngs = [rng_state()]
            if self.info.enabled:
                gathered: list[Any] = [None] * self.info.world_size
                torch.distributed.all_gather_object(gathered, rngs[0])
                rngs = gathered
            state.update(optimizer=self.optimizer.state_dict(), scaler=self.scaler.state_dict() if self.scaler else {},
                         rng=rngs)
        return state

    def save(self, best: bool = False, final: bool = False) -> None:
        """Numbered checkpoint + checkpoint_last.pt (rank 0 writes; all ranks take part in RNG gathering).

        The previous write is waited for, the state copied into host buffers allocated once (pinned and
        filled by a side stream on a GPU: `SnapshotBuffers`), then written, fsynced and linked on a
        background thread while training goes on: at most one snapshot exists, and the file is what
        a synchronous save would have written. With ``train.save_full_every_updates`` the saves in
        between hold the parameters alone (``checkpoint_<N>.params.pt``); the last save is always full.
        """
        every = self.recipe.train.save_full_every_updates
        full = final or every is None or self.state.update % every == 0
        state = self.checkpoint_state(full)
        self._last_save = time.monotonic()
        if self.info.is_main:
            self.writer.wait()  # the buffers are free again
            self.writer.submit(partial(self._write, self.buffers.snapshot(state), self.state.update, best, full))

    def _write(self, state: dict[str, Any], update: int, best: bool, full: bool) -> None:
        path = self.run.checkpoint(update, full)
        save_atomic(state, path)
        if full:  # checkpoint_last.pt is what a resume starts from: always a full state
            link_atomic(path, self.run.last)
        if best:
            link_atomic(path, self.run.best)
        resume = self.run.resume_checkpoint()  # the newest full state stays, however many snapshots came after
        for _, old in self.run.numbered()[: -self.recipe.train.keep_last]:
            if old != resume:
                old.unlink(missing_ok=True)

    # ------------------------------------------------------------------- loop

    def train(self) -> TrainState:
        """Run until a stopping criterion; always leaves a final checkpoint."""
        self._clock = self._last_save = started = time.monotonic()
        self.window.reset()
        self.session_tokens = 0.0
        reason = None
        with _StopSignal() as stop, Progress(self.info.is_main, self.recipe.train.max_updates,
                                             self.state.update) as progress:
            try:
                while reason is None:
                    reason = self._run_epoch(stop, progress)
            finally:
                self.writer.wait()  # the last checkpoint is on disk before train() returns or raises
        self.state.stop_reason = reason
        if self.window.updates:
            self._log(progress=None)
        self.session_seconds = time.monotonic() - started
        return self.state

    @property
    def session_tokens_per_s(self) -> float:
        """Target tokens per second of this session over its whole wall-clock time, validation and
        checkpoint writes included: the speed a real run gets, to set beside the benchmark's."""
        return self.session_tokens / max(self.session_seconds, 1e-9)

    def _run_epoch(self, stop: _StopSignal, progress: Progress) -> str | None:
        """Train on the rest of the current epoch; the reason to stop, or None to go on with the next."""
        t, epoch, world = self.recipe.train, self.state.epoch, self.info.world_size
        groups = self.plan.iterate(epoch, self.state.batch, self.info.rank, world, t.update_freq)
        cuda = self.device.type == "cuda"
        ahead = (2 if cuda else 0) if t.prefetch_updates is None else t.prefetch_updates
        prefetch = Prefetcher(self.train_split, groups, ahead, pin=cuda)
        try:
            for k, group, batches in prefetch:
                before = self.state.update
                everyone = group if world == 1 else self.plan.update_batches(epoch, k, world, t.update_freq)
                total = int(sum(int(self.tgt_lengths[b].sum()) for b in everyone))
                self.window.add(*self.train_step(group, total, batches))
                self.state.batch = k + len(group)
                self._count_time()
                if self.state.update == before:  # an fp16 overflow: no new update to log, validate or save
                    reason = self._should_stop(stop, epoch_done=False)
                else:
                    reason = self.after_update(stop, progress)
                if reason:
                    if self.state.update == before:
                        self.save(final=True)
                    return reason
        finally:
            prefetch.close()
        self.state.epoch += 1
        self.state.batch = 0
        reason = self._should_stop(stop, epoch_done=True)
        if reason:
            self.save(best=self._final_validation(reason), final=True)
        return reason

    def after_update(self, stop: _StopSignal, progress: Progress) -> str | None:
        """Log, validate, decide whether to stop, save; returns the reason to stop, or None."""
        t = self.recipe.train
        if self.state.update % t.log_every_updates == 0:
            self._log(progress)
        progress.advance(self.state.update)
        improved, reason = False, None
        if t.validate_every_updates and self.state.update % t.validate_every_updates == 0:
            improved = self.validate()  # its time counts: max_minutes is wall-clock time
            if t.patience is not None and self.state.bad_validations >= t.patience:
                reason = f"no BLEU improvement in {t.patience} validations (patience)"
        reason = reason or self._should_stop(stop, epoch_done=False)
        if reason and not improved:
            improved = self._final_validation(reason)
        if improved or reason or self._save_due():
            self.save(best=improved, final=reason is not None)
        return reason

    def _final_validation(self, reason: str) -> bool:
        """Validate once more as training stops, when the last validation is older than the last update
        (``train.validate_at_end``): a run stopped by a limit before its first validation still gets its
        valid BLEU, ``checkpoint_best.pt`` and curves. Not after a signal: preemption must be quick."""
        t = self.recipe.train
        if not t.validate_at_end or reason.startswith("received") or self.state.validated_update >= self.state.update:
            return False
        return self.validate()

    def _count_time(self) -> None:
        now = time.monotonic()
        self.state.seconds += now - self._clock
        self._clock = now

    def _agreed(self, flags: list[float], epoch_done: bool) -> list[float]:
        """Rank-local decisions (a signal, a clock) made the same on every rank. Across ranks that takes an
        all-reduce, which waits for the device, so it happens every `AGREE_EVERY` updates (and at the end
        of an epoch), never in between: a stop or a timed save comes at most that many updates late."""
        if not self.info.enabled:
            return flags
        if not epoch_done and self.state.update % AGREE_EVERY:
            return [0.0] * len(flags)
        return all_reduce_sum(flags, self.device, self.info)

    def limit_reached(self) -> str | None:
        """The limit the run's state has reached already (``max_minutes`` counting the training time of
        every session, resumes included), or None: what a re-run of a finished run is told."""
        t, s = self.recipe.train, self.state
        if t.max_updates is not None and s.update >= t.max_updates:
            return f"reached max_updates = {t.max_updates}"
        if t.max_epochs is not None and s.epoch >= t.max_epochs:
            return f"reached max_epochs = {t.max_epochs}"
        if t.max_minutes is not None and s.seconds / 60 >= t.max_minutes:
            return f"reached max_minutes = {t.max_minutes:g}"
        return None

    def _should_stop(self, stop: _StopSignal, epoch_done: bool) -> str | None:
        t = self.recipe.train
        if t.max_updates is not None and self.state.update >= t.max_updates:
            return f"reached max_updates = {t.max_updates}"
        if epoch_done and t.max_epochs is not None and self.state.epoch >= t.max_epochs:
            return f"reached max_epochs = {t.max_epochs}"
        minutes = (self.state.seconds + time.monotonic() - self._clock) / 60
        flags = [float(stop.received is not None), float(t.max_minutes is not None and minutes >= t.max_minutes)]
        signal_flag, time_flag = self._agreed(flags, epoch_done)
        if signal_flag:
            return f"received {stop.received or 'a signal on another rank'}"
        if time_flag:
            return f"reached max_minutes = {t.max_minutes:g}"
        return None

    def _save_due(self) -> bool:
        t = self.recipe.train
        by_updates = t.save_every_updates is not None and self.state.update % t.save_every_updates == 0
        by_time = t.save_every_minutes > 0 and (time.monotonic() - self._last_save) / 60 >= t.save_every_minutes
        (by_time_everywhere,) = self._agreed([float(by_time)], epoch_done=False)
        return by_updates or bool(by_time_everywhere)

    # ------------------------------------------------------------ validation, logs

    def validate(self) -> bool:
        """Valid loss and BLEU, the valid set sharded over the ranks; returns whether BLEU improved.
        Updates early-stopping state (the same on every rank: every rank gets the same result)."""
        devices = [self.device] if self.device.type == "cuda" else []
        with torch.random.fork_rng(devices=devices):  # every rank scores and translates its share
            result = self.validator.run(self.model, self.precision, self.info)
        self.state.validated_update = self.state.update
        improved = self.state.best_bleu is None or result["bleu"] > self.state.best_bleu
        if improved:
            self.state.best_bleu = result["bleu"]
            self.state.bad_validations = 0
        else:
            self.state.bad_validations += 1
        record = {"validation": True, "update": self.state.update, "epoch": self.state.epoch + 1,
                  "minutes": round(self.state.seconds / 60, 3), **result, "best_bleu": self.state.best_bleu}
        self.metrics.write(record, "valid", VALID_KEYS)
        if self.info.is_main:
            console.print(f"valid | update {self.state.update} | loss {result['loss']:.3f} | nll {result['nll']:.3f} "
                          f"| ppl {result['ppl']:.2f} | BLEU {result['bleu']:.2f} | best {self.state.best_bleu:.2f}")
            self._draw_curves()
        return improved

    def _draw_curves(self) -> None:
        """RUN/curves.png, redrawn at each validation so that it can be looked at during the run.
        A picture that cannot be drawn is a warning, once: it never stops training."""
        try:
            from nmtk.pictures import training_curves

            training_curves([self.run.path], self.run.path / "curves.png", names=[self.recipe.name])
        except Exception as exc:  # matplotlib missing or broken, a full disk...
            if not getattr(self, "_curves_failed", False):
                console.print(f"warning: could not draw {self.run.path / 'curves.png'}: {exc}")
                self._curves_failed = True

    def _log(self, progress: Progress | None) -> None:
        w = self.window  # its loss sums are device tensors: read here, once per log interval
        sums = all_reduce_sum([float(w.loss), float(w.nll), float(w.tokens)], self.device, self.info)
        record = training_record(self.state.update, self.state.epoch + 1, tuple(sums), time.monotonic() - w.started,
                                 self.lr(self.state.update), self.state.seconds / 60, self.state.skipped_updates)
        self.metrics.write(record, "train", TRAIN_KEYS)
        self.session_tokens += sums[2]
        if progress is not None:
            progress.show(record)
        w.reset()

    def close(self) -> None:
        self.metrics.close()
        barrier(self.info)
