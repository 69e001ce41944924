"""A request's glossary is looked for in each line as its own source reads it (`nmtk.serve.app._Service`)."""

from __future__ import annotations

from types import SimpleNamespace

from nmtk.pair import Pair
from nmtk.serve.app import ServerGuides, _Service
from nmtk.text.reading import Reading


def _view(tokenize) -> SimpleNamespace:  # noqa: ANN001 - a Moses tokenizer's stand-in
    return SimpleNamespace(reading=Reading(fold_case=False), src_pipe=SimpleNamespace(
        moses=SimpleNamespace(tokenize=tokenize)))


def test_a_multilingual_servers_glossary_is_matched_by_the_requests_own_pair() -> None:
    """Moses splits by language (French ``l'homme`` → ``l' homme``; here the first source's stand-in
    splits nothing): a request for a model's second source was matched with the first source's Moses,
    and missed its term."""
    english = _view(lambda text: text)
    french = _view(lambda text: text.replace("'", "' "))
    translator = SimpleNamespace(**vars(english), for_pair=lambda pair: french if pair == Pair("fr", "de") else english)
    service = _Service(SimpleNamespace(translator=translator), None, None, None, ServerGuides())
    asked = (["l'homme court"], [None], [[]], [("homme", "Mann")], False, None)
    assert service.guides(*asked, Pair("fr", "de"))[0].constraints == ("Mann",)
    assert service.guides(*asked, Pair("en", "de")) == [None]  # one word "l'homme", no term


def test_a_server_with_inline_terms_asks_for_them_as_hinted_terms_not_constraints() -> None:
    """``serve --terms inline``: the glossaries' terms go into the sources as hints and, per line, into
    its guidance as hinted terms that choose among the finished hypotheses (`preferring`)."""
    from nmtk.decode.guide import Glossary, Guidance

    english = _view(str)
    translator = SimpleNamespace(**vars(english), for_pair=lambda pair: english)
    service = _Service(SimpleNamespace(translator=translator), None, None, None,
                       ServerGuides(Glossary((("dog", "Hund"),)), (), True))
    got = service.guides(["a dog and a cat", "a bird"], [None, None], [[], []], [("cat", "Katze")], False, None)
    assert got == [Guidance(hinted=("Hund", "Katze")), None]
