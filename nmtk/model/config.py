"""The model's own configuration: what the Transformer needs to know, and nothing about recipes."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Literal


@dataclass(frozen=True)
class ModelConfig:
    """Shape and regularisation of a Transformer (names as in the paper, Table 3)."""

    src_vocab: int
    tgt_vocab: int
    d_model: int = 512
    heads: int = 8
    d_ff: int = 2048
    encoder_layers: int = 6
    decoder_layers: int = 6
    dropout: float = 0.1
    attention_dropout: float = 0.0
    relu_dropout: float = 0.0
    share_embeddings: Literal["all", "decoder", "none"] = "all"
    norm: Literal["post", "pre"] = "post"
    pad_id: int = 0
    max_positions: int = 1024
    activation: Literal["relu", "swish", "gelu"] = "relu"
    output_bias: bool = False
    positions: Literal["paper", "fairseq"] = "paper"  # fairseq: M2M-100/NLLB's sinusoids (`sinusoidal_positions`)
    output_languages: int = 0  # > 0: each target language's softmax over its own pieces (`languages.py`)

    def __post_init__(self) -> None:
        if self.d_model % self.heads:
            raise ValueError(f"d_model ({self.d_model}) must be divisible by heads ({self.heads})")
        if self.share_embeddings == "all" and self.src_vocab != self.tgt_vocab:
            raise ValueError('share_embeddings="all" needs one vocabulary for both sides')

    def to_dict(self) -> dict[str, Any]:
        """As checkpoints store it; without ``output_languages`` when unused, so that a checkpoint of a
        model without them reads as before."""
        fields = asdict(self)
        if not self.output_languages:
            del fields["output_languages"]
        return fields
