"""Word alignments from encoder-decoder attention (`translate --print-alignment`).

For a source and its translation, the model is run once more, teacher-forced, keeping the
cross-attention weights of one decoder layer (`Transformer.attention_weights`). The row of the
position that *produced* target token j (decoder input j - 1) says where the model looked; averaged
over heads, summed over the subword pieces of each word, its argmax over source words aligns target
word j. Pairs are written ``i-j`` (source word i, target word j, from 0), the format of fast_align
and fairseq. Words are the space-separated units of the subword model's input: Moses tokens when
the recipe Moses-tokenises, else the words of the text itself.
"""

from __future__ import annotations

import numpy as np
import torch

from nmtk.data.dataset import pad_sequences
from nmtk.device import autocast_for
from nmtk.model import Encoded, Transformer
from nmtk.vocab import BOS_ID, EOS_ID


@torch.inference_mode()
def attention_maps(model: Transformer, source: list[int], target: list[int], device: torch.device,
                   precision: str = "fp32") -> dict[str, list[np.ndarray]]:
    """One pair's attention weights, per kind (encoder, cross, decoder) a (heads, rows, columns) array per
    layer: the model run over the source (EOS appended) and ``<s>`` + target, keeping every weight."""
    src = torch.tensor([[*source, EOS_ID]], device=device)
    tgt = torch.tensor([[BOS_ID, *target]], device=device)
    with model.attention_weights() as kept, autocast_for(device, precision):
        model(src, tgt)
    return {kind: [w[0].float().cpu().numpy() for w in layers] for kind, layers in kept.items()}  # filled on leaving


@torch.inference_mode()
def cross_attention(model: Transformer, sources: list[list[int]], targets: list[list[int]], layer: int,
                    device: torch.device, precision: str = "fp32") -> list[np.ndarray]:
    """Per pair, the head-averaged cross-attention of decoder ``layer`` (0-based, negative from the end):
    (len(target), len(source)) rows producing each target token, columns of the source tokens (no EOS)."""
    src = pad_sequences([np.asarray(s, dtype=np.int64) for s in sources], suffix=EOS_ID).to(device)
    with autocast_for(device, precision):
        encoded = model.encode(src)
    return encoded_cross_attention(model, encoded, list(range(len(sources))), sources, targets, layer, device,
                                   precision)


@torch.inference_mode()
def encoded_cross_attention(model: Transformer, encoded: Encoded, rows: list[int], sources: list[list[int]],
                            targets: list[list[int]], layer: int, device: torch.device,
                            precision: str = "fp32") -> list[np.ndarray]:
    """`cross_attention` of targets whose sources were encoded already: ``encoded`` (a search's batch),
    ``rows`` each target's row in it. Only that layer's weights are kept (every other attention runs
    fused), and the decoder's states are never projected onto the vocabulary."""
    index = torch.tensor(rows, device=device)
    memory = encoded.memory.index_select(0, index)
    mask = None if encoded.mask is None else encoded.mask.index_select(0, index)
    tgt = pad_sequences([np.asarray(t, dtype=np.int64) for t in targets], prefix=BOS_ID).to(device)
    with model.attention_weights(only=[model.decoder[layer].cross_attn]) as kept, autocast_for(device, precision):
        model.decode(tgt, memory, mask)
    weights = kept["cross"][layer].float().mean(dim=1).cpu().numpy()  # (B, T, S)
    return [weights[i, : len(t), : len(s)] for i, (s, t) in enumerate(zip(sources, targets, strict=True))]
