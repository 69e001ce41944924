"""Moses punctuation normalisation, tokenisation and detokenisation through sacremoses."""

from __future__ import annotations

from dataclasses import dataclass, field

from sacremoses import MosesDetokenizer, MosesPunctNormalizer, MosesTokenizer


@dataclass
class Moses:
    """The Moses side of the pipeline for one language; a no-op when ``enabled`` is false.

    ``aggressive_dash_splits`` turns ``a-b`` into ``a @-@ b`` (the paper-era en-de convention); the
    detokeniser joins it back. No XML escaping: sentencepiece handles raw characters.
    """

    lang: str
    enabled: bool = True
    normalize: bool = True
    aggressive_dash_splits: bool = True
    _tok: MosesTokenizer = field(init=False, repr=False)
    _detok: MosesDetokenizer = field(init=False, repr=False)
    _norm: MosesPunctNormalizer = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._tok = MosesTokenizer(lang=self.lang)
        self._detok = MosesDetokenizer(lang=self.lang)
        self._norm = MosesPunctNormalizer(lang=self.lang)

    def tokenize(self, text: str) -> str:
        """Raw sentence -> space-separated Moses tokens."""
        text = " ".join(text.split())
        if not self.enabled or not text:
            return text
        if self.normalize:
            text = self._norm.normalize(text)
        return self._tok.tokenize(
            text, aggressive_dash_splits=self.aggressive_dash_splits, escape=False, return_str=True
        )

    def detokenize(self, text: str) -> str:
        """Space-separated Moses tokens -> raw sentence."""
        if not self.enabled:
            return text
        return self._detok.detokenize(text.split(), unescape=False)

    def __getstate__(self) -> dict:
        """Picklable for worker processes: the sacremoses objects are rebuilt on arrival."""
        return {"lang": self.lang, "enabled": self.enabled, "normalize": self.normalize,
                "aggressive_dash_splits": self.aggressive_dash_splits}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self.__post_init__()
