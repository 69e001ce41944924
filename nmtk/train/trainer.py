"""The training loop (paper §5): token batches through `UpdateStep` until `StopPolicy` says stop, with
validation, logs and checkpoints (`CheckpointKeeper`) along the way, and exact resume.

Determinism: the model is initialised from ``train.seed``; batch order is a function of
``(seed, epoch)``; every random generator is saved in checkpoints. A run interrupted after update k
and resumed therefore reproduces the uninterrupted run bit for bit on CPU in fp32.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict
from functools import partial
from typing import Any

import numpy as np
import torch

from nmtk import __version__
from nmtk.bf16_probe import Shapes
from nmtk.checkpoint import BackgroundWriter, Checkpoint, SnapshotBuffers, rng_state, set_rng_state
from nmtk.console import console
from nmtk.data.batching import BatchingPlan
from nmtk.data.dataset import Batch, Prefetcher, collate, corpus_draws, pad_multiple, split_lengths, training_split
from nmtk.device import resolve_precision, use_tf32
from nmtk.errors import NmtkError
from nmtk.manifest import PreparedData
from nmtk.model import Transformer
from nmtk.recipe import Recipe, model_config
from nmtk.rundir import RunDir
from nmtk.train.curriculum import Curriculum
from nmtk.train.distributed import DistInfo, FlagSum, all_reduce_sum, barrier, per_process_update_freq
from nmtk.train.graphs import use_graphs
from nmtk.train.keeper import CheckpointKeeper
from nmtk.train.loss import CHUNK_POSITIONS
from nmtk.train.metrics import CurvesDrawer, MetricsLog, MetricsWindow, Progress, training_record
from nmtk.train.micro import MicroBatches, largest, plan, run_update
from nmtk.train.state import TrainState
from nmtk.train.step import UpdateStep, compile_for_training
from nmtk.train.stopping import Agreement, StopPolicy, StopReason, StopSignal
from nmtk.train.validate import PairValidators, Pipelines, Validator, validator_for

#: Updates between the cross-rank agreements on stopping (signal, max_minutes) and timed saves.
AGREE_EVERY = 10
TRAIN_KEYS = ("loss", "nll", "ppl", "lr", "tgt_tokens_per_s")
VALID_KEYS = ("loss", "nll", "ppl", "bleu")


def compile_report() -> str:
    """What ``torch.compile`` did in this process: graphs compiled and recompilations (few is right: the
    length buckets bound the shapes, and dynamic shapes cover the rest)."""
    from torch._dynamo.utils import counters

    graphs = counters["stats"].get("unique_graphs", 0)
    recompiles = sum(counters["recompiles"].values()) if "recompiles" in counters else 0
    return f"{graphs} graph(s) compiled, {recompiles} recompilation(s)"


class Trainer:
    """Trains one recipe's model on prepared data into a run directory: the loop, and what it calls when.

    ``data`` is the prepared data (its folder and manifest) and ``pipelines`` the (source, target) text
    pipelines (a multilingual model's: per pair; validation cuts over-long sources and detokenises with
    them); both come from the caller, loaded.
    """

    def __init__(self, recipe: Recipe, data: PreparedData, pipelines: Pipelines, run: RunDir,
                 device: torch.device, info: DistInfo) -> None:
        self.recipe, self.run, self.device, self.info = recipe, run, device, info
        manifest = data.manifest()
        self.vocab_hash: dict[str, str] = manifest.vocab.sha256
        self.train_split, pair_ids = training_split(data)
        src_len, self.tgt_lengths = split_lengths(self.train_split)
        b, t = recipe.batching, recipe.train
        self.plan = self.base_plan = BatchingPlan(src_len, self.tgt_lengths, b.batch_tokens, b.bucket_width,
            b.max_sentences, t.seed, pair_ids, recipe.data.temperature or 1.0, corpus_draws(data, recipe, len(src_len)))
        self.curriculum = Curriculum(recipe, data, self.train_split, (src_len, self.tgt_lengths), info.is_main)
        self.train_split = self.curriculum.split  # an epoch's modified pairs, where modifiers are asked for
        self.update_freq = per_process_update_freq(t.update_freq, info.world_size)  # this rank's batches
        self.micro = MicroBatches(src_len, self.tgt_lengths, b.batch_tokens, self.update_freq, pad_multiple(device))
        self.cfg = model_config(recipe, *manifest.vocab_sizes())
        torch.manual_seed(t.seed)
        self.model = Transformer(self.cfg).to(device)
        shapes = Shapes(self.cfg.d_model, self.cfg.d_ff, self.cfg.tgt_vocab, rows=b.batch_tokens)
        self.precision, self.precision_reason = resolve_precision(t.precision, device, shapes)
        use_tf32(device, self.precision)
        self.compiled = compile_for_training(self.model, t.compile, device)
        self.state = TrainState()
        # the loss head sized for the device: bounded memory on a CPU, one large product on a GPU
        chunk = t.loss_chunk_tokens or (CHUNK_POSITIONS if device.type == "cpu" else None)
        self.step = UpdateStep(self.model, recipe, device, self.precision, chunk, info, self.state)
        self.graphed = use_graphs(t.cuda_graphs, device, self.precision, self.cfg.output_languages)
        self.stopping = StopPolicy(t, self.curriculum.ended)
        self.keeper = CheckpointKeeper(run, t, time.monotonic())
        self._validator_args = (data, recipe, pipelines, device)
        self._validator: Validator | PairValidators | None = None
        self.metrics = MetricsLog(run.log_path, run.path / "tensorboard", enabled=info.is_main)
        self.curves = CurvesDrawer(run.path, recipe.name, enabled=t.curves)
        self.writer = BackgroundWriter()  # checkpoints are written off the loop, from buffers reserved now
        self.buffers = SnapshotBuffers(self.model.state_dict() if info.is_main else None)
        self.window = MetricsWindow()
        self._clock = time.monotonic()  # training time is counted from here (`_count_time`)
        self._flag_sum = FlagSum(len(Agreement._fields), device, info)  # what the ranks agree on (`_flags`)
        self.session_tokens, self.session_seconds = 0.0, 0.0  # this session, for its average speed

    @property
    def validator(self) -> Validator | PairValidators:
        """Built at the first validation: a run that never validates (a benchmark) never reads the valid set."""
        if self._validator is None:
            self._validator = validator_for(*self._validator_args)
        return self._validator

    def resume(self, checkpoint: Checkpoint) -> None:
        self.step.load(checkpoint)
        self.state = self.step.state = TrainState(**{**checkpoint.state, "stop_reason": None})
        rngs = checkpoint.rng or []
        set_rng_state(rngs[self.info.rank] if self.info.rank < len(rngs) else rngs[0])

    def plan_micro_batches(self) -> str:
        """`nmtk.train.micro.plan` (before DDP wraps the model): how an update runs, for the ``update:`` line."""
        info = self.info  # with train.cuda_graphs, the first epoch's updates, for the shapes' padding
        epoch = self.plan.iterate(0, 0, info.rank, info.world_size, self.update_freq) if self.graphed else None
        return plan(self.micro, self.step, self.train_split, self.recipe.train.micro_batch_tokens, info, epoch)

    def check_memory(self) -> None:
        """`UpdateStep.check_memory` on the largest micro-batch, after DDP wrapping (its buckets count)."""
        self.step.check_memory(collate(self.train_split, largest(self.micro, self.plan), self.micro.multiple))

    def train_step(self, group: list[np.ndarray], total_tokens: float | None = None,
                   batches: list[Batch] | None = None) -> tuple[torch.Tensor, torch.Tensor, int]:
        """One update over the batches ``group`` indexes (``batches``: already collated); returns local
        (loss sum, nll sum, target tokens). ``total_tokens``: the update's target tokens over all ranks,
        counted from the batching plan (None: one rank, or summed across ranks here)."""
        local = int(sum(int(self.tgt_lengths[b].sum()) for b in group))
        if total_tokens is None:
            (total_tokens,) = all_reduce_sum([float(local)], self.device, self.info)
        return (*run_update(self.micro, self.step, self.train_split, group, total_tokens, batches), local)

    # --------------------------------------------------------------- checkpoints

    def checkpoint_state(self, full: bool = True) -> dict[str, Any]:
        """The parameters and what describes them; with ``full``, all a resume needs besides (optimizer,
        loss scaler, every rank's random state: gathering those is a collective, so every rank calls this)."""
        checkpoint = Checkpoint(model=self.model.state_dict(), model_config=self.cfg.to_dict(), vocab=self.vocab_hash,
                                recipe=self.recipe.model_dump(mode="json"), recipe_hash=self.recipe.hash(),
                                nmtk=__version__, state=asdict(self.state), full=full,
                                world_size=self.info.world_size)
        if full:
            rngs = [rng_state()]
            if self.info.enabled:
                gathered: list[Any] = [None] * self.info.world_size
                torch.distributed.all_gather_object(gathered, rngs[0])
                rngs = gathered
            checkpoint.optimizer, checkpoint.rng = self.step.optimizer.state_dict(), rngs
            checkpoint.scaler = self.step.scaler.state_dict() if self.step.scaler else {}
        return checkpoint.to_dict()

    def save(self, best: bool = False, final: bool = False) -> None:
        """Numbered checkpoint + checkpoint_last.pt (rank 0 writes; all ranks take part in RNG gathering).

        The state is copied into host buffers allocated once (`SnapshotBuffers`; on a GPU pinned, filled by
        a side stream whose event the writer waits on), then written, fsynced and linked on a background
        thread while training goes on (`CheckpointKeeper.write`): one snapshot at most, the same file."""
        self.step.reconcile()  # fp16: the skipped updates counted before the counter is saved
        state = self.checkpoint_state(full := self.keeper.full(self.state.update, final))
        self.keeper.saved(time.monotonic())
        if self.info.is_main:
            self.writer.wait()  # the buffers are free again
            copied, ready = self.buffers.snapshot(state)
            self.writer.submit(partial(self.keeper.write, copied, self.state.update, best, full, ready=ready))

    # ------------------------------------------------------------------- loop

    def train(self) -> TrainState:
        """Run until a stopping criterion; always leaves a final checkpoint."""
        self._clock = started = time.monotonic()
        self.keeper.saved(started)
        self.window.reset()
        self.session_tokens = 0.0
        reason = None
        with StopSignal() as stop, Progress(self.info.is_main, self.recipe.train.max_updates,
                                            self.state.update) as progress:
            try:
                while reason is None:
                    reason = self._run_epoch(stop, progress)
            finally:
                self.writer.wait()  # the last checkpoint is on disk before train() returns or raises
        self.state.stop_reason = str(reason)  # plain text in the state (checkpoints hold it)
        if self.window.updates:
            self._log(progress=None)
        self.session_seconds = time.monotonic() - started
        return self.state

    @property
    def session_tokens_per_s(self) -> float:
        """Target tokens per second of this session over its whole wall-clock time, validation and
        checkpoint writes included: the speed a real run gets, to set beside the benchmark's."""
        return self.session_tokens / max(self.session_seconds, 1e-9)

    def _run_epoch(self, stop: StopSignal, progress: Progress) -> StopReason | None:
        """Train on the rest of the current epoch; the reason to stop, or None to go on with the next."""
        t, epoch, world, freq = self.recipe.train, self.state.epoch, self.info.world_size, self.update_freq
        self.plan = self.curriculum.plan(self.base_plan, self.state, self.metrics)
        groups = self.plan.iterate(epoch, self.state.batch, self.info.rank, world, freq)
        prefetch = Prefetcher.on(self.device, self.train_split, groups, t.prefetch_updates, self.micro.split)
        try:
            for k, group, batches in self.curriculum.within_stage(prefetch, self.state):
                before = self.state.update
                everyone = None if world == 1 else self.plan.update_batches(epoch, k, world, freq)
                total = None if everyone is None else int(sum(int(self.tgt_lengths[b].sum()) for b in everyone))
                self.window.add(*self.train_step(group, total, batches))
                self.state.batch = k + len(group)
                self._count_time()
                reason = (self._should_stop(stop, epoch_done=False) if self.state.update <= before  # fp16 overflows
                          else self.after_update(stop, progress))  # counted: no new update to log or save
                if reason:
                    if self.state.update <= before:
                        self.save(final=True)
                    return reason
        finally:
            prefetch.close()
        self.curriculum.next_epoch(self.state)
        reason = self._should_stop(stop, epoch_done=True)
        if reason:
            self.save(best=self._final_validation(reason), final=True)
        return reason

    def after_update(self, stop: StopSignal, progress: Progress) -> StopReason | None:
        """Log, validate, decide whether to stop, save; returns the reason to stop, or None."""
        t = self.recipe.train
        if self.state.update % t.log_every_updates == 0:
            self._log(progress)
        progress.advance(self.state.update)
        improved, reason = False, None
        if t.validate_every_updates and self.state.update % t.validate_every_updates == 0:
            improved = self.validate()  # its time counts: max_minutes is wall-clock time
            reason = self.stopping.lost_patience(self.state)
        agreed = self._flags(stop, epoch_done=False)  # one collective for the stop and the timed save
        reason = reason or self.stopping.reason(self.state, agreed, stop.received)
        if reason and not improved:
            improved = self._final_validation(reason)
        if improved or reason or self.keeper.due_by_updates(self.state.update) or agreed.save_due:
            self.save(best=improved, final=reason is not None)
        return reason

    def _final_validation(self, reason: StopReason) -> bool:
        return self.stopping.validate_before_stopping(reason, self.state) and self.validate()

    def _count_time(self) -> None:
        now = time.monotonic()
        self.state.seconds += now - self._clock
        self._clock = now

    def _agreed(self, local: Agreement, epoch_done: bool) -> Agreement:
        """Rank-local decisions (a signal, a clock) made the same on every rank. Across ranks that takes an
        all-reduce, which waits for the device, so it happens every `AGREE_EVERY` updates (and at the end
        of an epoch), never in between: a stop or a timed save comes at most that many updates late."""
        if not self.info.enabled:
            return local
        if not epoch_done and self.state.update % AGREE_EVERY:
            return Agreement()
        return Agreement(*self._flag_sum(list(local)))

    def _should_stop(self, stop: StopSignal, epoch_done: bool) -> StopReason | None:
        return self.stopping.reason(self.state, self._flags(stop, epoch_done), stop.received)

    def _flags(self, stop: StopSignal, epoch_done: bool) -> Agreement:
        """This rank's signal, clock and timed-save flags, agreed across ranks in one all-reduce."""
        now = time.monotonic()
        local = self.stopping.flags(stop.received, self.state.seconds + now - self._clock, self.keeper.due_by_time(now))
        return self._agreed(local, epoch_done)

    # ------------------------------------------------------------ validation, logs

    def validate(self) -> bool:
        """Valid loss and BLEU, the valid set sharded over the ranks; returns whether BLEU improved.
        Updates early-stopping state (the same on every rank: every rank gets the same result)."""
        devices = [self.device] if self.device.type == "cuda" else []
        s = self.state
        with _validating(self), torch.random.fork_rng(devices=devices):  # each rank translates its share
            result = self.validator.run(self.model, self.precision, self.info)
        s.validated_update = s.update
        improved = s.best_bleu is None or result["bleu"] > s.best_bleu
        s.best_bleu, s.bad_validations = (result["bleu"], 0) if improved else (s.best_bleu, s.bad_validations + 1)
        record = {"validation": True, "update": s.update, "epoch": s.epoch + 1, "minutes": round(s.seconds / 60, 3),
                  **result, "best_bleu": s.best_bleu}
        self.metrics.write(record, "valid", VALID_KEYS)
        if self.info.is_main:
            console.print(f"valid | update {s.update} | loss {result['loss']:.3f} | nll {result['nll']:.3f} "
                          f"| ppl {result['ppl']:.2f} | BLEU {result['bleu']:.2f} | best {s.best_bleu:.2f}")
            self.curves.draw()
        return improved

    def _log(self, progress: Progress | None) -> None:
        w = self.window  # its loss sums are device tensors: read here, once per log interval
        sums = all_reduce_sum([float(w.loss), float(w.nll), float(w.tokens)], self.device, self.info)
        record = training_record(self.state.update, self.state.epoch + 1, tuple(sums), time.monotonic() - w.started,
                                 self.step.lr(self.state.update), self.state.seconds / 60, self.state.skipped_updates,
                                 self.micro.tokens) | self.curriculum.label(self.state)
        self.metrics.write(record, "train", TRAIN_KEYS)
        self.session_tokens += sums[2]
        if progress is not None:
            progress.show(record)
        w.reset()

    def close(self) -> None:
        self.metrics.close()
        barrier(self.info)


@contextmanager
def _validating(trainer: Trainer) -> Iterator[None]:
    """A validation, said as it starts (the final one of a large valid set runs for minutes); one that
    fails (any error) never loses the training before it: checkpoint_last.pt is written, then one line
    says so."""
    if trainer.info.is_main:
        console.print(f"[dim]valid | update {trainer.state.update} | translating the valid set…[/]")
    try:
        yield
    except Exception as exc:
        update = trainer.state.update
        trainer.save(final=True)
        trainer.writer.wait()
        raise NmtkError(f"validation at update {update} failed ({type(exc).__name__}: {exc}); the training so far "
                        f"is saved (checkpoint_last.pt, update {update}): the same command goes on from there") from exc
