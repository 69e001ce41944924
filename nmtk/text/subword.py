"""Subword models: sentencepiece (BPE, unigram) and WordPiece (Hugging Face `tokenizers`).

Both are learned by their library, never by code of ours, and both put ``<pad> <unk> <s> </s>`` at
ids 0-3 (`nmtk.vocab`), so the model core needs no vocabulary lookups. A model lives in one file:
``*.model`` (sentencepiece), ``*.json`` (a `tokenizers` WordPiece tokenizer) or ``*.vocab.json`` (a
sentencepiece model whose pieces take their ids from a separate vocabulary, as in Marian's models:
what `nmtk import` writes); `load_subword_model` picks the class by the suffix.

Both segmentations invert exactly when the input has no runs of spaces: sentencepiece keeps word
boundaries as ``▁``, and nmtk's WordPiece splits words on ASCII spaces only (``##`` marks a
continuation piece; a non-breaking space stays inside its word), so ``decode(encode(x)) == x`` for
any text whose characters are in the vocabulary (with ``byte_fallback``, for any text at all).
"""

from __future__ import annotations

import base64
import functools
import io
import json
import random
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Protocol

import numpy as np

from nmtk.errors import NmtkError
from nmtk.vocab import BOS_ID, EOS_ID, PAD_ID, SPECIAL_SYMBOLS, UNK_ID

WORDPIECE_PREFIX = "##"


class SubwordModel(Protocol):
    """What the text pipeline and the exporters need from a subword model."""

    path: Path

    @property
    def vocab_size(self) -> int: ...

    def encode(self, text: str) -> list[int]: ...

    def encode_batch(self, lines: list[str]) -> list[list[int]]: ...

    def decode(self, ids: list[int]) -> str: ...

    def pieces(self) -> list[str]:
        """The vocabulary: the piece of every id, in id order."""


class SentencePieceModel:
    """A sentencepiece ``.model`` file."""

    def __init__(self, path: Path) -> None:
        import sentencepiece as spm

        self.path = Path(path)
        self.sp = spm.SentencePieceProcessor(model_file=str(path))

    @property
    def vocab_size(self) -> int:
        return self.sp.get_piece_size()

    def encode(self, text: str) -> list[int]:
        return self.sp.encode(text)

    def encode_batch(self, lines: list[str]) -> list[list[int]]:
        # one line alone as a string: sentencepiece's batch call costs ~80 µs more (its thread pool)
        return [self.sp.encode(lines[0])] if len(lines) == 1 else self.sp.encode(lines)

    def decode(self, ids: list[int]) -> str:
        return self.sp.decode(ids)

    def pieces(self) -> list[str]:
        return [self.sp.id_to_piece(i) for i in range(self.vocab_size)]


class WordPieceModel:
    """A WordPiece tokenizer saved by Hugging Face `tokenizers` (``.json``): greedy longest-match-first
    pieces within each space-separated word, ``##`` on continuation pieces, a word that cannot be
    spelled with the vocabulary becomes ``<unk>``."""

    def __init__(self, path: Path) -> None:
        from tokenizers import Tokenizer

        self.path = Path(path)
        self.tokenizer = Tokenizer.from_file(str(path))

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.get_vocab_size()

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False).ids

    def encode_batch(self, lines: list[str]) -> list[list[int]]:
        return [e.ids for e in self.tokenizer.encode_batch(lines, add_special_tokens=False)]

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=False)

    def pieces(self) -> list[str]:
        return [self.tokenizer.id_to_token(i) for i in range(self.vocab_size)]


MAPPED_SUFFIX = ".vocab.json"
MAPPED_FORMAT = "nmtk-sentencepiece-vocabulary"


class MappedSentencePiece:
    """A sentencepiece model that segments, and a vocabulary that numbers its pieces.

    Marian (and so every opus-mt model) segments with ``source.spm``/``target.spm`` but numbers pieces
    by ``vocab.json``, one id space that both languages share; the sentencepiece ids are unused. The
    file (``*.vocab.json``) holds the sentencepiece model itself (base64), the pieces in nmtk's id
    order (``<pad> <unk> <s> </s>`` first, as everywhere in nmtk) and, for going back, the Hugging Face
    vocabulary and each nmtk id's id in it (``hf_ids``; -1 where nmtk needed a row the original has not).
    One self-contained file, so runs, exports and ``prepare`` copy it like any subword model.
    """

    def __init__(self, path: Path) -> None:
        import sentencepiece as spm

        self.path = Path(path)
        data = json.loads(self.path.read_text(encoding="utf-8"))
        if not isinstance(data, dict) or data.get("format") != MAPPED_FORMAT:
            raise ValueError(f"not an {MAPPED_FORMAT} file")
        self.spm_bytes = base64.b64decode(data["sentencepiece"])
        self.sp = spm.SentencePieceProcessor(model_proto=self.spm_bytes)
        self._pieces: list[str] = data["pieces"]
        self.hf_vocab: dict[str, int] = data["hf_vocab"]
        self.hf_ids: list[int] = data["hf_ids"]
        self._ids = {piece: i for i, piece in reversed(list(enumerate(self._pieces)))}

    @staticmethod
    def write(path: Path, spm_bytes: bytes, pieces: list[str], hf_vocab: dict[str, int], hf_ids: list[int]) -> None:
        data = {"format": MAPPED_FORMAT, "version": 1, "pieces": pieces, "hf_ids": hf_ids, "hf_vocab": hf_vocab,
                "sentencepiece": base64.b64encode(spm_bytes).decode("ascii")}
        Path(path).write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")

    @property
    def vocab_size(self) -> int:
        return len(self._pieces)

    def _number(self, pieces: list[str]) -> list[int]:
        return [self._ids.get(piece, UNK_ID) for piece in pieces]

    def encode(self, text: str) -> list[int]:
        return self._number(self.sp.encode(text, out_type=str))

    def encode_batch(self, lines: list[str]) -> list[list[int]]:
        return [self.encode(lines[0])] if len(lines) == 1 else [
            self._number(pieces) for pieces in self.sp.encode(lines, out_type=str)]

    def decode(self, ids: list[int]) -> str:
        pieces = [self._pieces[i] for i in ids if i == UNK_ID or i >= len(SPECIAL_SYMBOLS)]
        # As MarianTokenizer: a piece of the shared vocabulary that this side's model lacks comes back
        # verbatim from sentencepiece, so its word-boundary marks are turned into spaces afterwards.
        return self.sp.decode_pieces(pieces).replace("\u2581", " ").strip()

    def pieces(self) -> list[str]:
        return list(self._pieces)


def load_subword_model(path: Path) -> SubwordModel:
    """The subword model stored in ``path`` (``.model``: sentencepiece, ``.vocab.json``: sentencepiece
    with a vocabulary, ``.json``: WordPiece).

    Loaded once per file as it is on disk: a multilingual model's pipelines (two per pair, and M2M-100
    has n(n-1) pairs) share one model, which nothing changes after loading."""
    path = Path(path)
    try:
        stat = path.stat()
    except OSError:
        return _load_subword_model(path)  # its own error, naming the file
    return _cached_subword_model(str(path), stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=16)
def _cached_subword_model(path: str, mtime_ns: int, size: int) -> SubwordModel:
    return _load_subword_model(Path(path))


def _load_subword_model(path: Path) -> SubwordModel:
    mapped = path.name.endswith(MAPPED_SUFFIX)
    kind = ("sentencepiece + vocabulary (nmtk import)" if mapped else
            "WordPiece (tokenizers JSON)" if path.suffix == ".json" else "sentencepiece")
    try:
        if mapped:
            return MappedSentencePiece(path)
        return WordPieceModel(path) if path.suffix == ".json" else SentencePieceModel(path)
    except Exception as exc:  # sentencepiece and tokenizers raise errors of their own kinds
        if isinstance(exc, NmtkError):
            raise
        detail = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:160]
        raise NmtkError(f"{path}: not a readable {kind} model ({detail})") from None


def model_file_name(model_type: str, lang: str | None = None) -> str:
    """File name of a learned model: ``spm.model`` / ``wordpiece.json``, or per language ``spm.en.model``."""
    stem, suffix = ("wordpiece", ".json") if model_type == "wordpiece" else ("spm", ".model")
    return f"{stem}.{lang}{suffix}" if lang else f"{stem}{suffix}"


# ------------------------------------------------------------------------------------------ learning


def learn_subwords(inputs: list[Path], model_path: Path, *, model_type: str, vocab_size: int,
                   character_coverage: float, input_sentence_size: int, seed: int, normalization: str = "identity",
                   byte_fallback: bool = False, threads: int = 2, symbols: tuple[str, ...] = (),
                   words: tuple[str, ...] = ()) -> None:
    """Learn a subword model on text files (one sentence per line), write it to ``model_path``.

    The learner sees a seeded sample of at most ``input_sentence_size`` lines, so memory is bounded
    by the sample, not the corpus. ``symbols`` (a multilingual model's tags) become vocabulary items
    right after the special symbols that no text is ever segmented into: they are put in by id.
    ``words`` (the terminology hints' markers) are vocabulary items too, but segmented from text wherever
    they occur (sentencepiece: as ``▁word``, the space before them in the piece). Raises ValueError when
    the library cannot learn such a model.
    """
    if model_type == "wordpiece":
        _learn_wordpiece(inputs, model_path, vocab_size, input_sentence_size, seed, normalization, symbols + words)
    else:
        _learn_sentencepiece(inputs, model_path, model_type, vocab_size, character_coverage, input_sentence_size,
                             seed, normalization, byte_fallback, threads, symbols, words)


def _learn_sentencepiece(inputs: list[Path], model_path: Path, model_type: str, vocab_size: int,
                         character_coverage: float, input_sentence_size: int, seed: int, normalization: str,
                         byte_fallback: bool, threads: int, symbols: tuple[str, ...] = (),
                         words: tuple[str, ...] = ()) -> None:
    import sentencepiece as spm

    spm.set_random_generator_seed(seed)
    stream = io.BytesIO()
    try:
        spm.SentencePieceTrainer.train(
            # lines from Python, not file names: the model file records the names it was given (prepare's
            # temporary folder), so the same data prepared twice gave the same pieces in another file
            sentence_iterator=_lines(inputs), model_writer=stream, model_type=model_type, vocab_size=vocab_size,
            character_coverage=character_coverage, input_sentence_size=input_sentence_size,
            shuffle_input_sentence=True, normalization_rule_name=normalization, byte_fallback=byte_fallback,
            pad_id=PAD_ID, unk_id=UNK_ID, bos_id=BOS_ID, eos_id=EOS_ID,
            pad_piece=SPECIAL_SYMBOLS[PAD_ID], unk_piece=SPECIAL_SYMBOLS[UNK_ID],
            bos_piece=SPECIAL_SYMBOLS[BOS_ID], eos_piece=SPECIAL_SYMBOLS[EOS_ID],
            num_threads=threads, max_sentence_length=16384, train_extremely_large_corpus=False,
            hard_vocab_limit=True, minloglevel=2, **({"control_symbols": list(symbols)} if symbols else {}),
            # with the word boundary: " __source__" is one piece (bare, the space before it would be another)
            **({"user_defined_symbols": ["\u2581" + w for w in words]} if words else {}),
        )
    except RuntimeError as exc:
        raise ValueError(f"sentencepiece could not learn a {model_type} model of {vocab_size} pieces: {exc}") from exc
    model_path.write_bytes(stream.getvalue())


def sample_lines(inputs: list[Path], size: int, seed: int) -> Iterator[str]:
    """About ``size`` lines of the files, each kept with probability size / lines (seeded), streamed:
    memory does not depend on the corpus or the sample (the learner keeps only its counts)."""
    total = sum(1 for _ in _lines(inputs))
    keep = min(1.0, size / max(total, 1))
    rng = random.Random(seed)
    return (line for line in _lines(inputs) if keep >= 1.0 or rng.random() < keep)


def _lines(inputs: list[Path]) -> Iterator[str]:
    for path in inputs:
        with open(path, encoding="utf-8", newline="\n") as handle:
            for line in handle:
                yield line.rstrip("\n")


def _learn_wordpiece(inputs: list[Path], model_path: Path, vocab_size: int, input_sentence_size: int, seed: int,
                     normalization: str, symbols: tuple[str, ...] = ()) -> None:
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

    unk = SPECIAL_SYMBOLS[UNK_ID]
    tokenizer = Tokenizer(models.WordPiece(unk_token=unk, continuing_subword_prefix=WORDPIECE_PREFIX,
                                           max_input_chars_per_word=1000))
    if normalization == "nfkc":
        tokenizer.normalizer = normalizers.NFKC()
    tokenizer.pre_tokenizer = pre_tokenizers.Split(" ", behavior="removed")  # words: split on ASCII spaces only
    tokenizer.decoder = decoders.WordPiece(prefix=WORDPIECE_PREFIX, cleanup=False)  # joins words with one space
    trainer = trainers.WordPieceTrainer(vocab_size=vocab_size, special_tokens=[*SPECIAL_SYMBOLS, *symbols],
                                        continuing_subword_prefix=WORDPIECE_PREFIX, show_progress=False)
    tokenizer.train_from_iterator(sample_lines(inputs, input_sentence_size, seed), trainer)
    if [tokenizer.id_to_token(i) for i in range(len(SPECIAL_SYMBOLS))] != list(SPECIAL_SYMBOLS):
        raise ValueError("WordPiece did not put the special symbols at ids 0-3")
    if tokenizer.get_vocab_size() < vocab_size:
        raise ValueError(f"WordPiece learned only {tokenizer.get_vocab_size()} pieces of the {vocab_size} asked for "
                         "(the training text is too small for this vocabulary)")
    tokenizer.save(str(model_path))


def word_starts(pieces: Sequence[str]) -> np.ndarray:
    """Per vocabulary id, whether the piece begins a word: sentencepiece marks word starts with ``▁``,
    WordPiece marks continuations with ``##``."""
    wordpiece = any(p.startswith("##") for p in pieces) and not any(p.startswith("▁") for p in pieces)
    if wordpiece:
        return np.array([not p.startswith("##") for p in pieces])
    return np.array([p.startswith("▁") for p in pieces])


def word_index(starts: np.ndarray, ids: Sequence[int], markers: tuple[int, int, int] | None = None) -> list[int]:
    """The word (from 0) each token of ``ids`` belongs to; the first token always begins one. In a source
    with terminology hints (``markers``: the ids of ``__source__ __target__ __done__``,
    `TextPipeline.hint_markers`) only the source's own words count, and a hint's markup and target
    term belong to the first word of the source term it stands with: an alignment names the words of
    the line as typed, and the word a hinted term was asked for."""
    if not len(ids):
        return []
    if markers is not None and markers[0] in ids:
        return _unhinted_word_index(starts, ids, markers)
    begins = starts[np.asarray(ids)].copy()
    begins[0] = True
    return (np.cumsum(begins) - 1).tolist()


def _unhinted_word_index(starts: np.ndarray, ids: Sequence[int], markers: tuple[int, int, int]) -> list[int]:
    source, target, done = markers
    out, word, term, inside = [], -1, 0, False
    for i in ids:
        if i == source:
            term = word + 1  # the term's first word is the next one
        elif i == target or i == done:
            inside = i == target
        elif not inside:
            word += 1 if word < 0 or starts[i] else 0
            out.append(word)
            continue
        out.append(term)
    return out
