"""Markup through a translator (`translate --format html|xml`, `serve`'s ``format: "html"``).

Each document is cut into segments and their sentences (`nmtk.text.markup`); every sentence of every
document is one line of a single search (so a request's, or a file's, sentences batch together, and a
server batches them with other requests'), with word alignments; each segment's translations are joined
and its tags placed around the target words aligned to the source words they covered.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace

from nmtk.decode.base import TranslatorBase
from nmtk.decode.guide import Glossary, Guidance, guided
from nmtk.decode.search.config import Hypothesis, SearchConfig
from nmtk.decode.unknown import keeper, lost_carried, renumbered_better, unread
from nmtk.errors import NmtkError
from nmtk.model_source import NOT_ALIGNED
from nmtk.text.brackets import tidied
from nmtk.text.langid import translated_label
from nmtk.text.line_breaks import CLOSERS, ends_sentence
from nmtk.text.markup import Document, MarkupError, Target, owners, parse, place, text_of, token_spans
from nmtk.text.subword import word_index


def check_engine(translator: TranslatorBase, kind: str) -> None:
    """One line, before anything is read, where the engine cannot place tags."""
    if not translator.can_align:
        raise NmtkError(f"format {kind} (tags are placed by word alignments): {NOT_ALIGNED}")


def markup_search(search: SearchConfig) -> SearchConfig:
    """The search markup needs: the best translation of each sentence, with its word alignment."""
    return replace(search, align=True, nbest=1)


@dataclass
class MarkedUp:
    """Documents cut into the sentences to translate (``lines``, in order), and how to put them back."""

    documents: list[Document]
    places: list[tuple[int, int, int, int]]  # per line: its document, segment, first and last word
    lines: list[str]  # the sentences to translate
    tokens: list[str]  # each one as the source's Moses steps leave it: the words the alignment counts
    # the sentences with no letter or digit (``...``, ``—``, ``* * *``), kept as they are: a model given
    # one writes a sentence of its own (the demo model made "..." "Ein Taucher.")
    unread: list[tuple[int, int, int, int]] = field(default_factory=list)
    kind: str = "html"  # html or xml

    @classmethod
    def of(cls, documents: list[str], kind: str, translator: TranslatorBase,
           attributes: tuple[str, ...] = (), numbers: bool = False, glossary: Glossary | None = None) -> MarkedUp:
        # emoji, unknown scripts, links (numbers) carried; not what the glossary translates
        parsed, keep = [], keeper(translator, numbers, glossary)
        for d, text in enumerate(documents):
            try:
                parsed.append(parse(text, kind, attributes, keep))
            except MarkupError as exc:  # said of the document it is in (a file's line, a request's item)
                exc.document = d
                raise
        every = [(d, s, lo, hi) for d, doc in enumerate(parsed) for s, segment in enumerate(doc.segments)
                 for lo, hi in segment.sentences()]
        text = [" ".join(parsed[d].segments[s].words[lo:hi]) for d, s, lo, hi in every]
        read = [not unread(line) for line in text]
        places = [p for p, r in zip(every, read, strict=True) if r]
        lines = [line for line, r in zip(text, read, strict=True) if r]
        moses = translator.src_pipe.moses
        return cls(parsed, places, lines, [moses.tokenize(line) for line in lines] if moses.enabled else lines,
                   [p for p, r in zip(every, read, strict=True) if not r], kind)

    def ids(self, translator: TranslatorBase, hints: Glossary | None = None) -> list[list[int] | None]:
        """The sentences' source ids (`TranslatorBase.encode`'s), from the tokens already made; ``hints``:
        a glossary written into them as hints (``--terms inline``; alignments still count the sentence's
        own words, so tags land as without it)."""
        tokens = [translator.reading.read(t) for t in self.tokens]  # read as `encode` reads text (`Reading`)
        if hints is not None:
            target = translator.tgt_pipe.moses.tokenize
            tokens = [hints.hinted(t, translator.src_pipe.moses.tokenize, target, tokenized=True) for t in tokens]
        return list(translator.src_pipe.encode_tokenized(tokens)) if tokens else []

    def render(self, hyps: list[list[Hypothesis]], translator: TranslatorBase, own_stops: bool = False) -> list[str]:
        """The documents translated (``hyps``: one list per line, aligned), tags in place; ``own_stops``
        (documents and their fragments, not lines of text carried through markup): a sentence ends as its
        source does where the model ended it with a stop of its own (`_own_end`), and html's ``lang``
        attributes say the target language (`relabelled`). No segment keeps a stray bracket (`tidied`)."""
        targets: dict[tuple[int, int], list[tuple[int, str, list[str], list[int]]]] = {}
        for (d, s, lo, _), found, line, tokens in zip(self.places, hyps, self.lines, self.tokens, strict=True):
            target = _sentence_target(found[0] if found else None, line, tokens, translator)
            targets.setdefault((d, s), []).append((lo, *(_own_end(line, *target) if own_stops else target)))
        for d, s, lo, hi in self.unread:  # as they are, each word its own
            words = self.documents[d].segments[s].words[lo:hi]
            targets.setdefault((d, s), []).append((lo, " ".join(words), list(words), list(range(hi - lo))))
        for sentences in targets.values():
            sentences.sort(key=lambda sentence: sentence[0])
        out = []
        for d, doc in enumerate(self.documents):
            placed = []
            for s, segment in enumerate(doc.segments):
                joined = _joined(targets.get((d, s), []), segment.glued)
                placed.append(tidied(segment.written(), place(segment, joined)))
            out.append(doc.render(placed))
        return [relabelled(document, translator) for document in out] if own_stops and self.kind == "html" else out


def _sentence_target(hyp: Hypothesis | None, line: str, tokenized: str, translator: TranslatorBase
                     ) -> tuple[str, list[str], list[int]]:
    """One sentence's translation, its target words (as the alignment counts them: the subword model's
    words, before detokenising) and, per target word, the source word of ``line`` it is aligned to."""
    if hyp is None or not hyp.tokens:
        return "", [], []
    source_starts, target_starts = translator.word_starts
    pipe = translator.tgt_pipe
    groups: dict[int, list[int]] = {}
    for token, word in zip(hyp.tokens, word_index(target_starts, hyp.tokens), strict=True):
        groups.setdefault(word, []).append(token)
    words = [pipe.tokens_text(ids) for ids in groups.values()]
    # The model's source words: the subword model's input (Moses tokens, where the recipe asks for them),
    # after the pipeline's own first pieces (a multilingual model's tag).
    head = len(set(word_index(source_starts, translator.src_pipe.prefix))) if translator.src_pipe.prefix else 0
    mine = line.split()
    tokens = tokenized.split()
    owner = list(range(len(mine))) if tokens == mine else owners(mine, tokens)
    aligned = [0] * len(words)
    for s, t in hyp.alignment.pairs if hyp.alignment else ():
        if t < len(aligned) and owner:
            aligned[t] = owner[min(max(s - head, 0), len(owner) - 1)]
    return translator.detokenize(hyp), words, aligned


#: A source's question or exclamation marks, ellipsis or colon at its end (before quotes or brackets).
_MARKS_AT_END = re.compile(rf"([?!]+|\.{{3,}}|…|:)[{re.escape(CLOSERS)}]*\s*$")


def _own_end(line: str, text: str, words: list[str], aligned: list[int]) -> tuple[str, list[str], list[int]]:
    """A sentence's translation (`_sentence_target`'s) ending as its source does where the model ended it
    with a full stop of its own: none where the source has no end (a heading, a list item, a table cell,
    an ``alt`` text, a subtitle's fragment: "Dogs in the park" came back "Hunde im Park."), the source's
    question or exclamation marks, ellipsis or colon where it has those ("Where is the dog?" came back
    "Wo ist der Hund.", "A dog runs in the park..." "Ein Hund rennt im Park.", "Ingredients:" "Zutaten.").
    Models trained on sentences of one kind end every output with a stop."""
    marks = _MARKS_AT_END.search(line)
    if (ends_sentence(line) and not marks) or not words or not text.endswith(".") or text.endswith(".."):
        return text, words, aligned
    end = marks.group(1) if marks else ""
    if words[-1] == ".":
        return (text[:-1] + end, [*words[:-1], end], aligned) if end else (text[:-1].rstrip(), words[:-1], aligned[:-1])
    if words[-1].endswith("."):
        return text[:-1] + end, [*words[:-1], words[-1][:-1] + end], aligned
    return text, words, aligned


def own_marks(line: str, text: str) -> str:
    """A line of text's translation ending with the line's own question or exclamation marks, ellipsis
    or colon where the model ended it with a full stop ("Is the dog running?", "A dog runs!", "And
    then...", "Look at this:" came back with "."), as `_own_end` ends a sentence of markup; a stop where
    the line has none stays (the references of Multi30k's lines without one mostly have it)."""
    marks = _MARKS_AT_END.search(line)
    if marks is None or not text.endswith(".") or text.endswith(".."):
        return text
    return text[:-1] + marks.group(1)


def _joined(sentences: list[tuple[int, str, list[str], list[int]]], glued: frozenset[int] = frozenset()) -> Target:
    """A segment's sentences' translations as one: texts joined by a space (none where the source wrote
    none between them, ``glued``: ``<b>A dog runs.</b><i>A cat…`` keeps its tags together), the words'
    places in it found sentence by sentence (`token_spans` compares characters, by `difflib` where the
    detokeniser changed some: over a whole block of 300 sentences that took 11 s, over each sentence
    milliseconds), alignments to the segment's words (each sentence's from its first word)."""
    texts: list[str] = []
    spans: list[tuple[int, int]] = []
    aligned: list[int] = []
    at = 0  # where the next sentence's text begins in the joined text
    for first, text, sentence_words, sentence_aligned in sentences:
        if text:
            space = " " if texts and first - 1 not in glued else ""
            at += len(space)
            spans += [(lo + at, hi + at) for lo, hi in token_spans(sentence_words, text)]
            texts.append(space + text)
            at += len(text)
        else:
            spans += [(at, at)] * len(sentence_words)
        aligned += [first + s for s in sentence_aligned]
    return Target("".join(texts), spans, aligned)


def translate_markup(translator: TranslatorBase, documents: list[str], search: SearchConfig, kind: str,
                     attributes: tuple[str, ...] = (), glossary: Glossary | None = None,
                     bans: tuple[str, ...] = (), hints: bool = False, numbers: bool = False,
                     cut: list[int] | None = None, own_stops: bool = False) -> list[str]:
    """``documents`` (html or xml) translated with their tags, all their sentences in one search (with
    the glossary's terms, as constraints or, ``hints``, as hints in the sources, and the banned
    phrases, as in text); with ``numbers``, their numbers carried through as links are. Without, a
    document whose translation lost or garbled a number of its text is translated again with its
    numbers carried, as a line of text is (`renumbered_lines`; the demo model wrote "&copy; 2024 Dog
    Park" as "&copy; Basketballspieler der Nummer4444."). ``cut``: where given, the indices of the
    documents a sentence of which ran to its length limit are added to it (`translate`'s last line
    names them). ``own_stops``: sentences end as their source does (`MarkedUp.render`): documents' and
    their fragments, not lines of text carried through markup."""
    check_engine(translator, kind)
    marked = MarkedUp.of(documents, kind, translator, attributes, numbers, glossary)
    lines = marked.lines
    if not lines:
        return list(documents)
    guides = None
    if glossary is not None or bans:
        tokenize = translator.src_pipe.moses.tokenize
        guides = [guided(translator.reading.read(line), Guidance(), glossary, bans, tokenize, hints) for line in lines]
    ids = marked.ids(translator, glossary if hints else None)
    hyps = translator.hypotheses(lines, markup_search(search), ids=ids, guides=guides)
    ran = sorted({d for (d, *_), found in zip(marked.places, hyps, strict=True) if found and found[0].cut})
    out = marked.render(hyps, translator, own_stops)
    if not numbers:
        again = renumbered_documents(translator, documents, out, kind)
        if again:  # made again with their numbers carried; their length limits are the new translations'
            still: list[int] = []
            redone = translate_markup(translator, [documents[d] for d in again], search, kind, attributes, glossary,
                                      bans, hints, numbers=True, cut=still, own_stops=own_stops)
            taken = take_renumbered(translator, documents, out, again, redone, kind)
            ran = sorted(set(ran) - {again[k] for k in taken} | {again[k] for k in still if k in taken})
    if cut is not None:
        cut += ran
    return out


def take_renumbered(translator: TranslatorBase, documents: list[str], out: list[str], again: list[int],
                    redone: list[str], kind: str) -> list[int]:
    """Put into ``out`` each of the documents ``again`` (`renumbered_documents`) whose translation made
    again with its numbers carried (``redone``, in ``again``'s order) is the better one
    (`renumbered_better`, on their words); returns the positions in ``again`` taken. `translate_markup`
    and `serve`'s html both take them so (serve took every one, a number the model added included)."""
    taken = [k for k, (d, text) in enumerate(zip(again, redone, strict=True))
             if renumbered_better(translator, text_of(documents[d], kind), text_of(out[d], kind), text_of(text, kind))]
    for k in taken:
        out[again[k]] = redone[k]
    return taken


def relabelled(document: str, translator: TranslatorBase) -> str:
    """A translated html document whose elements in the source language say the target's (``<html
    lang="en">`` and ``lang="en-GB"`` → ``lang="de"``); others (a quote ``lang="fr"``) as they were."""
    source, target = translator.src_pipe.moses.lang, translator.tgt_pipe.moses.lang
    return _LANG_ATTRIBUTE.sub(lambda m: m.group(1) + translated_label(m.group(2), source, target), document)


#: An element's ``lang`` (or ``xml:lang``) attribute and its value.
_LANG_ATTRIBUTE = re.compile(r"""(<[A-Za-z][^<>]*?\s(?:xml:)?lang\s*=\s*["']?)([\w-]+)(?=["'\s/>])""", re.IGNORECASE)


def renumbered_documents(translator: TranslatorBase, documents: list[str], translations: list[str], kind: str
                         ) -> list[int]:
    """The indices of the ``documents`` whose words' ``translations`` lost or garbled a number of theirs,
    a name or a speaker's label, to be made again with them carried (`lost_carried`, the test of
    `renumbered_lines`, on markup's words); none
    where lines are read as typed. `translate_markup` and `serve`'s html both ask it."""
    if not translator.reading.carry:
        return []
    lang, source_lang = translator.tgt_pipe.moses.lang, translator.src_pipe.moses.lang
    found = []
    for d, (source, translation) in enumerate(zip(documents, translations, strict=True)):
        words, translated = text_of(source, kind), text_of(translation, kind)
        if lost_carried(words, translated, lang, source_lang):
            found.append(d)
    return found

