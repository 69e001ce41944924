"""Validation during training: loss on the valid set and BLEU of beam-search output (sacreBLEU)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import torch
from sacrebleu.metrics import BLEU

from nmtk.data.batching import BatchingPlan
from nmtk.data.binarized import BinarizedSplit
from nmtk.data.dataset import collate, split_lengths
from nmtk.decode.beam import SearchConfig
from nmtk.decode.search import decode_ids
from nmtk.device import autocast_for
from nmtk.model import Transformer
from nmtk.recipe import Recipe
from nmtk.rundir import RunDir
from nmtk.train.loss import label_smoothed_loss
from nmtk.vocab import PAD_ID


class Validator:
    def __init__(self, recipe: Recipe, data_dir: Path, run: RunDir, device: torch.device,
                 manifest: dict[str, Any]) -> None:
        self.recipe, self.device = recipe, device
        src, tgt = recipe.data.source_lang, recipe.data.target_lang
        self.split = BinarizedSplit(data_dir, "valid", src, tgt, manifest["dtype"])
        self.references = (data_dir / f"valid.raw.{tgt}").read_text(encoding="utf-8").splitlines()
        src_len, tgt_len = split_lengths(self.split)
        max_tokens = max(recipe.batching.max_tokens, int(src_len.max()), int(tgt_len.max()))
        self.batches = BatchingPlan(src_len, tgt_len, max_tokens).epoch_batches(0)
        self.sources = [self.split.src[i].astype("int64").tolist() for i in range(len(self.split))]
        self.tgt_pipe = run.pipelines(recipe)[1]
        d = recipe.decode
        self.search = SearchConfig(beam=d.beam, length_penalty=d.length_penalty, max_len_a=d.max_len_a,
                                   max_len_b=d.max_len_b)

    @torch.inference_mode()
    def loss(self, model: Transformer, precision: str) -> tuple[float, float]:
        loss_sum = nll_sum = 0.0
        tokens = 0
        model.eval()
        for indices in self.batches:
            batch = collate(self.split, indices).to(self.device)
            with autocast_for(self.device, precision):
                logits = model(batch.src, batch.tgt_in)
            loss, nll = label_smoothed_loss(logits, batch.tgt_out, self.recipe.optim.label_smoothing, PAD_ID)
            loss_sum += float(loss)
            nll_sum += float(nll)
            tokens += batch.target_tokens
        return loss_sum / tokens, nll_sum / tokens

    def translations(self, model: Transformer, precision: str) -> list[str]:
        hyps = decode_ids(model, self.sources, self.search, device=self.device, precision=precision)
        return [self.tgt_pipe.decode(h[0].tokens) if h else "" for h in hyps]

    def run(self, model: Transformer, precision: str) -> dict[str, float]:
        was_training = model.training
        try:
            loss, nll = self.loss(model, precision)
            bleu = BLEU().corpus_score(self.translations(model, precision), [self.references]).score
        finally:
            model.train(was_training)
        return {"loss": round(loss, 4), "nll": round(nll, 4), "ppl": round(math.exp(min(nll, 50)), 2),
                "bleu": round(bleu, 2)}
