"""The `nmtk` command line: one thin function per subcommand (parse, load the recipe, call the library, render).

Errors a user can fix arrive as `NmtkError` and are shown as one line on stderr with exit code 1;
anything else is a bug and is shown as one line too, with the traceback only under ``--debug``.
"""

from __future__ import annotations

import functools
import inspect
import json
import os
import shlex
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer
import typer.core
from rich.console import Console
from rich.syntax import Syntax

from nmtk import __version__
from nmtk.console import console, error_line
from nmtk.errors import NmtkError, validator_words

from .options import (
    AttentionKind,
    AttentionStyle,
    ConstraintOrder,
    ExportFormat,
    InvalidUtf8,
    LengthPenaltyForm,
    MarkupFormat,
    PictureFormat,
    PlotAxis,
    Precision,
    Quantization,
    TermsChoice,
    form_value,
)

#: Wider choice lists than this (``<float32|int8|…>``) are shown with spaces, so that they wrap between choices.
CHOICES_WIDTH = 24


def _paragraphs(doc: str | None) -> str | None:
    """A docstring's paragraphs, each on one line: typer keeps the source's line breaks, which cut a
    command's description in `nmtk --help` mid-phrase."""
    if not doc:
        return doc
    return "\n\n".join(" ".join(part.split()) for part in inspect.cleandoc(doc).split("\n\n"))


def _readable_help() -> None:
    """Option panels (`_panels`), and three fixes to how newer typers render ``--help``: a boolean flag
    shows ``<bool>`` as if it took a value (it does not: ``--force``, never ``--force true``); a
    number's type column carries its range (``<float range> [x>=0.0]``), which left the help text a
    24-character column at 80 columns; and a word longer than the help column
    (``checkpoint_avg_last<N>.pt``) is cut with an ellipsis instead of folded. Applied only when help
    is shown, so that start-up does not import typer's rich renderer for other commands."""
    import typer.core
    import typer.rich_utils
    from rich.text import Text

    option = getattr(typer.core, "TyperOption", None)
    display = getattr(option, "display_type_rich", None)
    if display is not None and not getattr(display, "_nmtk", False):
        @functools.wraps(display)  # (``__wrapped__``: tests/unit/test_cli.py checks typer's own signature)
        def display_type_rich(self: object, ctx: object) -> str | None:
            if getattr(self, "is_flag", False) and not getattr(self, "count", False):
                return None
            shown = display(self, ctx)  # "<int range>" as "<int>"
            if not isinstance(shown, str):
                return shown
            shown = shown.replace(" range>", ">")
            # a long choice list wraps between choices, never inside one ("fl / oat16")
            return shown.replace("|", " | ") if len(shown) > CHOICES_WIDTH else shown

        display_type_rich._nmtk = True  # type: ignore[attr-defined]
        option.display_type_rich = display_type_rich
        # still enforced: a value out of range is refused
        option._get_number_range_help_str = functools.wraps(option._get_number_range_help_str)(lambda self: None)
    command = getattr(typer.core, "TyperCommand", None)
    format_help = getattr(command, "format_help", None)
    if format_help is not None and not getattr(format_help, "_nmtk", False):
        @functools.wraps(format_help)
        def grouped(self: object, ctx: object, formatter: object) -> None:
            panels = getattr(getattr(self, "callback", None), "_nmtk_panels", {})
            for param in getattr(self, "params", ()):
                if param.name in panels:
                    param.rich_help_panel = panels[param.name]
            format_help(self, ctx, formatter)

        grouped._nmtk = True  # type: ignore[attr-defined]
        command.format_help = grouped
    make_text = getattr(typer.rich_utils, "_make_rich_text", None)
    if make_text is not None and not getattr(make_text, "_nmtk", False):
        @functools.wraps(make_text)
        def folded(**kwargs: object) -> object:
            text = make_text(**kwargs)
            if isinstance(text, Text):
                text.overflow = "fold"
            return text

        folded._nmtk = True  # type: ignore[attr-defined]
        typer.rich_utils._make_rich_text = folded
    for typer_app in (app, recipe_app):
        for info in typer_app.registered_commands:
            if info.help is None and info.callback is not None:
                info.help = _paragraphs(info.callback.__doc__)


class _Commands(typer.core.TyperGroup):
    """nmtk's command group: a Ctrl-C or SIGTERM that no command turned into its own message (one in a
    command's own imports or output) is one line too. Typer turns it into a silent exit 130 (SIGTERM
    included, whose code is 143)."""

    def invoke(self, ctx: typer.Context) -> object:
        from nmtk.errors import Interrupted
        from nmtk.interrupts import exit_code

        try:
            return super().invoke(ctx)
        except KeyboardInterrupt as exc:
            raise Interrupted("interrupted", exit_code(exc)) from None


app = typer.Typer(
    cls=_Commands,
    name="nmtk",
    help="Neural machine translation with the Transformer: prepare, train, average, translate, score.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)
recipe_app = typer.Typer(help="Validate, inspect and describe recipes.", no_args_is_help=True)
app.add_typer(recipe_app, name="recipe")

_state = {"debug": False}

SetOption = Annotated[
    list[str] | None,
    typer.Option("--set", help="Override a recipe field, e.g. --set model.dropout=0.3 (repeatable)."),
]


def _panels(groups: dict[str, tuple[str, ...]]) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """Group a command's options into ``--help`` panels, ``{panel: (parameter names)}``, declared once
    beside the command instead of in each option; `_readable_help` applies them. Each panel is a table
    of its own, so one long type (the precision choices) does not narrow every other help column."""
    def group(command: Callable[..., None]) -> Callable[..., None]:
        command._nmtk_panels = {name: panel for panel, names in groups.items() for name in names}  # type: ignore[attr-defined]
        return command

    return group


def _version(value: bool) -> None:
    if value:
        print(f"nmtk {__version__}")
        raise typer.Exit()


@app.callback()
def _main(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
    debug: Annotated[bool, typer.Option("--debug", help="Show full tracebacks on errors.")] = False,
) -> None:
    _state["debug"] = debug


RecipeArg = Annotated[Path, typer.Argument(help="Recipe file (TOML).")]


@app.command()
def prepare(
    recipe_file: RecipeArg,
    data_root: Annotated[Path | None, typer.Option(help="Where corpora are looked for and downloaded to "
                                                        "(default: $NMTK_DATA, else ~/.cache/nmtk).")] = None,
    out: Annotated[Path | None, typer.Option(help="Output folder (default: data-bin/<recipe name>).")] = None,
    set_: SetOption = None,
    force: Annotated[bool, typer.Option("--force", help="Rebuild even when up to date.")] = False,
) -> None:
    """Get corpora, Moses-tokenise, learn subwords, clean and binarise."""
    from nmtk.data.fetch import default_data_root
    from nmtk.data.prepare import prepare as run_prepare
    from nmtk.data.report import render_manifest
    from nmtk.recipe import load_recipe

    recipe = load_recipe(recipe_file, set_ or [])
    result = run_prepare(recipe, default_data_root(data_root), out, force=force, show_stages=True)
    if result.up_to_date:
        console.print(f"[green]up to date[/]: {result.out_dir}")
        return
    render_manifest(result.manifest)
    console.print(f"[green]prepared[/] {result.out_dir} in {result.manifest.seconds:.1f} s")


@app.command()
def train(
    recipe_file: RecipeArg,
    data: Annotated[Path | None, typer.Option(help="Prepared data (default: data-bin/<recipe name>); "
                                              "prepared first when missing; used as is, without its corpora, "
                                              "when prepared with the recipe's settings.")] = None,
    data_root: Annotated[Path | None, typer.Option(help="Corpora root for preparing (default: $NMTK_DATA).")] = None,
    run_dir: Annotated[Path | None, typer.Option(help="Run directory (default: runs/<recipe name>).")] = None,
    set_: SetOption = None,
    restart: Annotated[bool, typer.Option("--restart", help="Start over: the existing run is moved aside.")] = False,
    init_from: Annotated[Path | None, typer.Option(help="Start a new run from the weights of this checkpoint, or "
                                                   "of this run directory (an nmtk import, say).")] = None,
    device: Annotated[str | None, typer.Option(help="cpu or cuda (default: cuda when available).")] = None,
    threads: Annotated[int | None, typer.Option(help="CPU threads per process.")] = None,
    nproc: Annotated[int | None, typer.Option(help="Launch this many processes on this machine via torchrun; "
                                              "train.update_freq is divided among them (same update size).")
                     ] = None,
) -> None:
    """Train a recipe's model; resumes from the run's last checkpoint; torchrun for several processes."""
    from nmtk.recipe import load_recipe

    recipe = load_recipe(recipe_file, set_ or [])
    if nproc and nproc > 1 and "WORLD_SIZE" not in os.environ:
        from nmtk.train.distributed import launch_local

        raise typer.Exit(launch_local(sys.argv[1:], nproc, recipe.train.update_freq))
    from nmtk.train.run import train as run_training

    run_training(recipe, data_dir=data, data_root=data_root, run_dir=run_dir, restart=restart,
                 init_from=init_from, device_name=device, threads=threads)


@app.command()
def average(
    run_dir: Annotated[Path, typer.Argument(help="Run directory.")],
    files: Annotated[list[Path] | None, typer.Argument(help="Checkpoint files (instead of --last/--updates).")] = None,
    last: Annotated[int | None, typer.Option(min=1, help="Average the last N numbered checkpoints "
                                             "(default: the recipe's average.last).")] = None,
    updates: Annotated[str | None, typer.Option(help="Average the checkpoints of updates A-B.")] = None,
    out: Annotated[Path | None, typer.Option("-o", "--out", help="Output (default: "
                                             "RUN_DIR/checkpoint_avg_last<N>.pt).")] = None,
    force: Annotated[bool, typer.Option("--force", help="Replace an existing output checkpoint (never "
                                                    "another file).")] = False,
) -> None:
    """Average the parameters of a run's checkpoints (paper §6.1)."""
    from nmtk.train.average import average_run

    paths, target = average_run(run_dir, list(files or []), last, updates, out, force)
    noun = "checkpoint" if len(paths) == 1 else "checkpoints"
    console.print(f"averaged {len(paths)} {noun} ({', '.join(p.name for p in paths)}) -> {target}")


# ------------------------------------------------------------------- options translate and serve share
# Declared once: the same option reads the same in both commands' --help.

ModelOption = Annotated[Path | None, typer.Option("-m", "--model", help="Run directory (torch) or nmtk export "
                                                  "(CTranslate2) (default: $NMTK_MODEL, else the newest run "
                                                  "under runs/).")]
CheckpointOption = Annotated[Path | None, typer.Option(help="Checkpoint (default: the recipe's average "
                                                       "checkpoint_avg_last<N>.pt, else best, else last).")]
DeviceOption = Annotated[str | None, typer.Option(help="cpu or cuda (default: cuda when available).")]
DecodePrecision = Annotated[Precision, typer.Option(help="Arithmetic of the decoder; auto = bf16 on a GPU with "
                                                    "bf16, or where this CPU is measured faster in it, else fp32; "
                                                    "int8: int8 matrix products on a CPU.")]
TargetLangOption = Annotated[str | None, typer.Option("--target-lang", help="A multilingual model's target "
                                                     "language (its tag, >>xx<<, is put before each source).")]
SourceLangOption = Annotated[str | None, typer.Option("--source-lang", help="A multilingual model's source "
                                                     "language, where it has the target from several; auto: "
                                                     "each line's detected language.")]
ShortlistOption = Annotated[bool, typer.Option("--shortlist", help="Project each batch onto its sources' "
                                                "candidate pieces (the run's `nmtk shortlist`; an export's "
                                                "vmap.txt).")]
AsTypedOption = Annotated[bool, typer.Option(
    "--as-typed", help="Read every line as it came. By default a line in capitals (or With Every Word "
                       "Capitalised) is translated as sentence-cased text and given back in capitals (title "
                       "case), URLs and e-mail addresses are carried through untranslated, a translation that lost a "
                       "number of the line is made again with its numbers carried, and, "
                       "where the recipe has tokenizer.correct_typos, unknown words near a training word are "
                       "corrected.")]
FormatOption = Annotated[MarkupFormat | None, typer.Option(
    "--format", help="text: a line each; html or xml (inline tags): each line one fragment, its tags kept around "
                     "the words they covered (--document: the whole input one document); srt, vtt or ass: a "
                     "subtitle file (ass: also SSA), each cue's text translated, its numbers, timings and notes "
                     "kept; xliff: each segment's target filled (one holding a translation kept). Default: by "
                     "the name of -i's file (else -o's): srt, vtt, ass (FILE.ass, FILE.ssa), xliff for FILE.xlf "
                     "or FILE.xliff, html --document for FILE.html or FILE.htm; else text.", show_default=False)]
DocumentOption = Annotated[bool, typer.Option(
    "--document", help="--format html|xml: the whole input is one document (a page), not a fragment a line.")]
AttributesOption = Annotated[str | None, typer.Option(
    "--translate-attributes",
    help="--format html: attributes whose values are translated too, comma-separated (e.g. alt,title).")]
LenpenOption = Annotated[float | None, typer.Option(min=0.0, help="Length penalty α (default: the recipe's).")]
TranslateBeamOption = Annotated[int | None, typer.Option(min=1, help="Beam size (default: the recipe's, at least "
                                                                 "--nbest); 1 = greedy.")]
LenpenFormOption = Annotated[LengthPenaltyForm | None, typer.Option(
    help="gnmt: ((5+|Y|)/6)^α, the paper's; power: |Y|^α and CTranslate2's search, so that its export "
         "translates alike (default: the recipe's decode.length_penalty_form).")]
GlossaryOption = Annotated[Path | None, typer.Option(help="TSV of 'source term<TAB>target term': a line whose "
                                                     "source has a term gets its target term (default: the "
                                                     "recipe's decode.glossary).")]
GlossaryCaseOption = Annotated[bool, typer.Option("--glossary-ignore-case", help="Match glossary source terms in "
                                                  "any case (default: the recipe's).")]
BanOption = Annotated[Path | None, typer.Option(help="File of phrases never to produce, one a line.")]


TermsOption = Annotated[TermsChoice, typer.Option(
    "--terms", help="How glossary terms reach the translation: inline (hints in the source, for a model trained "
                    "with the terms modifier; any engine), constrained (the search must produce them; nmtk's "
                    "engine), auto (inline where the model was trained with hints).")]
NoRepeatOption = Annotated[int | None, typer.Option(min=0, help="Never repeat a subword n-gram of this size "
                                                    "(default: the recipe's; 0 = off).")]
RepetitionOption = Annotated[float | None, typer.Option(min=0.0, help="Penalty on subwords already produced (> 1 "
                                                        "discourages; default: the recipe's).")]

# ------------------------------------------------------------------------------ translate's own options

BeamTokensOption = Annotated[int | None, typer.Option(min=1, help="Decoding batch budget: source tokens × beam "
                                                      "per batch (default: the recipe's decode.beam_tokens).")]
BufferOption = Annotated[int, typer.Option(min=1, help="Input lines read, sorted and batched at a time; each "
                                           "buffer is written as soon as it is done.")]
SkipOption = Annotated[int, typer.Option(min=0, help="Leave out the first N input lines: to go on after an "
                                         "interrupted run, appending to -o's .partial file.")]
EnsembleOption = Annotated[list[Path] | None, typer.Option(help="More models to ensemble with -m's: checkpoints or run "
                                                           "directories (their default checkpoint) trained with the "
                                                           "same subword model (repeatable).")]
AlignOption = Annotated[bool, typer.Option("--print-alignment", help="Append a tab and word alignments 'i-j' "
                                           "(source word i, target word j).")]
AlignLayerOption = Annotated[int | None, typer.Option(min=1, help="Decoder layer (from 1) whose cross-attention "
                                                      "aligns (default: the last).")]
PrefixOption = Annotated[bool, typer.Option("--prefix", help="Lines are SOURCE<TAB>PREFIX: the translation starts "
                                            "with PREFIX (a line without a tab has none).")]
ErrorsOption = Annotated[InvalidUtf8, typer.Option(help="Invalid UTF-8 input: stop, or replace it with U+FFFD.")]
ScoresOption = Annotated[bool, typer.Option("--print-scores", help="Prefix each line with its score and a tab.")]
ConstraintsOption = Annotated[ConstraintOrder | None, typer.Option(help="Lines are SOURCE<TAB>TERM<TAB>TERM...: "
                                                                   "each translation contains its terms (after "
                                                                   "the prefix field with --prefix).")]


def _names(listed: str | None) -> tuple[str, ...]:
    """A comma-separated option's names (``alt,title``)."""
    return tuple(name.strip() for name in (listed or "").split(",") if name.strip())


def _refuse_batch_size(batch_size: str | None) -> None:
    """fairseq's and Marian's habit; click would suggest --buffer-size, which is another thing."""
    if batch_size is not None:
        raise NmtkError("--batch-size: nmtk batches by tokens: --beam-tokens N (source tokens × beam per batch); "
                        "--buffer-size is how many input lines are read and sorted at a time")


def _refuse_unused(needs: str, given: dict[str, bool]) -> None:
    """Options that do nothing without ``needs`` are one line (``--topk 5`` alone searched the beam,
    silently), as ``--document`` without ``--format`` is."""
    if named := [name for name, asked in given.items() if asked]:
        raise NmtkError(f"{', '.join(named)}: only with {needs} (without it, nothing uses "
                        f"{'them' if len(named) > 1 else 'it'})")


def _unused_refused(command: Callable[..., None]) -> Callable[..., None]:
    """`translate` with its options that need another checked first (`_refuse_unused`), before anything
    is read or loaded."""
    @functools.wraps(command)
    def checked(**options: Any) -> None:
        text, sampled = options["format_"] in (None, MarkupFormat.text), options["sampling"]
        _refuse_unused("--sampling", {"--topk": not sampled and options["topk"] != 0,
                                      "--topp": not sampled and options["topp"] != 1.0,
                                      "--temperature": not sampled and options["temperature"] != 1.0,
                                      "--seed": not sampled and options["seed"] != 1})
        _refuse_unused("--format html or xml", {"--translate-attributes": text and bool(options["attrs"])})
        _refuse_unused("--print-alignment or --format html|xml", {
            "--alignment-layer": text and not options["print_alignment"] and options["alignment_layer"] is not None})
        command(**options)

    return checked


@app.command()
@_panels({"Model": ("model", "checkpoint", "target_lang", "source_lang", "ensemble", "device", "threads", "precision",
                    "shortlist"),
          "Input and output": ("input_", "output", "force", "skip", "errors", "buffer_size", "format_", "document",
                               "attrs", "as_typed"),
          "Search": ("beam", "nbest", "lenpen", "lenpen_form", "max_len_a", "max_len_b", "beam_tokens"),
          "Sampling": ("sampling", "topk", "topp", "temperature", "seed"),
          "Prefix and terms": ("prefix", "constraints"),
          "Glossary, bans, repetition": ("glossary", "glossary_ignore_case", "terms", "ban", "no_repeat_ngram_size",
                                         "repetition_penalty"),
          "What is printed": ("print_scores", "print_alignment", "alignment_layer")})
@_unused_refused
def translate(
    model: ModelOption = None,
    checkpoint: CheckpointOption = None,
    target_lang: TargetLangOption = None,
    source_lang: SourceLangOption = None,
    input_: Annotated[Path | None, typer.Option("-i", "--input", help="Input text (default: stdin).")] = None,
    output: Annotated[Path | None, typer.Option("-o", "--output", help="Output file (default: stdout).")] = None,
    force: Annotated[bool, typer.Option("--force", help="Overwrite an existing --output.")] = False,
    beam: TranslateBeamOption = None,
    nbest: Annotated[int, typer.Option(min=1, help="Print the K best: 'LINE<TAB>SCORE<TAB>TEXT' lines.")] = 1,
    lenpen: LenpenOption = None,
    lenpen_form: LenpenFormOption = None,
    max_len_a: Annotated[float | None, typer.Option(min=0.0, help="Output length ≤ a·|x| + b.")] = None,
    max_len_b: Annotated[int | None, typer.Option(min=0, help="See --max-len-a.")] = None,
    beam_tokens: BeamTokensOption = None,
    buffer_size: BufferOption = 1000,
    skip: SkipOption = 0,
    errors: ErrorsOption = InvalidUtf8.error,
    print_scores: ScoresOption = False,
    device: DeviceOption = None,
    threads: Annotated[int | None, typer.Option(min=1, help="CPU threads: one-thread searches, side by side.")] = None,
    precision: DecodePrecision = Precision.auto,
    sampling: Annotated[bool, typer.Option("--sampling", help="Sample instead of beam search.")] = False,
    topk: Annotated[int, typer.Option(min=0, help="Sampling: keep the k most likely tokens (0 = all).")] = 0,
    topp: Annotated[float, typer.Option(min=0.0, max=1.0, help="Sampling: nucleus mass, 0 < p ≤ 1 (1: no cut).")] = 1.0,
    temperature: Annotated[float, typer.Option(min=0.0, help="Sampling temperature.")] = 1.0,
    seed: Annotated[int, typer.Option(help="Sampling seed.")] = 1,
    ensemble: EnsembleOption = None,
    print_alignment: AlignOption = False,
    alignment_layer: AlignLayerOption = None,
    prefix: PrefixOption = False,
    constraints: ConstraintsOption = None,
    glossary: GlossaryOption = None,
    glossary_ignore_case: GlossaryCaseOption = False,
    terms: TermsOption = TermsChoice.auto,
    ban: BanOption = None,
    no_repeat_ngram_size: NoRepeatOption = None,
    repetition_penalty: RepetitionOption = None,
    format_: FormatOption = None,
    document: DocumentOption = False,
    attrs: AttributesOption = None,
    shortlist: ShortlistOption = False,
    as_typed: AsTypedOption = False,
    batch_size: Annotated[str | None, typer.Option("--batch-size", hidden=True, callback=_refuse_batch_size)] = None,
) -> None:
    """Translate text with batched beam search (stdin to stdout by default)."""
    from nmtk.decode import stream
    search = dict(beam=beam, nbest=nbest, length_penalty=lenpen, length_penalty_form=form_value(lenpen_form),
                  max_len_a=max_len_a, max_len_b=max_len_b, beam_tokens=beam_tokens, align=print_alignment,
                  sampling=stream.SamplingConfig(topk, topp, temperature, seed) if sampling else None,
                  no_repeat_ngram_size=no_repeat_ngram_size, repetition_penalty=repetition_penalty,
                  ordered_constraints=constraints == ConstraintOrder.ordered if constraints else None)
    load = stream.LoadOptions(model=model, checkpoint=checkpoint, device=device, threads=threads, precision=precision,
                              ensemble=tuple(ensemble or ()), alignment_layer=alignment_layer, target_lang=target_lang,
                              source_lang=source_lang, shortlist=shortlist, as_typed=as_typed)
    guide = stream.GuideOptions(stream.InputFormat(prefix=prefix, constraints=constraints is not None), glossary,
                                glossary_ignore_case or None, ban, terms.value)
    io = dict(input=input_, output=output, force=force, buffer_size=buffer_size, skip=skip, errors=errors,
              format=format_ and format_.value, document=document, attributes=_names(attrs))
    stream.translate(stream.TranslateOptions(load=load, search=search, guide=guide, print_scores=print_scores, **io))

@app.command()
@_panels({"Export": ("checkpoint", "format_", "quantization", "force"),
          "generation_config.json (--format hf)": ("no_repeat_ngram_size", "repetition_penalty")})
def export(
    run_dir: Annotated[Path, typer.Argument(help="Run directory.")],
    out: Annotated[Path, typer.Option("-o", "--out", help="Folder to write the model to.")],
    format_: Annotated[ExportFormat, typer.Option("--format", help="ctranslate2 (for translate -m and CTranslate2) "
                                                  "or hf (a transformers MarianMT folder).")
                       ] = ExportFormat.ctranslate2,
    checkpoint: Annotated[Path | None, typer.Option(help="Checkpoint (default: the one translate would pick: "
                                                    "the recipe's average, else best, else last).")] = None,
    quantization: Annotated[Quantization, typer.Option(help="How CTranslate2 stores the weights (hf: float32)."
                                                       )] = Quantization.float32,
    force: Annotated[bool, typer.Option("--force", help="Replace an earlier export in the output folder.")] = False,
    no_repeat_ngram_size: Annotated[int | None, typer.Option(min=0, help="hf: written to generation_config.json "
                                                             "(default: the recipe's decode setting).")] = None,
    repetition_penalty: Annotated[float | None, typer.Option(min=0.0, help="hf: as --no-repeat-ngram-size.")
                                  ] = None,
) -> None:
    """Export a run's model: to CTranslate2 (a self-contained folder for `translate -m` or CTranslate2 itself), or
    to Hugging Face transformers (MarianMTModel + MarianTokenizer)."""
    from nmtk.convert.formats import export_model
    from nmtk.model_source import resolve_model
    from nmtk.rundir import RunDir

    source = resolve_model(RunDir(run_dir).require().path, checkpoint)
    console.print(f"checkpoint: {source.checkpoint} ({source.why})")
    result = export_model(source, out, format_.value, quantization.value, force,
                          dict(no_repeat_ngram_size=no_repeat_ngram_size, repetition_penalty=repetition_penalty))
    loads = {"ctranslate2": f"CTranslate2, {result.quantization}); translate with: nmtk translate -m {out}",
             "marian": f"transformers MarianMT); load with MarianMTModel.from_pretrained({str(out)!r}), "
                       f"or nmtk import {out} -o RUN",
             "m2m100": f"transformers M2M-100); load with M2M100ForConditionalGeneration.from_pretrained("
                       f"{str(out)!r}), or nmtk import {out} -o RUN"}
    console.print(f"exported {result.checkpoint} -> {out} ({loads[result.kind]}")


@app.command("import")
def import_(
    folder: Annotated[Path, typer.Argument(help="A transformers MarianMT folder (an opus-mt download: config.json, "
                                           "model.safetensors or pytorch_model.bin, source.spm, target.spm, "
                                           "vocab.json), or an M2M-100 one (vocab.json, sentencepiece.bpe.model).")],
    out: Annotated[Path, typer.Option("-o", "--out", help="Run directory to create.")],
    source_lang: Annotated[str | None, typer.Option(help="Source language (default: tokenizer_config.json, "
                                                    "else the folder's opus-mt-SRC-TGT name).")] = None,
    target_lang: Annotated[str | None, typer.Option(help="Target language (as --source-lang).")] = None,
    languages: Annotated[str | None, typer.Option(help="M2M-100: the languages to translate between, "
                                                  "comma-separated (default: all, where the model has few).")] = None,
    force: Annotated[bool, typer.Option("--force", help="Replace a run an earlier import wrote.")] = False,
) -> None:
    """Make a Hugging Face MarianMT (opus-mt) or M2M-100 model an nmtk run: translate, fine-tune, export it."""
    from nmtk.convert.formats import import_model

    result = import_model(folder, out, source_lang, target_lang, languages.split(",") if languages else None, force)
    console.print(f"imported {folder} -> {out}: {result.source} -> {result.target}, "
                  f"{result.encoder_layers}+{result.decoder_layers} layers, d_model {result.d_model}, "
                  f"{result.parameters:,} parameters; translate with: "
                  f"nmtk translate -m {out}{result.target_hint}")


@app.command()
@_panels({"Model": ("model", "checkpoint", "device", "threads", "precision", "shortlist"),
          "Server": ("host", "port", "api_key", "workers"),
          "Batching and limits": ("gather_tokens", "max_wait_ms", "max_chars", "max_lines", "max_queue"),
          "Search": ("beam", "lenpen", "lenpen_form", "no_repeat_ngram_size", "repetition_penalty"),
          "Control": ("glossary", "glossary_ignore_case", "terms", "ban", "as_typed")})
def serve(
    model: ModelOption = None,
    host: Annotated[str, typer.Option(help="Address to listen on (another than 127.0.0.1 exposes the model: "
                                      "set --api-key).")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=1, max=65535, help="Port.")] = 5000,
    checkpoint: CheckpointOption = None,
    beam: Annotated[int | None, typer.Option(min=1, help="Default beam (default: the recipe's).")] = None,
    lenpen: LenpenOption = None,
    lenpen_form: LenpenFormOption = None,
    gather_tokens: Annotated[int | None, typer.Option(min=1, help="A batch gathers requests up to this many "
                                                      "source tokens × beam (default: the decoding budget).")] = None,
    max_wait_ms: Annotated[float, typer.Option(min=0.0, help="...or until no request has come for this long "
                                               "(at most 20 times this in all).")] = 5.0,
    max_chars: Annotated[int, typer.Option(min=1, help="Characters per request.")] = 20_000,
    max_lines: Annotated[int, typer.Option(min=1, help="Lines per request.")] = 200,
    max_queue: Annotated[int, typer.Option(min=1, help="Requests waiting; more are answered 503.")] = 1000,
    workers: Annotated[int | None, typer.Option(min=1, help="Batches decoded side by side, the threads shared "
                                                "among them; a run's on a CPU each in a process of its own "
                                                "(default: 2 on a CPU, 1 on a GPU).")] = None,
    api_key: Annotated[str | None, typer.Option(help="Require 'Authorization: Bearer KEY' (default: "
                                                "$NMTK_API_KEY; unset: no key).")] = None,
    device: DeviceOption = None,
    threads: Annotated[int | None, typer.Option(min=1, help="CPU threads in all (default: every core).")] = None,
    precision: DecodePrecision = Precision.auto,
    no_repeat_ngram_size: NoRepeatOption = None,
    repetition_penalty: RepetitionOption = None,
    glossary: GlossaryOption = None,
    glossary_ignore_case: GlossaryCaseOption = False,
    terms: TermsOption = TermsChoice.auto,
    ban: BanOption = None,
    shortlist: ShortlistOption = False,
    as_typed: AsTypedOption = False,
) -> None:
    """Serve a model over HTTP: LibreTranslate and OpenNMT-py request formats, batching across requests, a page
    at / to try it. SIGTERM finishes the requests in flight; SIGHUP reloads the run's checkpoint. Glossary
    and bans given here apply to every request; requests add their own."""
    from nmtk.decode.load import LoadOptions
    from nmtk.serve.app import Limits
    from nmtk.serve.server import ServeOptions
    from nmtk.serve.server import serve as run_server

    load = LoadOptions(model=model, checkpoint=checkpoint, device=device, threads=threads, precision=precision,
                       shortlist=shortlist, as_typed=as_typed)
    search = dict(beam=beam, length_penalty=lenpen, length_penalty_form=form_value(lenpen_form),
                  no_repeat_ngram_size=no_repeat_ngram_size,
                  repetition_penalty=repetition_penalty)
    run_server(ServeOptions(load=load, search=search, host=host, port=port, glossary=glossary,
                            glossary_ignore_case=glossary_ignore_case or None, bans=ban, terms=terms.value,
                            gather_tokens=gather_tokens, max_wait_ms=max_wait_ms,
                            max_queue=max_queue, workers=workers,
                            limits=Limits(max_chars=max_chars, max_lines=max_lines),
                            api_key=api_key))


@app.command()
@_panels({"Model": ("model", "checkpoint", "target_lang", "source_lang"), "Sentence": ("input_", "line"),
          "Pictures": ("out", "kind", "layer", "head", "style", "format_", "force")})
def attention(
    sentence: Annotated[str | None, typer.Argument(help="The sentence to translate and draw.")] = None,
    model: Annotated[Path | None, typer.Option("-m", "--model", help="Run directory (default: $NMTK_MODEL, "
                                               "else the newest run under runs/).")] = None,
    checkpoint: Annotated[Path | None, typer.Option(help="Checkpoint (default: as translate).")] = None,
    target_lang: TargetLangOption = None,
    source_lang: SourceLangOption = None,
    input_: Annotated[Path | None, typer.Option("-i", "--input", help="Take the sentence from this file...")] = None,
    line: Annotated[int, typer.Option(min=1, help="...at this line (from 1).")] = 1,
    out: Annotated[Path, typer.Option("-o", "--out", help="Folder for the pictures; with one --kind, the picture "
                                      "itself where it ends in .png or .svg.")] = Path("attention"),
    kind: Annotated[list[AttentionKind] | None, typer.Option(help="encoder (self-attention), cross "
                                                            "(encoder-decoder) or decoder (self-attention); "
                                                            "repeatable (default: all three).")] = None,
    layer: Annotated[int | None, typer.Option(min=1, help="Layer (from 1; default: the last of its stack, as the "
                                              "paper's Figure 3 shows layer 5 of 6 and later).")] = None,
    head: Annotated[int | None, typer.Option(min=1, help="Only this head (from 1; default: every head).")] = None,
    style: Annotated[AttentionStyle, typer.Option(help="Encoder self-attention as the paper's lines (one colour "
                                                  "per head) or heat maps.")] = AttentionStyle.lines,
    format_: Annotated[PictureFormat, typer.Option("--format", help="Picture format.")] = PictureFormat.png,
    force: Annotated[bool, typer.Option("--force", help="Replace existing pictures nmtk drew (never another "
                                        "file).")] = False,
) -> None:
    """Translate one sentence and draw the attention of the model (paper Figures 3-5)."""
    from nmtk.decode.attention import AttentionOptions, draw

    kinds = tuple(k.value for k in kind) if kind else ("encoder", "cross", "decoder")
    options = AttentionOptions(model=model, sentence=sentence, input=input_, line=line, out=out, kinds=kinds,
                               layer=layer, head=head, style=style.value, format=format_.value, checkpoint=checkpoint,
                               force=force, target_lang=target_lang, source_lang=source_lang)
    for path in draw(options):
        console.print(f"wrote {path}")


@app.command()
def shortlist(
    run: Annotated[Path, typer.Argument(help="Run directory: its shortlist is saved in it (shortlist.npz).")],
    data: Annotated[Path | None, typer.Option(help="The prepared data it was trained on (default: the folder "
                                              "training recorded, else data-bin/<recipe name>).")] = None,
    per_source: Annotated[int, typer.Option(min=1, help="Target pieces kept per source piece.")] = 50,
    frequent: Annotated[int, typer.Option(min=0, help="The most frequent target pieces, kept for every "
                                          "sentence.")] = 100,
) -> None:
    """Build a lexical shortlist for decoding: per source piece, the target pieces that co-occur with it most
    in the training data, and the most frequent ones (translate/serve --shortlist; an export's vmap.txt)."""
    from nmtk.decode.shortlists import make_shortlist

    report = make_shortlist(run, data, per_source, frequent)
    console.print(f"wrote {report.path}: {report.per_source} pieces per source piece and {report.frequent} frequent "
                  f"ones, from {report.sentences:,} training pairs; a sentence keeps {report.mean_candidates:,.0f} "
                  f"of the {report.vocabulary:,} target pieces on average")


@app.command()
def distill(
    teacher: Annotated[Path, typer.Argument(help="The teacher: a run directory, a checkpoint in one, or an export.")],
    recipe_file: RecipeArg,
    out: Annotated[Path | None, typer.Option(help="Folder of the distilled data (default: distilled/<recipe name>)."
                                             )] = None,
    beam: Annotated[int | None, typer.Option(min=1, help="The teacher's beam (default: its recipe's decode.beam)."
                                             )] = None,
    drop: Annotated[float, typer.Option(min=0.0, max=0.99, help="Share of the teacher's translations left out, "
                                        "lowest score first.")] = 0.05,
    with_original: Annotated[bool, typer.Option("--with-original", help="Train on the original pairs too.")] = False,
    translate_only: Annotated[bool, typer.Option("--translate-only", help="Stop once the distilled data and its "
                                                 "recipe are written (then: nmtk train OUT/recipe.toml).")] = False,
    checkpoint: CheckpointOption = None,
    ensemble: EnsembleOption = None,
    device: DeviceOption = None,
    threads: Annotated[int | None, typer.Option(min=1, help="CPU threads.")] = None,
    precision: DecodePrecision = Precision.auto,
    data_root: Annotated[Path | None, typer.Option(help="Corpora root (default: $NMTK_DATA).")] = None,
    run_dir: Annotated[Path | None, typer.Option(help="The student's run (default: runs/<recipe name>).")] = None,
    set_: SetOption = None,
    force: Annotated[bool, typer.Option("--force", help="Start over: translate with the teacher again.")] = False,
) -> None:
    """Sequence-level distillation: the teacher translates the recipe's training sources, the student recipe
    trains on its translations (resumable at every step)."""
    from nmtk.decode.load import LoadOptions
    from nmtk.recipe import load_recipe
    from nmtk.train.distill import DistillOptions
    from nmtk.train.distill import distill as run_distill

    recipe = load_recipe(recipe_file, set_ or [])
    load = LoadOptions(checkpoint=checkpoint, device=device, threads=threads, precision=precision,
                       ensemble=tuple(ensemble or ()))
    again = shlex.join(["nmtk", *(arg for arg in sys.argv[1:] if arg != "--force")])  # --force would start over
    report = run_distill(recipe, DistillOptions(teacher, load, beam, drop, with_original, out, data_root, run_dir,
                                                translate_only, force, again=again))
    for corpus in report.corpora:
        console.print(f"{corpus.name}: kept {corpus.kept:,} of {corpus.pairs:,} pairs ({corpus.empty:,} empty "
                      f"translations, {corpus.low_score:,} with the lowest teacher scores left out)")
    console.print(f"student recipe: {report.recipe}" + ("" if report.run is None else f"; trained: {report.run}"))


@app.command()
def plot(
    runs: Annotated[list[Path], typer.Argument(help="Run directories (their train.jsonl), overlaid.")],
    out: Annotated[Path, typer.Option("-o", "--out", help="Picture to write (.png or .svg).")] = Path("curves.png"),
    x: Annotated[PlotAxis, typer.Option("--x", help="Horizontal axis.")] = PlotAxis.updates,
    size: Annotated[str, typer.Option(help="Width x height in pixels.")] = "1500x900",
    force: Annotated[bool, typer.Option("--force", help="Replace an existing picture nmtk drew (never another "
                                        "file).")] = False,
) -> None:
    """Draw training curves: training and validation loss, validation BLEU, learning rate, tokens/s."""
    from nmtk.pictures import plot_runs

    plot_runs(list(runs), out, x.value, size, force)
    console.print(f"wrote {out}")


@app.command()
@_panels({"References": ("ref", "test_set", "langpair"),
          "Metrics": ("metrics", "lowercase", "tokenize", "paper_bleu", "lang", "model"),
          "Significance": ("significance", "samples")})
def score(
    hyps: Annotated[list[Path] | None, typer.Argument(help="Hypothesis files (default: stdin).")] = None,
    ref: Annotated[list[Path] | None, typer.Option("-r", "--ref", help="Reference file (repeat for several).")] = None,
    metrics: Annotated[str, typer.Option(help="Comma-separated: bleu, chrf, ter.")] = "bleu,chrf",
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object on stdout.")] = False,
    lowercase: Annotated[bool, typer.Option("--lowercase", help="Case-insensitive scores.")] = False,
    tokenize: Annotated[str | None, typer.Option(help="sacreBLEU tokenizer for BLEU (default 13a).")] = None,
    paper_bleu: Annotated[bool, typer.Option("--paper-bleu", help="Tokenized BLEU as the paper reports it "
                                             "(Moses tokens, split compounds).")] = False,
    lang: Annotated[str | None, typer.Option(help="Target language for --paper-bleu's Moses tokeniser (default: "
                                             "-m RUN's, --langpair's, or the reference name's, e.g. ref.de).")] = None,
    model: Annotated[Path | None, typer.Option("-m", "--model", help="Run directory whose target language "
                                               "--paper-bleu uses.")] = None,
    significance: Annotated[bool, typer.Option("--significance", help="Paired bootstrap against the "
                                               "first system.")] = False,
    samples: Annotated[int, typer.Option(help="Bootstrap samples for --significance.")] = 1000,
    test_set: Annotated[str | None, typer.Option(help="Take references from sacreBLEU's test set, e.g. wmt14.")] = None,
    langpair: Annotated[str | None, typer.Option(help="Language pair of --test-set, e.g. en-de.")] = None,
) -> None:
    """Score translations with sacreBLEU: BLEU, chrF, TER; several systems; significance."""
    from nmtk.score import ScoreRequest, score_files
    from nmtk.score_report import render_scores, render_significance

    request = ScoreRequest(hyps=list(hyps or []), refs=list(ref or []), metrics=metrics, lowercase=lowercase,
                           tokenize=tokenize, paper_bleu=paper_bleu, lang=lang, model=model,
                           significance=significance, samples=samples, test_set=test_set, langpair=langpair)
    systems, results, sig = score_files(request, sys.stdin.buffer)
    if as_json:
        payload = results[systems[0]] if len(systems) == 1 else {"systems": results}
        if sig:
            payload["significance"] = sig
        print(json.dumps(payload))
        return
    render_scores(results)
    if sig:
        render_significance(sig, baseline=systems[0])


# ------------------------------------------------------------------------------------------ recipe


@recipe_app.command("validate")
def recipe_validate(
    files: Annotated[list[Path], typer.Argument(help="Recipe files to check.")],
    set_: SetOption = None,
) -> None:
    """Check recipes; exit 0 when every one is valid."""
    from nmtk.recipe import load_recipe

    failures = 0
    for path in files:
        try:
            recipe = load_recipe(path, set_ or [])
            console.print(f"[green]ok[/]  {path}")
            if recipe.train.precision == "bf16":  # torch only where there is something to check
                from nmtk.device import explicit_bf16_warning_here

                if warning := explicit_bf16_warning_here(recipe.train.precision):
                    console.print(f"[yellow]warning:[/yellow] {path}: {warning}")
        except NmtkError as exc:
            error_line(str(exc))
            failures += 1
    if failures:
        raise typer.Exit(1)


@recipe_app.command("show")
def recipe_show(
    file: Annotated[Path, typer.Argument(help="Recipe file.")],
    set_: SetOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object on stdout.")] = False,
) -> None:
    """Show the fully resolved recipe (valid TOML) and derived figures (parameter count, peak learning rate...)."""
    from nmtk.recipe import derived_figures, load_recipe, recipe_to_toml

    recipe = load_recipe(file, set_ or [])
    derived = derived_figures(recipe)
    if as_json:
        print(json.dumps({"parameters": derived["parameters"], "derived": derived,
                          "recipe": recipe.model_dump(mode="json")}))
        return
    figures = "".join(f"# {key}: {value:,}\n" if isinstance(value, int) else f"# {key}: {value}\n"
                      for key, value in derived.items())
    text = (f"# {recipe.name}: resolved from {file}\n{recipe_to_toml(recipe)}\n"
            f"# derived figures (not recipe fields)\n{figures}")
    if sys.stdout.isatty():  # colours on a terminal; never cut or wrapped, so what is copied is the recipe
        Console(highlight=False, soft_wrap=True).print(
            Syntax(text, "toml", theme="ansi_dark", background_color="default", word_wrap=False), crop=False)
    else:  # a file or a pipe gets the TOML as it is: `nmtk recipe show R > r.toml` is a recipe
        sys.stdout.write(text)


@recipe_app.command("samples")
def recipe_samples(
    file: Annotated[Path, typer.Argument(help="Recipe file.")],
    data: Annotated[Path | None, typer.Option(help="Its prepared data (default: data-bin/<recipe name>).")] = None,
    set_: SetOption = None,
    epoch: Annotated[int, typer.Option(help="The epoch (from 1): each draws its own pairs.")] = 1,
    stage: Annotated[str | None, typer.Option(help="The stage whose modifiers apply (default: the first).")] = None,
    count: Annotated[int, typer.Option("-n", "--count", min=1, help="Pairs shown.")] = 10,
) -> None:
    """Show training pairs as the recipe's modifiers change them in an epoch, as training feeds them."""
    from nmtk.data.prepare import default_out_dir
    from nmtk.recipe import load_recipe
    from nmtk.train.curriculum import modified_pairs

    recipe = load_recipe(file, set_ or [])
    found = modified_pairs(recipe, data or default_out_dir(recipe), epoch, stage, count)
    asked = ", ".join(f"{m.name} {m.p:.0%}" for m in found.modifiers)
    changed = ", ".join(f"{name} {n:,}" for name, n in found.counts.items() if n and name != "too long")
    kept = found.counts.get("too long", 0)
    print(f"epoch {epoch}: {asked}; pairs drawn: {changed or 'none'}"
          + (f"; {kept:,} kept as they were (too long once changed)" if kept else ""))
    for source, target, new_source, new_target in found.pairs:  # stdout: what was asked for, as `recipe show`
        print(f"\nsource  {source}\n     -> {new_source}\ntarget  {target}\n     -> {new_target}")


@recipe_app.command("docs")
def recipe_docs_cmd() -> None:
    """Print the recipe reference in Markdown (docs/recipes.md is this output)."""
    from nmtk.recipe_docs import reference_markdown

    print(reference_markdown(), end="")


@recipe_app.command("schema")
def recipe_schema_cmd() -> None:
    """Print the JSON Schema of recipes (for editor completion and validation)."""
    from nmtk.recipe import recipe_schema

    print(json.dumps(recipe_schema(), indent=2))


# -------------------------------------------------------------------------------------------- main


def _is_click_error(exc: Exception, name: str) -> bool:
    """Whether ``exc`` is click's ``name`` exception, from click or from the copy newer typers vendor."""
    return any(cls.__name__ == name and cls.__module__.endswith("exceptions") for cls in type(exc).__mro__)


#: Options renamed, per command, old → new: ``--max-tokens`` meant the decoding batch in ``translate`` and
#: the requests gathered in ``serve``. The old spelling still works, with a one-line notice.
RENAMED_OPTIONS = {"translate": {"--max-tokens": "--beam-tokens"}, "serve": {"--max-tokens": "--gather-tokens"}}


def _renamed_options(argv: list[str]) -> list[str]:
    """``argv`` with a renamed option of its command spelt the new way (``--old V`` and ``--old=V``)."""
    command = next((arg for arg in argv[1:] if arg in RENAMED_OPTIONS), None)
    if command is None:
        return argv
    out = []
    for arg in argv:
        name, eq, value = arg.partition("=")
        if name in RENAMED_OPTIONS[command]:
            new = RENAMED_OPTIONS[command][name]
            sys.stderr.write(f"notice: nmtk {command} {name} is now {new} (read as such; the old name will go)\n")
            arg = new + eq + value
        out.append(arg)
    return out


def main() -> None:
    """Console-script entry point: run the app, turning errors into one line and an exit code.

    Command-line mistakes (an unknown option, a value out of range, a choice not offered) are one
    line too, naming the option, with a pointer to the command's ``--help``.
    """
    sys.argv = _renamed_options(sys.argv)
    if len(sys.argv) < 2 or {"-h", "--help"} & set(sys.argv[1:]):
        _readable_help()
    try:
        code = app(standalone_mode=False)
        if isinstance(code, int) and code:
            sys.exit(code)
    except NmtkError as exc:
        if _state["debug"]:
            raise
        error_line(str(exc))
        sys.exit(exc.exit_code)
    except KeyboardInterrupt as exc:
        from nmtk.interrupts import exit_code

        error_line("interrupted")
        sys.exit(exit_code(exc))
    except Exception as exc:  # a command-line mistake, or a bug: still one line unless --debug
        if _is_click_error(exc, "NoArgsIsHelpError"):  # `nmtk recipe` alone: its help, as click shows it
            exc.show()
            sys.exit(exc.exit_code)
        if _is_click_error(exc, "UsageError"):  # bad option, value out of range, unknown choice or command
            command = exc.ctx.command_path if exc.ctx else "nmtk"
            error_line(f"{validator_words(exc.format_message())} (see {command} --help)")
            sys.exit(exc.exit_code)
        if _is_click_error(exc, "Abort"):
            error_line("interrupted")
            sys.exit(130)
        if _state["debug"] or "--debug" in sys.argv:
            raise
        error_line(f"{type(exc).__name__}: {exc} (run with --debug for the traceback)")
        sys.exit(1)
