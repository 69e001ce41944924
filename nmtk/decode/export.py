"""Deployment through CTranslate2: `nmtk export` and translating with the exported model.

The converter maps nmtk's weights onto CTranslate2's own Transformer specification
(``ctranslate2.specs.TransformerSpec``), which writes the model files: nothing here writes a binary
format. The mapping is one to one, because nmtk's model is the architecture CTranslate2 was built
for: post-norm (or pre-norm) layers, fused Q·K·V (self-attention) and K·V (encoder-decoder attention)
projections in that order, ReLU feed-forward, embeddings scaled by √d_model, the sinusoidal table
given as the position encodings (so that both engines add the very same numbers), tied matrices given
as one array (CTranslate2 stores it once), and the vocabulary as the subword model's pieces in id
order. Sources get ``</s>`` appended and decoding starts from ``<s>``, as in nmtk.

An exported directory holds, besides CTranslate2's files, everything the text pipeline needs (the
run's frozen recipe and subword model(s)) and ``nmtk-export.json``, so it is a complete artefact:
``nmtk translate -m DIR`` translates with it, and nothing else of the run is needed.

Scoring differs in one place. CTranslate2 normalises a hypothesis' log-probability by |Y|^α, nmtk
by GNMT's ((5 + |Y|) / 6)^α; with α = 0 both rank by the raw log-probability. `translate` passes
``--lenpen`` on as CTranslate2's α (docs/decoding.md, "Deploying", measures what that changes).
"""

from __future__ import annotations

import json
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from nmtk import __version__
from nmtk.decode.config import Hypothesis, SamplingConfig, SearchConfig, length_batches
from nmtk.decode.long_input import Segments, boundary_strengths, warn_split
from nmtk.errors import NmtkError
from nmtk.files import write_text_atomic
from nmtk.recipe import Recipe, load_recipe, recipe_to_toml
from nmtk.text import TextPipeline, text_pipelines
from nmtk.vocab import BOS, EOS, UNK

if TYPE_CHECKING:
    from nmtk.model import Transformer

MARKER = "nmtk-export.json"
QUANTIZATIONS = ("float32", "int8", "int8_float32", "int8_bfloat16", "bfloat16", "float16")


def _linear(spec: Any, linear: Any) -> None:
    spec.weight = linear.weight.detach().float().numpy()
    if linear.bias is not None:
        spec.bias = linear.bias.detach().float().numpy()


def _norm(spec: Any, norm: Any) -> None:
    spec.gamma = norm.weight.detach().float().numpy()
    spec.beta = norm.bias.detach().float().numpy()


def _ffn(spec: Any, ffn: Any, residual: Any) -> None:
    _linear(spec.linear_0, ffn.w1)
    _linear(spec.linear_1, ffn.w2)
    _norm(spec.layer_norm, residual.norm)


def model_spec(model: Transformer, source_pieces: list[str], target_pieces: list[str]) -> Any:
    """CTranslate2's specification of ``model``, weights set (fp32), vocabularies registered."""
    import ctranslate2

    cfg = model.cfg
    spec = ctranslate2.specs.TransformerSpec.from_config(
        (cfg.encoder_layers, cfg.decoder_layers), cfg.heads, pre_norm=cfg.norm == "pre",
        activation=ctranslate2.specs.Activation.RELU)
    arrays: dict[int, np.ndarray] = {}  # one numpy array per tensor, so tied weights stay one array

    def array(tensor: Any) -> np.ndarray:
        return arrays.setdefault(tensor.data_ptr(), tensor.detach().float().numpy())

    positions = model.src_embed.pe.detach().float().numpy()
    for side, embed in ((spec.encoder, model.src_embed), (spec.decoder, model.tgt_embed)):
        table = side.embeddings[0] if isinstance(side.embeddings, list) else side.embeddings
        table.weight = array(embed.table.weight)
        side.scale_embeddings = True  # × √d_model, paper §3.4
        side.position_encodings.encodings = positions
    for layer_spec, layer in zip(spec.encoder.layer, model.encoder, strict=True):
        _linear(layer_spec.self_attention.linear[0], layer.self_attn.qkv)
        _linear(layer_spec.self_attention.linear[1], layer.self_attn.out)
        _norm(layer_spec.self_attention.layer_norm, layer.res_attn.norm)
        _ffn(layer_spec.ffn, layer.ffn, layer.res_ffn)
    for layer_spec, layer in zip(spec.decoder.layer, model.decoder, strict=True):
        _linear(layer_spec.self_attention.linear[0], layer.self_attn.qkv)
        _linear(layer_spec.self_attention.linear[1], layer.self_attn.out)
        _norm(layer_spec.self_attention.layer_norm, layer.res_self.norm)
        _linear(layer_spec.attention.linear[0], layer.cross_attn.q)
        _linear(layer_spec.attention.linear[1], layer.cross_attn.kv)
        _linear(layer_spec.attention.linear[2], layer.cross_attn.out)
        _norm(layer_spec.attention.layer_norm, layer.res_cross.norm)
        _ffn(layer_spec.ffn, layer.ffn, layer.res_ffn)
    if cfg.norm == "pre":
        _norm(spec.encoder.layer_norm, model.encoder_norm)
        _norm(spec.decoder.layer_norm, model.decoder_norm)
    spec.decoder.projection.weight = array(model.output_weight)
    spec.register_source_vocabulary(source_pieces)
    spec.register_target_vocabulary(target_pieces)
    spec.config.unk_token, spec.config.bos_token, spec.config.eos_token = UNK, BOS, EOS
    spec.config.decoder_start_token = BOS
    spec.config.add_source_eos = True
    spec.config.layer_norm_epsilon = model.encoder[0].res_attn.norm.eps
    return spec


def export_run(run: Any, checkpoint: Path, out: Path, quantization: str, force: bool) -> dict[str, Any]:
    """Write ``run``'s model from ``checkpoint`` to ``out`` as a CTranslate2 model with its text pipeline.

    Built in a temporary folder beside ``out`` and renamed into place: an existing ``out`` is kept
    unless ``force``, and is never left half replaced.
    """
    from nmtk.decode.translator import load_model

    if quantization not in QUANTIZATIONS:
        raise NmtkError(f"--quantization {quantization}: choose one of {', '.join(QUANTIZATIONS)}")
    if out.exists() and not force:
        raise NmtkError(f"{out}: exists; use --force to replace it")
    recipe = run.recipe()
    source, target = run.pipelines(recipe)
    model = load_model(checkpoint, _cpu(), run.vocab_hash())
    spec = model_spec(model, source.subwords.pieces(), target.subwords.pieces())
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    try:
        spec.validate()
        spec.optimize(quantization=quantization)
        spec.save(str(tmp))
        models = run.manifest()["vocab"]["models"]
        for name in set(models.values()):
            shutil.copyfile(run.path / name, tmp / name)
        write_text_atomic(tmp / "recipe.toml", recipe_to_toml(recipe))
        meta = {"format": "ctranslate2", "nmtk": __version__, "quantization": quantization,
                "checkpoint": checkpoint.name, "run": str(run.path), "models": models,
                "max_positions": model.cfg.max_positions}
        write_text_atomic(tmp / MARKER, json.dumps(meta, indent=2))
        write_text_atomic(tmp / "README.md", _readme(recipe, meta))
        if out.exists():
            shutil.rmtree(out)
        tmp.rename(out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return meta


def _ct2_device(name: str, gpus: int) -> tuple[str, int]:
    """CTranslate2's (device, index) for ``--device``, checked as `nmtk.device.pick_device` checks torch's."""
    if name == "auto":
        return ("cuda" if gpus else "cpu"), 0
    kind, _, index = name.partition(":")
    if kind not in ("cpu", "cuda") or (index and not index.isdigit()) or (kind == "cpu" and index):
        raise NmtkError(f"--device {name!r}: not a device (use cpu, cuda or cuda:N)")
    if kind == "cuda" and int(index or 0) >= gpus:
        raise NmtkError(f"--device {name}: no such CUDA device is available (CTranslate2 sees {gpus})")
    return kind, int(index or 0)


def _cpu() -> Any:
    import torch

    return torch.device("cpu")


def _readme(recipe: Recipe, meta: dict[str, Any]) -> str:
    src, tgt = recipe.data.source_lang, recipe.data.target_lang
    return f"""# {recipe.name}: a CTranslate2 model exported by nmtk {meta["nmtk"]}

{src} → {tgt}, from `{meta["checkpoint"]}` of `{meta["run"]}`, weights stored as {meta["quantization"]}.
This folder is complete: CTranslate2's model (`model.bin`, `config.json`, vocabularies), the run's
recipe (`recipe.toml`) and subword model(s), and `{MARKER}`.

With nmtk (its text pipeline, the recipe's beam settings; `--device cuda` on a GPU):

```bash
nmtk translate -m THIS_FOLDER < input.{src} > output.{tgt}
nmtk translate -m THIS_FOLDER --beam 5 --nbest 3 --print-scores -i input.{src}
```

With CTranslate2 alone, the input must be the subword pieces of the recipe's text pipeline
(`recipe.toml`, `[tokenizer]`), and the output joined back by the same subword model:

```python
import ctranslate2
translator = ctranslate2.Translator("THIS_FOLDER", device="cpu")
translator.translate_batch([pieces], beam_size={recipe.decode.beam}, min_decoding_length=0)
```
"""


def is_export(path: Path) -> bool:
    return (Path(path) / MARKER).is_file()


@dataclass
class ExportedTranslator:
    """Translates with an exported CTranslate2 model, through the same text pipeline as nmtk's own.

    The same interface as `nmtk.decode.translator.Translator`: ``hypotheses(sentences)``, with the
    search (``search``, ``sampling``, ``max_tokens``) set on the object.
    """

    directory: Path
    recipe: Recipe
    pipelines: tuple[TextPipeline, TextPipeline]
    ct2: Any
    max_positions: int
    quantization: str = ""
    search: SearchConfig | None = None
    sampling: SamplingConfig | None = None
    max_tokens: int = 8192
    device: str = "cpu"

    @classmethod
    def load(cls, directory: Path, device: str = "cpu", threads: int = 0) -> ExportedTranslator:
        """``device``: cpu, cuda, cuda:N, or auto (CUDA when CTranslate2 sees a GPU)."""
        import ctranslate2

        directory = Path(directory)
        device, index = _ct2_device(device, ctranslate2.get_cuda_device_count())
        try:
            meta = json.loads((directory / MARKER).read_text(encoding="utf-8"))
            recipe = load_recipe(directory / "recipe.toml")
            langs = (recipe.data.source_lang, recipe.data.target_lang)
            models = {lang: directory / meta["models"][lang] for lang in langs}
            pipelines = text_pipelines(recipe.tokenizer, langs, models)
            ct2 = ctranslate2.Translator(str(directory), device=device, device_index=index, intra_threads=threads)
        except NmtkError:
            raise
        except (OSError, ValueError, KeyError, RuntimeError) as exc:
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            raise NmtkError(f"{directory}: not a complete nmtk export ({first}); run nmtk export again") from None
        positions = int(meta.get("max_positions", 1024))
        return cls(directory, recipe, pipelines, ct2, positions, meta.get("quantization", ""), device=device)

    def __post_init__(self) -> None:
        self.src_pipe, self.tgt_pipe = self.pipelines
        self.source_pieces = self.src_pipe.subwords.pieces()
        self.target_ids = {piece: i for i, piece in enumerate(self.tgt_pipe.subwords.pieces())}
        self.boundaries = boundary_strengths(self.source_pieces)
        if self.search is None:
            d = self.recipe.decode
            self.search = SearchConfig(beam=d.beam, length_penalty=d.length_penalty, max_len_a=d.max_len_a,
                                       max_len_b=d.max_len_b)

    def hypotheses(self, sentences: list[str], first_line: int = 1) -> list[list[Hypothesis]]:
        """N-best hypotheses per sentence, as `Translator.hypotheses` gives them (empty lines get none;
        a line longer than the model's input is translated in pieces, with a warning naming it)."""
        ids = [self.src_pipe.encode(s) if s.strip() else None for s in sentences]
        todo = [i for i, x in enumerate(ids) if x is not None]
        results: list[list[Hypothesis]] = [[] for _ in sentences]
        if not todo:
            return results
        segments = Segments.of([ids[i] for i in todo], self.max_positions - 1, self.boundaries)
        found = segments.join(self._decode(segments.pieces, self.search, self.sampling, self.max_tokens))
        for i, hyps, n in zip(todo, found, segments.count, strict=True):
            results[i] = hyps
            if n > 1:
                warn_split(first_line + i, len(ids[i]), self.max_positions, n)
        return results

    def _decode(self, sources: list[list[int]], search: SearchConfig, sampling: SamplingConfig | None,
                max_tokens: int) -> list[list[Hypothesis]]:
        """Length-sorted batches, each cut where the output limit a·|x| + b changes: CTranslate2 takes
        one maximum length per call, nmtk has one per sentence."""
        lengths = np.fromiter((len(s) + 1 for s in sources), dtype=np.int64, count=len(sources))
        limits = [min(int(search.max_len_a * (len(s)) + search.max_len_b), self.max_positions - 1) for s in sources]
        out: list[list[Hypothesis]] = [[] for _ in sources]
        rows = 1 if sampling else search.beam
        for batch in length_batches(lengths, max_tokens, rows):
            for limit in sorted({limits[i] for i in batch}):
                group = [int(i) for i in batch if limits[i] == limit]
                found = self._call([sources[i] for i in group], limit, search, sampling)
                for i, hyps in zip(group, found, strict=True):
                    out[i] = hyps
        return out

    def _call(self, sources: list[list[int]], limit: int, search: SearchConfig,
              sampling: SamplingConfig | None) -> list[list[Hypothesis]]:
        options = dict(max_decoding_length=max(limit, 1) + 1, min_decoding_length=0, max_input_length=0,
                       return_scores=True, length_penalty=search.length_penalty)
        if sampling is None:
            options.update(beam_size=search.beam, num_hypotheses=search.nbest)
        else:
            options.update(beam_size=1, sampling_topk=sampling.topk, sampling_topp=sampling.topp,
                           sampling_temperature=sampling.temperature)
        results = self.ct2.translate_batch([[self.source_pieces[t] for t in s] for s in sources], **options)
        return [[Hypothesis([self.target_ids[p] for p in tokens], score)
                 for tokens, score in zip(r.hypotheses, r.scores, strict=True)] for r in results]

    def translate(self, sentences: list[str]) -> list[str]:
        return [self.detokenize(h[0]) if h else "" for h in self.hypotheses(sentences)]

    def detokenize(self, hyp: Hypothesis) -> str:
        return self.tgt_pipe.decode(hyp.tokens)

    def detokenize_ids(self, ids: list[int]) -> str:
        return self.tgt_pipe.decode(ids)
