"""One language's whole text pipeline: raw sentence <-> Moses tokens <-> sentencepiece ids."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import sentencepiece as spm

from nmtk.text.moses import Moses

if TYPE_CHECKING:
    from nmtk.recipe import TokenizerSection


class TextPipeline:
    """Moses (optional) then sentencepiece; `decode` inverts `encode` up to Moses normalisation."""

    def __init__(self, moses: Moses, spm_model: Path) -> None:
        self.moses = moses
        self.spm_model = Path(spm_model)
        self.sp = spm.SentencePieceProcessor(model_file=str(spm_model))

    @property
    def vocab_size(self) -> int:
        return self.sp.get_piece_size()

    def encode(self, text: str) -> list[int]:
        return self.sp.encode(self.moses.tokenize(text))

    def encode_tokenized(self, lines: list[str]) -> list[list[int]]:
        """Ids of already Moses-tokenised lines, batched through sentencepiece."""
        return self.sp.encode(lines)

    def decode(self, ids: list[int]) -> str:
        return self.moses.detokenize(self.sp.decode(ids))

    def __getstate__(self) -> dict:
        return {"moses": self.moses, "spm_model": self.spm_model}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["moses"], state["spm_model"])


def moses_for(tok: TokenizerSection, lang: str) -> Moses:
    """The Moses step a recipe's ``[tokenizer]`` asks for, for one language."""
    return Moses(lang, tok.moses, tok.normalize_punctuation, tok.aggressive_dash_splits)


def text_pipelines(tok: TokenizerSection, langs: tuple[str, str],
                   models: dict[str, Path]) -> tuple[TextPipeline, TextPipeline]:
    """Source and target pipelines from the ``[tokenizer]`` settings and each language's subword model file."""
    src, tgt = (TextPipeline(moses_for(tok, lang), models[lang]) for lang in langs)
    return src, tgt
