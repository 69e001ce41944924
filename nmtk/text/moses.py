"""Moses punctuation normalisation, tokenisation and detokenisation through sacremoses.

Neither step is exactly reversible (normalisation rewrites „quotes“ and dashes; tokenisation and
detokenisation lose spacing such as ``5,5 %`` or URLs), so each can be switched off per side.
"""

from __future__ import annotations

from functools import cached_property
from typing import TYPE_CHECKING

from nmtk.text.reading import normalized

if TYPE_CHECKING:
    from sacremoses import MosesDetokenizer, MosesPunctNormalizer, MosesTokenizer


class Moses:
    """The Moses steps of one side's pipeline: ``normalize`` punctuation, ``tokenize`` (and detokenise).

    With both off the text passes through untouched. ``aggressive_dash_splits`` turns ``a-b`` into
    ``a @-@ b`` (the paper-era en-de convention); the detokeniser joins it back. No XML escaping: the
    subword models handle raw characters. sacremoses is imported and its objects built on first use:
    its import alone (~0.3 s, hundreds of regexes) would otherwise start every command of a recipe
    without Moses.
    """

    def __init__(self, lang: str, tokenize: bool = True, normalize: bool = True,
                 aggressive_dash_splits: bool = True) -> None:
        self.lang, self.tokenize_, self.normalize = lang, tokenize, normalize
        self.aggressive_dash_splits = aggressive_dash_splits

    @cached_property
    def _tok(self) -> MosesTokenizer:
        from sacremoses import MosesTokenizer

        return MosesTokenizer(lang=self.lang)

    @cached_property
    def _detok(self) -> MosesDetokenizer:
        from sacremoses import MosesDetokenizer

        return MosesDetokenizer(lang=self.lang)

    @cached_property
    def _norm(self) -> MosesPunctNormalizer:
        from sacremoses import MosesPunctNormalizer

        return MosesPunctNormalizer(lang=self.lang)

    def __repr__(self) -> str:
        return (f"Moses({self.lang!r}, tokenize={self.tokenize_}, normalize={self.normalize}, "
                f"aggressive_dash_splits={self.aggressive_dash_splits})")

    @property
    def enabled(self) -> bool:
        return self.tokenize_ or self.normalize

    def tokenize(self, text: str) -> str:
        """Raw sentence -> (normalised) space-separated Moses tokens; unchanged when both steps are off.
        The text is `normalized` first, in training data and input alike: accents composed with their
        letters ("é" typed as ``e`` + U+0301 was split off as a token of its own) and the invisible break
        hints (``&shy;``) dropped."""
        if not self.enabled:
            return text
        text = normalized(" ".join(text.split()))
        if text.replace(" ", "").isalpha():  # words of letters alone: both steps leave them as they are
            return text
        if self.normalize and text:
            text = self._norm.normalize(text)
        if not self.tokenize_ or not text:
            return text
        return self._tok.tokenize(
            text, aggressive_dash_splits=self.aggressive_dash_splits, escape=False, return_str=True
        )

    def detokenize(self, text: str) -> str:
        """Space-separated Moses tokens -> raw sentence (a no-op when tokenisation is off)."""
        if not self.tokenize_:
            return text
        return self._detok.detokenize(text.split(), unescape=False)

    def __getstate__(self) -> dict:
        """Picklable for worker processes: the sacremoses objects (built on first use) are not sent."""
        return {"lang": self.lang, "tokenize": self.tokenize_, "normalize": self.normalize,
                "aggressive_dash_splits": self.aggressive_dash_splits}

    def __setstate__(self, state: dict) -> None:
        self.__init__(**state)
