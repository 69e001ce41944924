"""MarianMT (transformers) and nmtk: the one-to-one map between their weights and vocabularies, used
by the Marian exporter and importer beside this module (and by M2M-100's, a model of the same family).

MarianMT (every Helsinki-NLP opus-mt model) is the paper's post-norm Transformer with sinusoidal
positions, embeddings scaled by √d_model and tied matrices, so the weights map one to one, with four
differences that this module owns:

* **Positions.** transformers' sinusoidal table puts all the sines first, then all the cosines; nmtk
  interleaves them as the paper does. The two tables differ by a permutation of the model's width, and
  a Transformer is unchanged when its residual stream is permuted consistently: every matrix that
  reads the stream gets its columns permuted, every matrix (and bias, and LayerNorm gain and shift)
  that writes it gets its rows permuted, embeddings their columns. Attention heads and the
  feed-forward inner width are untouched. So the conversion is exact both ways, not an approximation.
* **Fused projections.** nmtk computes Q·K·V (and the encoder's K·V) with one matrix; MarianMT has one
  per projection. They are row blocks of nmtk's.
* **Vocabulary.** nmtk numbers the subword model's pieces with ``<pad> <unk> <s> </s>`` at 0-3 and
  starts decoding from ``<s>``; Marian numbers them by ``vocab.json`` (``</s>`` = 0, ``<pad>`` last)
  and starts from ``<pad>``. An nmtk model is exported with its own ids (the config names the start
  id); an imported model's rows are reordered so that its start symbol lands on ``<s>`` and nmtk's
  padding gets a row of its own (the one row an opus-mt model gains). ``hf_ids`` in the imported
  vocabulary (`nmtk.text.subword.MappedSentencePiece`) records the original order, so exporting an
  imported run gives the original tensors back.
* **Output bias.** Marian's ``final_logits_bias`` is nmtk's ``model.output_bias`` (zero when the
  recipe has none).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nmtk.errors import NmtkError
from nmtk.text.subword import MappedSentencePiece, SentencePieceModel, load_subword_model
from nmtk.vocab import EOS, PAD, SPECIAL_SYMBOLS, UNK

if TYPE_CHECKING:
    import torch


NO_ROW = -1  # in ``hf_ids``: an nmtk row the Hugging Face model has not (nmtk's own padding row)

#: transformers' activation names in nmtk's terms.
HF_ACTIVATIONS = {"relu": "relu", "swish": "swish", "silu": "swish", "gelu": "gelu"}


# ------------------------------------------------------------------------------------ weight map


def residual_order(d_model: int) -> torch.Tensor:
    """transformers' width order in nmtk's terms: column k of a MarianMT state is nmtk's column order[k]
    (the sine of frequency i sits at 2i in nmtk, at i in MarianMT; its cosine at 2i+1 and d/2+i)."""
    import torch

    return torch.cat([torch.arange(0, d_model, 2), torch.arange(1, d_model, 2)])


@dataclass(frozen=True)
class Entry:
    """One MarianMT tensor: the nmtk tensor (rows ``rows`` of it) and how it touches the residual stream:
    ``in`` reads it (columns permuted), ``out`` writes it (rows permuted), ``plain`` neither."""

    hf: str
    nmtk: str
    kind: str
    rows: tuple[int, int] | None = None


def _projections(hf: str, nmtk: str, d: int, fused: str, names: str) -> list[Entry]:
    """MarianMT's separate ``{q,k,v}_proj`` as row blocks of nmtk's fused ``fused`` projection."""
    blocks = [(n, (i * d, (i + 1) * d)) for i, n in enumerate(names)]
    return [Entry(f"{hf}.{n}_proj.weight", f"{nmtk}.{fused}.weight", "in", rows) for n, rows in blocks] + \
        [Entry(f"{hf}.{n}_proj.bias", f"{nmtk}.{fused}.bias", "plain", rows) for n, rows in blocks]


def _out(hf: str, nmtk: str) -> list[Entry]:
    return [Entry(f"{hf}.out_proj.weight", f"{nmtk}.out.weight", "out"),
            Entry(f"{hf}.out_proj.bias", f"{nmtk}.out.bias", "out")]


def _block(hf: str, nmtk: str, kind_fc: str) -> list[Entry]:
    """A LayerNorm (``hf`` norm, ``nmtk`` residual) or the feed-forward pair."""
    if kind_fc == "norm":
        return [Entry(f"{hf}.weight", f"{nmtk}.norm.weight", "out"), Entry(f"{hf}.bias", f"{nmtk}.norm.bias", "out")]
    return [Entry(f"{hf}.fc1.weight", f"{nmtk}.ffn.w1.weight", "in"),
            Entry(f"{hf}.fc1.bias", f"{nmtk}.ffn.w1.bias", "plain"),
            Entry(f"{hf}.fc2.weight", f"{nmtk}.ffn.w2.weight", "out"),
            Entry(f"{hf}.fc2.bias", f"{nmtk}.ffn.w2.bias", "out")]


def layer_entries(encoder_layers: int, decoder_layers: int, d: int) -> list[Entry]:
    """Every layer tensor of a MarianMT model and its nmtk counterpart."""
    entries: list[Entry] = []
    for i in range(encoder_layers):
        hf, nm = f"model.encoder.layers.{i}", f"encoder.{i}"
        entries += _projections(f"{hf}.self_attn", f"{nm}.self_attn", d, "qkv", "qkv")
        entries += _out(f"{hf}.self_attn", f"{nm}.self_attn")
        entries += _block(f"{hf}.self_attn_layer_norm", f"{nm}.res_attn", "norm")
        entries += _block(hf, nm, "ffn") + _block(f"{hf}.final_layer_norm", f"{nm}.res_ffn", "norm")
    for i in range(decoder_layers):
        hf, nm = f"model.decoder.layers.{i}", f"decoder.{i}"
        entries += _projections(f"{hf}.self_attn", f"{nm}.self_attn", d, "qkv", "qkv")
        entries += _out(f"{hf}.self_attn", f"{nm}.self_attn")
        entries += _block(f"{hf}.self_attn_layer_norm", f"{nm}.res_self", "norm")
        entries += _projections(f"{hf}.encoder_attn", f"{nm}.cross_attn", d, "q", "q")
        entries += _projections(f"{hf}.encoder_attn", f"{nm}.cross_attn", d, "kv", "kv")
        entries += _out(f"{hf}.encoder_attn", f"{nm}.cross_attn")
        entries += _block(f"{hf}.encoder_attn_layer_norm", f"{nm}.res_cross", "norm")
        entries += _block(hf, nm, "ffn") + _block(f"{hf}.final_layer_norm", f"{nm}.res_ffn", "norm")
    return entries


def to_hf(t: torch.Tensor, kind: str, order: torch.Tensor) -> torch.Tensor:
    if kind == "in":
        return t[:, order]
    if kind == "out":
        return t[order]
    return t


def from_hf(t: torch.Tensor, kind: str, inverse: torch.Tensor) -> torch.Tensor:
    return to_hf(t, kind, inverse)


def marian_positions(n: int, d_model: int) -> torch.Tensor:
    """transformers' sinusoidal table for MarianMT (sines, then cosines): nmtk's table, reordered."""
    from nmtk.model.transformer import sinusoidal_positions

    return sinusoidal_positions(n, d_model)[:, residual_order(d_model)]


# ------------------------------------------------------------------------------------ vocabulary


@dataclass
class SideVocab:
    """One side's vocabulary in both numberings: ``hf_ids[i]`` is the Hugging Face id of nmtk id i."""

    pieces: list[str]  # nmtk id order
    hf_ids: list[int]
    hf_vocab: dict[str, int]
    spm_bytes: bytes

    @property
    def hf_size(self) -> int:
        return len(self.hf_vocab)

    def hf_order(self) -> list[int]:
        """nmtk id of every Hugging Face id, in Hugging Face order."""
        order = [NO_ROW] * self.hf_size
        for nmtk_id, hf_id in enumerate(self.hf_ids):
            if hf_id != NO_ROW:
                order[hf_id] = nmtk_id
        return order


def side_vocab_of_run(model_file: Path) -> SideVocab:
    """A run's subword model as a Hugging Face vocabulary: nmtk's own ids (a plain sentencepiece model),
    or the original numbering kept by `nmtk import`."""
    model = load_subword_model(model_file)
    if isinstance(model, MappedSentencePiece):
        return SideVocab(model.pieces(), model.hf_ids, model.hf_vocab, model.spm_bytes)
    if not isinstance(model, SentencePieceModel):
        raise NmtkError(f"{model_file}: a WordPiece vocabulary; MarianTokenizer reads sentencepiece models only "
                        '(train with tokenizer.type = "bpe" or "unigram")')
    pieces = model.pieces()
    if len(set(pieces)) != len(pieces):
        raise NmtkError(f"{model_file}: two ids share a piece; vocab.json cannot number them")
    return SideVocab(pieces, list(range(len(pieces))), {p: i for i, p in enumerate(pieces)},
                     model_file.read_bytes())


def nmtk_order(hf_vocab: dict[str, int], start: int | None, where: Path) -> list[int]:
    """Hugging Face ids in nmtk's order: pad (or a new row), unk, the decoder's start, eos, the rest."""
    for symbol in (PAD, UNK, EOS):
        if symbol not in hf_vocab:
            raise NmtkError(f"{where}: no {symbol} entry; a MarianMT vocabulary has {PAD}, {UNK} and {EOS}")
    pad, unk, eos = hf_vocab[PAD], hf_vocab[UNK], hf_vocab[EOS]
    if start is None or start == pad:
        head = [NO_ROW, unk, pad, eos] if start == pad else [pad, unk, NO_ROW, eos]
    else:
        head = [pad, unk, start, eos]
    taken = set(head)
    return head + [i for i in sorted(hf_vocab.values()) if i not in taken]


def mapped_side(hf_vocab: dict[str, int], order: list[int], spm_bytes: bytes) -> SideVocab:
    names = {i: p for p, i in hf_vocab.items()}
    pieces = [SPECIAL_SYMBOLS[k] if k < len(SPECIAL_SYMBOLS) else names[i] for k, i in enumerate(order)]
    return SideVocab(pieces, order, hf_vocab, spm_bytes)


def write_json(path: Path, data: Any) -> None:
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def nmtk_rows(table: torch.Tensor, side: SideVocab, inverse: torch.Tensor) -> torch.Tensor:
    """An imported embedding table's rows in nmtk's order (``side.hf_ids``; a row transformers has not is
    zero) and its columns in nmtk's width order (``inverse``: `residual_order`'s inverse)."""
    import torch

    rows = torch.zeros(len(side.hf_ids), table.shape[1], dtype=torch.float32)
    present = torch.tensor([i for i, h in enumerate(side.hf_ids) if h != NO_ROW])
    rows[present] = table.float()[torch.tensor([h for h in side.hf_ids if h != NO_ROW])][:, inverse]
    return rows
