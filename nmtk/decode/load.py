"""From a model on disk to a translator: the one function `translate`, `attention`, benchmarks and
the server call.

``-m`` names a run directory (nmtk's engine, torch) or an `nmtk export` folder (CTranslate2, torch
never imported: a deployment pays neither its memory, ~200 MB, nor its import time).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from nmtk.console import console
from nmtk.decode.config import SamplingConfig, SearchConfig
from nmtk.errors import NmtkError
from nmtk.precision import Precision
from nmtk.recipe import DecodeSection
from nmtk.rundir import ExportDir, RunDir, latest_run

if TYPE_CHECKING:
    from nmtk.decode.base import TranslatorBase


@dataclass(frozen=True)
class SearchChoices:
    """What a command chose of the search; None leaves a setting to the recipe's ``[decode]``."""

    beam: int | None = None
    nbest: int = 1
    length_penalty: float | None = None
    max_len_a: float | None = None
    max_len_b: int | None = None
    max_tokens: int | None = None

    def resolve(self, decode: DecodeSection) -> SearchConfig:
        return SearchConfig.from_recipe(decode, beam=self.beam, nbest=self.nbest, length_penalty=self.length_penalty,
                                        max_len_a=self.max_len_a, max_len_b=self.max_len_b,
                                        max_tokens=self.max_tokens)


@dataclass(frozen=True)
class LoadOptions:
    """Which model, where, in what arithmetic, searched how."""

    model: Path | None = None  # run directory or export; None: $NMTK_MODEL, else the newest run under runs/
    checkpoint: Path | None = None  # None: the run's default checkpoint (`RunDir.default_checkpoint`)
    checkpoint_why: str = "asked for"  # said of ``checkpoint``: a server names the default it chose and pinned
    device: str | None = None  # cpu, cuda, cuda:N; None: CUDA when available
    threads: int | None = None  # per search
    searches: int = 1  # searches run side by side (the server's decoding threads): CTranslate2's inter_threads
    precision: Precision = Precision.auto
    ensemble: tuple[Path, ...] = ()
    search: SearchChoices = field(default_factory=SearchChoices)
    sampling: SamplingConfig | None = None
    alignment_layer: int | None = None  # 1-based decoder layer whose cross-attention aligns; None: the last
    align: bool = False


def choose_run(model: Path | None) -> RunDir:
    """``-m``, else ``$NMTK_MODEL``, else the most recently trained run under ``runs/`` (named on stderr)."""
    if model is not None:
        return RunDir(model).require()
    if os.environ.get("NMTK_MODEL"):
        return RunDir(os.environ["NMTK_MODEL"]).require()
    run = latest_run()
    if run is None:
        raise NmtkError("no model: pass -m RUN_DIR, set NMTK_MODEL, or train one (nmtk train) so runs/ has a run")
    console.print(f"model: {run.path} (the most recently trained run under runs/)")
    return run.require()


def named_model(o: LoadOptions) -> Path | None:
    """``-m``, else ``$NMTK_MODEL``; None leaves the choice to `choose_run` (the newest run)."""
    return o.model or (Path(os.environ["NMTK_MODEL"]) if os.environ.get("NMTK_MODEL") else None)


def load_translator(o: LoadOptions) -> TranslatorBase:
    """The translator ``o`` asks for: a run's model(s) with torch, or an exported model with CTranslate2."""
    named = named_model(o)
    if named is not None and ExportDir(named).is_export():
        return _load_exported(o, Path(named))
    if named is not None and Path(named).is_file():  # fairseq's habit: -m RUN/checkpoint_N.pt
        if o.checkpoint is not None:
            raise NmtkError(f"-m {named} is a checkpoint file and --checkpoint {o.checkpoint} another: give one")
        run = RunDir(Path(named).parent)
        if not run.is_run():
            raise NmtkError(f"{named}: a file outside a run directory; -m takes a run directory (or a checkpoint "
                            "inside one), or an nmtk export")
        return _load_run(replace(o, model=run.path, checkpoint=Path(named)), run)
    return _load_run(o, choose_run(o.model))


def _load_run(o: LoadOptions, run: RunDir) -> TranslatorBase:
    import torch

    from nmtk.bf16_probe import Shapes
    from nmtk.decode.ensemble import Ensemble
    from nmtk.decode.search import step_probe
    from nmtk.decode.translator import Translator, load_model
    from nmtk.device import keep_freed_memory, pick_device, resolve_precision

    if o.threads:
        torch.set_num_threads(o.threads)
    manifest = run.manifest()
    recipe = run.recipe()
    search = o.search.resolve(recipe.decode)
    checkpoint, why = (o.checkpoint, o.checkpoint_why) if o.checkpoint else run.default_checkpoint()
    console.print(f"checkpoint: {checkpoint} ({why})")
    device = pick_device(o.device)
    if device.type == "cpu":
        keep_freed_memory()
    model = load_model(checkpoint, device, manifest.vocab.sha256)
    if o.ensemble:
        model = Ensemble([model, *(load_model(p, device, manifest.vocab.sha256) for p in o.ensemble)])
    cfg = model.cfg
    precision, why = resolve_precision(o.precision, device, Shapes(cfg.d_model, cfg.d_ff, cfg.tgt_vocab), "decode",
                                       workload=step_probe(model, device))
    console.print(f"precision: {precision} ({why})")
    layers = model.cfg.decoder_layers
    if o.alignment_layer is not None and not 1 <= o.alignment_layer <= layers:
        raise NmtkError(f"--alignment-layer {o.alignment_layer}: the model has decoder layers 1 to {layers}")
    align_layer = (o.alignment_layer or layers) - 1 if o.align else None
    return Translator(pipelines=run.pipelines(recipe, manifest), model=model, search=search, device=device,
                      precision=precision, sampling=o.sampling, align_layer=align_layer,
                      longest_trained=manifest.longest_training_source)


def _load_exported(o: LoadOptions, directory: Path) -> TranslatorBase:
    """CTranslate2 behind the same options; the ones it cannot honour are errors naming them."""
    from nmtk.decode.ct2 import CT2_COMPUTE_TYPES, Ct2Translator

    if ExportDir(directory).meta().get("format") == "hf":
        raise NmtkError(f"{directory}: a Hugging Face (transformers) export; translate with transformers, or make "
                        f"it a run again: nmtk import {directory} -o RUN")
    needs_run = {"--ensemble": (bool(o.ensemble), "an export holds one model: ensemble with the run directories"),
                 "--checkpoint": (o.checkpoint is not None, "an export holds the checkpoint it was made from: pass "
                                  "the run directory, or export that checkpoint (nmtk export --checkpoint)"),
                 "--print-alignment": (o.align, "alignments come from nmtk's own model: pass the run directory")}
    for option, (used, why) in needs_run.items():
        if used:
            raise NmtkError(f"{option}: not available with an exported CTranslate2 model ({directory}): {why}")
    compute = None if o.precision is Precision.auto else CT2_COMPUTE_TYPES[o.precision]
    translator = Ct2Translator.load(directory, o.device or "auto", threads=o.threads or 0, compute_type=compute,
                                    searches=o.searches)
    translator.search = o.search.resolve(translator.recipe.decode)
    translator.sampling = o.sampling
    if o.sampling is not None:
        import ctranslate2

        ctranslate2.set_random_seed(o.sampling.seed)
    console.print(f"model: {directory} (CTranslate2, {translator.quantization}, {translator.device})")
    return translator
