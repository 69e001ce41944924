"""The text pipelines a model's folder speaks: per language pair, with its subword model(s) and tags.

A run, an export and prepared data hold their subword models beside a manifest; this is where a pair
of them (`nmtk.pair.choose_pair`) becomes the (source, target) `TextPipeline`s that translate and
validate with. A multilingual model's source pipeline puts the target's tag first (or, M2M-100's, the
source's code, the target's forced as the first token).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from nmtk.errors import NmtkError
from nmtk.pair import Pair, choose_pair
from nmtk.text.pipeline import TextPipeline, text_pipelines

if TYPE_CHECKING:
    from nmtk.manifest import Manifest
    from nmtk.recipe import Recipe

#: A pair's (source, target) text pipelines.
Pipes = tuple[TextPipeline, TextPipeline]


def pipelines_in(folder: Path, recipe: Recipe, manifest: Manifest, pair: Pair) -> Pipes:
    """The pipelines of ``pair`` (one of ``manifest``'s) with the subword model(s) it names, inside
    ``folder``; one line naming a model file that is missing."""
    models = manifest.model_paths(folder)
    for lang in pair:
        if lang not in models or not models[lang].is_file():
            raise NmtkError(f"{models.get(lang, folder / '?')}: subword model missing from {folder}")
    if manifest.pairs and manifest.tag_style == "m2m-100":  # the source's code first, the target's forced
        return text_pipelines(recipe.tokenizer, pair, models, manifest.tags[pair.source], (manifest.tags[pair.target],),
                              frozenset(manifest.tags.values()))
    return text_pipelines(recipe.tokenizer, pair, models, manifest.tags.get(pair.target) if manifest.pairs else None)


def model_pipelines(folder: Path, recipe: Recipe, manifest: Manifest, target_lang: str | None = None,
                    source_lang: str | None = None, any_pair: bool = False) -> tuple[Pipes, dict[Pair, Pipes]]:
    """What a translator of the model in ``folder`` (a run, or an export with its manifest) speaks: the
    pipelines of the pair asked for (`choose_pair`), and a multilingual model's pipelines of every pair
    (empty for one pair). ``any_pair``: with no target given, a multilingual model's first pair (a
    server's requests each say theirs) instead of an error."""
    pairs = manifest.language_pairs()
    if not manifest.pairs:
        chosen = choose_pair(pairs, target_lang, source_lang, auto_source=True)  # auto: the one source
        return pipelines_in(folder, recipe, manifest, chosen), {}
    every = {pair: pipelines_in(folder, recipe, manifest, pair) for pair in pairs}
    if target_lang is None and source_lang is None and any_pair:
        return every[pairs[0]], every
    # auto: a pair with the target; each line's own is detected (`TranslatorBase.for_text`)
    return every[choose_pair(pairs, target_lang, source_lang, auto_source=True)], every


def training_pipelines(folder: Path, recipe: Recipe, manifest: Manifest) -> Pipes | dict[Pair, Pipes]:
    """What validation translates with: the pipelines of the pair, or of every pair (multilingual)."""
    if not manifest.pairs:
        return pipelines_in(folder, recipe, manifest, manifest.language_pairs()[0])
    return model_pipelines(folder, recipe, manifest, any_pair=True)[1]
