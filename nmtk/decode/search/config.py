"""What a search is asked for and what it gives back, without torch.

Beam search, sampling and the CTranslate2 translator share these, and the last must load without
torch: a deployed (exported) model is run by CTranslate2 alone (`nmtk.decode.ct2`).

`SearchConfig` is the one home of the search settings: its defaults are the recipe's ``[decode]``
defaults (`nmtk.recipe.DecodeSection`), and `SearchConfig.from_recipe` is the one place a recipe's
section and a command's explicit choices become a search, for `translate`, validation and exports.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from nmtk.errors import NmtkError
from nmtk.recipe import DECODE_BEAM_TOKENS, DecodeSection

if TYPE_CHECKING:
    from nmtk.decode.search.word_alignment import Alignment

_DEFAULTS = DecodeSection()


@dataclass
class Hypothesis:
    tokens: list[int]
    score: float  # length-normalised log-probability
    alignment: Alignment | None = None  # word alignment, when asked for (`nmtk.decode.search.alignment`)
    # the watched cross-attention of each token's step (tokens × source positions), when the search kept it
    attention: Any = field(default=None, compare=False, repr=False)
    case: str | None = None  # the case its source line was typed in, given back to the text (`nmtk.text.casing`)
    cut: bool = False  # the search stopped it at its length limit (a·|x| + b): the model had not ended it
    retried: bool = False  # searched again with repeats barred, its first translation having been cut


@dataclass(frozen=True)
class SamplingConfig:
    topk: int = 0  # 0 = no top-k cut
    topp: float = 1.0  # 1.0 = no nucleus cut
    temperature: float = 1.0
    seed: int = 1

    def __post_init__(self) -> None:
        # a nucleus of mass 0 keeps no token at all: nmtk's engine would draw from nothing and
        # CTranslate2 refuses it; say so before any line is read
        if not 0.0 < self.topp <= 1.0:
            raise NmtkError(f"--topp {self.topp:g}: the nucleus must keep some probability mass, 0 < p <= 1 (1: no "
                            "cut; --topk 1 for the most likely token alone)")
        if self.topk < 0 or self.temperature < 0:
            raise NmtkError(f"--topk {self.topk}, --temperature {self.temperature:g}: neither may be negative")


@dataclass(frozen=True)
class LineControls:
    """What one line asks of its search besides the model, as target subword ids: the start its
    translation must have (``prefix``), phrases it must contain (``constraints``, lexically
    constrained beam search: `nmtk.decode.search.constrained`) and phrases it must never contain
    (``bans``). Built from text by `nmtk.decode.guide`; empty fields ask for nothing."""

    prefix: tuple[int, ...] = ()
    constraints: tuple[tuple[int, ...], ...] = ()
    bans: tuple[tuple[int, ...], ...] = ()
    # target terms the line's source holds as hints (``--terms inline``), as text: they ask nothing of
    # the search (nor make the controls true); of its finished hypotheses, the best holding most of them
    # is the translation (`nmtk.decode.guide.preferring`)
    hinted: tuple[str, ...] = ()
    # those terms as target ids: none is written twice in a row (banned doubled, its canonical spelling
    # only). A model trained with hints sometimes copies a hinted term again and again ("in der gelben
    # Hose Hose Hose …" to the length limit); CTranslate2 takes the doubled terms of a call's lines as one set
    doubled: tuple[tuple[int, ...], ...] = ()
    # per constraint, the source ids of the words a glossary found it for (() where it was given as such):
    # a line cut into sentences gives each sentence the constraints whose words it holds
    anchors: tuple[tuple[int, ...], ...] = ()
    # target ids that continue the word before them: never right after a constraint's last token, so a
    # term is produced as whole words ("Hund" does not count as met by "Hunde"); one set shared by all lines
    glue: frozenset[int] = field(default=frozenset(), compare=False, repr=False)

    def __bool__(self) -> bool:
        return bool(self.prefix or self.constraints or self.bans or self.doubled)

    @property
    def anchored(self) -> bool:
        """Whether each of the constraints has its source words (`anchors`): the line may be cut."""
        return len(self.anchors) == len(self.constraints) and all(self.anchors)

    @property
    def barred(self) -> tuple[tuple[int, ...], ...]:
        """Every phrase this line must never contain: its bans and its hinted terms doubled."""
        return self.bans + tuple(term + term for term in self.doubled)


@dataclass(frozen=True)
class SearchConfig:
    """One search, whole: beam (1 = greedy), length penalty α and its form, output length ≤ a·|x| + b, the n
    best kept, the batch budget ``beam_tokens`` in source tokens × beam (× 1 for sampling; None: by
    device), sampling instead of beam search, and whether hypotheses carry word alignments.

    Frozen and hashable: translators take it per call (`TranslatorBase.hypotheses`), never keep it,
    and the server batches together the requests whose searches are equal. Built from the recipe's
    ``[decode]`` and a command's or request's choices by `from_recipe` / `choose`; every rule between
    the settings is checked here, once, whoever built it.
    """

    beam: int = _DEFAULTS.beam
    length_penalty: float = _DEFAULTS.length_penalty
    length_penalty_form: str = _DEFAULTS.length_penalty_form  # "gnmt" or "power" (`DecodeSection`)
    max_len_a: float = _DEFAULTS.max_len_a
    max_len_b: int = _DEFAULTS.max_len_b
    nbest: int = 1
    beam_tokens: int | None = _DEFAULTS.beam_tokens  # None: by device (`budget`)
    sampling: SamplingConfig | None = None
    align: bool = False
    no_repeat_ngram_size: int = _DEFAULTS.no_repeat_ngram_size  # 0: no limit
    repetition_penalty: float = _DEFAULTS.repetition_penalty  # 1: none
    ordered_constraints: bool = False  # a line's constraints must appear in the order given
    # every finished hypothesis a sentence's beam holds when it stops (up to the beam), not only the n
    # best: for a caller that chooses among them (hinted terms). The search stops as for the n best.
    alternatives: bool = False
    # a line whose translation ran to its length limit is searched again with repeats barred
    # (`nmtk.decode.base.unrepeated`); validation during training does not, to measure the model alone
    retry_cut: bool = True
    # the source vocabulary's hint symbols (`TextPipeline.hint_markers`, set by the translator): a·|x| + b
    # counts the source's words, not hints' markup (`nmtk.vocab.unhinted_length`)
    hint_markers: tuple[int, int, int] | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.beam < 1 or self.nbest < 1:
            raise NmtkError(f"beam {self.beam}, n-best {self.nbest}: both must be at least 1")
        if self.nbest > self.beam and self.sampling is None:  # sampling draws n-best samples, beam or not
            raise NmtkError(f"n-best {self.nbest} exceeds beam {self.beam}: a beam of {self.beam} keeps {self.beam} "
                            "hypotheses; raise the beam or leave it out (it then follows the n-best)")
        if self.length_penalty_form not in ("gnmt", "power"):
            raise NmtkError(f"length penalty form {self.length_penalty_form!r}: gnmt or power")
        if self.no_repeat_ngram_size < 0:
            raise NmtkError(f"no_repeat_ngram_size {self.no_repeat_ngram_size}: must be 0 (no limit) or more")
        if self.repetition_penalty <= 0:
            raise NmtkError(f"repetition_penalty {self.repetition_penalty:g}: must be above 0 (1: no penalty; above "
                            "1 discourages repeating)")

    @property
    def steers(self) -> bool:
        """Whether this search changes the model's scores on every line (repetition limits)."""
        return self.no_repeat_ngram_size > 0 or self.repetition_penalty != 1.0

    def output_limit(self, source_len: int, max_positions: int, prefix: int = 0) -> int:
        """Output tokens (EOS aside) a source of ``source_len`` subwords may get: a·|x| + b, raised to
        hold a prefix of ``prefix`` tokens and one more, never past the model's positions. (The torch
        searches compute the same per batch row: `nmtk.decode.search.step.max_lengths`.)"""
        limit = int(self.max_len_a * source_len + self.max_len_b)
        return min(max(limit, prefix + 1) if prefix else limit, max_positions - 1)

    def budget(self, device_type: str) -> int:
        """Source tokens × beam per batch on a device of this type (``cpu``, ``cuda``), in either engine."""
        return self.beam_tokens or DECODE_BEAM_TOKENS.get(device_type, DECODE_BEAM_TOKENS["cpu"])

    @property
    def returned(self) -> int:
        """Hypotheses a sentence's search gives back at most: the n best, or with ``alternatives`` every
        one its beam holds."""
        return self.beam if self.alternatives and self.sampling is None else self.nbest

    @property
    def rows(self) -> int:
        """Rows a source takes in a batch: its beam, or one for each of its n-best samples."""
        return self.nbest if self.sampling is not None else self.beam

    @classmethod
    def from_recipe(cls, decode: DecodeSection, **choices: Any) -> SearchConfig:
        """The search a command asks for, the recipe's ``[decode]`` filling what it leaves open (None)."""
        base = cls(beam=decode.beam, length_penalty=decode.length_penalty,
                   length_penalty_form=decode.length_penalty_form, max_len_a=decode.max_len_a,
                   max_len_b=decode.max_len_b, beam_tokens=decode.beam_tokens,
                   no_repeat_ngram_size=decode.no_repeat_ngram_size, repetition_penalty=decode.repetition_penalty)
        return base.choose(**choices)

    def choose(self, **choices: Any) -> SearchConfig:
        """This search with ``choices`` (field names; None leaves a field as it is).

        Rule for ``nbest`` K: without a chosen beam the beam is at least K (this beam, raised to K); a
        chosen beam smaller than K is an error (`__post_init__`), since a beam of B holds B hypotheses.
        """
        chosen = {k: v for k, v in choices.items() if v is not None}
        if "beam" not in chosen and chosen.get("nbest", 1) > self.beam:
            chosen["beam"] = chosen["nbest"]
        return replace(self, **chosen)
