"""One language's whole text pipeline: raw sentence <-> (Moses tokens) <-> subword ids.

Which steps run depends on the side: the recipe says per side whether Moses normalises and
tokenises (``tokenizer.moses``, ``tokenizer.normalize_punctuation``). With neither, the subword
model sees the raw sentence and ``decode(encode(x)) == x``: the translation is plain text that can be
scored against raw references.
"""

from __future__ import annotations

from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import numpy as np

from nmtk.text.brackets import CLOSING, OPENING
from nmtk.text.moses import Moses
from nmtk.text.subword import SubwordModel, load_subword_model, word_starts
from nmtk.vocab import HINT_SYMBOLS, UNK_ID

if TYPE_CHECKING:
    from nmtk.recipe import TokenizerSection

Side = Literal["source", "target"]


class TextPipeline:
    """Moses (per the recipe) then the subword model; `decode` inverts `encode` up to what Moses changed.

    ``prefix``: ids put before every encoded sentence, a multilingual model's language tag on its source
    side. The tag is an id, never text: Moses and the subword model cannot change or split it.
    ``starts``: on a target side, ids every translation begins with (M2M-100's target language code,
    forced as the first token); ``hidden``: ids `decode` never writes as text (M2M-100's language
    codes, which transformers' tokenizer drops as special tokens too).
    """

    def __init__(self, moses: Moses, subword_model: Path, prefix: tuple[int, ...] = (),
                 starts: tuple[int, ...] = (), hidden: frozenset[int] = frozenset()) -> None:
        self.moses = moses
        self.model_path = Path(subword_model)
        self.subwords: SubwordModel = load_subword_model(self.model_path)
        self.prefix, self.starts, self.hidden = list(prefix), tuple(starts), frozenset(hidden) | frozenset(starts)
        self._spelt: dict[str, bool] = {}  # `spells`' answers, per character

    @property
    def vocab_size(self) -> int:
        return self.subwords.vocab_size

    def encode(self, text: str) -> list[int]:
        return self.prefix + self.subwords.encode(self.moses.tokenize(text))

    def encode_tokenized(self, lines: list[str]) -> list[list[int]]:
        """Ids of lines that already went through `Moses.tokenize`, batched through the subword model."""
        if self.prefix:
            return [self.prefix + ids for ids in self.subwords.encode_batch(lines)]
        return self.subwords.encode_batch(lines)

    @cached_property
    def hint_markers(self) -> tuple[int, int, int] | None:
        """The ids of the terminology hints' symbols (`nmtk.vocab.HINT_SYMBOLS`, each one piece with its
        word boundary) in a vocabulary learned with them, else None."""
        ids = {piece: i for i, piece in enumerate(self.subwords.pieces())}
        found = tuple(ids.get("\u2581" + symbol) for symbol in HINT_SYMBOLS)
        return None if None in found else found  # type: ignore[return-value]

    @cached_property
    def lettered(self) -> frozenset[int]:
        """The ids of the pieces that hold a letter or a bracket: a translation's run of them repeated back
        to back is a model stuttering (`nmtk.decode.base.stutter`: "eine Frau)))))"), a run of ``1``s or
        ``!``s is not (a line may say "!!!!")."""
        return frozenset(i for i, piece in enumerate(self.subwords.pieces())
                         if any(c.isalpha() or c in OPENING + CLOSING for c in piece))

    @cached_property
    def word_marks(self) -> tuple[frozenset[int], np.ndarray, np.ndarray]:
        """What a translation's stutters are read by (`nmtk.decode.base.stutter`): the pieces with a letter
        (`lettered`), per id whether it begins a word, and each piece's letters."""
        pieces = self.subwords.pieces()
        return self.lettered, word_starts(pieces), np.array([sum(c.isalpha() for c in p) for p in pieces])

    def spells(self, char: str) -> bool:
        """Whether the subword model spells ``char`` (through Moses) without ``<unk>``: false for an emoji
        or a script its training data lacked, where it has no byte fallback (`nmtk.decode.unknown`)."""
        if char not in self._spelt:
            self._spelt[char] = UNK_ID not in self.subwords.encode(self.moses.tokenize(char))
        return self._spelt[char]

    def decode(self, ids: list[int]) -> str:
        return self.moses.detokenize(self.tokens_text(ids))

    def tokens_text(self, ids: list[int]) -> str:
        """``ids`` as the subword model writes them, before detokenising (Moses tokens where the recipe
        has Moses), the hidden ids (a multilingual model's tags) left out."""
        return self.subwords.decode([i for i in ids if i not in self.hidden] if self.hidden else ids)

    def __getstate__(self) -> dict:
        return {"moses": self.moses, "model_path": self.model_path, "prefix": tuple(self.prefix),
                "starts": self.starts, "hidden": self.hidden}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["moses"], state["model_path"], state.get("prefix", ()), state.get("starts", ()),
                      state.get("hidden", frozenset()))


def moses_for(tok: TokenizerSection, lang: str, side: Side) -> Moses:
    """The Moses steps a recipe's ``[tokenizer]`` asks for on one side."""
    return Moses(lang, tokenize=tok.applies("moses", side), normalize=tok.applies("normalize_punctuation", side),
                 aggressive_dash_splits=tok.aggressive_dash_splits)


def text_pipelines(tok: TokenizerSection, langs: tuple[str, str], models: dict[str, Path], tag: int | None = None,
                   starts: tuple[int, ...] = (), hidden: frozenset[int] = frozenset()
                   ) -> tuple[TextPipeline, TextPipeline]:
    """Source and target pipelines from the ``[tokenizer]`` settings and each language's subword model
    file; ``tag``: the language tag id a multilingual model's sources begin with; ``starts`` and
    ``hidden``: the ids its translations begin with, and those never written as text (M2M-100's)."""
    src, tgt = langs
    return (TextPipeline(moses_for(tok, src, "source"), models[src], () if tag is None else (tag,)),
            TextPipeline(moses_for(tok, tgt, "target"), models[tgt], starts=starts, hidden=hidden))
