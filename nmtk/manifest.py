"""The prepared data's manifest, typed, and the prepared-data folder that owns its file names.

``nmtk prepare`` writes ``manifest.json`` beside the binarised splits; `train` copies it into the run
directory, where `translate`, `export` and `average` read it. It was a bare dict indexed in eight
files; here it is one pydantic model, validated when read, with a version so that a manifest written
by a later (or much earlier) nmtk is refused with one line instead of failing somewhere downstream.

    data-bin/<name>/manifest.json       this model
    data-bin/<name>/<split>.<lang>.bin  ids of every sentence, and .idx offsets (`nmtk.data.binarized`)
    data-bin/<name>/<split>.raw.<lang>  the split's raw text (references for validation and scoring)
    data-bin/<name>/spm*.model ...      the subword model(s), named in ``vocab.models``
    data-bin/<name>/words.<lang>.tsv    the training sources' word counts (``words``; correct_typos)
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from nmtk.errors import NmtkError
from nmtk.files import write_text_atomic
from nmtk.pair import Pair

MANIFEST = "manifest.json"
#: Beside the prepared data: every training pair cleaning dropped (corpus, line, rule).
DROPPED = "dropped.tsv"


def words_file(lang: str) -> str:
    """The name of a language's training word counts (``Manifest.words``) in prepared data, a run, an export."""
    return f"words.{lang}.tsv"


#: Version 1 is the first typed manifest; manifests written before it carried no version and are the same.
MANIFEST_VERSION = 1


class VocabInfo(BaseModel):
    """The subword model(s): file per language, vocabulary size per language, sha256 per file."""

    model_config = ConfigDict(extra="forbid")
    joint: bool
    models: dict[str, str]
    size: dict[str, int]
    sha256: dict[str, str]


class Manifest(BaseModel):
    """What `prepare` made: languages, id dtype, vocabulary, per-split statistics, the settings' hash."""

    model_config = ConfigDict(extra="forbid")
    version: int = MANIFEST_VERSION
    format: int
    source_lang: str
    target_lang: str
    dtype: str
    vocab: VocabInfo
    splits: dict[str, dict[str, Any]] = {}
    test_sets: list[str] = []
    settings_hash: str | None = None
    settings: dict[str, Any] | None = None
    inputs: dict[str, Any] = {}
    recipe: str | None = None
    seconds: float = 0.0
    pairs: list[str] = []
    """A multilingual model's directions (``en-de``, ...); empty for one pair."""
    tags: dict[str, int] = {}
    """A multilingual model's language tag ids, by language (``>>de<<`` -> its id)."""
    tag_style: Literal["opus-mt", "m2m-100"] = "opus-mt"
    """How a multilingual model reads its tags: ``opus-mt`` (and nmtk's): the target's tag before the
    source; ``m2m-100`` (M2M-100, NLLB): the source's code before it, the target's forced first."""
    words: dict[str, str] = {}
    """The source language's training words and their counts, by language (``tokenizer.correct_typos``:
    `nmtk.text.typos`); a file beside the subword model, copied wherever it goes."""
    hints: bool = False
    """The source vocabulary holds the terminology hints' symbols and ``train.align.*`` the training pairs'
    word alignments (a recipe with the ``terms`` modifier)."""

    def language_pairs(self) -> list[Pair]:
        """The directions the data (and a model trained on it) translates: a multilingual model's pairs,
        or its one pair."""
        return [Pair.parse(name) for name in self.pairs] or [Pair(self.source_lang, self.target_lang)]

    def training_corpora(self, pair: Pair) -> list[dict[str, Any]]:
        """The training corpora of ``pair``'s split, in order, with their kept pairs (`prepare` records
        them; data prepared before it did: empty)."""
        return list(self.splits.get(self.training_split(pair), {}).get("corpora", []))

    def training_split(self, pair: Pair) -> str:
        """The name of ``pair``'s training split: ``train``, or a multilingual model's ``train.en-de``."""
        return f"train.{pair.name}" if self.pairs else "train"

    @property
    def longest_training_source(self) -> int | None:
        """Subwords of the longest source line training kept (None where the manifest does not say: an
        imported model's): what the model has seen, so what `translate` splits longer lines towards."""
        sides = [self.splits.get(self.training_split(p), {}).get("sides", {}).get(p.source, {})
                 for p in self.language_pairs()]
        longest = max((side.get("max_len") or 0 for side in sides), default=0)
        return int(longest) if longest else None

    def vocab_sizes(self) -> tuple[int, int]:
        """Source and target vocabulary sizes (a multilingual model's vocabulary is joint)."""
        first = self.language_pairs()[0]
        return self.vocab.size[first.source], self.vocab.size[first.target]

    @classmethod
    def in_folder(cls, folder: Path) -> Manifest:
        """The manifest of a folder that holds one (prepared data, a run, an export)."""
        return cls.read(Path(folder) / MANIFEST)

    @classmethod
    def in_folder_or_none(cls, folder: Path) -> Manifest | None:
        """`in_folder`, or None where there is none yet or it cannot be read (prepare rebuilds then)."""
        try:
            return cls.in_folder(folder)
        except NmtkError:
            return None

    @classmethod
    def read(cls, path: Path) -> Manifest:
        """The manifest at ``path``; one line naming the file when it is missing, unreadable or of
        another version."""
        try:
            raw = json.loads(Path(path).read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise NmtkError(f"{path}: missing; the folder is incomplete") from None
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise NmtkError(f"{path}: not a readable manifest ({type(exc).__name__})") from None
        if not isinstance(raw, dict):
            raise NmtkError(f"{path}: not a manifest (expected a JSON object)")
        version = raw.get("version", MANIFEST_VERSION)
        if version != MANIFEST_VERSION:
            raise NmtkError(f"{path}: manifest version {version!r}, this nmtk reads version {MANIFEST_VERSION}; "
                            "prepare the data again (nmtk prepare --force) with this nmtk")
        try:
            return cls.model_validate(raw)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            raise NmtkError(f"{path}: invalid manifest: {where}: {first['msg']}") from None

    def write(self, path: Path) -> None:
        write_text_atomic(path, self.model_dump_json(indent=2))

    @property
    def text_files(self) -> set[str]:
        """The files the text pipeline needs beside the manifest: the subword model(s) and word counts."""
        return set(self.vocab.models.values()) | set(self.words.values())

    def model_paths(self, folder: Path) -> dict[str, Path]:
        """The subword model file of each language, inside ``folder``."""
        return {lang: Path(folder) / name for lang, name in self.vocab.models.items()}


def raw_text(folder: Path, split: str, lang: str) -> Path:
    """A split's raw text: references for validation and scoring."""
    return Path(folder) / f"{split}.raw.{lang}"


#: The training pairs' word alignments (`nmtk.data.alignment`): ``train.align.bin`` and ``.idx``.
ALIGNMENT = "align"


def split_prefix(folder: Path, split: str, lang: str) -> Path:
    """A binarised side's prefix: ``<prefix>.bin`` and ``<prefix>.idx`` (`nmtk.data.binarized`)."""
    return Path(folder) / f"{split}.{lang}"


class PreparedData:
    """A folder `nmtk prepare` wrote, and its manifest: the one handle of prepared data (train, validation
    and the data readers take it whole), and the one place that knows the folder's file names. The
    manifest is read once, on first use (or given, by `prepare`, which wrote it)."""

    def __init__(self, path: str | Path, manifest: Manifest | None = None) -> None:
        self.path = Path(path)
        self._manifest = manifest

    def __str__(self) -> str:
        return str(self.path)

    @property
    def manifest_path(self) -> Path:
        return self.path / MANIFEST

    @property
    def lock_path(self) -> Path:
        """Held while `prepare` checks or builds the folder; beside it, as the folder is swapped in whole."""
        return self.path.with_name(f".{self.path.name}.lock")

    def manifest(self) -> Manifest:
        if self._manifest is None:
            self._manifest = Manifest.read(self.manifest_path)
        return self._manifest

    def raw(self, split: str, lang: str) -> Path:
        return raw_text(self.path, split, lang)

    def prefix(self, split: str, lang: str) -> Path:
        return split_prefix(self.path, split, lang)

    def alignments(self) -> Path:
        """The training pairs' word alignments (prepared for the ``terms`` modifier), as a side's prefix."""
        return split_prefix(self.path, "train", ALIGNMENT)
