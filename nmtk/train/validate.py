"""Validation during training: loss on the valid set and BLEU of beam-search output (sacreBLEU)."""

from __future__ import annotations

import math
from dataclasses import replace
from functools import partial
from typing import Any

import numpy as np
import torch
from sacrebleu.metrics import BLEU

from nmtk.console import console
from nmtk.data.batching import BatchingPlan
from nmtk.data.binarized import BinarizedSplit
from nmtk.data.dataset import collate, pad_multiple, split_lengths
from nmtk.decode.search.config import SearchConfig
from nmtk.decode.translator import Translator
from nmtk.device import autocast_for
from nmtk.files import read_lines
from nmtk.manifest import PreparedData
from nmtk.model import ModelConfig, Transformer
from nmtk.pair import Pair
from nmtk.precision import Precision
from nmtk.recipe import Recipe
from nmtk.text.pairs import Pipes
from nmtk.train.distributed import DistInfo, all_gather_object, all_reduce_sum
from nmtk.train.loss import projected_label_smoothed_loss
from nmtk.vocab import PAD_ID

SINGLE = DistInfo()

#: Share of a GPU's free memory validation's beam search may fill, and the least budget it gets.
FREE_MEMORY_SHARE, MIN_BEAM_TOKENS = 0.5, 1_024


def beam_tokens_for(free_bytes: int, cfg: ModelConfig, search: SearchConfig, value_bytes: int) -> int:
    """A decoding budget (source tokens × beam) that fits in ``FREE_MEMORY_SHARE`` of ``free_bytes``.

    Per unit of the budget, one source position of one beam row holds its cross-attention keys and
    values in every decoder layer, and brings up to ``max_len_a`` target positions of self-attention
    cache, held twice while the cache grows (2 · L · d values each); and a step's log-probabilities and
    candidates (about 3 × V fp32 values per row) are shared by a row's source positions, 8 at the
    fewest. Training's reserved memory stays where it is: the default budget (65,536 on a GPU) beside it
    was what ran a 40 GB card out of memory at the first validation (#46 point 5)."""
    cache = 2 * cfg.decoder_layers * cfg.d_model * value_bytes * (1 + 2 * max(search.max_len_a, 1.0))
    per_unit = cache + 3 * 4 * cfg.tgt_vocab / 8
    return max(MIN_BEAM_TOKENS, int(free_bytes * FREE_MEMORY_SHARE // per_unit))


class Validator:
    """Valid loss (label-smoothed, as in training) and sacreBLEU of the recipe's beam search.

    Valid sets are not length-filtered: a source longer than the model accepts is translated in
    pieces for BLEU (as `translate` does), and pairs longer than ``max_positions`` on either side are
    left out of the loss (the model cannot score them whole).
    """

    def __init__(self, split: BinarizedSplit, references: list[str], pipelines: Pipes,
                 search: SearchConfig, label_smoothing: float, batch_tokens: int, max_positions: int,
                 device: torch.device) -> None:
        self.split, self.references, self.pipelines = split, references, pipelines
        self.search, self.label_smoothing, self.device = search, label_smoothing, device
        src_len, tgt_len = split_lengths(split)
        fits = np.flatnonzero((src_len <= max_positions) & (tgt_len <= max_positions))
        batch_tokens = max(batch_tokens, int(src_len[fits].max(initial=1)), int(tgt_len[fits].max(initial=1)))
        batches = BatchingPlan(src_len[fits], tgt_len[fits], batch_tokens).epoch_batches(0) if fits.size else []
        self.batches = [fits[b] for b in batches]
        self.sources = [split.src[i].astype("int64").tolist() for i in range(len(split))]

    @classmethod
    def for_split(cls, data: PreparedData, recipe: Recipe, pipelines: Pipes, device: torch.device,
                  pair: Pair | None = None) -> Validator:
        """The prepared valid split of ``pair`` (``valid``; a multilingual model's ``valid.en-de``) and its
        raw references, searched as the recipe's ``[decode]`` says (its beam, length penalty, length
        limit and decoding budget ``decode.beam_tokens``)."""
        split_name = "valid" if pair is None else f"valid.{pair.name}"
        pair = pair or data.manifest().language_pairs()[0]
        split = BinarizedSplit(data, split_name, pair)
        references = read_lines(data.raw(split_name, pair.target), "reference")  # split on \n only
        search = replace(SearchConfig.from_recipe(recipe.decode), retry_cut=False)  # the model's own translations
        return cls(split, references, pipelines, search, recipe.optim.label_smoothing,
                   recipe.batching.batch_tokens, recipe.model.max_positions, device)

    @torch.inference_mode()
    def loss(self, model: Transformer, precision: Precision, info: DistInfo = SINGLE) -> tuple[float, float]:
        """Per-token loss and NLL; with several ranks each scores every ``world_size``-th batch."""
        loss_sum = torch.zeros((), device=self.device)
        nll_sum = torch.zeros((), device=self.device)
        tokens = 0
        model.eval()
        for indices in self.batches[info.rank :: info.world_size]:
            batch = collate(self.split, indices, pad_multiple(self.device)).to(self.device)
            head = partial(projected_label_smoothed_loss, target=batch.tgt_out, epsilon=self.label_smoothing,
                           pad_id=PAD_ID)
            with autocast_for(self.device, precision):
                loss, nll = model(batch.src, batch.tgt_in, head=head, src_padded=batch.src_padded,
                                  src_first=batch.src_first)
            loss_sum += loss
            nll_sum += nll
            tokens += batch.target_tokens
        loss_total, nll_total, tokens_total = all_reduce_sum([float(loss_sum), float(nll_sum), float(tokens)],
                                                            self.device, info)
        return loss_total / max(tokens_total, 1), nll_total / max(tokens_total, 1)

    def translations(self, model: Transformer, precision: Precision, info: DistInfo = SINGLE) -> list[str]:
        """Best translations of every source, on every rank; with several ranks each translates every
        ``world_size``-th source (sources are interleaved, so every rank gets a like mix of lengths)."""
        mine = list(range(info.rank, len(self.sources), info.world_size))
        translator = Translator(pipelines=self.pipelines, model=model, device=self.device, precision=precision)
        hyps = translator.hypotheses_of_ids([self.sources[i] for i in mine], self._search_now(model, precision))
        texts = [translator.detokenize(h[0]) if h else "" for h in hyps]
        out = [""] * len(self.sources)
        for rank, part in enumerate(all_gather_object(texts, info)):
            out[rank :: info.world_size] = part
        return out

    def _search_now(self, model: Transformer, precision: Precision) -> SearchConfig:
        """The recipe's search (as `translate` does it); on a GPU with no ``decode.beam_tokens`` set, its
        budget from the memory free now, after the allocator's cached blocks are given back. A batch
        that still runs out of memory is searched again in halves (`decode_ids`)."""
        if self.device.type != "cuda" or self.search.beam_tokens is not None:
            return self.search
        torch.cuda.empty_cache()
        free, _ = torch.cuda.mem_get_info(self.device)
        value_bytes = 4 if precision == Precision.fp32 else 2
        return replace(self.search, beam_tokens=beam_tokens_for(free, model.cfg, self.search, value_bytes))

    def run(self, model: Transformer, precision: Precision, info: DistInfo = SINGLE) -> dict[str, float]:
        """Valid loss, NLL, perplexity and sacreBLEU; every rank of a job takes part and gets the result."""
        was_training = model.training
        try:
            loss, nll = self.loss(model, precision, info)
            bleu = BLEU().corpus_score(self.translations(model, precision, info), [self.references]).score
        finally:
            model.train(was_training)
        return {"loss": round(loss, 4), "nll": round(nll, 4), "ppl": round(math.exp(min(nll, 50)), 2),
                "bleu": round(bleu, 2)}


#: The text pipelines validation needs: (source, target), or a multilingual model's per pair.
Pipelines = Pipes | dict[Pair, Pipes]


class PairValidators:
    """A multilingual model's validation: loss and BLEU on every pair's valid set, and their means,
    which the best checkpoint and early stopping follow (so no direction is traded for another)."""

    def __init__(self, validators: dict[str, Validator]) -> None:
        self.validators = validators

    def run(self, model: Transformer, precision: Precision, info: DistInfo = SINGLE) -> dict[str, Any]:
        pairs = {name: v.run(model, precision, info) for name, v in self.validators.items()}
        if info.is_main:
            for name, r in pairs.items():
                console.print(f"valid {name} | loss {r['loss']:.3f} | nll {r['nll']:.3f} | BLEU {r['bleu']:.2f}")
        mean = {key: round(float(np.mean([r[key] for r in pairs.values()])), 4) for key in ("loss", "nll", "bleu")}
        return {**mean, "ppl": round(math.exp(min(mean["nll"], 50)), 2), "pairs": pairs}


def validator_for(data: PreparedData, recipe: Recipe, pipelines: Pipelines,
                  device: torch.device) -> Validator | PairValidators:
    """The run's validation: one valid set, or one per pair of a multilingual model (named ``en-de``)."""
    if not isinstance(pipelines, dict):
        return Validator.for_split(data, recipe, pipelines, device)
    return PairValidators({pair.name: Validator.for_split(data, recipe, pipelines[pair], device, pair)
                           for pair in data.manifest().language_pairs()})
