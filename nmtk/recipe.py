"""Recipes: the validated TOML files that configure every nmtk command.

A recipe is a set of pydantic models, one per section. Every model forbids unknown keys, so a
misspelled key is an error naming the field rather than a silently ignored setting. Overrides given
on the command line (``--set model.dropout=0.3``) are merged into the parsed TOML *before*
validation, so they are checked exactly like the file.
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import tomli_w
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from nmtk.console import is_main_process
from nmtk.errors import NmtkError, validator_words
from nmtk.precision import Precision
from nmtk.vocab import PAD_ID, SPECIAL_SYMBOLS

if TYPE_CHECKING:
    from nmtk.model import ModelConfig

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised only on Python 3.10
    import tomli as tomllib


#: Decoding's batch budget by device when ``decode.beam_tokens`` is unset: source tokens × beam per batch
#: (translate, validation, serving). Not ``batching.batch_tokens``, which counts tokens per side of a
#: training batch. A GPU needs far larger batches than a CPU to be kept busy. On a CPU nmtk's own engine
#: holds 356 instead of 688 MiB at 2,048, for 5–9 % of its translation speed, and CTranslate2, whose
#: searches run a thread each (`nmtk.decode.ct2.thread_layout`), is fastest there (docs/decoding.md).
DECODE_BEAM_TOKENS = {"cpu": 2_048, "cuda": 65_536}


class Section(BaseModel):
    """Base of every recipe section: unknown keys are errors, assignments are validated, and types are
    strict: TOML has real types, so ``layers = true``, ``dropout = "0.3"`` or ``joint = "yes"`` are errors
    naming the field, never coerced (an integer is still a valid float)."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, use_attribute_docstrings=True, strict=True)


# --------------------------------------------------------------------------------------------- data


class CorpusFile(Section):
    """One side of a corpus: a text file under the data root, optionally downloadable."""

    path: str
    """Path of the text file relative to the data root (``.gz`` is read compressed, ``.sgm`` as WMT SGML)."""
    url: str | None = None
    """Where to download ``path`` (or the archive that contains it) when it is not under the data root."""
    sha256: str | None = None
    """Expected sha256 of the downloaded file (the archive, when ``archive`` is set)."""
    archive: str | None = None
    """When ``url`` is an archive (.tgz/.tar.gz/.zip): where to store it under the data root; it is
    unpacked next to itself and ``path`` is then a file inside it."""
    column: int | None = Field(default=None, ge=1)
    """In a file of tab-separated columns, which one (1: the first) is this side: one file can hold both
    sides (``source = { path = "paracrawl.en-de.tsv.gz", column = 1 }``, the target ``column = 2``), as
    OPUS, ParaCrawl, HPLT and OpusTrainer's corpora come. Unset: the whole line."""

    @model_validator(mode="after")
    def _column_of_text(self) -> CorpusFile:
        if self.column is not None and self.path.endswith((".sgm", ".sgm.gz")):
            raise ValueError(f"{self.path}: a WMT .sgm file has no columns (its <seg> texts are read)")
        return self

    @field_validator("sha256")
    @classmethod
    def _hex_digest(cls, value: str | None) -> str | None:
        if value is not None and (len(value) != 64 or any(c not in "0123456789abcdef" for c in value.lower())):
            raise ValueError("must be 64 hexadecimal digits")
        return value.lower() if value else value


#: A corpus tag: one printable word, neither a special symbol nor a ``>>xx<<`` target tag.
CORPUS_TAG = re.compile(r"(?!<(?:s|/s|pad|unk)>$)(?!>>.*<<$)[^\s\x00-\x1f\x7f]{1,40}")


class Corpus(Section):
    """A parallel corpus: a source file and a target file with one sentence per line, line-aligned."""

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
    """Short name shown in tables and used in file names (letters, digits, ``.``, ``_``, ``-``)."""
    source: CorpusFile
    """The source-language side."""
    target: CorpusFile
    """The target-language side."""
    weight: float = 1.0
    """Training corpora: how often its pairs are drawn per epoch, relative to 1.0: ``2`` trains on each
    pair twice an epoch, ``0.5`` on half of them (another half each epoch; fairseq's
    ``--upsample-primary``, Marian's ``--data-weighting``). Decided from the seed and the epoch alone:
    resumable exactly, the same under any launcher."""
    tag: str | None = None
    """Training corpora: a vocabulary item put before the source of each of its pairs (tagged
    back-translation, Caswell et al. 2019: ``tag = "<BT>"``), its own piece, never produced by segmenting
    text; `translate` never adds it. In a multilingual recipe it follows the target's ``>>de<<``."""

    @model_validator(mode="after")
    def _weight_and_tag(self) -> Corpus:
        if not (self.weight > 0 and self.weight < float("inf")):
            raise ValueError(f"corpus {self.name}: weight {self.weight} must be a number above 0 (1: as it is)")
        if self.tag is not None and not CORPUS_TAG.fullmatch(self.tag):
            raise ValueError(f"corpus {self.name}: tag {self.tag!r} must be one word of printable characters, "
                             "not a special symbol (<s>, </s>, <pad>, <unk>) nor a target tag (>>de<<); e.g. \"<BT>\"")
        return self

    @model_validator(mode="before")
    @classmethod
    def _plain_paths(cls, data: Any) -> Any:
        """Allow ``source = "multi30k/train.en.gz"`` as shorthand for ``source = {path = ...}``."""
        if isinstance(data, dict):
            data = dict(data)
            for side in ("source", "target"):
                if isinstance(data.get(side), str):
                    data[side] = {"path": data[side]}
        return data


class LanguagePair(Section):
    """One direction of a multilingual recipe (``[[data.pairs]]``), with its own corpora."""

    source_lang: str = Field(pattern=r"^[A-Za-z][A-Za-z0-9_]*$")
    """Source language code, e.g. ``en``."""
    target_lang: str = Field(pattern=r"^[A-Za-z][A-Za-z0-9_]*$")
    """Target language code, e.g. ``de``: the source's tag (``>>de<<``) asks for it."""
    train: list[Corpus] = Field(min_length=1)
    """This direction's training corpora, concatenated."""
    valid: Corpus
    """This direction's validation set: loss and BLEU are reported per direction."""
    test: list[Corpus] = []
    """This direction's test sets."""

    @property
    def name(self) -> str:
        """``en-de``: in split and file names and in reports."""
        return f"{self.source_lang}-{self.target_lang}"


def target_tag(lang: str) -> str:
    """The target-language tag put before a multilingual model's source: ``>>de<<``, the convention of
    multilingual opus-mt models, so that nmtk's and theirs speak one language."""
    return f">>{lang}<<"


class CleanSection(Section):
    """What `prepare` removes from the training corpora, besides empty, over-long and bad-ratio pairs.

    Each rule on by default, counted per corpus in the manifest, and every pair it drops listed in the
    prepared data's ``dropped.tsv`` (corpus, line, rule). Validation and test sets are never cleaned."""

    duplicates: bool = True
    """Exact duplicate pairs: the first is kept, the others dropped (by 64-bit hashes: memory 8 bytes a
    pair)."""
    copies: bool = True
    """Pairs whose source and target are the same text (the same letters and digits, up to case and
    punctuation): untranslated copies."""
    scripts: float = Field(0.5, ge=0.0, le=1.0)
    """A side whose letters are more than this share outside its language's scripts (Latin for ``de``,
    Cyrillic for ``ru``...) is dropped; 1 turns it off. Languages nmtk knows no script for are left
    alone."""
    language: bool = True
    """Language identification: a side that the packaged identifier (`nmtk.text.langid`) confidently
    finds to be another language than the recipe says is dropped. Languages it does not know are left
    alone."""
    numbers: bool = True
    """Numbers and URLs: a pair whose sides both write numbers in digits, but not the same ones, or
    where one side has a URL the other lacks, is dropped (a number in digits on one side only is
    usually spelled out on the other, and is kept)."""


class DataSection(Section):
    """Which corpora to use and how to clean them: one pair (``source_lang``, ``target_lang``,
    ``train``, ``valid``, ``test``), or several (``[[data.pairs]]``, one model for all)."""

    source_lang: str | None = Field(None, min_length=1)
    """Source language code, e.g. ``en`` (one-pair recipes)."""
    target_lang: str | None = Field(None, min_length=1)
    """Target language code, e.g. ``de`` (one-pair recipes)."""
    train: list[Corpus] = []
    """Training corpora, concatenated (one-pair recipes)."""
    valid: Corpus | None = None
    """Validation set (newstest2013 in the paper, §6.2; one-pair recipes)."""
    test: list[Corpus] = []
    """Test sets, prepared alongside for `translate` and `score` (one-pair recipes)."""
    pairs: list[LanguagePair] | None = None
    """Several directions in one model (multilingual): each with its languages and corpora. The
    source of every pair starts with its target language's tag (``>>de<<``), one vocabulary item;
    the subword model is learned jointly on all languages, each sampled to an equal share."""
    temperature: float | None = Field(None, ge=1.0)
    """Multilingual only: pair i is sampled in proportion to (n_i / n)^(1/T) per epoch: 1 (the default)
    is proportional to its size, 5 as in M2M-100 and fairseq's multilingual task (small pairs seen
    more often)."""
    max_len: int = Field(250, ge=1)
    """Training pairs with more subwords than this on either side are dropped."""
    max_ratio: float = Field(9.0, ge=1.0)
    """Training pairs whose length ratio (longer/shorter, in subwords) exceeds this are dropped,
    as Moses ``clean-corpus-n.perl`` does."""
    encoding_errors: Literal["error", "replace"] = "error"
    """Invalid UTF-8 in a corpus: ``error`` stops naming the file and line; ``replace`` uses U+FFFD."""
    clean: CleanSection = CleanSection()
    """Cleaning of the training corpora (``[data.clean]``): duplicates, copies, scripts, language
    identification, numbers and URLs."""

    @model_validator(mode="after")
    def _one_pair_or_several(self) -> DataSection:
        single = {"source_lang": self.source_lang, "target_lang": self.target_lang, "train": self.train or None,
                  "valid": self.valid}
        if self.pairs is not None:
            given = [key for key, value in {**single, "test": self.test or None}.items() if value is not None]
            if given:
                raise ValueError(f"with [[data.pairs]], give {given[0]} per pair, not in [data]")
            if not self.pairs:
                raise ValueError("data.pairs is empty")
            names = [pair.name for pair in self.pairs]
            if len(set(names)) < len(names):
                raise ValueError(f"data.pairs: {sorted({n for n in names if names.count(n) > 1})[0]} is listed twice")
            for pair in self.pairs:
                if pair.source_lang == pair.target_lang:
                    raise ValueError(f"data.pairs: {pair.name}: source and target are the same language")
                _check_test_names(pair.test)
            return self
        missing = [key for key, value in single.items() if value is None]
        if missing:
            raise ValueError(f"{missing[0]} is missing (or give [[data.pairs]])")
        if self.temperature is not None:
            raise ValueError("temperature samples the pairs of [[data.pairs]]; this recipe has one pair")
        if self.source_lang == self.target_lang:
            raise ValueError(f"source_lang and target_lang are both {self.source_lang!r}")
        _check_test_names(self.test)
        return self

    @model_validator(mode="after")
    def _weights_and_tags_train_only(self) -> DataSection:
        for pair in self.pairs or []:
            _check_training_only(pair.valid, pair.test)
        if self.valid is not None:
            _check_training_only(self.valid, self.test)
        return self

    @property
    def multilingual(self) -> bool:
        return self.pairs is not None

    def language_pairs(self) -> list[LanguagePair]:
        """Every direction: the pairs, or the one pair of a one-pair recipe."""
        if self.pairs is not None:
            return list(self.pairs)
        assert self.source_lang and self.target_lang and self.valid
        return [LanguagePair(source_lang=self.source_lang, target_lang=self.target_lang, train=self.train,
                             valid=self.valid, test=self.test)]

    def languages(self) -> list[str]:
        """Every language, sources first, in the order of the pairs."""
        pairs = self.language_pairs()
        return list(dict.fromkeys([p.source_lang for p in pairs] + [p.target_lang for p in pairs]))

    def targets(self) -> list[str]:
        return list(dict.fromkeys(p.target_lang for p in self.language_pairs()))

    def corpora(self) -> list[Corpus]:
        """Every corpus of every pair (training, validation and test)."""
        return [c for p in self.language_pairs() for c in [*p.train, p.valid, *p.test]]


def _check_training_only(valid: Corpus, test: list[Corpus]) -> None:
    for corpus in (valid, *test):
        if corpus.weight != 1.0 or corpus.tag is not None:
            raise ValueError(f"corpus {corpus.name}: weight and tag are for training corpora; validation and "
                             "test sets are translated as they are")


def _check_test_names(test: list[Corpus]) -> None:
    names = [corpus.name for corpus in test]
    clash = {n for n in names if names.count(n) > 1 or n in ("train", "valid")}
    if clash:
        raise ValueError(f"test set names must be unique and not 'train' or 'valid': {sorted(clash)}")


# ---------------------------------------------------------------------------------------- tokenizer


Sides = Literal["none", "source", "target", "both"]


class TokenizerSection(Section):
    """Moses pre-processing (per side) and the subword model (sentencepiece or WordPiece)."""

    moses: Sides = "none"
    """Which sides are Moses-tokenised (sacremoses) before the subword model, and detokenised after
    decoding: ``none``, ``source``, ``target`` or ``both`` (``true`` means both, ``false`` none).
    Detokenisation does not undo everything (``5,5 %`` comes back as ``5,5%``, URLs gain spaces), so
    a target side with Moses cannot always reproduce raw references; the subword models alone can."""
    normalize_punctuation: Sides = "none"
    """Which sides get Moses punctuation normalisation first (same values as ``moses``). It rewrites
    „quotes“, dashes and spacing for good: on the target side the model could never produce them."""
    aggressive_dash_splits: bool = True
    """With Moses tokenisation: split hyphenated words (``a-b`` -> ``a @-@ b``), as the paper-era en-de
    pipelines did."""
    type: Literal["bpe", "unigram", "wordpiece"] = "bpe"
    """Subword model: ``bpe`` (Sennrich et al., sentencepiece), ``unigram`` (Kudo, sentencepiece) or
    ``wordpiece`` (Schuster & Nakajima / Wu et al. 2016, the paper's en-fr vocabulary; Hugging Face
    ``tokenizers``: ``##`` continuation pieces, greedy longest-match-first, unknown words as ``<unk>``)."""
    vocab_size: int = Field(37000, ge=1)
    """Vocabulary size of each subword model, special symbols included."""
    joint: bool = True
    """One subword model learned on both languages (required for ``share_embeddings = "all"``)."""
    normalization: Literal["identity", "nfkc", "nmt_nfkc"] = "identity"
    """Unicode normalisation inside the subword model. ``identity`` keeps every character, so the
    segmentation inverts exactly; ``nfkc``/``nmt_nfkc`` (sentencepiece's default) fold variants
    (``…`` -> ``...``, non-breaking space -> space), which the output then cannot contain."""
    byte_fallback: bool = False
    """sentencepiece only: spell characters outside the vocabulary as UTF-8 byte pieces instead of
    ``<unk>`` (takes 256 ids of ``vocab_size``), so any text survives encoding and decoding."""
    character_coverage: float = Field(1.0, gt=0.0, le=1.0)
    """Fraction of characters the subword model must cover (sentencepiece ``character_coverage``)."""
    input_sentence_size: int = Field(1_000_000, ge=1000)
    """Sentences sampled from the training text to learn the subword model (bounds its memory)."""
    seed: int = 1
    """Seed for subword learning and sampling, so that `prepare` is reproducible."""
    correct_typos: bool = False
    """Before translation (`translate`, `serve`, either engine), a source word the training data never had
    that is one edit (two for 8+ letters) from words it had becomes the most frequent of them (SymSpell):
    `prepare` writes the training sources' word counts, which the run and its export keep. One language
    pair; ``translate --as-typed`` reads lines as they came (docs/decoding.md)."""
    reuse: str | None = None
    """A run directory (or prepared-data folder) whose subword models and vocabulary `prepare` copies
    instead of learning new ones: how a recipe fine-tunes a model made elsewhere (``nmtk import``
    writes it into the imported run's recipe). The learning fields above are then unused."""

    @field_validator("moses", "normalize_punctuation", mode="before")
    @classmethod
    def _bool_means_both_sides(cls, value: Any) -> Any:
        return {True: "both", False: "none"}.get(value, value) if isinstance(value, bool) else value

    @field_validator("vocab_size")
    @classmethod
    def _room_for_specials(cls, value: int) -> int:
        if value <= len(SPECIAL_SYMBOLS):
            raise ValueError(
                f"vocab_size ({value}) must be larger than the {len(SPECIAL_SYMBOLS)} special symbols "
                f"{', '.join(SPECIAL_SYMBOLS)}"
            )
        return value

    @model_validator(mode="after")
    def _options_of_the_model_type(self) -> TokenizerSection:
        if self.type == "wordpiece" and self.byte_fallback:
            raise ValueError('byte_fallback is a sentencepiece option; type = "wordpiece" spells unknown words <unk>')
        if self.type == "wordpiece" and self.normalization == "nmt_nfkc":
            raise ValueError('normalization "nmt_nfkc" is sentencepiece\'s; use "identity" or "nfkc" with wordpiece')
        if self.byte_fallback and self.vocab_size <= len(SPECIAL_SYMBOLS) + 256:
            raise ValueError(f"byte_fallback needs vocab_size above {len(SPECIAL_SYMBOLS) + 256} "
                             "(256 byte pieces + the special symbols)")
        return self

    def applies(self, step: Literal["moses", "normalize_punctuation"], side: Literal["source", "target"]) -> bool:
        """Whether the Moses ``step`` runs on ``side``."""
        return getattr(self, step) in ("both", side)


# ----------------------------------------------------------------------------------------- batching


class BatchingSection(Section):
    """Token-bucket batching of training pairs."""

    batch_tokens: int = Field(4096, ge=1)
    """Most tokens per batch on each side, padding included (paper §5.1: about 25,000 per side)."""
    bucket_width: int = Field(1, ge=1)
    """Sentence lengths are rounded up to a multiple of this before grouping; 1 gives the least padding."""
    max_sentences: int | None = Field(None, ge=1)
    """Optional cap on sentences per batch."""


# -------------------------------------------------------------------------------------------- model


class ModelSection(Section):
    """The Transformer's shape (paper §3, Table 3)."""

    layers: int = Field(6, ge=1)
    """N, the number of encoder and of decoder layers (paper §3.1)."""
    encoder_layers: int | None = Field(None, ge=1)
    """Encoder layers when they differ from ``layers``."""
    decoder_layers: int | None = Field(None, ge=1)
    """Decoder layers when they differ from ``layers``."""
    d_model: int = Field(512, ge=1)
    """Model width (paper §3.1: 512 base, 1024 big)."""
    heads: int = Field(8, ge=1)
    """Attention heads h (paper §3.2.2: 8 base, 16 big)."""
    d_ff: int = Field(2048, ge=1)
    """Inner width of the position-wise feed-forward network (paper §3.3)."""
    dropout: float = Field(0.1, ge=0.0, lt=1.0)
    """P_drop: residual dropout on every sub-layer output and on the embedding sums (paper §5.4)."""
    attention_dropout: float = Field(0.0, ge=0.0, lt=1.0)
    """Dropout on attention weights (not in the paper; tensor2tensor's later default is 0.1)."""
    relu_dropout: float = Field(0.0, ge=0.0, lt=1.0)
    """Dropout after the feed-forward ReLU (not in the paper)."""
    share_embeddings: Literal["all", "decoder", "none"] = "all"
    """Weight tying (paper §3.4): ``all`` = source, target and output projection share one matrix
    (needs a joint vocabulary); ``decoder`` = target embedding and output projection; ``none``."""
    norm: Literal["post", "pre"] = "post"
    """``post`` = LayerNorm(x + Sublayer(x)) as in the paper; ``pre`` = x + Sublayer(LayerNorm(x))
    with a final LayerNorm (more stable for deep models)."""
    max_positions: int = Field(1024, ge=1)
    """Longest sequence the model accepts (positional encodings are sinusoidal, so this costs nothing)."""
    activation: Literal["relu", "swish", "gelu"] = "relu"
    """The feed-forward non-linearity: ``relu`` as in the paper (§3.3); ``swish`` (x·sigmoid(x), what
    opus-mt models use) and ``gelu`` for models imported from Hugging Face (`nmtk import`)."""
    output_bias: bool = False
    """A bias on the pre-softmax projection: none in the paper; Marian's models (opus-mt) have one."""
    positions: Literal["paper", "fairseq"] | None = None
    """The sinusoid table: the paper's (unset), or ``fairseq``'s, which M2M-100 and NLLB models use
    (`nmtk import` writes it for them)."""
    output_vocab: Literal["all", "per-target"] = "all"
    """The softmax's pieces: ``all`` of the vocabulary; ``per-target`` (a recipe with
    ``[[data.pairs]]``): for each target language only the pieces its training targets hold, a third
    of a four-language vocabulary, so the output projection costs what a one-pair model's does
    (docs/multilingual.md). The Hugging Face export needs ``all``."""

    @property
    def n_encoder_layers(self) -> int:
        return self.encoder_layers or self.layers

    @property
    def n_decoder_layers(self) -> int:
        return self.decoder_layers or self.layers

    @model_validator(mode="after")
    def _heads_divide_width(self) -> ModelSection:
        if self.d_model % self.heads:
            raise ValueError(f"d_model ({self.d_model}) must be divisible by heads ({self.heads})")
        return self


# -------------------------------------------------------------------------------------------- optim


class OptimSection(Section):
    """Adam, the learning-rate schedule and the loss (paper §5.3, §5.4)."""

    betas: tuple[float, float] = Field((0.9, 0.98), strict=False)  # TOML has arrays, not tuples
    """Adam β1, β2 (paper §5.3)."""
    eps: float = Field(1e-9, gt=0.0)
    """Adam ε (paper §5.3)."""
    weight_decay: float = Field(0.0, ge=0.0)
    """Decoupled weight decay (AdamW); 0 as in the paper."""
    lr_schedule: Literal["inverse_sqrt"] = "inverse_sqrt"
    """lr = lr_scale · d_model^-0.5 · min(step^-0.5, step · warmup^-1.5) (paper §5.3)."""
    warmup: int = Field(4000, ge=1)
    """warmup_steps of the schedule (paper §5.3: 4000)."""
    lr_scale: float = Field(1.0, gt=0.0)
    """Constant factor of the schedule (1.0 in the paper)."""
    lr: float | None = Field(None, gt=0.0)
    """Peak learning rate reached at step ``warmup``; when set it replaces ``lr_scale``."""
    label_smoothing: float = Field(0.1, ge=0.0, lt=1.0)
    """ε_ls of label-smoothed cross-entropy (paper §5.4)."""
    clip_norm: float = Field(0.0, ge=0.0)
    """Clip the gradient's global norm to this; 0 = no clipping (the paper does not clip)."""

    @field_validator("betas")
    @classmethod
    def _betas_in_range(cls, value: tuple[float, float]) -> tuple[float, float]:
        if not all(0.0 <= b < 1.0 for b in value):
            raise ValueError(f"Adam betas must lie in [0, 1), got {list(value)}")
        return value

    def peak_lr(self, d_model: int) -> float:
        """Learning rate at the end of warmup, the schedule's maximum: ``lr``, else
        lr_scale · d_model^-0.5 · warmup^-0.5 (paper §5.3, equation 3 at step = warmup)."""
        if self.lr is not None:
            return self.lr
        return self.lr_scale * d_model**-0.5 * self.warmup**-0.5


# -------------------------------------------------------------------------------------------- train


class Modifier(Section):
    """A change made to a share of the training pairs as they are fed (OpusTrainer's modifiers): the pairs
    are drawn afresh each epoch from the seed and the epoch, so a run is the same run twice, and resumes
    exactly."""

    name: Literal["uppercase", "titlecase", "typos", "noise", "merge", "terms"]
    """``uppercase``/``titlecase``: both sides in capitals / each word capitalised; ``typos``: one of
    OpusTrainer's typo classes per chosen source (swapped, missing, extra, nearby or repeated letters,
    spaces); ``noise``: the pair becomes a random string on both sides (learn to copy what cannot be
    translated); ``merge``: the pair joined with 1 to ``max_lines - 1`` others into one line; ``terms``:
    aligned source words followed by their target word (``__source__ w __target__ t __done__``, Dinu et
    al. 2019), so the model learns to take terms from its input (`translate --glossary`, any engine)."""
    p: float = Field(ge=0.0, le=1.0)
    """Share of the training pairs changed each epoch (0 to 1)."""
    words: float = Field(0.2, ge=0.0, le=1.0)
    """``terms``: the chance that each aligned word of a chosen pair gets its hint."""
    replace: float = Field(0.0, ge=0.0, le=1.0)
    """``terms``: the share of hints whose target word is another word of the target vocabulary, in the hint
    and in the target alike (OpusTrainer's ``replace`` mode, with real words): the model learns to copy the
    hint rather than translate the source word as it would anyway."""
    max_words: int = Field(1, ge=1, le=5)
    """``terms``: a replaced hint's target is 1 to this many words of the corpus's targets (OpusTrainer's
    random strings have 1–3). One-word hints alone left a glossary's two-word terms at 52–61 % recall
    in the terms recipe's model ("red car" → "rotes Auto" came out "rotes"); 3 took them to 85 %, for
    1.0–1.8 BLEU on clean text (two seeds, docs/training.md)."""
    max_lines: int = Field(3, ge=2, le=8)
    """``merge``: the most pairs joined into one."""

    @model_validator(mode="after")
    def _fields_of_its_kind(self) -> Modifier:
        """A field another modifier reads, set to other than its default, is an error (``typos`` with
        ``words = 0.5`` would otherwise be read as 0.5 of words and silently do nothing): a recipe
        written by nmtk lists every field at its default, which stays valid."""
        for field, value in self:
            owner = MODIFIER_FIELDS.get(field)
            if owner is not None and owner != self.name and value != type(self).model_fields[field].default:
                raise ValueError(f"modifier {self.name}: {field} is the {owner} modifier's (leave it out)")
        return self


#: The fields only one modifier reads (`Modifier`), by the modifier.
MODIFIER_FIELDS = {"words": "terms", "replace": "terms", "max_words": "terms", "max_lines": "merge"}


class Stage(Section):
    """A stage of the curriculum: the corpora's weights while it lasts, and when it ends (OpusTrainer's
    stages: e.g. original + back-translated data until the back-translation was seen twice, then original
    only). Stages run in order; the last one may have no end (it runs until training stops)."""

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
    """Shown on the ``update:`` line and in train.jsonl when the stage begins."""
    weights: dict[str, float] = {}
    """Corpus name -> weight during this stage (as a corpus's ``weight``; 0 leaves it out). A corpus not
    named keeps its own ``weight``."""
    updates: int | None = Field(None, ge=1)
    """End the stage after this many updates in it (the last stage's end ends training; without one it
    lasts until the train section's limits)."""
    epochs: float | None = Field(None, gt=0.0)
    """... or once ``corpus`` has been seen this many times (an epoch sees it ``weight`` times)."""
    corpus: str | None = None
    """The corpus whose epochs ``epochs`` counts."""
    modifiers: list[Modifier] | None = None
    """This stage's modifiers; unset: ``train.modifiers``."""

    @model_validator(mode="after")
    def _one_end(self) -> Stage:
        if self.updates is not None and self.epochs is not None:
            raise ValueError(f"stage {self.name}: give updates or epochs (of a corpus), not both")
        if (self.epochs is None) != (self.corpus is None):
            raise ValueError(f"stage {self.name}: epochs and corpus go together (epochs of which corpus)")
        for corpus, weight in self.weights.items():
            if not (weight >= 0 and weight < float("inf")):
                raise ValueError(f"stage {self.name}: weight of {corpus} is {weight}: 0 or more")
        return self

    @property
    def endless(self) -> bool:
        return self.updates is None and self.epochs is None


class TrainSection(Section):
    """When to stop, save and validate; precision and reproducibility."""

    max_updates: int | None = Field(100_000, ge=1)
    """Stop after this many updates (paper: 100k base, 300k big)."""
    max_epochs: int | None = Field(None, ge=1)
    """Stop after this many passes over the training data."""
    max_minutes: float | None = Field(None, gt=0.0)
    """Stop after this many minutes of training (wall clock, resumes included)."""
    precision: Precision = Field(Precision.auto, strict=False)  # its names, as TOML strings
    """Arithmetic: ``bf16`` autocast (GPUs, and CPUs with AVX-512 BF16 or AMX; elsewhere bf16 is emulated
    and slower than fp32), ``fp16`` with dynamic loss scaling, ``auto`` = bf16 where the hardware multiplies
    bf16 natively (Ampere and later GPUs) and on a CPU with bf16 hardware where bf16 is measured faster for
    this model (a sub-second probe, cached), fp16 on older GPUs (V100, T4), else fp32 (with TF32 matrix
    products on a GPU)."""
    @field_validator("precision")
    @classmethod
    def _trainable(cls, value: Precision) -> Precision:
        if value is Precision.int8:
            raise ValueError("int8 is a decoding precision (translate --precision int8): train in auto, fp32, "
                             "bf16 or fp16")
        return value

    compile: bool | Literal["auto"] = "auto"
    """``torch.compile`` the model's forward pass and loss: fewer, fused kernels and far fewer launches
    per update. ``auto``: on for CUDA, off for CPU (where it was measured slower, docs/training.md)."""
    cuda_graphs: bool | Literal["auto"] = "auto"
    """Run each micro-batch (forward, loss, backward) as a captured CUDA graph, padded to one of
    ``graph_shapes`` shapes chosen from the data's lengths: a small micro-batch then costs its kernels,
    not the host's launches (docs/distributed.md). ``auto``: on a CUDA GPU in bf16 or fp32, where the
    micro-batches are the plan's batches of at most 12,500 tokens (several GPUs sharing the paper's
    update; measured 2 to 5× faster), off where nmtk merges them into larger ones (measured slower);
    ``true`` needs a CUDA GPU, bf16 or fp32, and one output vocabulary."""
    graph_shapes: int = Field(16, ge=1, le=64)
    """With ``cuda_graphs``: the most micro-batch shapes (one graph each, one memory pool). More shapes,
    less padding (the ``update:`` line says how much)."""
    loss_chunk_tokens: int | None = Field(None, ge=1)
    """Target positions per chunk of the output projection and loss; unset = auto: 512 on CPU (bounds
    memory), the whole micro-batch on CUDA (one large matrix product instead of many small ones)."""
    prefetch_updates: int | None = Field(None, ge=0)
    """Updates' batches collated ahead on a background thread, in pinned memory; unset = auto: 2 on
    CUDA, 0 on CPU (there the thread would take a core from the computation, which uses them all:
    measured 13% slower on 2 cores)."""
    ddp_bucket_mb: int = Field(25, ge=1)
    """DDP gradient bucket size in MiB (all-reduce granularity; PyTorch's default 25)."""
    ddp_static_graph: bool = True
    """Tell DDP the graph is the same every step (it is): lets it skip per-step graph discovery. Applied
    where each process runs one batch per update: with accumulation the first backward runs under
    ``no_sync``, which a static graph does not survive (pytorch#143580)."""
    ddp_grad_dtype: Literal["fp32", "bf16"] = "fp32"
    """Gradients all-reduced in this type; ``bf16`` halves the communication (fairseq's and Megatron's
    option for slow interconnects) at a small cost in precision."""
    update_freq: int = Field(1, ge=1)
    """Batches per update over all processes: an update is ``update_freq`` batches of at most
    ``batching.batch_tokens`` tokens whatever the launcher. One process accumulates them all; N
    processes (``--nproc``, torchrun, several nodes) take ``update_freq / N`` each, which must divide."""
    micro_batch_tokens: int | None = Field(None, ge=1)
    """How a process runs its share of an update: micro-batches of at most this many tokens a side, cut
    from the update's sentences sorted by length (the same sentences and the same update: only the
    order of additions differs). Unset: on a GPU the largest that its memory holds (up to the whole
    share: a probe at start, halved on running out of memory later); on a CPU the plan's batches.
    Free to change on resume: the data position is the plan's (docs/distributed.md)."""
    seed: int = 1
    """Seed of parameters, dropout and batch order."""
    save_every_updates: int | None = Field(None, ge=1)
    """Save a checkpoint every this many updates."""
    save_every_minutes: float = Field(10.0, ge=0.0)
    """Save a checkpoint every this many minutes of wall-clock time; 0 = never by time. (The paper
    saved every 10 minutes, §6.1; its recipes save every N updates instead, see docs/paper.md.)"""
    keep_last: int = Field(20, ge=1)
    """Numbered checkpoints kept (older ones are deleted); enough for ``average.last``."""
    save_full_every_updates: int | None = Field(None, ge=1)
    """Unset: every checkpoint holds the full training state. Set: only saves at multiples of this
    (and the last one) do; the others hold the parameters alone (``checkpoint_<N>.params.pt``, a third
    of the size with Adam), enough for ``nmtk average``; a resume starts from the last full state."""
    validate_every_updates: int | None = Field(1000, ge=1)
    """Compute valid loss and BLEU every this many updates; unset = only at the end."""
    validate_at_end: bool = True
    """Validate once more when training stops (by a limit, not a signal) if the last validation is older
    than the last update, so that every finished run has a valid BLEU and ``checkpoint_best.pt``."""
    patience: int | None = Field(None, ge=1)
    """Stop after this many validations without a better BLEU; unset = never stop early."""
    log_every_updates: int = Field(100, ge=1)
    """Write a line of metrics to ``train.jsonl`` every this many updates."""
    curves: bool = True
    """Redraw ``curves.png`` (matplotlib) at each validation, to look at during the run; false: no
    picture while training (a second a drawing on a CPU), ``nmtk plot`` draws it from train.jsonl."""
    modifiers: list[Modifier] = []
    """On-the-fly modifiers (``[[train.modifiers]]``), applied in order (``terms`` last) to fresh pairs
    each epoch; docs/training.md."""
    stages: list[Stage] = []
    """The curriculum (``[[train.stages]]``): corpus weights and modifiers per stage, in order."""

    @model_validator(mode="after")
    def _some_stopping_criterion(self) -> TrainSection:
        if self.max_updates is None and self.max_epochs is None and self.max_minutes is None:
            raise ValueError("set at least one of max_updates, max_epochs, max_minutes")
        return self


# ------------------------------------------------------------------------------------------- decode


class DecodeSection(Section):
    """Beam search defaults (paper §6.1)."""

    beam: int = Field(4, ge=1)
    """Beam size (paper: 4); 1 is greedy search."""
    length_penalty: float = Field(0.6, ge=0.0)
    """α of the length penalty (paper: 0.6), in the form ``length_penalty_form`` names."""
    length_penalty_form: Literal["gnmt", "power"] = "gnmt"
    """``gnmt``: log P(Y|X) / ((5 + |Y|) / 6)^α, |Y| counting EOS (the paper's, from GNMT), and a
    search that ends once no live beam can beat the finished ones. ``power``: log P(Y|X) / |Y|^α, |Y|
    counting EOS too, and a search that ends once ``beam`` hypotheses have finished: what CTranslate2
    and fairseq do, so that a CTranslate2 export translates as the run does."""
    max_len_a: float = Field(1.0, ge=0.0)
    """Output length is at most max_len_a · |x| + max_len_b (paper: |x| + 50)."""
    max_len_b: int = Field(50, ge=0)
    """See ``max_len_a``."""
    beam_tokens: int | None = Field(None, ge=1)
    """Decoding batch budget: source tokens × beam per batch (translate and validation), not the
    training batch's tokens per side (``batching.batch_tokens``); unset = 2,048 on a CPU (either engine),
    65,536 on CUDA."""
    no_repeat_ngram_size: int = Field(0, ge=0)
    """Never produce an n-gram of subwords of this size twice in one translation (0: no limit);
    CTranslate2's and transformers' option of the same name."""
    repetition_penalty: float = Field(1.0, gt=0.0)
    """CTRL's penalty on every subword already produced (1: none; > 1 discourages repeating):
    a positive logit is divided by it, a negative one multiplied."""
    glossary: Path | None = None
    """Terminology: a TSV file of ``source term<TAB>target term`` pairs; every line whose source holds a
    term must have its target term in the translation (a lexical constraint); a relative path is read
    from the directory the command runs in."""
    glossary_ignore_case: bool = False
    """Match glossary source terms whatever their case (the target term is produced as written)."""


class AverageSection(Section):
    """Checkpoint averaging (paper §6.1)."""

    last: int = Field(5, ge=1)
    """Average this many of the last checkpoints (paper: 5 base, 20 big)."""


# ------------------------------------------------------------------------------------------- recipe


class Recipe(Section):
    """A complete nmtk recipe."""

    name: str = Field("recipe", pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
    """Name of the experiment; defaults to the recipe file's name. Names ``data-bin/<name>`` and ``runs/<name>``."""
    data: DataSection
    """Corpora and cleaning."""
    tokenizer: TokenizerSection = TokenizerSection()
    """Moses and sentencepiece."""
    batching: BatchingSection = BatchingSection()
    """Token-bucket batching."""
    model: ModelSection = ModelSection()
    """The Transformer's shape."""
    optim: OptimSection = OptimSection()
    """Adam, schedule, loss."""
    train: TrainSection = TrainSection()
    """Stopping, saving, validating, precision."""
    decode: DecodeSection = DecodeSection()
    """Beam search defaults."""
    average: AverageSection = AverageSection()
    """Checkpoint averaging default."""

    @model_validator(mode="after")
    def _cross_section_checks(self) -> Recipe:
        if self.model.share_embeddings == "all" and not self.tokenizer.joint and self.tokenizer.reuse is None:
            raise ValueError(
                'model.share_embeddings = "all" needs tokenizer.joint = true '
                "(one vocabulary for both languages)"
            )
        if self.model.output_vocab == "per-target" and not self.data.multilingual:
            raise ValueError('model.output_vocab = "per-target" needs several target languages ([[data.pairs]])')
        _check_stages(self.train.stages, [c.name for p in self.data.language_pairs() for c in p.train])
        if self.uses_terms and (self.data.multilingual or self.tokenizer.reuse is not None):
            raise ValueError("train.modifiers: terms needs one language pair and a vocabulary of its own "
                             "(not tokenizer.reuse): prepare adds the hint symbols to it")
        if self.tokenizer.correct_typos and self.data.multilingual:
            raise ValueError("tokenizer.correct_typos: one language pair only (the words are one source language's)")
        if self.average.last > self.train.keep_last:
            raise ValueError(
                f"average.last ({self.average.last}) exceeds train.keep_last ({self.train.keep_last}): "
                "the checkpoints to average would be deleted"
            )
        return self

    @property
    def all_modifiers(self) -> list[Modifier]:
        """Every modifier training uses: ``train.modifiers`` and each stage's own."""
        return [*self.train.modifiers, *(m for s in self.train.stages for m in s.modifiers or ())]

    @property
    def casing(self) -> list[str]:
        """The casing modifiers (``uppercase``, ``titlecase``) training uses in any stage: `prepare` shows the
        subword learner lines so cased too, so that capitals get pieces of their own (otherwise a word in
        capitals is spelled letter by letter: 4x the tokens on Multi30k)."""
        used = {m.name for m in self.all_modifiers}
        return [name for name in ("uppercase", "titlecase") if name in used]

    @property
    def uses_terms(self) -> bool:
        """Whether training puts terminology hints in sources: `prepare` then adds their symbols to the
        vocabulary and aligns the training pairs."""
        return any(m.name == "terms" for m in self.all_modifiers)

    def hash(self) -> str:
        """sha256 of the canonical JSON of the resolved recipe (what a run was trained with)."""
        text = json.dumps(self.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()


def _check_stages(stages: list[Stage], corpora: list[str]) -> None:
    """Stages have names of their own, name training corpora that exist, draw something, and only the
    last may be endless."""
    for i, stage in enumerate(stages):
        where = f"train.stages[{i}] ({stage.name})"
        if (first := next(k for k, other in enumerate(stages) if other.name == stage.name)) < i:
            raise ValueError(f"{where}: train.stages[{first}] has that name too: train.jsonl and the update line "
                             "name a stage by it")
        for name in [*stage.weights, *([stage.corpus] if stage.corpus else [])]:
            if name not in corpora:
                raise ValueError(f"{where}: no training corpus named {name!r} (the corpora: {', '.join(corpora)})")
        if stage.weights and len(corpora) == len(stage.weights) and not any(stage.weights.values()):
            raise ValueError(f"{where}: every weight is 0: the stage would draw no pair")
        if stage.corpus and stage.weights.get(stage.corpus, 1.0) == 0:
            raise ValueError(f"{where}: ends after epochs of {stage.corpus}, whose weight in it is 0")
        if stage.endless and i < len(stages) - 1:
            raise ValueError(f"{where}: has no end (updates, or epochs of a corpus) but is not the last stage")


# ------------------------------------------------------------------------------------------ loading


def _format_location(loc: tuple[Any, ...]) -> str:
    return ".".join(str(part) for part in loc)


def _given(where: str, overrides: dict[str, str]) -> str | None:
    """The ``--set`` key that gave the field ``where`` (dotted, list indices as numbers): the field's own,
    or a list or table above it (``--set 'train.stages=[...]'`` for ``train.stages.0.updates``)."""
    return next((k for k in overrides if where == k or where.startswith(f"{k}.")), None)


def _section_at(loc: tuple[Any, ...]) -> type[BaseModel] | None:
    """The recipe's section (a pydantic model) that the field path ``loc`` leads to: a field's own type,
    or a list's or table's items' (``train.stages.0``); None where it leads elsewhere."""
    model: type[BaseModel] | None = Recipe
    for part in loc:
        if isinstance(part, int):  # an item of the list the last field held: the items' model
            continue
        field = model.model_fields.get(part) if model is not None else None
        if field is None:
            return None
        model = _model_in(field.annotation)
    return model


def _model_in(annotation: Any) -> type[BaseModel] | None:
    """The pydantic model an annotation holds: itself, or its items' (``list[Stage]``, ``Stage | None``)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    found = [_model_in(arg) for arg in getattr(annotation, "__args__", ())]
    return next((m for m in found if m is not None), None)


def _near(loc: tuple[Any, ...]) -> str:
    """For an unknown field, the section's fields its name is close to (``max_minute``: max_minutes),
    else the section's fields where they are few; empty where neither helps."""
    import difflib

    section = _section_at(loc[:-1])
    if section is None or not isinstance(loc[-1], str):
        return ""
    fields = list(section.model_fields)
    close = difflib.get_close_matches(loc[-1], fields, n=3, cutoff=0.6)
    if close:
        return f" (did you mean {' or '.join(close)}?)"
    elsewhere = _sections_with(loc[-1], exclude=loc[0])
    if elsewhere:  # ``train.lr``: the field is another section's (``optim.lr``)
        return f" (did you mean {' or '.join(elsewhere)}?)"
    return f" (its fields: {', '.join(fields)})" if len(fields) <= 8 else ""


def _sections_with(name: str, exclude: Any) -> list[str]:
    """The recipe's top-level sections, other than ``exclude``, that have a field ``name``: where a field
    given in the wrong section belongs."""
    found = []
    for section, field in Recipe.model_fields.items():
        model = _model_in(field.annotation)
        if section != exclude and model is not None and name in model.model_fields:
            found.append(f"{section}.{name}")
    return found


def _format_errors(source: str, error: ValidationError, overrides: dict[str, str]) -> str:
    """All validation errors of a recipe on one line, each naming its field."""
    parts = []
    for err in error.errors():
        where = _format_location(err["loc"])
        message = validator_words(err["msg"])
        if err["type"] == "extra_forbidden":
            message = "unknown field" + _near(err["loc"])
        elif err["type"] == "missing":
            message = "required field is missing"
        elif "input" in err and not isinstance(err["input"], dict | list):
            message = f"{message} (got {err['input']!r})"
        if not err["loc"]:  # a check of the whole recipe: its message names the fields it is about
            named = re.match(r"[A-Za-z_][\w.\[\]]*", message)
            given = _given(re.sub(r"\[(\d+)\]", r".\1", named.group()) if named else "", overrides)
            parts.append(f"--set {given}={overrides[given]}: {message}" if given else message)
            continue
        given = _given(where, overrides)
        origin = f"--set {given}={overrides[given]}" + (f": {where}" if given != where else "") if given else where
        related = [f"--set {k}={v}" for k, v in overrides.items() if k.startswith(f"{where}.")]
        if related and where not in overrides:
            message = f"{message} (after {', '.join(related)})"
        parts.append(f"{origin}: {message}")
    return f"{source}: " + "; ".join(parts)


def parse_override(item: str) -> tuple[str, Any]:
    """Split ``key.path=value``; the value is read as a TOML value when it is one, else as a string.

    Pydantic then validates (and coerces) it with the field's own type, as for the file.
    """
    key, sep, raw = item.partition("=")
    key = re.sub(r"\[\s*(\d+)\s*\]", r".\1", key.strip())  # data.train[1].weight: data.train.1.weight
    if not sep or not key:
        raise NmtkError(f"--set {item!r}: expected KEY=VALUE, e.g. --set model.dropout=0.3")
    try:
        value = tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        value = raw.strip()
    return key, value


def _apply_override(data: dict[str, Any], key: str, value: Any) -> None:
    node: Any = data
    parts = key.split(".")
    for depth, part in enumerate(parts[:-1]):
        if isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
            continue
        if isinstance(node, list):
            where = ".".join(parts[:depth])
            raise NmtkError(f"--set {key}: {where} has {len(node)} entries: {where}.0 to {where}.{len(node) - 1} "
                            f"(or {where}[0] ...)")
        if not isinstance(node, dict):
            raise NmtkError(f"--set {key}: {'.'.join(parts[:depth]) or 'recipe'} is not a section")
        node = node.setdefault(part, {})
    last = parts[-1]
    if isinstance(node, list) and last.isdigit() and int(last) < len(node):
        node[int(last)] = value
    elif isinstance(node, dict):
        node[last] = value
    else:
        raise NmtkError(f"--set {key}: {'.'.join(parts[:-1])} is not a section")


def read_toml(path: Path) -> dict[str, Any]:
    """Parse a TOML file, turning every failure into a one-line error naming the file."""
    try:
        with open(path, "rb") as handle:
            return tomllib.load(handle)
    except FileNotFoundError:
        raise NmtkError(f"{path}: recipe file not found") from None
    except IsADirectoryError:
        raise NmtkError(f"{path}: is a directory, expected a recipe .toml file") from None
    except tomllib.TOMLDecodeError as exc:
        raise NmtkError(f"{path}: invalid TOML: {exc}") from None
    except UnicodeDecodeError as exc:
        raise NmtkError(f"{path}: not valid UTF-8 ({exc.reason} at byte {exc.start})") from None


#: Recipe keys renamed, old → new. ``max_tokens`` meant a training batch's tokens per side in one section
#: and a decoding batch's source tokens × beam in another; each meaning now has its own name. An old key
#: is read as the new one, with one notice per key and process.
RENAMED_KEYS = {"batching.max_tokens": "batching.batch_tokens", "decode.max_tokens": "decode.beam_tokens"}
_noticed: set[str] = set()


def _rename_notice(where: str, old: str) -> None:
    if old not in _noticed and is_main_process():
        _noticed.add(old)
        sys.stderr.write(f"notice: {where}: {old} is now {RENAMED_KEYS[old]} (read as such; "
                         "the old name will go)\n")


def _renamed(data: dict[str, Any], source: str, notice: bool = True) -> None:
    """Old keys of ``data`` moved to their new names, in place; both names at once is an error."""
    for old, new in RENAMED_KEYS.items():
        section, _, key = old.partition(".")
        part = data.get(section)
        if isinstance(part, dict) and key in part:
            if new.partition(".")[2] in part:
                raise NmtkError(f"{source}: {old} and {new} are one setting: keep {new}")
            part[new.partition(".")[2]] = part.pop(key)
            if notice:
                _rename_notice(source, old)


def with_current_names(data: dict[str, Any], source: str) -> dict[str, Any]:
    """A copy of a dumped recipe (a checkpoint's) with today's key names, for comparing with a recipe
    read now; no notice (the user did not write it)."""
    data = json.loads(json.dumps(data))
    _renamed(data, source, notice=False)
    return data


def recipe_from_dict(data: dict[str, Any], source: str, overrides: list[str] = ()) -> Recipe:
    """Validate a parsed recipe after applying ``--set`` overrides."""
    data = json.loads(json.dumps(data))  # deep copy: overrides never touch the caller's dict
    _renamed(data, source)
    given: dict[str, str] = {}
    for item in overrides:
        key, value = parse_override(item)
        if key in RENAMED_KEYS:
            _rename_notice("--set", key)
            key = RENAMED_KEYS[key]
        _apply_override(data, key, value)
        given[key] = item.partition("=")[2]
    try:
        return Recipe.model_validate(data)
    except ValidationError as exc:
        raise NmtkError(_format_errors(source, exc, given)) from None


def load_recipe(path: str | Path, overrides: list[str] = ()) -> Recipe:
    """Read, override and validate a recipe file. The name defaults to the file's stem."""
    path = Path(path)
    data = read_toml(path)
    data.setdefault("name", path.stem)
    return recipe_from_dict(data, str(path), overrides)


def _flat(value: Any, prefix: str = "") -> dict[str, Any]:
    """``{"a": {"b": [1]}}`` as ``{"a.b.0": 1}``: every leaf under its dotted field name."""
    if isinstance(value, dict):
        return {k: v for key, item in value.items() for k, v in _flat(item, f"{prefix}{key}.").items()}
    if isinstance(value, list):
        return {k: v for i, item in enumerate(value) for k, v in _flat(item, f"{prefix}{i}.").items()}
    return {prefix.rstrip("."): value}


def differences(old: dict[str, Any], new: dict[str, Any]) -> list[tuple[str, Any, Any]]:
    """Every dotted field (sorted) whose value differs between two dumped recipes (or parts of one),
    as ``(field, old, new)``."""
    a, b = _flat(old), _flat(new)
    return [(key, a.get(key), b.get(key)) for key in sorted(set(a) | set(b)) if a.get(key) != b.get(key)]


def added_later(field: str, old: Any, new: Any) -> bool:
    """Whether a `differences` entry is a field the older recipe lacks (a later nmtk added it), at its
    default: a run trained by the nmtk before it resumes as unchanged (`nmtk.train.run.check_resumable`)."""
    section, _, rest = field.partition(".")
    info = Recipe.model_fields.get(section)
    if old is not None or not rest or info is None or info.is_required():
        return False
    default = info.get_default(call_default_factory=True)
    flat = _flat(default.model_dump(mode="json")) if isinstance(default, BaseModel) else {}
    return rest in flat and flat[rest] == new


def first_difference(old: dict[str, Any], new: dict[str, Any], skip: Callable[[str], bool] = lambda _: False
                     ) -> tuple[str, Any, Any] | None:
    """The first of `differences` whose field ``skip`` does not leave out; None when they agree."""
    return next((d for d in differences(old, new) if not skip(d[0])), None)


def recipe_to_toml(recipe: Recipe) -> str:
    """The resolved recipe as TOML (unset optional fields are left out: TOML has no null)."""

    def drop_none(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: drop_none(v) for k, v in value.items() if v is not None}
        if isinstance(value, list):
            return [drop_none(v) for v in value]
        return value

    return tomli_w.dumps(drop_none(recipe.model_dump(mode="json")))


def recipe_schema() -> dict[str, Any]:
    """JSON Schema of recipes, for editors (e.g. Taplo / Even Better TOML)."""
    schema = Recipe.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "nmtk recipe"
    return schema


def model_config(recipe: Recipe, src_vocab: int | None = None, tgt_vocab: int | None = None) -> ModelConfig:
    """The model configuration a recipe asks for; vocabulary sizes default to ``tokenizer.vocab_size``."""
    from nmtk.model import ModelConfig  # torch: only where a model is wanted, not for reading recipes

    m = recipe.model
    return ModelConfig(
        src_vocab=src_vocab or recipe.tokenizer.vocab_size,
        tgt_vocab=tgt_vocab or recipe.tokenizer.vocab_size,
        d_model=m.d_model,
        heads=m.heads,
        d_ff=m.d_ff,
        encoder_layers=m.n_encoder_layers,
        decoder_layers=m.n_decoder_layers,
        dropout=m.dropout,
        attention_dropout=m.attention_dropout,
        relu_dropout=m.relu_dropout,
        share_embeddings=m.share_embeddings,
        norm=m.norm,
        pad_id=PAD_ID,
        max_positions=m.max_positions,
        activation=m.activation,
        output_bias=m.output_bias,
        positions=m.positions or "paper",
        output_languages=len(recipe.data.targets()) if m.output_vocab == "per-target" else 0,
    )


def derived_figures(recipe: Recipe) -> dict[str, Any]:
    """Figures a user wants before launching a run: model size, learning rate, batch size."""
    from nmtk.model import parameter_count

    cfg = model_config(recipe)
    return {
        "parameters": parameter_count(cfg),
        "encoder_layers": cfg.encoder_layers,
        "decoder_layers": cfg.decoder_layers,
        "d_head": cfg.d_model // cfg.heads,
        "peak_lr": recipe.optim.peak_lr(cfg.d_model),
        "tokens_per_update": recipe.batching.batch_tokens * recipe.train.update_freq,
        "recipe_hash": recipe.hash(),
    }
