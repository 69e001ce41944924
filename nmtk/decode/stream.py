"""`nmtk translate`: text streamed from input to output through a translator, n-best and score formats.

The typer command only parses; everything it parsed arrives here as one `TranslateOptions`: what to
load (`nmtk.decode.load.LoadOptions`), the search it chose (the recipe's ``[decode]`` fills the rest:
`SearchConfig.from_recipe`) and how to read and write.
"""

from __future__ import annotations

import html
import os
import re
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace
from itertools import islice
from pathlib import Path
from typing import Any, BinaryIO, TextIO

from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn

from nmtk.console import console
from nmtk.decode.base import TranslatorBase, refuse_tags
from nmtk.decode.guide import Glossary, Guidance, GuideOptions, InputFormat, guided, inline_terms, read_guides
from nmtk.decode.load import LoadOptions, load_translator, with_glossary
from nmtk.decode.markup import check_engine, own_marks, translate_markup
from nmtk.decode.search.config import Hypothesis, SamplingConfig, SearchConfig  # noqa: F401 - the CLI's
from nmtk.decode.unknown import (
    can_carry,
    carried_lines,
    left_out,
    rebracketed_better,
    rebracketed_lines,
    renumbered_lines,
    renumbered_taken,
    restored,
    sentences_apart,
)
from nmtk.errors import Interrupted, NmtkError
from nmtk.files import (
    InvalidUtf8,
    ReadyLines,
    buffered,
    checked_reads,
    decode_lines,
    decode_text,
    input_path,
    open_binary,
    output_path,
    partial_path,
)
from nmtk.interrupts import deferred, exit_code, interruptible
from nmtk.model_source import NOT_ALIGNED, resolve_model
from nmtk.pair import sources_of
from nmtk.text import langid
from nmtk.text.brackets import rebracketed, tidied, to_rebracket
from nmtk.text.line_breaks import list_marker
from nmtk.text.markup import MarkupError, holds_tags, parse
from nmtk.text.subtitles import AssScript, Subtitles
from nmtk.text.xliff import Xliff


@dataclass(frozen=True)
class TranslateOptions:
    """Everything `nmtk translate` was asked to do."""

    load: LoadOptions = field(default_factory=LoadOptions)
    search: dict[str, Any] = field(default_factory=dict)  # `SearchConfig` fields chosen (None: the recipe's)
    input: Path | None = None
    output: Path | None = None
    force: bool = False
    buffer_size: int = 1000
    skip: int = 0  # input lines to leave out (going on after an interrupted run)
    errors: InvalidUtf8 = InvalidUtf8.error
    print_scores: bool = False
    guide: GuideOptions = field(default_factory=lambda: GuideOptions())
    format: str | None = "text"  # text, html / xml (tags placed around their words: `nmtk.decode.markup`), srt /
    # vtt (`SUBTITLES`), xliff; None: what the input's (else the output's) name says (`_with_format`), else text
    document: bool = False  # html / xml: the whole input is one document (else each line is one fragment)
    attributes: tuple[str, ...] = ()  # html: attributes whose values are translated too (alt, title)

    @property
    def nbest(self) -> int:
        """Translations per line asked for (the output's shape: one line each, or n-best rows)."""
        return self.search.get("nbest") or 1


@dataclass(frozen=True)
class Engine:
    """A loaded translator, the search this run asks of it, and what guides each line."""

    translator: TranslatorBase
    search: SearchConfig
    format: InputFormat = InputFormat()
    glossary: Glossary | None = None
    bans: tuple[str, ...] = ()
    detect: bool = False  # --source-lang auto, a model with the target from several sources
    hints: bool = False  # the glossary goes into the sources as hints (--terms inline), not into the search
    cut: list[int] = field(default_factory=list)  # input lines whose translation ran to its length limit
    retried: list[int] = field(default_factory=list)  # ... and whose second, repeats barred, ended before it
    detected: dict[str, TranslatorBase] = field(default_factory=dict)  # a buffer's lines' pairs (`view_of`)
    auto: bool = False  # --source-lang auto: lines already in the target language are written as they are
    kept: list[int] = field(default_factory=list)  # ... those lines
    tagged: list[int] = field(default_factory=list)  # text lines holding markup tags (`holds_tags`)
    uncarried: list[int] = field(default_factory=list)  # lines with spans to carry that these options leave
    foreign: list[tuple[int, str]] = field(default_factory=list)  # lines in a language the model reads none of

    def alone(self, options: TranslateOptions) -> bool:
        """Whether each line gives its translation alone: plain input, no scores, n-best or alignments."""
        return self.format.plain and not options.print_scores and self.search.nbest == 1 and not self.search.align

    def as_they_are(self, sources: list[str], options: TranslateOptions) -> dict[int, str]:
        """With ``--source-lang auto``, the lines surely in the target language already (`langid.already_in`,
        among the model's languages), by index: written as they are, as `serve` gives such texts back;
        where each line gives its translation alone (`alone`)."""
        if not (self.auto and self.alone(options)):
            return {}
        pairs, pair = self.translator.pairs, self.translator.language_pair
        target = pair.target if pair is not None else self.translator.tgt_pipe.moses.lang
        sources_ = sources_of(pairs, target) if pairs else [self.translator.src_pipe.moses.lang]
        among = self.languages()
        return {k: line for k, line in enumerate(sources)
                if line.strip() and langid.already_in(langid.detect(line, among)[0], target, sources_)}

    def languages(self) -> list[str]:
        """The model's languages, sources and targets, as its recipe spells them (once each)."""
        pairs, translator = self.translator.pairs, self.translator
        return list(dict.fromkeys(lang for pair in pairs for lang in pair)) if pairs else [
            translator.src_pipe.moses.lang, translator.tgt_pipe.moses.lang]

    def elsewhere(self, sources: list[str], skip: Iterable[int] = ()) -> dict[int, str]:
        """With ``--source-lang auto``, the lines (by index, but those in ``skip``) the identifier is sure
        are in a language the model reads none of, and that language's code (`langid.foreign_language`):
        translated as one of its sources all the same ("Un chien court dans le parc." by an en→de model:
        "Ein mült sich bereit."), and named on the last line."""
        if not self.auto:
            return {}
        among, skipped = self.languages(), set(skip)
        found = {k: langid.foreign_language(line, among) for k, line in enumerate(sources) if k not in skipped}
        return {k: code for k, code in found.items() if code}

    def opened(self, lines: list[str], options: TranslateOptions) -> tuple[list[str], list[str]]:
        """Each line's list item marker (`list_marker`: ``1. ``, ``- ``, ``a) ``), written back before its
        translation as `serve` writes a text's back, and the rest of the line, its sentences glued to
        each other set apart (`sentences_apart`: "snow.A cat"), where each line gives its translation
        alone and is not read as typed; else no markers and the lines as they are."""
        reading = self.translator.reading
        if not (self.alone(options) and reading.carry):
            return [""] * len(lines), lines
        markers = [list_marker(line) for line in lines]
        rest = [line[len(marker):] for line, marker in zip(lines, markers, strict=True)]
        return markers, [sentences_apart(line) for line in rest] if reading.split else rest

    def view_of(self, line: str) -> TranslatorBase:
        """The translator that reads ``line``: with ``--source-lang auto``, its detected language's pair,
        detected once per buffer (encoding, carrying and renumbering ask; `_translated` empties it)."""
        if not self.detect or not line.strip():
            return self.translator
        if line not in self.detected:
            self.detected[line] = self.translator.for_text(line)
        return self.detected[line]

    def ids(self, sources: list[str], first: int) -> list[list[int] | None] | None:
        """With ``--source-lang auto``, each line encoded by the pair of its detected language; with
        inline terms, with the glossary's hints (None: the translator's own pair encodes them all, in
        `hypotheses`)."""
        hints = self.glossary if self.hints else None
        if not self.detect:
            return None if hints is None else self.translator.encode(sources, first, hints)
        return [self.view_of(line).encode([line], first + k, hints)[0] if line.strip() else None
                for k, line in enumerate(sources)]

    def carried(self, sources: list[str], first: int, options: TranslateOptions, cut: set[int]) -> dict[int, str]:
        """The translations of the lines holding characters the source vocabulary cannot spell, their
        spans carried through (`nmtk.decode.unknown`), by index (``first``: the first one's line number);
        none where lines are read by another input format, or each line gives more than its translation.
        Those that ran to their length limit are added to ``cut``."""
        if not self.carries(options):
            self._uncarried(sources, first)
            return {}
        refuse_tags(self.translator, sources, first)  # as `encode` checks the lines it is given
        out: dict[int, str] = {}
        for view, lines in self.views(sources, range(len(sources))):
            found = carried_lines(view, [sources[k] for k in lines], self.glossary)
            out.update({lines[i]: text for i, text in self._through_markup(view, found, cut, lines).items()})
        return out

    def leaving(self, options: TranslateOptions) -> str:
        """The options that leave lines' spans to the model, as the last line names them (`distill` asks
        for scores, which a user of it never typed)."""
        search, given = self.search, self.format
        named = [name for name, on in (("--prefix", given.prefix), ("--constraints", given.constraints),
                                       ("scores", options.print_scores), ("n-best lists", search.nbest > 1),
                                       ("sampling", search.sampling is not None), ("alignments", search.align))
                 if on]
        return " and ".join(named) if named else "these options"

    def _uncarried(self, sources: list[str], first: int) -> None:
        """Note the lines holding what a plain translation would carry through (emoji, links, codes) where
        these options leave them to the model (`--prefix`, `--constraints`, `--nbest`, scores,
        alignments: each line's hypotheses are the search's own), which drops or garbles them silently
        ("A dog 🐶 runs." → "Ein Hund schnüffelt."); none from an engine that cannot carry at all (its
        notice came at load)."""
        if not (self.translator.reading.carry and self.translator.can_align):
            return
        self.uncarried.extend(first + k for k in carried_lines(self.translator, sources, self.glossary))

    def renumbered(self, sources: list[str], out: list[str], options: TranslateOptions, cut: set[int]) -> list[str]:
        """``out`` (a line per source) with each translation that lost a number of its source
        (`lost_numbers`), or a glossary's untranslated term, made again with the source's numbers (and
        those terms) carried through, as links are (`renumbered_lines`); where
        lines are carried, and not read as typed. ``cut`` (the lines that ran to their length limit)
        follows: a line made again is in it where its new translation ran to the limit."""
        return self._made_again(sources, out, options, cut, renumbered_lines, renumbered_taken)

    def rebracketed(self, sources: list[str], out: list[str], options: TranslateOptions, cut: set[int]) -> list[str]:
        """``out`` with each translation that lost brackets of its source (`lost_brackets`) made again
        with the bracketed parts as inline elements, which markup places by alignment (`rebracketed_lines`),
        and brackets again: the demo model wrote "A woman (in a red dress) dances." as "Eine Frau in einem
        roten Kleid tanzt.", now "Eine Frau (in einem roten Kleid) tanzt."; the first translation stays where
        markup placed a part around no letter or the second garbles a number the first kept
        (`rebracketed_better`)."""
        return self._made_again(sources, out, options, cut, rebracketed_lines, rebracketed_better)

    def _made_again(self, sources: list[str], out: list[str], options: TranslateOptions, cut: set[int],
                    found_in: Callable[[TranslatorBase, list[str], list[str]], dict[int, str]],
                    taken: Callable[[TranslatorBase, str, str, str], str | None]) -> list[str]:
        """``out`` with the lines ``found_in`` names made again through markup with their numbers carried,
        each where ``taken`` returns its new text; where lines are carried. A line made again is in ``cut``
        where its new translation ran to its length limit, and out of it where not."""
        if not self.carries(options):
            return out
        out = list(out)
        for view, lines in self.views(sources, range(len(sources))):
            found = found_in(view, [sources[k] for k in lines], [out[k] for k in lines])
            ran: set[int] = set()
            for i, text in self._through_markup(view, found, ran, lines, numbers=True).items():
                k = lines[i]
                if (again := taken(view, sources[k], out[k], text)) is not None:  # its length limit follows it
                    out[k] = again
                    cut.discard(k)
                    cut.update(ran & {k})
        return out

    def _through_markup(self, view: TranslatorBase, found: dict[int, str], cut: set[int], lines: list[int],
                        numbers: bool = False) -> dict[int, str]:
        """``found``'s fragments (by index into ``lines``) translated as html and restored as text; the
        lines of those that ran to their length limit added to ``cut``."""
        if not found:
            return {}
        ran: list[int] = []
        done = translate_markup(view, list(found.values()), self.search, "html", (), self.glossary, self.bans,
                                self.hints, numbers=numbers, cut=ran)
        cut.update(lines[list(found)[d]] for d in ran)
        return restored(found, done)

    def carries(self, options: TranslateOptions) -> bool:
        """Whether lines are carried (`nmtk.decode.unknown`): plain input, each line giving its translation."""
        return self.format.plain and not options.print_scores and can_carry(self.translator, self.search)

    def views(self, sources: list[str], lines: Iterable[int]) -> list[tuple[TranslatorBase, list[int]]]:
        """``lines`` of ``sources`` by the translator that reads them: with ``--source-lang auto``, the pair
        of each one's detected language."""
        groups: dict[object, tuple[TranslatorBase, list[int]]] = {}
        for k in lines:
            view = self.view_of(sources[k])
            groups.setdefault(view.language_pair, (view, []))[1].append(k)
        return list(groups.values())

    def guides(self, lines: list[str], first: int) -> tuple[list[str], list[Guidance | None] | None]:
        """The sources of ``lines`` (numbered from ``first``) and each one's guidance (None: none at all,
        and the search runs exactly as without these options)."""
        if self.format.plain and self.glossary is None and not self.bans:
            return lines, None
        sources, guides = [], []
        tokenize = self.translator.src_pipe.moses.tokenize
        for k, line in enumerate(lines):
            source, guide = self.format.split(line, first + k)
            sources.append(source)
            guides.append(guided(self.translator.reading.read(source), guide, self.glossary, self.bans, tokenize,
                                 self.hints))
        return sources, guides


def output_lines(index: int, hyps: list[Hypothesis], engine: Engine, options: TranslateOptions) -> list[str]:
    """The line(s) one input line gives: the translation, ``SCORE<TAB>TEXT``, or n-best rows; with
    ``--print-alignment`` a tab and the ``i-j`` pairs follow the text."""
    align, nbest = engine.search.align, engine.search.nbest

    def text(h: Hypothesis) -> str:
        return engine.translator.detokenize(h) + (f"\t{h.alignment or ''}" if align else "")

    empty = "\t" if align else ""
    if nbest > 1:  # an empty input line still gets one line, so every input is accounted for
        return [f"{index}\t{h.score:.4f}\t{text(h)}" for h in hyps[:nbest]] or [f"{index}\t\t{empty}"]
    if not hyps:
        return ["\t" + empty if options.print_scores else empty]
    return [f"{hyps[0].score:.4f}\t{text(hyps[0])}" if options.print_scores else text(hyps[0])]


def translate(options: TranslateOptions) -> None:
    """Run `nmtk translate`: check the paths, load, then stream input to output.

    With ``-o OUT`` the translations go to ``OUT.partial`` as they are finished and the file becomes
    ``OUT`` (by rename) only when every line is done: an interrupted run leaves an existing ``OUT`` as
    it was and the finished prefix in ``OUT.partial``, with one line saying how many lines it holds and
    how to go on (``--skip N``). Going on appends to that prefix, never truncates it, ``--force`` or
    not; a run that fails before finishing a line leaves no ``OUT.partial`` behind.
    """
    options = _with_format(options)
    if options.input is not None:  # the user's paths are checked before any model loads
        input_path(options.input)
        if options.skip and (lines := count_lines(options.input)) < options.skip:
            raise NmtkError(_skip_beyond(options, lines))
    partial, resume = _check_output(options) if options.output is not None else (None, False)
    model = resolve_model(options.load.model, options.load.checkpoint)
    search = SearchConfig.from_recipe(model.recipe.decode, **options.search)
    if (search.align or options.format != "text") and not model.aligns:  # before the model loads
        what = "--print-alignment" if search.align else f"--format {options.format} (tags are placed by alignments)"
        raise NmtkError(f"{what}: {model.path}: {NOT_ALIGNED}")
    glossary, bans = read_guides(options.guide, model.recipe)
    hints = glossary is not None and inline_terms(options.guide.terms, model.manifest, str(model.path))
    translator = load_translator(model, with_glossary(options.load, glossary, hints))
    if hints:
        translator.check_hints(glossary)
    engine = Engine(translator, search, options.guide.format, glossary, bans, _detects_sources(translator, options),
                    hints, auto=(options.load.source_lang or "").lower() == "auto")
    engine.translator.check_guides(None if hints else glossary, bans, options.guide.format.constraints, search)
    if options.format != "text":
        _refuse_with_markup(engine, options)
    elif options.document:
        raise NmtkError("--document: for --format html or xml (a text's lines are translated one by one)")
    if options.document or options.format in WHOLE:
        return _translate_document(engine, options, partial)
    source: BinaryIO = open_binary(options.input) if options.input else sys.stdin.buffer  # .gz, .xz, .bz2 too
    done, start = [0], time.perf_counter()
    try:
        with interruptible():  # Ctrl-C and SIGTERM end a wait for input wherever the kernel delivers them
            if options.output is None:
                _stream(engine, options, source, sys.stdout, done)
            else:
                _to_partial(engine, options, source, partial, resume, done)
                os.replace(partial, options.output)
        console.print(summary(done[0], time.perf_counter() - start, engine.cut, engine.retried, engine.kept,
                              engine.tagged, engine.uncarried, engine.leaving(options), engine.foreign))
    except KeyboardInterrupt as exc:
        code = exit_code(exc)
        if partial is not None and not partial.exists():
            raise Interrupted("interrupted before a line was finished: nothing was written to "
                              f"{options.output}", code) from None
        where = "written to stdout" if options.output is None else f"in {partial}"
        finished = options.skip + done[0]
        raise Interrupted(f"interrupted: the first {finished:,} input lines are translated ({where}); go on "
                          f"with the same command and --skip {finished}", code) from None
    finally:
        if options.input:
            source.close()


def summary(lines: int, seconds: float, cut: list[int], retried: list[int] = (), as_is: list[int] = (),
            tagged: list[int] = (), uncarried: list[int] = (), uncarried_by: str = "these options",
            foreign: list[tuple[int, str]] = ()) -> str:
    """The line `translate` ends with, as fairseq's and Marian's do: how many lines, how fast, and which
    translations ran to their length limit (``cut``: the model did not end them, most often because it
    repeats itself, ``Kartoffffatatatat…``), so that a user need not find them by reading; ``retried``:
    those translated again with repeats barred (they had run to the limit, or stuttered), which then ended;
    ``as_is``: those written as they were
    (``--source-lang auto``: already in the target language); ``tagged``: text lines holding markup tags,
    read as words (``--format html`` translates around them); ``uncarried``: lines holding what a plain
    translation carries through, left to the model by the options ``uncarried_by`` names
    (`Engine._uncarried`, `Engine.leaving`)."""
    said = (f"translated {lines:,} line{'' if lines == 1 else 's'} in {seconds:.1f} s "
            f"({lines / max(seconds, 1e-9):.1f} lines/s)")
    if as_is:
        said += f"; {len(as_is):,} already in the target language, written as they are: {_lines(as_is)}"
    if retried:
        said += (f"; {len(retried):,} translated again with repeats barred, having repeated themselves: "
                 f"{_lines(retried)}")
    if tagged:
        said += (f"; {len(tagged):,} held markup tags, read as words (--format html translates the text between "
                 f"them and puts them back): {_lines(tagged)}")
    if uncarried:
        said += (f"; {len(uncarried):,} held emoji, links or codes, left to the model with {uncarried_by} (a "
                 f"plain translation carries them through): {_lines(uncarried)}")
    if foreign:
        codes = Counter(code for _, code in foreign)
        named = ", ".join(langid.language_name(code) for code, _ in codes.most_common(3))
        said += (f"; {len(foreign):,} seemed to be in a language the model does not read ({named}), translated "
                 f"as one it reads: {_lines([k for k, _ in foreign])}")
    if cut:
        said += f"; {len(cut):,} ran to the length limit without ending (the model repeating itself?): {_lines(cut)}"
    return said


def _lines(numbers: list[int]) -> str:
    """``line 3`` or ``lines 1, 2, … and 5 more``: at most ten line numbers."""
    shown = ", ".join(str(n) for n in numbers[:10]) + (f" and {len(numbers) - 10:,} more" if len(numbers) > 10 else "")
    return f"line{'s' if len(numbers) > 1 else ''} {shown}"


def _detects_sources(translator: TranslatorBase, options: TranslateOptions) -> bool:
    """Whether each line's source language is detected: ``--source-lang auto`` for a model with the
    target from several sources (from one, that one is the source)."""
    pair = translator.language_pair
    return ((options.load.source_lang or "").lower() == "auto" and pair is not None
            and len(sources_of(translator.pairs, pair.target)) > 1)


def _refuse_with_markup(engine: Engine, options: TranslateOptions) -> None:
    """One line for the options that markup cannot take (a fragment's sentences are nmtk's to cut, and its
    output is the fragment with its tags), and for an engine that cannot place tags."""
    whole = options.document or options.format in WHOLE
    if options.skip and whole:
        raise NmtkError(f"--format {options.format}{' --document' if options.document else ''}: --skip cannot be "
                        "used with it (the whole input is read and translated at once, and written whole)")
    refused = [name for name, asked in (("--nbest", options.nbest > 1), ("--print-scores", options.print_scores),
                                        ("--print-alignment", engine.search.align),
                                        ("--prefix/--constraints", not engine.format.plain),
                                        ("--source-lang auto", engine.detect)) if asked]
    if refused:
        raise NmtkError(f"--format {options.format}: {', '.join(refused)} cannot be used with it (the sentences of "
                        "marked-up text are nmtk's to cut, and each output is the text with its tags)")
    check_engine(engine.translator, options.format)


def _translate_document(engine: Engine, options: TranslateOptions, partial: Path | None) -> None:
    """``--format html|xml --document``: the whole input is one document, translated with its tags in one
    search, written whole (to ``-o``: through its partial file, renamed when done)."""
    raw = _read_all(options.input) if options.input else sys.stdin.buffer.read()
    document = decode_text(raw, str(options.input or "stdin"), options.errors.value,
                           hint="use --errors replace to substitute U+FFFD")
    where, start = str(options.input or "stdin"), time.perf_counter()
    with interruptible():
        if options.format in SUBTITLES:
            text, what = _translated_subtitles(engine, document, where, options.format)
        elif options.format == "xliff":
            text, what = _translated_xliff(engine, document, where)
        else:
            _refuse_xliff_as_xml(document, options, where)
            _warn_of_page_language(document, engine.translator, where)
            text = translate_markup(engine.translator, [document], engine.search, options.format, options.attributes,
                                    engine.glossary, engine.bans, engine.hints, own_stops=True)[0]
            what = f"the {options.format} document"
    if partial is None:
        sys.stdout.write(text)
        sys.stdout.flush()
    else:
        with open(partial, "w", encoding="utf-8") as sink:
            sink.write(text)
        os.replace(partial, options.output)
    console.print(f"translated {what} in {time.perf_counter() - start:.1f} s")


#: ``--format`` values that are subtitle files (`nmtk.text.subtitles`): always the whole input at once.
SUBTITLES = ("srt", "vtt", "ass")
#: File names of a subtitle format under another name: SubStation Alpha's, which ASS extends.
_ALSO = {"ssa": "ass"}
#: ``--format`` values read whole, as ``--document`` reads html and xml.
WHOLE = (*SUBTITLES, "xliff")
#: The start of an XLIFF file: its declaration and comments, then its root.
_XLIFF_ROOT = re.compile(r"\ufeff?\s*(?:<\?xml[^>]*\?>\s*)?(?:<!--.*?-->\s*)*<(?:[\w.-]+:)?xliff[\s>]", re.DOTALL)


#: File names whose format ``translate`` takes without ``--format``: an html page (whole: ``--document``).
PAGES = ("html", "htm", "xhtml")


def _with_format(options: TranslateOptions) -> TranslateOptions:
    """``options`` with a format where none was chosen: a subtitle file's, an XLIFF file's or a whole html
    page's, by the name of the input (else of the output: ``-o film.de.srt``), said in one line: read as
    lines, a WebVTT header went to the model ("WAAATTTNNNGA."), an XLIFF file's or a page's tags were read
    as words; else text."""
    if options.format is not None:
        return options
    named = options.input or options.output
    suffix = named.suffix.lower().lstrip(".") if named is not None else ""
    suffix = _ALSO.get(suffix, suffix)
    if suffix in SUBTITLES:
        chosen = replace(options, format=suffix)
    elif suffix in ("xlf", "xliff"):
        chosen = replace(options, format="xliff")
    elif suffix in PAGES:
        chosen = replace(options, format="html", document=True)
    else:
        return replace(options, format="text")
    console.print(f"format: {chosen.format}{' --document' if chosen.document else ''} (from the name {named.name}; "
                  "--format text reads it as lines)")
    return chosen


#: An html page's own language (``<html lang="fr">``).
_PAGE_LANGUAGE = re.compile(r"""<html\b[^<>]*?\slang\s*=\s*["']?([\w-]+)""", re.IGNORECASE)


def _warn_of_page_language(document: str, translator: TranslatorBase, where: str) -> None:
    """A warning where a page says it is in another language than the model's source (pages' ``lang``
    is often wrong, so the page is translated all the same)."""
    said, ours = _PAGE_LANGUAGE.search(document[:4096]), translator.src_pipe.moses.lang
    if said and ours and not langid.same_language(said.group(1), ours):
        console.print(f'warning: {where}: the page says it is in another language (<html lang="{said.group(1)}">) '
                      f"than this model translates ({ours}); translated as {ours} all the same")


def _refuse_xliff_as_xml(document: str, options: TranslateOptions, where: str) -> None:
    """One line for an XLIFF file read as an xml document: its sources would be translated in place and
    its targets left empty."""
    if options.format == "xml" and _XLIFF_ROOT.match(document):
        raise NmtkError(f"{where}: an XLIFF file: --format xliff writes each segment's translation into its "
                        "target (--format xml would translate its sources in place)")


def _translated_xliff(engine: Engine, document: str, where: str) -> tuple[str, str]:
    """An XLIFF file with each segment's translation in its target (`nmtk.text.xliff`): sources translated
    as markup is (XLIFF's inline codes kept), targets that hold a translation kept; and what was
    translated, for the last line."""
    xliff = Xliff.parse(document, where)
    _check_xliff_languages(xliff, engine.translator, where)
    empty = xliff.todo()
    todo = [k for k in empty if xliff.segments[k].source.strip()]
    pieces = [(k, piece) for k in todo for piece in xliff.pieces(k)]  # a <seg-source>'s sentences apart
    try:
        done = translate_markup(engine.translator, [piece for _, piece in pieces], engine.search, "xml",
                                (), engine.glossary, engine.bans, engine.hints, own_stops=True)
    except MarkupError as exc:
        k = pieces[exc.document or 0][0]
        raise NmtkError(f"{where}: segment {k + 1} ({xliff.segments[k].source[:40]!r}): {exc}") from None
    translated: dict[int, list[str]] = {}
    for (k, _), text in zip(pieces, done, strict=True):
        translated.setdefault(k, []).append(text)
    kept = len(xliff.segments) - len(empty)
    what = f"{len(todo):,} of {len(xliff.segments):,} segments" + (
        f" ({kept:,} kept the translation their target holds)" if kept else "")
    return xliff.render({k: xliff.body(k, texts) for k, texts in translated.items()}), what


def _check_xliff_languages(xliff: Xliff, translator: TranslatorBase, where: str) -> None:
    """One line where an XLIFF file says it goes between other languages than the model's (or than the
    ``--source-lang``/``--target-lang`` a multilingual model was given): its targets would be filled in
    the model's language all the same. A region (``de-CH``) is its language's."""
    model = translator.src_pipe.moses.lang, translator.tgt_pipe.moses.lang
    wrong = [f"{side} {langid.base_language(lang)}" for side, lang, ours in zip(("from", "into"), xliff.languages,
                                                                             model, strict=True)
             if lang and ours and not langid.same_language(lang, ours)]
    if wrong:
        raise NmtkError(f"{where}: an XLIFF file to translate {' and '.join(wrong)} (its languages: "
                        f"{' → '.join(xliff.languages)}); this model translates {model[0]} into {model[1]}")


def _translated_subtitles(engine: Engine, document: str, where: str, kind: str) -> tuple[str, str]:
    """A subtitle file (``kind``: srt, vtt, ass) with its cues' text translated (each cue one segment, or a
    line per speaker), as markup is: tags kept, links, numbers and emoji carried through
    (`nmtk.text.subtitles`); and what was translated, for the last line."""
    subtitles = AssScript.parse(document, where) if kind == "ass" else Subtitles.parse(document)
    segments = subtitles.segments()
    for k, segment in enumerate(segments):
        try:
            parse(segment, "html")
        except MarkupError as exc:  # a cue's tags that do not nest: its text translated without them
            segments[k] = html.escape(re.sub(r"</?[A-Za-z][^>]*>", "", segment), quote=False)
            console.print(f"warning: {where}: the cue text {segment[:40]!r}: {exc}; translated without its tags")
    done = translate_markup(engine.translator, segments, engine.search, "html", (), engine.glossary, engine.bans,
                            engine.hints, own_stops=True)
    _rebracketed_fragments(engine, segments, done)
    subtitles.relabelled(engine.translator.src_pipe.moses.lang, engine.translator.tgt_pipe.moses.lang)
    return subtitles.render([" ".join(text.splitlines()) for text in done]), f"{len(subtitles.cues):,} cues"


def _rebracketed_fragments(engine: Engine, segments: list[str], done: list[str], kind: str = "html",
                           attributes: tuple[str, ...] = ()) -> None:
    """``done`` (the translations of ``segments``: subtitle cues, or lines of ``--format html|xml``) with
    those that lost brackets of their segment made again, the bracketed parts placed by alignment
    (`Engine.rebracketed`'s rule), and none left stray (`nmtk.text.brackets.rebracketed`): "(laughs)",
    "[music]" and "(in a red dress)" are a subtitle's own, which the demo model dropped, and `<p>A woman
    (in a red dress) dances.</p>` a page's."""
    found = to_rebracket(segments, done)
    again = translate_markup(engine.translator, list(found.values()), engine.search, kind, attributes, engine.glossary,
                             engine.bans, engine.hints, own_stops=True) if found else []
    done[:] = rebracketed(segments, done, found, again)


def _to_partial(engine: Engine, options: TranslateOptions, source: BinaryIO, partial: Path, resume: bool,
                done: list[int]) -> None:
    """Stream into ``partial``: appended to when going on, else new; a new one that ends with no finished
    line (an error or Ctrl-C before the first buffer) is removed, so that nothing stands in the way of
    running again."""
    try:
        with open(partial, "a" if resume else "w", encoding="utf-8") as sink:
            _stream(engine, options, source, sink, done)
            sink.flush()
            os.fsync(sink.fileno())
    except BaseException:
        if not resume and done[0] == 0:
            partial.unlink(missing_ok=True)
        raise


def _check_output(options: TranslateOptions) -> tuple[Path, bool]:
    """``-o OUT``'s partial file, and whether this run goes on from it (``--skip N`` where it holds the
    first N inputs). One line for an output that is the input, and for a partial file that ``--skip``
    does not match: its finished lines are kept unless the user starts over with ``--force``."""
    assert options.output is not None
    output_path(options.output)
    partial = partial_path(options.output)
    _refuse_input_as_output(options, options.output, partial)
    resume = False
    if partial.exists():
        finished = finished_inputs(partial, options.nbest)
        if options.skip and finished != options.skip:
            raise NmtkError(f"{partial}: holds the first {finished:,} input lines, not {options.skip:,}: go on with "
                            f"--skip {finished}, or start over with --force and no --skip")
        if not options.skip and not options.force:
            raise NmtkError(f"{partial}: holds the first {finished:,} input lines of an interrupted run: go on "
                            f"with --skip {finished}, or start over with --force")
        resume = bool(options.skip)
    elif options.skip:
        raise NmtkError(f"--skip {options.skip}: {partial} does not exist; --skip goes on from the partial file an "
                        "interrupted run left (without it, the output would lack those lines)")
    if options.output.exists() and not options.force:
        raise NmtkError(f"{options.output}: exists; use --force to overwrite it")
    if resume:
        console.print(f"going on from {partial}: its {options.skip:,} finished lines are kept")
    return partial, resume


def _refuse_input_as_output(options: TranslateOptions, *outputs: Path) -> None:
    """The input is read while the output is written: the same file (by name, link or redirection) as
    an output would be destroyed, ``--force`` or not."""
    try:
        source = os.stat(options.input) if options.input is not None else os.fstat(sys.stdin.fileno())
    except (OSError, ValueError, AttributeError):  # no stdin at all
        return
    for path in outputs:
        try:
            same = os.path.samestat(source, os.stat(path))
        except OSError:
            continue
        if same:
            named = f"-i {options.input}" if options.input is not None else "the standard input"
            raise NmtkError(f"-o {options.output}: is the input file ({named}); write the translation to another file")


def finished_inputs(partial: Path, nbest: int = 1) -> int:
    """The input lines a partial output holds: one line each, or with n-best rows the last row's index."""
    if nbest <= 1:
        return count_lines(partial)
    last = b""
    with open(partial, "rb") as handle:
        for last in handle:  # noqa: B007 - the last row is what counts
            pass
    try:
        return int(last.split(b"\t", 1)[0]) if last.strip() else 0
    except ValueError:
        raise NmtkError(f"{partial}: not an n-best output of nmtk translate (no line number in its last row)") from None


def _skip_beyond(options: TranslateOptions, lines: int) -> str:
    return (f"--skip {options.skip}: {options.input or 'the standard input'} has only {lines:,} lines; nothing "
            "to go on with")


def _skipped(options: TranslateOptions, lines: Iterator[str]) -> Iterator[str]:
    """``lines`` after the first ``--skip``; one error (nothing written) where the input has fewer."""
    read = 0
    for read, _ in enumerate(islice(lines, options.skip), start=1):  # noqa: B007 - the count is what counts
        pass
    if read < options.skip:
        raise NmtkError(_skip_beyond(options, read))
    yield from lines


def _input_lines(options: TranslateOptions, source: Iterable[bytes]) -> Iterator[str]:
    name = str(options.input or "stdin")
    if options.input is not None:
        source = checked_reads(source, options.input)  # a corrupt .gz: one line naming it
    return decode_lines(source, name, options.errors.value, hint="use --errors replace to substitute U+FFFD")


def _read_all(path: Path) -> bytes:
    """A whole input document, decompressed where it is compressed (`open_binary`)."""
    with open_binary(path) as handle:
        return b"".join(checked_reads(handle, path))


def count_lines(path: Path) -> int:
    """Lines of a file (a last line without a newline counts), read in blocks: ~0.1 s per 100 MB; a
    compressed input's lines as it decompresses (`open_binary`)."""
    count, last = 0, b"\n"
    with open_binary(path) as handle:
        for block in checked_reads(iter(lambda: handle.read(1 << 20), b""), path):
            count += block.count(b"\n")
            last = block[-1:]
    return count + (last != b"\n")


def lines_to_translate(options: TranslateOptions) -> int | None:
    """The lines this run will translate, for the progress bar: the input file's, less ``--skip``
    (None from stdin, whose length is unknown)."""
    return None if options.input is None else max(count_lines(options.input) - options.skip, 0)


def _progress(options: TranslateOptions) -> tuple[Progress, int | None]:
    """A progress display on stderr when it is a terminal (and stdout is not the translations' terminal):
    sentences, sentences/s and, for ``-i FILE``, a bar and the time left."""
    show = (options.output is not None or not sys.stdout.isatty()) and console.is_terminal
    total = lines_to_translate(options) if show else None
    columns = [SpinnerColumn(), TextColumn("{task.completed:,}" + (f" of {total:,}" if total else "") + " sentences"),
               TextColumn("{task.fields[rate]}")]
    if total:
        columns += [BarColumn(), TextColumn("{task.fields[left]}")]
    return Progress(*columns, console=console, disable=not show), total


def time_left(done: int, total: int | None, seconds: float) -> str:
    """``m:ss left`` (or ``h:mm:ss``) at the rate so far, lines done per second; empty before the first
    buffer or without a total. rich's own estimate samples the last 30 s of updates, which one update
    per 1,000-line buffer seldom fills: it showed ``-:--:--`` for whole runs."""
    if not total or done <= 0 or seconds <= 0:
        return ""
    left = round(max(total - done, 0) * seconds / done)
    hours, rest = divmod(left, 3600)
    return (f"{hours}:{rest // 60:02d}:{rest % 60:02d}" if hours else f"{rest // 60}:{rest % 60:02d}") + " left"


def _translated(engine: Engine, options: TranslateOptions, chunk: list[str], first: int) -> list[str]:
    """The output lines of a buffer of input lines (numbered from ``first``): with ``--format html|xml``
    each line is one fragment, its tags in place, on one line, as `serve` translates a list's items."""
    if options.format != "text":
        ran: list[int] = []
        try:
            done = translate_markup(engine.translator, chunk, engine.search, options.format, options.attributes,
                                    engine.glossary, engine.bans, engine.hints, cut=ran, own_stops=True)
        except MarkupError as exc:  # its line and column are the fragment's: named by the input's line here
            where = f"{options.input or 'stdin'}:{first + (exc.document or 0)}"
            raise NmtkError(f"{where}: {str(exc).replace('line 1, ', '')}") from None
        engine.cut.extend(first + d for d in ran)
        if engine.translator.reading.carry:  # as lines of text are (`Engine.rebracketed`)
            _rebracketed_fragments(engine, chunk, done, options.format, options.attributes)
        return [" ".join(line.splitlines()) for line in done]
    engine.detected.clear()
    engine.tagged.extend(first + k for k, line in enumerate(chunk) if holds_tags(line))
    markers, chunk = engine.opened(chunk, options)
    sources, guides = engine.guides(chunk, first)
    cut: set[int] = set()  # the lines whose translation ran to its length limit, however it was made
    as_is = engine.as_they_are(sources, options)
    engine.kept.extend(first + k for k in as_is)
    engine.foreign.extend((first + k, code) for k, code in engine.elsewhere(sources, as_is).items())
    sources, guides = left_out(sources, guides, as_is)
    carried = engine.carried(sources, first, options, cut) | as_is
    sources, guides = left_out(sources, guides, carried)
    hypotheses = engine.translator.hypotheses(sources, engine.search, first_line=first,
                                              ids=engine.ids(sources, first), guides=guides)
    cut.update(k for k, hyps in enumerate(hypotheses) if hyps and hyps[0].cut)
    engine.retried.extend(first + k for k, hyps in enumerate(hypotheses) if hyps and hyps[0].retried)
    out = [line for k, hyps in enumerate(hypotheses) for line in output_lines(first + k, hyps, engine, options)]
    out = engine.renumbered(chunk, [carried.get(k, line) for k, line in enumerate(out)], options, cut)
    out = engine.rebracketed(chunk, out, options, cut)
    if engine.carries(options):  # "A dog runs!" ends with its "!", not the model's "."; no stray brackets
        out = [own_marks(line, tidied(line, text)) for line, text in zip(chunk, out, strict=True)]
    engine.cut.extend(first + k for k in sorted(cut))
    return [marker + line for marker, line in zip(markers, out, strict=True)] if any(markers) else out


def _stream(engine: Engine, options: TranslateOptions, source: BinaryIO, sink: TextIO, done: list[int]) -> None:
    """Translate ``--buffer-size`` lines at a time, writing and flushing each buffer's lines as soon as
    it is done; ``done[0]`` counts the input lines written so far.

    The buffer is the reorder window: its lines are sorted by length into batches, and none of them
    can be written before the buffer is finished. Memory is bounded by it, not by the input
    (benchmarks/translate.py --lines measures 20,000 against 200,000 lines). From a pipe or a
    terminal a buffer also ends where the writer has sent nothing more (`ReadyLines`): a program that
    writes a line and waits for its translation gets it at once.
    """
    progress, total = _progress(options)
    raw: Iterable[bytes] = source
    waiting = None
    if ReadyLines.applies(source):
        raw = ReadyLines(source)
        waiting = raw.waiting
    lines = _skipped(options, _input_lines(options, raw))
    with progress:
        task = progress.add_task("translate", total=total, rate="", left="")
        start = time.perf_counter()
        for chunk in buffered(lines, options.buffer_size, waiting):
            first = options.skip + done[0] + 1
            out = _translated(engine, options, chunk, first)
            with deferred():  # a buffer is in the output whole, and counted, or not at all
                sink.write("".join(f"{line}\n" for line in out))
                sink.flush()
                done[0] += len(chunk)
            seconds = time.perf_counter() - start
            rate = f"{done[0] / max(seconds, 1e-9):.1f} sentences/s"
            progress.update(task, advance=len(chunk), rate=rate, left=time_left(done[0], total, seconds))
