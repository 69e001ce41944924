"""The M2M-100 ↔ nmtk weight map: MarianMT's (`nmtk.convert.marian.weights`) without the width
permutation (fairseq's sinusoids are computed by nmtk itself, ``positions = "fairseq"``), plus each
stack's final LayerNorm of a pre-norm model; and the ``<s>`` row nmtk starts decoding from, a copy
of ``</s>``'s kept out of the softmax by `START_BIAS`."""

from __future__ import annotations

from typing import TYPE_CHECKING

from nmtk.convert.m2m100.folder import M2M100
from nmtk.convert.marian.weights import (
    HF_ACTIVATIONS,
    NO_ROW,
    Entry,
    SideVocab,
    from_hf,
    layer_entries,
    nmtk_rows,
    to_hf,
)
from nmtk.errors import NmtkError
from nmtk.vocab import BOS_ID

if TYPE_CHECKING:
    import torch

    from nmtk.model import ModelConfig, Transformer

#: What keeps nmtk's ``<s>`` (a copy of ``</s>``'s row, where decoding starts) out of the softmax.
START_BIAS = -1e4
TIED_KEYS = ("model.shared.weight", "model.encoder.embed_tokens.weight", "model.decoder.embed_tokens.weight",
             "lm_head.weight")
FINAL_NORMS = (("model.encoder.layer_norm", "encoder_norm"), ("model.decoder.layer_norm", "decoder_norm"))


def nmtk_m2m100(m: M2M100) -> Transformer:
    """The nmtk Transformer holding an M2M-100 model's weights (pre-norm, fairseq positions)."""
    import torch

    from nmtk.model import ModelConfig, Transformer
    from nmtk.vocab import PAD_ID

    c, w = m.config, m.weights
    d = c["d_model"]
    cfg = ModelConfig(
        src_vocab=len(m.side.pieces), tgt_vocab=len(m.side.pieces), d_model=d, heads=c["encoder_attention_heads"],
        d_ff=c["encoder_ffn_dim"], encoder_layers=c["encoder_layers"], decoder_layers=c["decoder_layers"],
        dropout=float(c.get("dropout", 0.1)), attention_dropout=float(c.get("attention_dropout", 0.0)),
        relu_dropout=float(c.get("activation_dropout", 0.0)), share_embeddings="all", norm="pre", pad_id=PAD_ID,
        max_positions=int(c.get("max_position_embeddings", 1024)),
        activation=HF_ACTIVATIONS[c.get("activation_function", "relu")], output_bias=True, positions="fairseq")
    with torch.device("meta"):
        shapes = Transformer(cfg).state_dict()
    same = torch.arange(d)
    state = {k: torch.zeros(v.shape, dtype=torch.float32) for k, v in shapes.items()}
    for e in _entries(cfg):
        if e.hf not in w:
            raise NmtkError(f"the weights lack {e.hf}: not an M2M-100 model of this configuration")
        target = state[e.nmtk] if e.rows is None else state[e.nmtk][e.rows[0] : e.rows[1]]
        target.copy_(from_hf(w[e.hf].float(), e.kind, same))
    state["src_embed.table.weight"] = nmtk_rows(w["model.shared.weight"], m.side, same)
    state["tgt_embed.table.weight"] = state["src_embed.table.weight"]
    state["output_bias"][BOS_ID] = START_BIAS
    model = Transformer.empty(cfg, torch.device("cpu"))
    model.load_state_dict(state)
    return model.eval()


def _entries(cfg: ModelConfig) -> list[Entry]:
    finals = [Entry(f"{hf}.{p}", f"{nm}.{p}", "out") for hf, nm in FINAL_NORMS for p in ("weight", "bias")]
    return layer_entries(cfg.encoder_layers, cfg.decoder_layers, cfg.d_model) + finals


def m2m100_state_dict(model: Transformer, side: SideVocab, embedding_keys: tuple[str, ...] = ("model.shared.weight",)
                      ) -> dict[str, torch.Tensor]:
    """The nmtk model's tensors under M2M-100's names, in its vocabulary's order: what
    ``save_pretrained`` writes (the tied matrix under ``embedding_keys``, the names the original used)."""
    import torch

    state = model.state_dict()
    same = torch.arange(model.cfg.d_model)
    out: dict[str, torch.Tensor] = {}
    for e in _entries(model.cfg):
        tensor = to_hf(state[e.nmtk], e.kind, same)
        part = tensor if e.rows is None else tensor[e.rows[0] : e.rows[1]]
        out[e.hf] = part.contiguous().clone()
    order = side.hf_order()
    if NO_ROW in order:
        raise NmtkError("the vocabulary has a row the M2M-100 model has not")
    table = state["src_embed.table.weight"][torch.tensor(order)].contiguous()
    for key in embedding_keys:
        out[key] = table.clone()
    return out
