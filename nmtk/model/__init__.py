"""The Transformer core shared by training and decoding. Knows nothing of recipes, training or the CLI."""

from nmtk.model.attention import LayerCache
from nmtk.model.config import ModelConfig
from nmtk.model.transformer import DecoderCache, Encoded, Transformer, parameter_count

__all__ = ["DecoderCache", "Encoded", "LayerCache", "ModelConfig", "Transformer", "parameter_count"]
