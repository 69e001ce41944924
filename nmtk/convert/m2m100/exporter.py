"""`nmtk export --format hf` of an imported M2M-100 or NLLB run: back to transformers' own files (the
weights under the names the original saved them, its configuration and tokenizer files as they came,
kept in the run at import: `M2M100_ORIGIN`, `M2M100_TOKENIZER`)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from nmtk.convert.exporting import ExportResult, export_source, write_export
from nmtk.convert.importing import read_json
from nmtk.convert.m2m100.folder import SPM_FILE, TOKENIZER_JSON
from nmtk.convert.m2m100.weights import m2m100_state_dict
from nmtk.convert.marian.weights import SideVocab, side_vocab_of_run, write_json
from nmtk.errors import NmtkError
from nmtk.files import copy_atomic
from nmtk.model_source import ModelSource
from nmtk.rundir import M2M100_ORIGIN, M2M100_TOKENIZER
from nmtk.vocab import BOS_ID

if TYPE_CHECKING:
    from nmtk.model import Transformer


def write_m2m100(folder: Path, model: Transformer, side: SideVocab, origin: dict[str, Any],
                 tokenizer_json: Path | None = None) -> None:
    """An imported M2M-100 run back as transformers' files: weights, config, vocabulary (``vocab.json``,
    or NLLB's ``tokenizer_json`` as it came), tokenizer settings."""
    from safetensors.torch import save_file

    warn_dropped_bias(model)
    state = m2m100_state_dict(model, side, tuple(origin.get("embedding_keys") or ("model.shared.weight",)))
    save_file(state, str(folder / "model.safetensors"), metadata={"format": "pt"})
    write_json(folder / "config.json", origin["config"])
    (folder / SPM_FILE).write_bytes(side.spm_bytes)
    if origin.get("vocab_size") is None:
        if tokenizer_json is None or not tokenizer_json.is_file():
            raise NmtkError(f"{tokenizer_json}: missing; an NLLB run keeps the model's tokenizer.json there")
        copy_atomic(tokenizer_json, folder / TOKENIZER_JSON)
    else:
        write_json(folder / "vocab.json", {p: i for p, i in side.hf_vocab.items() if i < origin["vocab_size"]})
    write_json(folder / "tokenizer_config.json", origin["tokenizer_config"])
    if origin.get("special_tokens_map") is not None:
        write_json(folder / "special_tokens_map.json", origin["special_tokens_map"])


def warn_dropped_bias(model: Transformer) -> None:
    """M2M-100 has no output bias: nmtk's carries only `START_BIAS` on ``<s>`` after an import, but
    fine-tuning trains all of it, and what it learnt cannot be written back. Said once, with its size,
    so that a changed output of the export is not a mystery."""
    from nmtk.console import console

    learnt = model.output_bias.detach().float().clone()
    learnt[BOS_ID] = 0.0
    largest = float(learnt.abs().max())
    if largest > 0:
        console.print(f"warning: M2M-100 has no output bias: the one fine-tuning learnt (largest |b| {largest:.3g}) "
                      "is left out of the export, whose outputs may differ slightly from the run's")


def export_m2m100(source: ModelSource, out: Path, force: bool) -> ExportResult:
    """An imported M2M-100 run's model (as trained since, or not) back as transformers' files in ``out``."""
    import torch

    from nmtk.checkpoint import load_model

    run = export_source(source, out, force)
    model = load_model(run.checkpoint, torch.device("cpu"), run.manifest.vocab.sha256)
    origin = read_json(run.run.path / M2M100_ORIGIN, "it is written by nmtk import of an M2M-100 model")
    side = side_vocab_of_run(next(iter(run.manifest.model_paths(run.run.path).values())))
    return write_export(out, "m2m100", run, lambda folder: write_m2m100(folder, model, side, origin,
                                                                        run.run.path / M2M100_TOKENIZER), {},
                        lambda meta: f"# {run.recipe.name}: an M2M-100 model, from {meta['checkpoint']}\n")
