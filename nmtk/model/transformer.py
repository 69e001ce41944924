"""The Transformer (paper §3): embeddings, encoder, decoder and output projection.

`forward` serves training (teacher forcing over whole target prefixes); `encode`, `start_cache`
and `decode_step` serve inference, one target position at a time with a key/value cache.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, NamedTuple, TypeVar

import torch
from torch import Tensor, nn

from nmtk.model.attention import KEPT, LayerCache
from nmtk.model.config import ModelConfig
from nmtk.model.languages import LanguageTable, OutputGroup
from nmtk.model.layers import DecoderLayer, EncoderLayer, dropout
from nmtk.model.output import OutputProjection
from nmtk.model.script import ScriptedStep, applies

if TYPE_CHECKING:
    import numpy as np

T = TypeVar("T")
_KEEPING = threading.Lock()  # guards the modules' keep_weights counts (threads enter and leave attention_weights)


def _on_meta() -> bool:
    """Whether modules are being built under ``torch.device("meta")``, for their shapes only
    (`parameter_count`, `Transformer.empty`). Then nothing is computed: torch's meta ``arange`` and
    ``normal_`` import its compiler, 1.2 s of every `nmtk recipe show`."""
    return torch.get_default_device().type == "meta"


#: fairseq's first position: its padding id (1) + 1, where M2M-100 and NLLB count positions from.
FAIRSEQ_POSITION_OFFSET = 2


def sinusoidal_positions(length: int, d_model: int, offset: int = 0, style: str = "paper") -> Tensor:
    """PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(...) (paper §3.5), shape (length, d).

    ``style="fairseq"``: the table of fairseq and so of M2M-100 and NLLB (imported models): sines in
    the first half, cosines in the second, frequencies 10000^(-j/(d/2 - 1)), and the first token at
    position 2 (`FAIRSEQ_POSITION_OFFSET`). It is not the paper's table under any reordering of the
    dimensions (the frequencies differ), so it is a table of its own."""
    if style == "fairseq":
        half = d_model // 2
        pos = torch.arange(offset, offset + length, dtype=torch.float32).unsqueeze(1) + FAIRSEQ_POSITION_OFFSET
        angles = pos * torch.exp(torch.arange(half, dtype=torch.float32) * -(math.log(10000.0) / (half - 1)))
        pe = torch.cat([torch.sin(angles), torch.cos(angles)], dim=1)
        return torch.cat([pe, torch.zeros(length, d_model - 2 * half)], dim=1)
    pos = torch.arange(offset, offset + length, dtype=torch.float32).unsqueeze(1)
    inv_freq = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float32) * (-math.log(10000.0) / d_model))
    pe = torch.zeros(length, d_model)
    pe[:, 0::2] = torch.sin(pos * inv_freq)
    pe[:, 1::2] = torch.cos(pos * inv_freq)[:, : d_model // 2]
    return pe


class Embeddings(nn.Module):
    """Token embedding scaled by √d_model plus sinusoidal position, then dropout (paper §3.4, §3.5, §5.4)."""

    def __init__(self, table: nn.Embedding, d_model: int, dropout: float, max_positions: int,
                 style: str = "paper") -> None:
        super().__init__()
        self.table, self.style = table, style
        self.scale = math.sqrt(d_model)
        self.dropout = dropout
        self.max_positions = max_positions
        # Not a parameter and not saved: it is a function of d_model alone (shapes only on meta, see `_on_meta`).
        self.register_buffer("pe", torch.empty(max_positions, d_model), persistent=False)
        if not _on_meta():
            self.fill_positions()

    @torch.no_grad()
    def fill_positions(self) -> None:
        """Compute the sinusoid table into ``pe``: at construction, and after `Transformer.empty`
        (a state dict does not hold it)."""
        self.pe.copy_(sinusoidal_positions(self.max_positions, self.pe.size(1), style=self.style))

    def check_positions(self, positions: int) -> None:
        if positions > self.max_positions:
            raise ValueError(f"sequence of {positions} positions exceeds max_positions={self.max_positions}")

    def forward(self, tokens: Tensor, offset: int = 0) -> Tensor:
        length = tokens.size(1)
        self.check_positions(offset + length)
        x = self.table(tokens) * self.scale + self.pe[offset : offset + length].to(self.table.weight.dtype)
        return dropout(x, self.dropout, self.training)


class Encoded(NamedTuple):
    """The encoder's output for a batch and the source mask every attention over it uses."""

    memory: Tensor  # (B, S, d_model)
    mask: Tensor | None  # (B, 1, 1, S), True at real tokens; None when nothing is padded
    language: Tensor | None = None  # (B,) each sentence's target language (`output_languages`; `LanguageTable`)


class DecoderCache:
    """Incremental-decoding state for a batch: one `LayerCache` per decoder layer plus the source mask."""

    def __init__(self, layers: list[LayerCache], memory_mask: Tensor | None, allowed: Tensor | None = None) -> None:
        self.layers = layers
        self.memory_mask = memory_mask
        self.allowed = allowed  # (sentences, V) or None: see `Transformer.decode_step`
        self.length = 0  # target positions decoded so far
        self.beams = 1  # rows per source sentence, all attending to its one copy of the encoder output
        self._spare: Tensor | None = None  # see `LayerCache.reorder`

    def expand(self, beams: int) -> None:
        """Each sentence's row becomes ``beams`` rows (sentence-major) that share its encoder keys and
        values: held once per sentence, not copied per beam, so reordering or shrinking the batch moves
        a K-th of the bytes and encoder-decoder attention reads each source once for all its beams."""
        self.beams = beams

    def step_buffers(self, rows: int) -> tuple[list[Tensor], list[Tensor], list[Tensor], list[Tensor]]:
        """For a scripted step (`nmtk.model.script`) of ``rows`` rows: each layer's key and value buffers,
        with room made for the step's position (`LayerCache.reserve`), and its encoder keys and values."""
        for layer in self.layers:
            layer.reserve(rows, layer.memory_k)
        return ([layer.k for layer in self.layers], [layer.v for layer in self.layers],
                [layer.memory_k for layer in self.layers], [layer.memory_v for layer in self.layers])

    def reorder(self, index: Tensor, memory: bool = True) -> None:
        """Select rows of the batch (beam search's chosen origins, or the sentences still running).

        ``memory=False`` skips the encoder keys/values: reordering beams *within* a sentence leaves
        them unchanged, since every beam of a sentence attends to the same source. With ``beams`` > 1
        a reorder with ``memory`` keeps whole sentences: all rows of each, in order.
        """
        sentences = None
        if memory:
            sentences = index if self.beams == 1 else index.view(-1, self.beams)[:, 0] // self.beams
        for layer in self.layers:  # one spare buffer for the whole cache, kept between steps
            self._spare = layer.reorder(index, sentences, self._spare)
        if sentences is not None and self.memory_mask is not None:
            self.memory_mask = self.memory_mask.index_select(0, sentences)
        if sentences is not None and self.allowed is not None:
            self.allowed = self.allowed.index_select(0, sentences)


class Transformer(nn.Module):
    """Encoder-decoder Transformer with optional weight tying (paper §3.4)."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.cfg = cfg
        src_table = self._embedding(cfg.src_vocab)
        tgt_table = src_table if cfg.share_embeddings == "all" else self._embedding(cfg.tgt_vocab)
        self.src_embed = Embeddings(src_table, cfg.d_model, cfg.dropout, cfg.max_positions, cfg.positions)
        self.tgt_embed = Embeddings(tgt_table, cfg.d_model, cfg.dropout, cfg.max_positions, cfg.positions)
        self.encoder = nn.ModuleList(EncoderLayer(cfg) for _ in range(cfg.encoder_layers))
        self.decoder = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.decoder_layers))
        pre = cfg.norm == "pre"
        self.encoder_norm = nn.LayerNorm(cfg.d_model) if pre else nn.Identity()
        self.decoder_norm = nn.LayerNorm(cfg.d_model) if pre else nn.Identity()
        if cfg.share_embeddings == "none":
            self.output = nn.Linear(cfg.d_model, cfg.tgt_vocab, bias=False)
            if not _on_meta():
                nn.init.normal_(self.output.weight, std=cfg.d_model**-0.5)
        else:
            self.output = None  # logits use the target embedding matrix (paper §3.4)
        # The paper's projection has no bias; Marian's (opus-mt) has one, added after the tied matrix.
        self.output_bias = nn.Parameter(torch.zeros(cfg.tgt_vocab)) if cfg.output_bias else None
        self._compiled: dict[str, list[Callable[..., Tensor]]] = {}  # see `compile_layers`
        self._projection = OutputProjection()  # decoding's layout, shortlist and int8: see `project`
        self._scripted = ScriptedStep()  # a CPU decoding step in one TorchScript call: see `decode_step`
        self.register_load_state_dict_post_hook(_rebuild_script)
        self._languages: LanguageTable | None = None  # see `language_table`
        if cfg.output_languages:  # buffers, so that checkpoints carry them (`set_output_languages`)
            self.register_buffer("output_tags", torch.zeros(cfg.output_languages, dtype=torch.long))
            self.register_buffer("output_allowed", torch.ones(cfg.output_languages, cfg.tgt_vocab, dtype=torch.bool))
            _make_language_table(self)
            self.register_load_state_dict_post_hook(lambda module, _keys: _make_language_table(module))

    @classmethod
    def empty(cls, cfg: ModelConfig, device: torch.device) -> Transformer:
        """A model with its weights allocated on ``device`` but not initialized, to load a state into.

        Initializing weights that a checkpoint then overwrites made loading the big model take 2.2 s
        on a CPU instead of 0.8, and a model bound for a GPU was first a full copy in host memory.
        The sinusoid tables are in no state dict (they are not saved), so they are computed here.
        Allocated by ``torch.empty``, not ``to_empty``: the latter's ``empty_like`` of a meta tensor
        imports torch's Python meta kernels and sympy: 0.4 s of a CPU start that loads a full checkpoint
        (`nmtk.checkpoint.load_model`) or imports a Marian or M2M-100 model.
        """
        with torch.device("meta"):
            model = cls(cfg)
        model._apply(lambda t: torch.empty(t.shape, dtype=t.dtype, device=device))
        for embed in (model.src_embed, model.tgt_embed):
            embed.fill_positions()
        return model

    @property
    def layers_compiled(self) -> bool:
        """Whether `compile_layers` has run (training's passes then go through the compiled layers), or
        the whole forward was compiled (`nmtk.train.step.compile_for_training`)."""
        return bool(self._compiled) or getattr(self, "_compiled_whole", False)

    def compile_layers(self, **options: object) -> None:
        """``torch.compile`` each encoder and decoder layer for training (teacher-forced passes).

        Per layer, so that the graphs are small and shared by every layer of a stack's shapes, and the
        loss head (a custom autograd function with a loop over chunks) stays eager. Only training mode
        uses them: validation's and translation's incremental decoding (with its key/value cache)
        runs the plain layers and so causes no recompiles. The compiled wrappers are not submodules:
        parameters and checkpoints are the model's own. ``options`` go to ``torch.compile``.
        """
        self._compiled = {"encoder": [torch.compile(layer, **options) for layer in self.encoder],
                          "decoder": [torch.compile(layer, **options) for layer in self.decoder]}

    def _layers(self, stack: str) -> Sequence[Callable[..., Tensor]]:
        return self._compiled[stack] if self.training and self._compiled else getattr(self, stack)

    def _embedding(self, vocab: int) -> nn.Embedding:
        """N(0, d^-0.5) as tensor2tensor and fairseq do: with the √d scaling, inputs have unit variance.
        Nothing is drawn on the meta device (`_on_meta`)."""
        if _on_meta():
            return nn.Embedding(vocab, self.cfg.d_model, padding_idx=self.cfg.pad_id,
                                _weight=torch.empty(vocab, self.cfg.d_model))
        table = nn.Embedding(vocab, self.cfg.d_model, padding_idx=self.cfg.pad_id)
        nn.init.normal_(table.weight, std=self.cfg.d_model**-0.5)
        with torch.no_grad():
            table.weight[self.cfg.pad_id].zero_()
        return table

    # ------------------------------------------------------------------ encoder

    def source_mask(self, src: Tensor, padded: bool | None = None) -> Tensor | None:
        """(B, 1, 1, S) True at real tokens; None when nothing is padded (lets SDPA use faster kernels).

        ``padded``, when the caller knows it (training's batches know it from their lengths, on the
        CPU), spares the look at the tensor: that look makes the host wait for the device.
        """
        if padded is False:
            return None
        real = src.ne(self.cfg.pad_id)
        if padded is None and bool(real.all()):
            return None
        return real[:, None, None, :]

    def encode(self, src: Tensor, padded: bool | None = None) -> Encoded:
        """Encoder output (B, S, d), the source mask used by every attention over it, and (with
        `output_languages`) each sentence's target language."""
        mask = self.source_mask(src, padded)
        x = self.src_embed(src)
        for layer in self._layers("encoder"):
            x = layer(x, mask)
        table = self.language_table
        return Encoded(self.encoder_norm(x), mask, None if table is None else table.language(src))

    # ------------------------------------------------- per-language output vocabularies

    def set_output_languages(self, tags: Tensor, allowed: Tensor) -> None:
        """Each target language's tag id (L,) and the pieces it may produce (L, V) bool."""
        with torch.no_grad():
            self.output_tags.copy_(tags)
            self.output_allowed.copy_(allowed)
        _make_language_table(self)

    @property
    def language_table(self) -> LanguageTable | None:
        return self._languages  # of the buffers (None without `output_languages`): `_make_language_table`

    def _apply(self, fn: Callable[..., Tensor], recurse: bool = True) -> Transformer:
        """`nn.Module._apply` (``to``, ``to_empty``...): the language table follows the buffers, and the
        scripted step is built again from the tensors as they now are."""
        super()._apply(fn, recurse)
        self._scripted.reset()
        _make_language_table(self)
        return self

    def output_groups(self, language: Tensor, src_first: np.ndarray | None = None) -> list[OutputGroup]:
        """The batch's sentences by target language (`Encoded.language`), for training's loss head; from
        ``src_first``, each source's first token on the host, where the caller has it (no device read)."""
        table = self.language_table
        return table.groups(language if src_first is None else table.host_language(src_first))

    # ------------------------------------------------------------------ decoder

    def project(self, h: Tensor) -> Tensor:
        """Decoder states -> vocabulary logits (pre-softmax linear transformation, paper §3.4), through
        decoding's layout, shortlist and int8 where they apply (`nmtk.model.output`)."""
        return self._projection.logits(h, self.output_weight, self.output_bias)

    def restrict_output(self, ids: Tensor | None) -> None:
        """Project onto the target ``ids`` alone (a lexical shortlist's candidates for a batch:
        `nmtk.data.shortlist`): `decode_step` then gives their logits, in the order of ``ids`` (the
        searches map the columns back: `output_ids`); None: the whole vocabulary again. ``ids`` must be
        sorted and begin with the special ids (`Shortlist.candidates`), so that their columns are the
        specials' own. The rows of the output matrix are gathered once here, not at every step. Per
        thread: searches side by side each restrict to their own batch's candidates."""
        if ids is not None and self.cfg.output_languages:
            raise ValueError("a model with per-language output vocabularies takes no shortlist")
        self._projection.restrict(ids, self.output_weight, self.output_bias)

    @property
    def output_ids(self) -> Tensor | None:
        """The target ids `decode_step`'s logits are for when restricted (`restrict_output`), else None."""
        return self._projection.ids

    def train(self, mode: bool = True) -> Transformer:
        """`nn.Module.train`; entering training mode also frees `project`'s decoding copy of the output
        matrix (the size of the embedding table)."""
        if mode:
            self._projection.reset()
            self._scripted.reset()
        return super().train(mode)

    def decode(self, tgt_in: Tensor, memory: Tensor, memory_mask: Tensor | None) -> Tensor:
        """Decoder states (B, T, d) for whole target prefixes, causally masked."""
        y = self.tgt_embed(tgt_in)
        for layer in self._layers("decoder"):
            y = layer(y, memory, memory_mask)
        return self.decoder_norm(y)

    @property
    def output_weight(self) -> Tensor:
        """The pre-softmax projection (V, d): the target embedding matrix when tied (paper §3.4)."""
        return self.output.weight if self.output is not None else self.tgt_embed.table.weight

    def forward(self, src: Tensor, tgt_in: Tensor, head: Callable[[Tensor, Tensor], T] | None = None,
                src_padded: bool | None = None, src_first: np.ndarray | None = None) -> Tensor | T:
        """Teacher-forced logits (B, T, V): position t predicts target token t+1.

        With ``head``, the decoder states (B, T, d) and `output_weight` go to ``head(states, weight)``
        (``head(states, weight, bias=output_bias)`` for a model with an output bias; ``groups=`` the
        batch's `output_groups` for a model with `output_languages`) instead, and its
        result is returned: training's chunked loss projects a few positions at a
        time, so the logits of a whole batch never exist at once. ``src_padded``: see `source_mask`;
        ``src_first``: see `output_groups` (training's batches hold both on the host).
        """
        memory, mask, language = self.encode(src, src_padded)
        states = self.decode(tgt_in, memory, mask)
        if head is None:
            logits = self.project(states)
            if language is None:
                return logits
            return logits.masked_fill(~self.language_table.allowed[language][:, None, :], float("-inf"))
        extra = {} if self.output_bias is None else {"bias": self.output_bias}
        if language is not None:
            extra["groups"] = self.output_groups(language, src_first)
        return head(states, self.output_weight, **extra)

    @contextmanager
    def attention_weights(self, only: Sequence[nn.Module] | None = None) -> Iterator[dict[str, list[Tensor]]]:
        """Keep every attention's weights while inside (``only``: those attention modules' alone, the
        others run on the fused kernel); the dict yielded is filled on leaving.

        ``{"encoder": [...], "decoder": [...], "cross": [...]}``, one (B, heads, T_q, T_k) tensor per
        layer (None for a module not kept), from the last forward run inside (a teacher-forced
        `forward` gives whole matrices). Outside this block attention runs on the fused kernel and
        keeps nothing.
        """
        kinds = {"encoder": [layer.self_attn for layer in self.encoder],
                 "decoder": [layer.self_attn for layer in self.decoder],
                 "cross": [layer.cross_attn for layer in self.decoder]}
        modules = [m for group in kinds.values() for m in group if only is None or any(m is o for o in only)]
        kept: dict[nn.Module, Tensor] = {}
        token = KEPT.set(kept)
        with _KEEPING:
            for module in modules:
                module.keep_weights += 1
        found: dict[str, list[Tensor]] = {}
        try:
            yield found
            found.update({kind: [kept.get(m) for m in group] for kind, group in kinds.items()})
        finally:
            KEPT.reset(token)
            with _KEEPING:
                for module in modules:
                    module.keep_weights -= 1

    @contextmanager
    def watch_cross_attention(self, layer: int) -> Iterator[Callable[[], Tensor | None]]:
        """While inside, decoder ``layer``'s cross-attention (0-based, negative from the end) keeps its
        weights, and only it; the callable gives the last forward's, averaged over heads: (B, T_q, S)."""
        module = self.decoder[layer].cross_attn
        with self.attention_weights(only=[module]):
            kept = KEPT.get()

            def last() -> Tensor | None:
                weights = kept.get(module)
                return None if weights is None else weights.mean(dim=1)

            yield last

    # ------------------------------------------------------- incremental decoding

    def start_cache(self, encoded: Encoded) -> DecoderCache:
        """Project the encoder output once per layer for encoder-decoder attention.

        Made contiguous here, once: the projection's head split is a strided view, which every step's
        attention products would otherwise copy again (per layer, per step)."""
        layers = [LayerCache(*(t.contiguous() for t in layer.cross_attn.project_memory(encoded.memory)))
                  for layer in self.decoder]
        allowed = None if encoded.language is None else self.language_table.allowed[encoded.language]
        return DecoderCache(layers, encoded.mask, allowed)

    def decode_step(self, tokens: Tensor, cache: DecoderCache) -> Tensor:
        """Logits (B, V) for the next position, given the last tokens (B,); advances the cache. On a CPU
        the decoder's part is one TorchScript call where it applies (`nmtk.model.script`: the same ops,
        without Python between them)."""
        scripted = self._scripted.module(self) if applies(self, tokens) else None
        if scripted is not None:
            self.tgt_embed.check_positions(cache.length + 1)
            y = scripted(tokens, cache.length, *cache.step_buffers(tokens.size(0)), cache.memory_mask, cache.beams)
        else:
            y = self.tgt_embed(tokens[:, None], offset=cache.length)
            for layer, layer_cache in zip(self.decoder, cache.layers, strict=True):
                y = layer(y, None, cache.memory_mask, cache=layer_cache, beams=cache.beams)
            y = self.decoder_norm(y)
        cache.length += 1
        logits = self.project(y)[:, 0]
        if cache.allowed is None:
            return logits
        # a language's foreign pieces do not exist for it, as in CTranslate2's vocabulary map
        rows = logits.view(-1, cache.beams, logits.size(-1))
        return rows.masked_fill(~cache.allowed[:, None, :], float("-inf")).view_as(logits)


def _rebuild_script(model: Transformer, _keys: object) -> None:
    """After a state is loaded (perhaps by assignment, replacing the tensors): the scripted step anew."""
    model._scripted.reset()


def _make_language_table(model: Transformer) -> None:
    """`Transformer.language_table`, made again whenever the buffers change (`set_output_languages`, a
    state loaded into them, the model moved), never inside a forward: a table made there would be a
    tensor a captured CUDA graph allocated and then kept (`nmtk.train.graphs`), and making it reads the
    device."""
    if model.cfg.output_languages and model.output_tags.device.type != "meta":
        model._languages = LanguageTable(model.output_tags, model.output_allowed)


def parameter_count(model: nn.Module | ModelConfig) -> int:
    """Trainable parameters of a model, each shared tensor counted once.

    Given a configuration, the model is built on the `meta` device (no memory, no init cost).
    """
    if isinstance(model, ModelConfig):
        with torch.device("meta"):
            model = Transformer(model)
    return sum(p.numel() for p in model.parameters() if p.requires_grad)
