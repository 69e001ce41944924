"""`nmtk attention`: translate one sentence and draw the attention the model paid doing it (paper
Figures 3-5). The weights come from `nmtk.decode.search.alignment.attention_maps`, the pictures from
`nmtk.pictures`."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from nmtk.console import console
from nmtk.decode.load import LoadOptions, load_translator
from nmtk.decode.search.alignment import attention_maps
from nmtk.decode.search.config import SearchConfig
from nmtk.decode.translator import Translator
from nmtk.errors import NmtkError
from nmtk.files import decode_lines
from nmtk.model_source import resolve_model
from nmtk.pictures import attention_picture, check_replaceable

KINDS = ("encoder", "cross", "decoder")


@dataclass(frozen=True)
class AttentionOptions:
    model: Path | None
    sentence: str | None
    input: Path | None
    line: int
    out: Path
    kinds: tuple[str, ...]
    layer: int | None  # from 1; None: the last layer of each stack
    head: int | None  # from 1; None: every head
    style: str
    format: str
    checkpoint: Path | None = None
    force: bool = False
    target_lang: str | None = None  # a multilingual model's pair, as translate's --target-lang
    source_lang: str | None = None


def the_sentence(options: AttentionOptions) -> str:
    """The sentence to draw: the argument, or line ``--line`` of ``-i FILE``."""
    if (options.sentence is None) == (options.input is None):
        raise NmtkError("give one sentence: nmtk attention -m RUN \"SENTENCE\", or -i FILE --line N")
    if options.sentence is not None:
        sentence = options.sentence
    else:
        try:
            with open(options.input, "rb") as handle:
                lines = decode_lines(handle, str(options.input))
                sentence = next((text for n, text in enumerate(lines, start=1) if n == options.line), None)
        except FileNotFoundError:
            raise NmtkError(f"{options.input}: input file not found") from None
        if sentence is None:
            raise NmtkError(f"{options.input}: has no line {options.line}")
    if not sentence.strip():
        raise NmtkError("the sentence is empty: there is no attention to draw")
    return sentence


PICTURE_SUFFIXES = (".png", ".svg")


def _picture_file(options: AttentionOptions) -> Path | None:
    """``-o`` where it names one picture (``-o cross.png`` with one ``--kind``: a user who names a picture
    gets it, not a folder of that name; an existing folder stays a folder), else None (a folder). Checked
    before the model loads."""
    out = options.out
    if out.suffix.lower() not in PICTURE_SUFFIXES or out.is_dir():
        _check_folder(out)
        return None
    if len(options.kinds) > 1:
        kinds = ", ".join(options.kinds)
        raise NmtkError(f"-o {out}: names one picture, but {len(options.kinds)} are drawn ({kinds}): give a folder "
                        "(-o attention), or one --kind")
    if out.suffix.lower() != f".{options.format}" and options.format != "png":
        raise NmtkError(f"-o {out}: a {out.suffix} picture, but --format {options.format}: give one or the other")
    return out


def _check_folder(out: Path) -> None:
    """One line where the folder ``-o`` cannot be made: a file there or above it (``-o notes.txt``)."""
    for path in (out, *out.parents):
        if path.exists():
            if not path.is_dir():
                raise NmtkError(f"-o {out}: {path} is a file, not a folder: give a folder for the pictures, or a "
                                f"picture's name ({', '.join(sorted(PICTURE_SUFFIXES))}) with one --kind")
            return


def _targets(options: AttentionOptions, file: Path | None, stacks: dict[str, int]) -> dict[str, Path]:
    """Where each kind's picture goes: ``file`` (`_picture_file`), else ``kind-layerL.FORMAT`` in the
    folder ``-o``."""
    if file is not None:
        return {options.kinds[0]: file}
    return {kind: options.out / f"{kind}-layer{options.layer or stacks[kind]}.{options.format}"
            for kind in options.kinds}


def draw(options: AttentionOptions) -> list[Path]:
    """Translate the sentence, run the model over it and its translation keeping the weights, draw."""
    sentence = the_sentence(options)
    file = _picture_file(options)
    source = resolve_model(options.model, options.checkpoint)
    if source.is_export:
        raise NmtkError(f"{source.path}: an exported CTranslate2 model; draw attention with the run it was exported "
                        "from")
    # the model's attention over the sentence as typed: no folding of capitals, no typo correction
    translator = load_translator(source, LoadOptions(target_lang=options.target_lang, source_lang=options.source_lang,
                                                     as_typed=True))
    assert isinstance(translator, Translator)
    if (options.source_lang or "").lower() == "auto":  # the sentence's detected language
        translator = translator.for_text(sentence)
    model = translator.first_model
    for kind in options.kinds:  # check --layer and --head before any work
        count = model.cfg.encoder_layers if kind == "encoder" else model.cfg.decoder_layers
        if options.layer is not None and not 1 <= options.layer <= count:
            stack = "encoder" if kind == "encoder" else "decoder"  # cross-attention is the decoder layers'
            raise NmtkError(f"--layer {options.layer}: the model's {stack} has layers 1 to {count}")
    if options.head is not None and not 1 <= options.head <= model.cfg.heads:
        raise NmtkError(f"--head {options.head}: the model has heads 1 to {model.cfg.heads}")
    targets = _targets(options, file, {"encoder": model.cfg.encoder_layers, "cross": model.cfg.decoder_layers,
                                 "decoder": model.cfg.decoder_layers})
    for path in targets.values():
        check_replaceable(path, options.force)
    src = translator.src_pipe.encode(sentence)
    limit = model.cfg.max_positions - 1
    if len(src) > limit:
        raise NmtkError(f"the sentence has {len(src):,} subwords, more than the model's {limit:,}")
    hyp = translator.hypotheses([sentence], SearchConfig.from_recipe(source.recipe.decode))[0][0].tokens
    console.print(f"translation: {translator.tgt_pipe.decode(hyp)}")
    kept = attention_maps(model, src, hyp, translator.device, translator.precision)
    pieces_src, pieces_tgt = translator.src_pipe.subwords.pieces(), translator.tgt_pipe.subwords.pieces()
    source = [pieces_src[t] for t in src] + ["</s>"]
    target_in = ["<s>"] + [pieces_tgt[t] for t in hyp]
    target_out = [pieces_tgt[t] for t in hyp] + ["</s>"]
    next(iter(targets.values())).parent.mkdir(parents=True, exist_ok=True)
    written = []
    for kind in options.kinds:
        layers = kept[kind]
        layer = (options.layer or len(layers)) - 1
        weights = layers[layer]
        heads = None if options.head is None else [options.head - 1]
        rows, cols = {"encoder": (source, source), "cross": (target_out, source),
                      "decoder": (target_in, target_in)}[kind]
        style = options.style if kind == "encoder" else "heatmap"
        title = {"encoder": "encoder self-attention", "cross": "encoder-decoder attention (rows: the token produced)",
                 "decoder": "decoder self-attention"}[kind] + f", layer {layer + 1} of {len(layers)}"
        written.append(attention_picture(np.asarray(weights), rows, cols, targets[kind], title, style, heads,
                                         average=kind != "encoder"))
    return written
