"""From a resolved model (`nmtk.model_source.ModelSource`) to a translator: the one function `translate`,
`attention`, benchmarks and the server call.

A run directory is searched by nmtk's engine (torch); an `nmtk export` folder by CTranslate2, torch never
imported: a deployment pays neither its memory (~200 MB) nor its import time. How to search is not a
loading option: each call of the translator says it (`SearchConfig`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from nmtk.console import console
from nmtk.errors import NmtkError
from nmtk.model_source import NOT_ALIGNED, ModelSource, ensemble_member
from nmtk.precision import Precision
from nmtk.text.reading import Reading, terms_pattern
from nmtk.vocab import UNK_ID

if TYPE_CHECKING:
    from nmtk.decode.base import TranslatorBase
    from nmtk.decode.guide import Glossary
    from nmtk.text.pipeline import TextPipeline


@dataclass(frozen=True)
class LoadOptions:
    """Which model, where and in what arithmetic."""

    model: Path | None = None  # run directory, checkpoint in one, or export; None: $NMTK_MODEL, else the newest run
    checkpoint: Path | None = None  # None: the run's default checkpoint (`nmtk.model_source.default_checkpoint`)
    device: str | None = None  # cpu, cuda, cuda:N; None: CUDA when available
    threads: int | None = None  # per search
    searches: int = 1  # searches run side by side (the server's decoding threads): CTranslate2's inter_threads
    precision: Precision = Precision.auto
    ensemble: tuple[Path, ...] = ()
    alignment_layer: int | None = None  # 1-based decoder layer whose cross-attention aligns; None: the last
    target_lang: str | None = None  # a multilingual model's target (its tag starts every source)
    source_lang: str | None = None  # where a multilingual model has that target from several sources
    any_pair: bool = False  # a multilingual model without target_lang: its first pair (the server's requests say)
    shortlist: bool = False  # project onto the run's lexical shortlist (`nmtk shortlist`; an export's vmap.txt)
    as_typed: bool = False  # no folding of capitals, no typo correction, links read (`nmtk.text.reading`)
    keep_case: frozenset[str] = frozenset()  # words read in capitals as typed: a glossary's (`Glossary.cased`)
    # a hinted glossary's terms that translate to themselves, carried through untranslated
    # (`Glossary.untranslated`), matched ignoring case where the glossary does
    carry_terms: tuple[str, ...] = ()
    carry_ignore_case: bool = False


def load_translator(source: ModelSource, options: LoadOptions) -> TranslatorBase:
    """The translator for ``source`` (`nmtk.model_source.resolve_model`): a run's model(s) with torch, or an
    exported model with CTranslate2. ``options.model``/``options.checkpoint`` were resolved into ``source``."""
    if source.found:
        console.print(f"model: {source.path} ({source.found})")
    translator = _load_exported(source, options) if source.is_export else _load_run(source, options)
    translator.reading = _reading(source, translator.src_pipe, options)
    return translator


def with_glossary(options: LoadOptions, glossary: Glossary | None, hints: bool) -> LoadOptions:
    """``options`` with what reading takes from ``glossary`` (`translate`'s, a server's own): its words in
    capitals read as typed (`Glossary.cased`) and, where it goes in as hints, its terms that translate
    to themselves carried where a hint loses them (`Glossary.untranslated`)."""
    if glossary is None:
        return options
    return replace(options, keep_case=glossary.cased(), carry_terms=glossary.untranslated() if hints else (),
                   carry_ignore_case=glossary.ignore_case)


def _reading(source: ModelSource, pipe: TextPipeline, options: LoadOptions) -> Reading:
    """How the translator reads its lines: capitals folded (a lone word in capitals by how the source
    subword model spells it, a glossary's in capitals as typed), typos corrected where the recipe asked
    for it (its training words beside the model), a glossary's untranslated terms carried; every line
    as it came with ``as_typed``."""
    if options.as_typed:
        return Reading(fold_case=False, carry=False, split=False)
    lang, subwords = pipe.moses.lang, pipe.subwords
    keep, terms = options.keep_case, terms_pattern(options.carry_terms, options.carry_ignore_case)

    def pieces(word: str) -> int:
        """The pieces the model spells ``word`` in; where it cannot (<unk>: a vocabulary without capitals),
        as if letter by letter."""
        ids = subwords.encode(word)
        return len(ids) if UNK_ID not in ids else len(word) + 1

    words = source.manifest.words.get(lang) if source.manifest else None
    if words is None:
        return Reading(lang=lang, pieces=pieces, keep=keep, terms=terms, spells=pipe.spells)
    from nmtk.text.typos import TypoCorrector

    return Reading(lang=lang, typos=TypoCorrector.read(source.path / words, lang), pieces=pieces, keep=keep,
                   terms=terms, spells=pipe.spells)


def _load_run(source: ModelSource, options: LoadOptions) -> TranslatorBase:
    import torch

    from nmtk.bf16_probe import Shapes
    from nmtk.checkpoint import load_model
    from nmtk.decode.search.batches import step_probe
    from nmtk.decode.search.ensemble import Ensemble
    from nmtk.decode.shortlists import run_shortlist
    from nmtk.decode.translator import Translator
    from nmtk.device import keep_freed_memory, pick_device, resolve_precision
    from nmtk.text.pairs import model_pipelines

    shortlist = run_shortlist(source.path) if options.shortlist else None  # refused before anything loads
    threads, searches = torch_layout(options)
    if threads:
        torch.set_num_threads(threads)
    manifest = source.manifest
    console.print(f"checkpoint: {source.checkpoint} ({source.why})")
    device = pick_device(options.device)
    if device.type == "cpu":
        keep_freed_memory()
    model = load_model(source.checkpoint, device, manifest.vocab.sha256)
    if options.ensemble:
        members = [model]
        for path in options.ensemble:
            checkpoint, why = ensemble_member(path)
            console.print(f"ensemble: {checkpoint} ({why})")
            members.append(load_model(checkpoint, device, manifest.vocab.sha256))
        model = Ensemble(members)
    cfg = model.cfg
    shapes = Shapes(cfg.d_model, cfg.d_ff, cfg.tgt_vocab)
    precision, why = resolve_precision(options.precision, device, shapes, "decode", workload=step_probe(model, device))
    console.print(f"precision: {precision} ({why})")
    if precision is Precision.int8:
        from nmtk.model.int8 import quantize_for_decoding

        for member in getattr(model, "models", [model]):
            quantize_for_decoding(member)
    layers = model.cfg.decoder_layers
    if options.alignment_layer is not None and not 1 <= options.alignment_layer <= layers:
        raise NmtkError(f"--alignment-layer {options.alignment_layer}: the model has decoder layers 1 to {layers}")
    pipelines, pairs = model_pipelines(source.path, source.recipe, manifest, options.target_lang,
                                       options.source_lang, options.any_pair)
    return Translator(pipelines=pipelines, pairs=pairs, model=model, device=device,
                      precision=precision, align_layer=(options.alignment_layer or layers) - 1,
                      longest_trained=manifest.longest_training_source,
                      shortlist=shortlist, searches=searches if device.type == "cpu" else 1)


def torch_layout(options: LoadOptions) -> tuple[int | None, int]:
    """nmtk's engine's (torch threads, searches side by side) for these options. A file's translation on a
    CPU (one caller, ``searches`` 1) runs ``threads`` one-thread searches (torch's own count when unset:
    every core, or ``OMP_NUM_THREADS``), as CTranslate2 does (`nmtk.decode.ct2.thread_layout`; why:
    `nmtk.decode.search.batches.side_by_side`); a call of a single batch, and sampling, search on all
    of them. A server's searches keep what they asked (each in a process of its own on a CPU:
    `nmtk.serve.process`)."""
    import torch

    if options.searches != 1:
        return options.threads, 1
    threads = options.threads or torch.get_num_threads()
    return threads, threads


def _load_exported(source: ModelSource, options: LoadOptions) -> TranslatorBase:
    """CTranslate2 behind the same options; the ones it cannot honour are errors naming them."""
    from nmtk.decode.ct2 import CT2_COMPUTE_TYPES, Ct2Translator

    if options.ensemble:
        raise NmtkError(f"--ensemble: not available with an exported CTranslate2 model ({source.path}): an export "
                        "holds one model: ensemble with the run directories")
    if options.alignment_layer is not None:
        raise NmtkError(f"--alignment-layer: an export ({source.path}) aligns by its last decoder layer, chosen when "
                        "it was exported: align another layer with the run directory")
    compute = None if options.precision is Precision.auto else CT2_COMPUTE_TYPES[options.precision]
    translator = Ct2Translator.load(source, options.device or "auto", threads=options.threads or 0,
                                    compute_type=compute, searches=options.searches,
                                    pair=(options.target_lang, options.source_lang, options.any_pair),
                                    shortlist=options.shortlist)
    console.print(f"model: {source.path} (CTranslate2, {translator.quantization}, {translator.device})")
    if not source.aligns and translator.reading.carry:  # else silent: emoji and links would simply be lost
        console.print(f"notice: characters the model cannot spell, links and the numbers a translation loses go to "
                      f"the model as they are, not carried through: {NOT_ALIGNED}")
    return translator
