"""`nmtk train` end to end: data, run directory, resume or restart, the trainer, the final summary."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import torch

from nmtk.checkpoint import Checkpoint
from nmtk.console import console
from nmtk.data.dataset import target_pieces
from nmtk.data.fetch import default_data_root
from nmtk.data.prepare import default_out_dir, prepare
from nmtk.device import keep_freed_memory, pick_device
from nmtk.errors import NmtkError
from nmtk.manifest import Manifest, PreparedData
from nmtk.model import Transformer, parameter_count
from nmtk.model.languages import allowed_pieces
from nmtk.model_source import resolve_model
from nmtk.recipe import Recipe, added_later, differences, with_current_names
from nmtk.rundir import RunDir, default_run_dir
from nmtk.text.pairs import training_pipelines
from nmtk.train.curriculum import check_stage_pairs
from nmtk.train.distributed import (
    DistInfo,
    barrier,
    broadcast_object,
    init_distributed,
    lost_peer,
    lost_peer_error,
    shutdown,
    update_size,
)
from nmtk.train.lock import training_lock
from nmtk.train.metrics import truncate_log
from nmtk.train.trainer import Trainer, compile_report

# Settings a resumed run may not change, and what would break.
_FROZEN = {
    "model": "the model's shape",
    "tokenizer": "the vocabulary",
    "data.source_lang": "the language pair",
    "data.target_lang": "the language pair",
    "batching": "the data position (batches would be scrambled)",
    "train.seed": "the data position (batch order)",
    "train.update_freq": "the data position (batches per update)",
    "train.stages": "the data position (which stage, which corpora)",
    "train.modifiers": "the data position (which pairs each epoch changes)",
}
_MUTABLE_MODEL = {"dropout", "attention_dropout", "relu_dropout"}


def _frozen(field: str) -> str | None:
    """What changing ``field`` on resume would break; None when it may change."""
    if field.startswith("model.") and field.split(".")[-1] in _MUTABLE_MODEL:
        return None
    return next((why for prefix, why in _FROZEN.items() if field == prefix or field.startswith(prefix + ".")), None)


def changed_settings(run: RunDir, checkpoint: Checkpoint, recipe: Recipe) -> list[tuple[str, Any, Any]]:
    """The recipe's settings that differ from the checkpoint's, as (field, old, new); one that would break
    the checkpoint is refused, naming the field."""
    before, now = with_current_names(checkpoint.recipe or {}, str(run.path)), recipe.model_dump(mode="json")
    changed = [d for d in differences(before, now) if not added_later(*d)]
    for field, old, new in changed:
        if (why := _frozen(field)) is not None:
            field, was, becomes = _listed(field, old, new, before, now)
            raise NmtkError(f"{run.path}: cannot resume: {field} changed from {was} to {becomes}, which changes "
                            f"{why}; use --restart to start over or --run-dir for a new run")
    return changed


def _listed(field: str, old: Any, new: Any, before: dict[str, Any], now: dict[str, Any]) -> tuple[str, str, str]:
    """A change as the refusal says it (values as Python writes them); one found in a list entry one side
    lacks (``train.stages.1.corpus`` from 'bt' to None) as the list's own: ``train.stages`` from 2
    entries to 1 entry."""
    parts = field.split(".")
    index = next((i for i, part in enumerate(parts) if part.isdigit()), None)
    if index is None or (old is not None and new is not None):
        return field, repr(old), repr(new)

    def entries(recipe: dict[str, Any]) -> str:
        value: Any = recipe
        for part in parts[:index]:
            value = value.get(part, []) if isinstance(value, dict) else []
        count = len(value) if isinstance(value, list) else 0
        return f"{count} entr{'y' if count == 1 else 'ies'}" if count else "none"

    return ".".join(parts[:index]), entries(before), entries(now)


def check_resumable(run: RunDir, checkpoint: Checkpoint, recipe: Recipe, manifest: Manifest,
                    info: DistInfo) -> None:
    """Refuse, naming the field, a recipe change that would break the checkpoint."""
    changed = changed_settings(run, checkpoint, recipe)
    if changed and info.is_main:
        changes = ", ".join(f"{field} {old!r} → {new!r}" for field, old, new in changed)
        console.print(f"resuming with changed settings: {changes}")
    if checkpoint.vocab != manifest.vocab.sha256:
        raise NmtkError(f"{run.path}: cannot resume: the vocabulary (subword model) differs from the checkpoint's; "
                        "use --restart or a new --run-dir")
    if checkpoint.world_size != info.world_size:
        raise NmtkError(f"{run.path}: cannot resume: the checkpoint was written by {checkpoint.world_size} "
                        f"processes, this job has {info.world_size} (the data position depends on it)")


def _prepare_data(recipe: Recipe, data_dir: Path | None, data_root: Path | None, info: DistInfo) -> PreparedData:
    """Run `prepare` on rank 0 when the data is missing or out of date; every rank gets its handle (the
    folder and its manifest, read once)."""
    data_dir = Path(data_dir or default_out_dir(recipe))
    error, data = None, None
    if info.is_main:
        try:
            root = default_data_root(data_root)
            result = prepare(recipe, root, data_dir, rebuild=False, show_stages=True)
            if not result.inputs_checked:
                console.print(f"data: {data_dir} (prepared with this recipe's settings; its inputs are not under "
                              f"{root}, so they were not re-checked)")
            else:
                console.print(f"data: {data_dir} ({'up to date' if result.up_to_date else 'prepared'})")
            data = result.data
        except NmtkError as exc:
            error = str(exc)
    error, data = broadcast_object((error, data), info, wait=True)
    if error:
        raise NmtkError(error)
    return data


def _set_aside(run: RunDir) -> Path:
    target = run.path.with_name(f"{run.path.name}.old-{time.strftime('%Y%m%d-%H%M%S')}")
    os.replace(run.path, target)
    return target


def train(recipe: Recipe, *, data_dir: Path | None = None, data_root: Path | None = None,
          run_dir: Path | None = None, restart: bool = False, init_from: Path | None = None,
          device_name: str | None = None, threads: int | None = None) -> dict[str, Any]:
    """Train (or resume) the recipe; returns the final state as a dict."""
    device = pick_device(device_name)
    info = init_distributed(device.type)
    run = RunDir(run_dir or default_run_dir(recipe))
    try:
        with _locked(run, info):
            return _train(recipe, info, device, data_dir, data_root, run, restart, init_from, threads)
    except Exception as exc:
        if info.enabled and lost_peer(exc):
            raise lost_peer_error(exc, info) from None
        raise
    finally:
        shutdown(info)


@contextmanager
def _locked(run: RunDir, info: DistInfo) -> Iterator[None]:
    """Rank 0 holds the run's training lock for the whole job; every rank learns whether it got it."""
    with ExitStack() as stack:
        error = None
        if info.is_main:
            try:
                stack.enter_context(training_lock(run))
            except NmtkError as exc:
                error = str(exc)
        error = broadcast_object(error, info, wait=True)
        if error:
            raise NmtkError(error)
        yield


def _train(recipe: Recipe, info: DistInfo, device: torch.device, data_dir: Path | None, data_root: Path | None,
           run: RunDir, restart: bool, init_from: Path | None, threads: int | None) -> dict[str, Any]:
    if device.type == "cuda" and info.enabled:
        device = torch.device("cuda", info.local_rank)
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", info.world_size))
    torch.set_num_threads(threads or max(1, (os.cpu_count() or 1) // local_world))
    if device.type == "cpu":
        keep_freed_memory()
    size = update_size(recipe.train.update_freq, recipe.batching.batch_tokens, info.world_size)  # every rank refuses
    _refuse_before_preparing(run, recipe, restart, init_from)
    data = _prepare_data(recipe, data_dir, data_root, info)
    check_stage_pairs(recipe, data)
    checkpoint = _open_run(run, recipe, data, info, restart)
    trainer = Trainer(recipe, data, training_pipelines(data.path, recipe, data.manifest()), run, device, info)
    _restrict_outputs(trainer.model, data, recipe)
    if checkpoint is not None:
        trainer.resume(checkpoint)
        finished = trainer.stopping.limit(trainer.state)
        if finished:  # the same on every rank: the state comes from one checkpoint
            if info.is_main:
                further = "" if finished.kind == "stage" else " (raise the limit with --set to train further)"
                console.print(f"[green]finished[/]: {finished} at update {trainer.state.update} ({run.path}); nothing "
                              f"to do{further}")
            trainer.close()
            return {"update": trainer.state.update, "reason": finished, "best_bleu": trainer.state.best_bleu,
                    "run_dir": str(run.path), "tgt_tokens_per_s": 0}
        if info.is_main:
            s = trainer.state
            console.print(f"resuming {run.path} from update {s.update} (epoch {s.epoch + 1}, batch {s.batch})")
            newest = run.numbered()[-1][0] if run.numbered() else s.update
            if newest > s.update:
                console.print(f"update {s.update} is the last full training state; the parameter-only snapshots after "
                              f"it (to update {newest}) are for averaging and are written again as training goes on")
    elif init_from:
        _init_weights(trainer, Path(init_from), info, run)
    micro = trainer.plan_micro_batches()  # probes before DDP: no rank waits for another's
    trainer.step.wrap()
    trainer.check_memory()  # after DDP and with Adam's moments: what the run will hold
    graphs = trainer.step.graphs.prepare() if trainer.step.graphs is not None else None  # train.cuda_graphs
    if info.is_main:
        console.print(f"{size}, {micro}")
        if curriculum := trainer.curriculum.describe():
            console.print(curriculum)
        if graphs:
            console.print(graphs)
        console.print(f"model: {parameter_count(trainer.model):,} parameters | device {device} | "
                      f"{info.world_size} process(es) | precision {trainer.precision} ({trainer.precision_reason})")
    state = trainer.train()
    trainer.close()
    if info.is_main:
        best = "no validation" if state.best_bleu is None else f"best valid BLEU {state.best_bleu:.2f}"
        console.print(f"[green]stopped[/]: {state.stop_reason} | update {state.update} | "
                      f"{state.seconds / 60:.1f} min | {best} | checkpoint {run.last}")
        console.print(f"this session: {trainer.session_tokens_per_s:,.0f} target tokens/s over "
                      f"{trainer.session_seconds / 60:.1f} min, validation and checkpoints included")
        if trainer.compiled:
            console.print(f"torch.compile: {compile_report()}")
    return {"update": state.update, "reason": state.stop_reason, "best_bleu": state.best_bleu,
            "run_dir": str(run.path), "tgt_tokens_per_s": round(trainer.session_tokens_per_s)}


def _restrict_outputs(model: Transformer, data: PreparedData, recipe: Recipe) -> None:
    """``model.output_vocab = "per-target"``: each target's tag and the pieces its training targets hold,
    into the model (`nmtk.model.languages`), before a resume or ``--init-from`` loads weights over them."""
    if model.cfg.output_languages:
        tags, produced = target_pieces(data, recipe.data.targets())
        allowed = allowed_pieces(model.cfg.tgt_vocab, [torch.from_numpy(p.astype(np.int64)) for p in produced])
        model.set_output_languages(torch.tensor(tags), allowed)


def _init_weights(trainer: Trainer, init_from: Path, info: DistInfo, run: RunDir) -> None:
    """``--init-from``: a checkpoint file, or a run directory (an imported one, say), whose checkpoint
    is the one translate would use. What an imported run keeps of its original format comes along."""
    if info.is_main:
        run.inherit_origin(init_from if init_from.is_dir() else init_from.parent)
    if init_from.is_dir():
        source = resolve_model(RunDir(init_from).require().path)
        if source.checkpoint is None:
            raise NmtkError(f"--init-from {source.path}: a CTranslate2 export; start from the run it was made "
                            "from, or import a Hugging Face model (nmtk import)")
        init_from = source.checkpoint
        if info.is_main:
            console.print(f"--init-from: {init_from} ({source.why})")
    trainer.step.init_from(init_from, trainer.vocab_hash)


def _refuse_before_preparing(run: RunDir, recipe: Recipe, restart: bool, init_from: Path | None) -> None:
    """What refuses to resume for the recipe alone, before `prepare` runs (hours on a large corpus, and
    into a new folder where the data settings changed): ``--init-from`` on a run with checkpoints, and a
    changed setting that would break the checkpoint (its recipe read with the tensors left on disk)."""
    if restart or not run.has_checkpoints():
        return
    if init_from:
        raise NmtkError(f"{run.path} already has checkpoints: --init-from starts a new run "
                        "(use another --run-dir, or --restart)")
    changed_settings(run, Checkpoint.read(run.resume_checkpoint(), mmap=True), recipe)


def _open_run(run: RunDir, recipe: Recipe, data: PreparedData, info: DistInfo, restart: bool) -> Checkpoint | None:
    """Freeze the run directory (rank 0); the checkpoint to resume from, or None for a new run (or one
    ``--init-from`` starts: `_refuse_before_preparing` refused it on a run with checkpoints)."""
    checkpoint = None
    if run.has_checkpoints():
        if restart:
            if info.is_main:
                moved = _set_aside(run)
                console.print(f"--restart: the previous run was moved to {moved}")
        else:
            checkpoint = Checkpoint.read(run.resume_checkpoint())
            check_resumable(run, checkpoint, recipe, data.manifest(), info)  # before anything is written into the run
    barrier(info)
    if info.is_main:
        run.freeze(recipe, data)
        if checkpoint is not None:  # lines of updates after the resumed one would be repeated: the log restarts
            # there, before the Trainer opens it to append (a later atomic rewrite would orphan its handle)
            truncate_log(run.log_path, checkpoint.state["update"])
    barrier(info)
    return checkpoint
