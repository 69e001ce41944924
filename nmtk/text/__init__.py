"""Raw text <-> token ids: Moses pre-processing (sacremoses) and sentencepiece subwords."""

from nmtk.text.moses import Moses
from nmtk.text.pipeline import TextPipeline, moses_for, text_pipelines
from nmtk.text.subword import learn_subwords

__all__ = ["Moses", "TextPipeline", "learn_subwords", "moses_for", "text_pipelines"]
