"""What every `nmtk import` does the same way, mirroring `nmtk.convert.exporting`: read a transformers
folder's JSON and weights, make the run's placeholder recipe, and write the run whole
(`write_imported_run`: its vocabulary files, manifest, recipe, checkpoint and marker, built beside
``out`` and renamed into place, so nothing is ever half-written). Which importer a folder needs:
`nmtk.convert.formats.import_model`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nmtk import __version__
from nmtk.errors import NmtkError
from nmtk.files import built_beside
from nmtk.manifest import Manifest
from nmtk.pair import Pair
from nmtk.recipe import Recipe, recipe_from_dict, recipe_to_toml
from nmtk.rundir import MANIFEST, RECIPE, RunDir, mark_written

if TYPE_CHECKING:
    import torch

    from nmtk.model import Transformer

HF_WEIGHTS = ("model.safetensors", "pytorch_model.bin")

IMPORT_HEADER = """\
# Written by `nmtk import {folder}`. [model] and [tokenizer] describe the imported model; [data] names
# placeholder corpora. To fine-tune: copy this file, point [data] at your corpora, keep
# tokenizer.reuse (prepare then uses this run's vocabulary), and run
#   nmtk train YOUR_RECIPE.toml --init-from THIS_RUN
"""


@dataclass(frozen=True)
class ImportResult:
    """What `nmtk import` made, for its summary line."""

    out: Path
    source: str  # its source language(s), ", "-separated
    target: str  # its target language(s)
    encoder_layers: int
    decoder_layers: int
    d_model: int
    parameters: int

    @property
    def target_hint(self) -> str:
        """What `translate` needs besides the run: a multilingual model's target (and source)."""
        sources, targets = self.source.split(", "), self.target.split(", ")
        if len(targets) == 1:
            return ""
        target = next(t for t in targets if t != sources[0])
        return (f" --source-lang {sources[0]}" if len(sources) > 1 else "") + f" --target-lang {target}"


def read_json(path: Path, missing: str) -> Any:
    """A transformers folder's JSON file; one line naming it when it is missing (``missing``: what the
    folder should hold) or unreadable."""
    if not path.is_file():
        raise NmtkError(f"{path}: missing; {missing}")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise NmtkError(f"{path}: not readable JSON ({type(exc).__name__})") from None


def read_weights(folder: Path) -> dict[str, torch.Tensor]:
    """A transformers folder's weights (safetensors, else a pickled state dict read ``weights_only``)."""
    import torch

    for name in HF_WEIGHTS:
        path = folder / name
        if path.is_file():
            try:
                if name.endswith(".safetensors"):
                    from safetensors.torch import load_file

                    return load_file(str(path))
                return torch.load(path, map_location="cpu", weights_only=True)
            except Exception as exc:  # safetensors and torch raise their own kinds
                detail = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:120]
                raise NmtkError(f"{path}: not readable weights ({detail})") from None
    raise NmtkError(f"{folder}: no {' or '.join(HF_WEIGHTS)}")


def placeholder_recipe(out: Path, folder: Path, model: Transformer, pairs: list[Pair], multilingual: bool,
                       joint: bool) -> Recipe:
    """The imported run's recipe: the model as it is, placeholder corpora (one pair, or one per pair of a
    multilingual model), ``tokenizer.reuse`` of the run itself."""
    cfg = model.cfg
    name = re.sub(r"[^A-Za-z0-9._-]", "-", out.name).lstrip("._-") or "imported"
    if multilingual:
        data: dict[str, Any] = {"pairs": [{
            "source_lang": a, "target_lang": b,
            "train": [{"name": "train", "source": f"train.{a}-{b}.{a}", "target": f"train.{a}-{b}.{b}"}],
            "valid": {"name": "valid", "source": f"valid.{a}-{b}.{a}", "target": f"valid.{a}-{b}.{b}"}}
            for a, b in pairs]}
    else:
        (src, tgt), = pairs
        data = {"source_lang": src, "target_lang": tgt,
                "train": [{"name": "train", "source": f"train.{src}", "target": f"train.{tgt}"}],
                "valid": {"name": "valid", "source": f"valid.{src}", "target": f"valid.{tgt}"}}
    shape = {"encoder_layers": cfg.encoder_layers, "decoder_layers": cfg.decoder_layers, "layers": cfg.encoder_layers,
             "d_model": cfg.d_model, "heads": cfg.heads, "d_ff": cfg.d_ff, "dropout": cfg.dropout,
             "attention_dropout": cfg.attention_dropout, "relu_dropout": cfg.relu_dropout,
             "share_embeddings": cfg.share_embeddings, "norm": cfg.norm, "max_positions": cfg.max_positions,
             "activation": cfg.activation, "output_bias": cfg.output_bias}
    if cfg.positions != "paper":
        shape["positions"] = cfg.positions
    tokenizer = {"reuse": str(out), "vocab_size": cfg.tgt_vocab, **({} if joint else {"joint": False})}
    return recipe_from_dict({"name": name, "data": data, "tokenizer": tokenizer, "model": shape},
                            f"nmtk import {folder}")


def write_imported_run(out: Path, folder: Path, model: Transformer, recipe: Recipe,
                       write_files: Callable[[Path], Manifest]) -> ImportResult:
    """The run of an imported ``model``, built beside ``out`` and renamed into place: ``write_files(tmp)``
    writes the format's own files there (its vocabularies, what an export needs back) and returns the
    manifest that names them; then the manifest, the recipe, ``checkpoint_last.pt`` and the marker."""
    from nmtk.checkpoint import Checkpoint

    with built_beside(out) as build:
        tmp = RunDir(build)
        manifest = write_files(tmp.path)
        manifest.write(tmp.path / MANIFEST)
        (tmp.path / RECIPE).write_text(IMPORT_HEADER.format(folder=folder) + recipe_to_toml(recipe), encoding="utf-8")
        Checkpoint(model=model.state_dict(), model_config=model.cfg.to_dict(), vocab=manifest.vocab.sha256,
                   recipe=recipe.model_dump(mode="json"), recipe_hash=recipe.hash(), nmtk=__version__,
                   state={"update": 0}, imported_from=str(folder)).save(tmp.last)
        mark_written(tmp.path, f"nmtk import {folder}", "import")
    cfg = model.cfg
    return ImportResult(out, manifest.source_lang.replace("+", ", "), manifest.target_lang.replace("+", ", "),
                        cfg.encoder_layers, cfg.decoder_layers, cfg.d_model, sum(p.numel() for p in model.parameters()))
