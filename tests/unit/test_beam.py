"""Beam search on a tiny trained model: greedy equivalence, batching, cache, scores, n-best, sampling."""

from __future__ import annotations

import math
import os
import signal
import threading
import time

import numpy as np
import pytest
import torch
from helpers import copy_batch

from nmtk.decode.search import batches
from nmtk.decode.search.batches import decode_ids
from nmtk.decode.search.beam import BLOCK, Hypothesis, SearchConfig, _by_topk, _in_blocks, length_penalty
from nmtk.decode.search.choose import search
from nmtk.decode.search.sampling import SamplingConfig, sample_search
from nmtk.errors import NmtkError
from nmtk.model import ModelConfig, Transformer
from nmtk.vocab import BOS_ID, EOS_ID, PAD_ID


class FullPrefixCache:
    """Stands in for the KV cache: keeps the prefix and recomputes the decoder over it every step."""

    def __init__(self, memory, mask, bos: int) -> None:
        self.memory, self.mask = memory, mask
        self.prefix = torch.full((memory.size(0), 1), bos, dtype=torch.long)

    def expand(self, beams: int) -> None:  # a copy of everything per beam: what the real cache avoids
        self.reorder(torch.arange(self.prefix.size(0)).repeat_interleave(beams))

    def reorder(self, index, memory: bool = True) -> None:
        self.prefix = self.prefix.index_select(0, index)
        if memory:
            self.memory = self.memory.index_select(0, index)
            self.mask = None if self.mask is None else self.mask.index_select(0, index)


class Uncached(Transformer):
    def start_cache(self, encoded):
        return FullPrefixCache(encoded.memory, encoded.mask, bos=BOS_ID)

    def decode_step(self, tokens, cache):
        cache.prefix[:, -1] = tokens
        logits = self.project(self.decode(cache.prefix, cache.memory, cache.mask))[:, -1]
        cache.prefix = torch.cat([cache.prefix, torch.zeros_like(cache.prefix[:, :1])], dim=1)
        return logits


@pytest.fixture(scope="module")
def model(copy_models) -> Transformer:
    # Trained briefly: good enough to make search decisions non-trivial, not perfect.
    return copy_models[250]


@pytest.fixture(scope="module")
def sources() -> torch.Tensor:
    src, _ = copy_batch(torch.Generator().manual_seed(5), batch=24)
    return src


def naive_greedy(model: Transformer, src: torch.Tensor, cfg: SearchConfig) -> list[list[int]]:
    """Reference: recompute the whole prefix, take the arg-max, one sentence at a time."""
    out = []
    for row in src:
        row = row[row.ne(PAD_ID)][None]
        memory, mask, _ = model.encode(row)
        prefix, limit = [BOS_ID], int(cfg.max_len_a * (row.size(1) - 1) + cfg.max_len_b)
        for _ in range(limit):
            logits = model.project(model.decode(torch.tensor([prefix]), memory, mask))[0, -1]
            logits[[PAD_ID, BOS_ID]] = float("-inf")
            if len(prefix) == 1:
                logits[EOS_ID] = float("-inf")  # never an empty translation
            token = int(logits.argmax())
            if token == EOS_ID:
                break
            prefix.append(token)
        out.append(prefix[1:])
    return out


def test_beam_1_is_greedy(model, sources) -> None:
    cfg = SearchConfig(beam=1, length_penalty=0.6)
    got = [h[0].tokens for h in search(model, sources, cfg)]
    assert got == naive_greedy(model, sources, cfg)


@pytest.mark.parametrize("beam", [1, 4])
def test_batch_equals_each_sentence_alone(model, sources, beam: int) -> None:
    cfg = SearchConfig(beam=beam, nbest=min(beam, 2))
    batched = search(model, sources, cfg)
    for i, row in enumerate(sources):
        alone = search(model, row[row.ne(PAD_ID)][None], cfg)[0]
        assert [h.tokens for h in alone] == [h.tokens for h in batched[i]]
        assert [h.score for h in alone] == pytest.approx([h.score for h in batched[i]], abs=1e-4)


@pytest.mark.parametrize("beam", [1, 4])
def test_cache_equals_recomputing_the_prefix(model, sources, beam: int) -> None:
    uncached = Uncached(model.cfg).eval()
    uncached.load_state_dict(model.state_dict())
    cfg = SearchConfig(beam=beam, nbest=beam)
    fast, slow = search(model, sources, cfg), search(uncached, sources, cfg)
    for a, b in zip(fast, slow, strict=True):
        assert [h.tokens for h in a] == [h.tokens for h in b]
        assert [h.score for h in a] == pytest.approx([h.score for h in b], abs=1e-4)


def sequence_score(model: Transformer, src: torch.Tensor, tokens: list[int], alpha: float) -> float:
    """Length-normalised log-probability of a given output, by a full forward pass."""
    tgt = torch.tensor([[BOS_ID, *tokens, EOS_ID]])
    lprobs = torch.log_softmax(model(src[src.ne(PAD_ID)][None], tgt[:, :-1]), dim=-1)[0]
    raw = lprobs.gather(1, tgt[0, 1:, None]).sum().item()
    return raw / length_penalty(len(tokens) + 1, alpha)


def test_scores_are_normalised_log_probabilities_and_beam_beats_greedy(model, sources) -> None:
    greedy = search(model, sources, SearchConfig(beam=1))
    beam = search(model, sources, SearchConfig(beam=5))
    for i, row in enumerate(sources):
        assert beam[i][0].score == pytest.approx(sequence_score(model, row, beam[i][0].tokens, 0.6), abs=1e-4)
        assert greedy[i][0].score == pytest.approx(sequence_score(model, row, greedy[i][0].tokens, 0.6), abs=1e-4)
        # Where both find the same tokens, their scores differ by float order alone (5 rows a step against
        # 1: 1.2e-6 on an AMD EPYC with AVX-512 BF16); 1e-4, the tolerance the scores are checked to above.
        assert beam[i][0].score >= greedy[i][0].score - 1e-4


def test_nbest_is_distinct_and_sorted(model, sources) -> None:
    for hyps in search(model, sources, SearchConfig(beam=6, nbest=4)):
        assert len(hyps) == 4
        assert len({tuple(h.tokens) for h in hyps}) == 4
        scores = [h.score for h in hyps]
        assert scores == sorted(scores, reverse=True)


def test_max_length_and_order_of_decode_ids(model) -> None:
    sources = [[5, 6, 7, 8, 9, 10, 11], [12], [13, 14, 15]]
    cfg = SearchConfig(beam=3, max_len_a=0.0, max_len_b=2, beam_tokens=16)
    hyps = decode_ids(model, sources, cfg)
    assert all(len(h[0].tokens) <= 2 for h in hyps)
    full = decode_ids(model, sources, SearchConfig(beam=3, beam_tokens=16))
    assert [h[0].tokens for h in full] == [h[0].tokens for h in decode_ids(model, sources, SearchConfig(beam=3))]


def test_sampling_is_seeded(model, sources) -> None:
    cfg = SearchConfig(beam=1)
    a = sample_search(model, sources, cfg, sampling=SamplingConfig(topk=5, temperature=1.5, seed=3))
    b = sample_search(model, sources, cfg, sampling=SamplingConfig(topk=5, temperature=1.5, seed=3))
    c = sample_search(model, sources, cfg, sampling=SamplingConfig(topp=0.9, temperature=2.0, seed=4))
    assert [h[0].tokens for h in a] == [h[0].tokens for h in b]
    assert [h[0].tokens for h in a] != [h[0].tokens for h in c]


def test_n_best_samples_are_drawn_each_alone_best_first(model, sources) -> None:
    """``--sampling --nbest 3``: three samples of each line (several back-translations of one line, as
    fairseq and CTranslate2 draw them), each a draw of its own, sorted by score; a batch holds 3 rows a line."""
    sampling = SamplingConfig(temperature=3.0, seed=5)
    cfg = SearchConfig(beam=1, nbest=3, sampling=sampling)
    drawn = sample_search(model, sources, cfg, sampling=sampling)
    assert len(drawn) == sources.size(0) and all(len(h) == 3 for h in drawn)
    assert all([x.score for x in h] == sorted((x.score for x in h), reverse=True) for h in drawn)
    assert any(len({tuple(x.tokens) for x in h}) > 1 for h in drawn)  # not one draw thrice
    again = sample_search(model, sources, cfg, sampling=sampling)
    assert [[x.tokens for x in h] for h in drawn] == [[x.tokens for x in h] for h in again]
    assert cfg.rows == 3 and SearchConfig(beam=4, nbest=2).rows == 4


@pytest.mark.parametrize("bad", [{"topp": 0.0}, {"topp": 1.5}, {"topk": -1}, {"temperature": -0.5}])
def test_a_sampling_setting_that_keeps_no_token_is_refused(bad: dict) -> None:
    # top-p 0 kept no token: torch.multinomial failed on an all -inf row in the middle of the input
    with pytest.raises(NmtkError, match="--top|--temperature"):
        SamplingConfig(**bad)


# ------------------------------------------------------------------ exact values with a fake model

A, B = 4, 5  # two ordinary tokens after the special symbols
#: Next-token probabilities by prefix (after <s>); b b b... goes on with 0.5 / 0.5; anything else ends.
TABLE = {
    (): {A: 0.6, B: 0.4},
    (A,): {EOS_ID: 0.5, A: 0.25, B: 0.25},
    (B,): {EOS_ID: 0.2, B: 0.8},
    (B, B): {EOS_ID: 0.8, B: 0.2},
}
# The complete hypotheses and their log-probabilities (|Y| counts </s>):
#   a </s>      log 0.3   = -1.2040  |Y| 2        b b </s>    log 0.256 = -1.3626  |Y| 3
#   a a </s>    log 0.15  = -1.8971  |Y| 3        b </s>      log 0.08  = -2.5257  |Y| 2
#   b^n </s>    log(0.064 · 0.5^(n-2)) for n ≥ 3, |Y| n + 1


class PrefixCache:
    def __init__(self, rows: int) -> None:
        self.prefix = torch.empty((rows, 0), dtype=torch.long)

    def expand(self, beams: int) -> None:
        self.reorder(torch.arange(self.prefix.size(0)).repeat_interleave(beams))

    def reorder(self, index: torch.Tensor, memory: bool = True) -> None:
        self.prefix = self.prefix.index_select(0, index)


class TableModel(torch.nn.Module):
    """The decoding contract over TABLE: scores are exact log-probabilities, whatever the source."""

    def __init__(self) -> None:
        super().__init__()
        self.cfg = ModelConfig(src_vocab=6, tgt_vocab=6, d_model=4, heads=1, max_positions=64)
        self.anchor = torch.nn.Parameter(torch.zeros(1))  # decode_ids asks the device of a parameter
        self.steps = 0

    def encode(self, src: torch.Tensor) -> torch.Tensor:
        return src

    def start_cache(self, encoded: torch.Tensor) -> PrefixCache:
        return PrefixCache(encoded.size(0))

    def decode_step(self, tokens: torch.Tensor, cache: PrefixCache) -> torch.Tensor:
        self.steps += 1
        cache.prefix = torch.cat([cache.prefix, tokens[:, None]], dim=1)
        scores = torch.full((tokens.size(0), 6), float("-inf"))
        for row, prefix in enumerate(cache.prefix.tolist()):
            prefix = tuple(prefix[1:])
            rule = TABLE.get(prefix, {B: 0.5, EOS_ID: 0.5} if len(prefix) > 2 and set(prefix) == {B} else {EOS_ID: 1.0})
            for token, p in rule.items():
                scores[row, token] = math.log(p)
        return scores


SRC = torch.tensor([[A, A, A, A, A, EOS_ID]])  # |x| = 5: at most 5 + 50 output tokens by default


def test_gnmt_length_penalty_scores_and_ranking_are_exact() -> None:
    plain = search(TableModel(), SRC, SearchConfig(beam=2, nbest=2, length_penalty=0.0))[0]
    assert [h.tokens for h in plain] == [[A], [B, B]]
    assert [h.score for h in plain] == pytest.approx([math.log(0.3), math.log(0.256)], abs=1e-6)
    # α = 1 divides by (5 + |Y|) / 6: 7/6 for "a </s>", 8/6 for "b b </s>", which now ranks first.
    gnmt = search(TableModel(), SRC, SearchConfig(beam=2, nbest=2, length_penalty=1.0))[0]
    assert [h.tokens for h in gnmt] == [[B, B], [A]]
    assert [h.score for h in gnmt] == pytest.approx([math.log(0.256) / (8 / 6), math.log(0.3) / (7 / 6)], abs=1e-6)


class EagerToEnd(TableModel):
    """Ends at once with probability 0.9; after "a", always."""

    def decode_step(self, tokens: torch.Tensor, cache: PrefixCache) -> torch.Tensor:
        cache.prefix = torch.cat([cache.prefix, tokens[:, None]], dim=1)
        scores = torch.full((tokens.size(0), 6), float("-inf"))
        first = cache.prefix.size(1) == 1
        scores[:, EOS_ID] = math.log(0.9) if first else 0.0
        if first:
            scores[:, A] = math.log(0.1)
        return scores


@pytest.mark.parametrize("beam", [1, 3])
def test_a_sentence_never_translates_to_nothing(beam: int) -> None:
    """The empty hypothesis (log 0.9) would beat "a" (log 0.1) in every search: EOS is barred as the
    first token, as fairseq's min_len 1 and CTranslate2's min_decoding_length 1 bar it."""
    best = search(EagerToEnd(), SRC, SearchConfig(beam=beam, length_penalty=0.6))[0][0]
    assert best.tokens == [A]
    assert best.score == pytest.approx(math.log(0.1) / length_penalty(2, 0.6), abs=1e-6)
    sampled = sample_search(EagerToEnd(), SRC, SearchConfig(beam=1), sampling=SamplingConfig(seed=3))
    assert sampled[0][0].tokens == [A]


def test_search_stops_exactly_when_no_live_beam_can_win() -> None:
    """α = 0: after step 2 "a </s>" (-1.204) is finished and "b b" (-1.139) still live, so step 3 runs;
    after it the best live beam ("b b b", -2.749) can only fall further, so the search stops."""
    model = TableModel()
    best = search(model, SRC, SearchConfig(beam=2, length_penalty=0.0))[0][0]
    assert (best.tokens, model.steps) == ([A], 3)
    # α = 1: a live beam's best reachable score is its log-probability / lp(limit + 1), lp(56) = 61/6.
    # The best finished is "b b </s>", -1.3626 / (8/6) = -1.0219. After step s ≥ 4 the live beam is
    # b^s, log-probability -2.7489 - 0.6931 (s - 3): its bound is -1.0204 at s = 14, -1.0886 at 15.
    model = TableModel()
    best = search(model, SRC, SearchConfig(beam=2, length_penalty=1.0))[0][0]
    assert (best.tokens, model.steps) == ([B, B], 15)


def test_the_power_form_divides_by_the_length_and_stops_once_the_beam_has_finished() -> None:
    """``length_penalty_form = "power"`` (CTranslate2's, fairseq's search), beam 2, α = 1: step 2 finishes
    "a </s>"; step 3 finishes "b b </s>" and "a a </s>" (or "a b </s>"), and with two finished the search
    stops, where GNMT's rule above ran 15 steps. Ranked by log P / |Y|: "b b" -1.3626/3, "a" -1.2040/2."""
    model = TableModel()
    power = search(model, SRC, SearchConfig(beam=2, nbest=2, length_penalty=1.0, length_penalty_form="power"))[0]
    assert [h.tokens for h in power] == [[B, B], [A]] and model.steps == 3
    assert [h.score for h in power] == pytest.approx([math.log(0.256) / 3, math.log(0.3) / 2], abs=1e-6)
    assert length_penalty(3.0, 1.0, "power") == 3.0 and length_penalty(3.0, 1.0) == pytest.approx(8 / 6)
    # α = 0: both forms are the raw log-probability and one stopping rule
    model = TableModel()
    best = search(model, SRC, SearchConfig(beam=2, length_penalty=0.0, length_penalty_form="power"))[0][0]
    assert (best.tokens, model.steps) == ([A], 3)
    greedy = search(TableModel(), SRC, SearchConfig(beam=1, length_penalty=1.0, length_penalty_form="power"))[0][0]
    assert (greedy.tokens, greedy.score) == ([A], pytest.approx(math.log(0.3) / 2, abs=1e-6))


def test_long_sources_are_cut_at_the_strongest_boundary_that_fits() -> None:
    from nmtk.decode.long_input import Segments, boundary_strengths, split_ids

    pieces = ["<pad>", "<unk>", "<s>", "</s>", "▁word", "▁.", "▁,", "##!", "ing"]
    strength = boundary_strengths(pieces)
    assert strength.tolist() == [0, 0, 0, 0, 0, 2, 1, 2, 0]
    w, dot, comma = 4, 5, 6
    ids = [w, w, comma, w, dot, w, w, comma, w, w, w, w]
    assert split_ids(ids, 6, strength) == [[w, w, comma, w, dot], [w, w, comma], [w, w, w, w]]
    assert split_ids([w] * 7, 3, strength) == [[w] * 3, [w] * 3, [w]]  # no punctuation: cut at the limit
    segments = Segments.of([[w, w], ids], 6, strength)
    assert segments.count == [1, 3] and len(segments.pieces) == 4
    hyps = [[Hypothesis([9], -1.0)], [Hypothesis([1, 2], -2.0)], [Hypothesis([3], -4.0)], [Hypothesis([4], -3.0)]]
    joined = segments.join(hyps)
    assert joined[0] == hyps[0] and [h.tokens for h in joined[1]] == [[1, 2, 3, 4]]
    assert joined[1][0].score == pytest.approx(-3.0)
    assert np.asarray(strength).dtype == np.int8
    tag = 8  # a multilingual source's tag: every piece begins with it, and the rest is cut to fit beside it
    tagged = Segments.of([[tag, w, w], [tag, *ids]], 7, strength, head=[tag])
    assert tagged.count == [1, 3] and all(p[0] == tag and p.count(tag) == 1 for p in tagged.pieces)
    assert [p[1:] for p in tagged.pieces[1:]] == split_ids(ids, 6, strength)


def test_a_line_of_several_sentences_is_cut_into_them_and_nothing_else_is() -> None:
    """A sentence ends at ``. ! ?`` standing alone (Moses splits it off: ``street .``; it keeps ``Mr.``,
    ``e.g.``, ``3.5`` whole), closing quotes and brackets after it, where a capital or a digit begins
    the next word; never inside a hint, nor before a number inside brackets closed later ("(see Fig. 3)").
    Such cuts are not cuts for length (no warning)."""
    from nmtk.decode.long_input import (
        CLOSES,
        ENDS,
        NUMBERS,
        OPENS,
        TRAILS,
        WORDS,
        Segments,
        boundary_strengths,
        bracket_steps,
        sentence_kinds,
        sentences_of,
    )
    from nmtk.text.subword import word_starts

    pieces = ["<pad>", "<unk>", "<s>", "</s>", "▁a", "▁.", "▁Two", "▁!", '▁"', "▁M", "r", ".", "▁3", "5", "▁two",
              "▁?", "▁__source__", "▁__target__", "▁__done__", "▁)", "▁…", "▁("]
    kinds = sentence_kinds(pieces, word_starts(pieces))
    assert kinds[[4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 19]].tolist() == [
        WORDS, ENDS, OPENS, ENDS, CLOSES, OPENS, 0, TRAILS, NUMBERS, 0, WORDS, ENDS, CLOSES]
    a, dot, two, bang, quote, m, r, glued, three, five, low, ask, src, tgt, done, shut = range(4, 20)
    assert sentences_of([a, a, dot, two, a, bang, two, a], kinds) == [[a, a, dot], [two, a, bang], [two, a]]
    assert sentences_of([three, dot, two, a, a], kinds) == [[three, dot, two, a, a]]  # "1. Buy milk": one word
    assert sentences_of([a, a, dot, glued, glued, two, a], kinds) == [[a, a, dot, glued, glued], [two, a]]  # "..."
    assert sentences_of([a, m, r, glued, two, a, three, glued, five, a], kinds) == [[a, m, r, glued, two, a, three,
                                                                                    glued, five, a]]
    assert sentences_of([a, dot, low, a, dot], kinds) == [[a, dot, low, a, dot]]  # no capital after: one sentence
    assert sentences_of([a, a, ask, quote, shut, two, a], kinds) == [[a, a, ask, quote, shut], [two, a]]
    hinted = [a, src, a, dot, two, tgt, two, done, dot, three]  # a hint holding ". Two": not cut inside it
    assert sentences_of(hinted, kinds, (src, tgt, done)) == [hinted[:9], [three]]
    brackets, opened = bracket_steps(pieces), 21
    see = [a, a, opened, a, a, dot, three, shut, a, a, dot]  # "a runs (see Fig. 3) in the park."
    assert sentences_of(see, kinds, brackets=brackets) == [see] and len(sentences_of(see, kinds)) == 2
    inner = [opened, two, a, dot, two, a, dot, shut, two, a]  # "(A cat sleeps. A bird sings.) A man walks."
    assert sentences_of(inner, kinds, brackets=brackets) == [inner[:4], inner[4:8], inner[8:]]
    smiley = [opened, a, a, dot, three, a, a]  # ":( a b. 3 c d": a bracket never closed holds nothing
    assert sentences_of(smiley, kinds, brackets=brackets) == [smiley[:4], smiley[4:]]
    strength = boundary_strengths(pieces)
    lines = [[a, a, dot, two, a], [a, a, dot, two, a], [a] * 9]
    segments = Segments.of(lines, 100, strength, longest=4, kinds=kinds, first=[1, 0, 1])
    assert segments.count == [2, 1, 3] and segments.lengthy == [False, False, True]
    assert segments.pieces[:3] == [[a, a, dot], [two, a], [a, a, dot, two, a]]
    three_sentences = [a, a, dot, two, a, bang, two, a]
    assert Segments.of([three_sentences], 100, strength, kinds=kinds, first=[2]).pieces == [three_sentences[:6],
                                                                                          [two, a]]


def test_a_hinted_line_is_cut_and_counted_by_its_own_words_and_never_inside_a_hint() -> None:
    """A line's hints (``__source__ w __target__ W __done__``) count nothing against the training data's
    lengths, and no piece ends inside one, even where a hint holds the only punctuation or the limit falls."""
    from nmtk.decode.long_input import Segments, boundary_strengths, split_ids

    pieces = ["<pad>", "<unk>", "<s>", "</s>", "▁word", "▁.", "▁,", "▁__source__", "▁__target__", "▁__done__"]
    strength = boundary_strengths(pieces)
    w, comma, src, tgt, done = 4, 6, 7, 8, 9
    markers = (src, tgt, done)
    hint = [src, w, tgt, w, comma, w, done]  # a target term with a comma in it
    line = [w, w, *hint, w, w, w]  # 5 words of its own, 12 ids
    assert Segments.of([line], 100, strength, longest=3).count == [5]  # 12 ids > 2 x 3: cut to pieces of 3
    assert Segments.of([line], 100, strength, longest=3, markers=markers).count == [1]  # 5 words <= 2 x 3
    for limit in (7, 8, 9, 10):  # room for the hint: no piece ends inside it (ids 2-8)
        cut = split_ids(line, limit, strength, markers)
        ends = np.cumsum([len(p) for p in cut])[:-1]
        assert sum(cut, []) == line and max(map(len, cut)) <= limit and not any(2 < e < 9 for e in ends), cut
    assert split_ids(line, 8, strength, markers) == [[w, w], [*hint, w], [w, w]]
    assert split_ids(line, 8, strength) == [[w, w, src, w, tgt, w, comma], [w, done, w, w, w]]  # cut at the comma


def test_a_source_longer_than_the_model_is_translated_in_pieces(model) -> None:
    from nmtk.decode.long_input import Segments

    limit = model.cfg.max_positions - 1
    long = list(range(4, 30)) * (3 * limit // 26)
    strength = np.zeros(model.cfg.src_vocab, dtype=np.int8)
    segments = Segments.of([[5, 6, 7], long], limit, strength)
    hyps, pieces = segments.decode(lambda p: decode_ids(model, p, SearchConfig(beam=1))), segments.count
    assert pieces == [1, 3] and hyps[0][0].tokens and len(hyps[1]) == 1 and len(hyps[1][0].tokens) >= 3


@pytest.mark.parametrize("beam", [1, 2])
def test_the_end_forced_at_the_length_limit_costs_its_log_probability(beam: int) -> None:
    """With at most one token, "a" and "b" must end at once: log p(a) + log p(</s> | a) = log 0.3, and
    log 0.4 + log 0.2 = log 0.08 (a free </s> would give log 0.6 and log 0.4)."""
    cfg = SearchConfig(beam=beam, nbest=beam, length_penalty=0.0, max_len_a=0.0, max_len_b=1)
    hyps = search(TableModel(), SRC, cfg)[0]
    assert [h.tokens for h in hyps] == [[A], [B]][:beam]
    assert [h.score for h in hyps] == pytest.approx([math.log(0.3), math.log(0.08)][:beam], abs=1e-6)


def test_padding_lengths_to_a_multiple_of_8_changes_no_output(model) -> None:
    """What a GPU does (`pad_multiple`): the extra positions are masked, so the same hypotheses come out
    (scores to float rounding), for the beam and for greedy search."""
    sources = [[5, 6, 7, 8, 9, 10, 11], [12], [13, 14, 15], [16, 17, 18, 19, 20, 21, 22, 23, 24]]
    for beam in (1, 4):
        plain = decode_ids(model, sources, SearchConfig(beam=beam, nbest=min(beam, 2)), pad_to=1)
        padded = decode_ids(model, sources, SearchConfig(beam=beam, nbest=min(beam, 2)), pad_to=8)
        assert [[h.tokens for h in hs] for hs in plain] == [[h.tokens for h in hs] for hs in padded]
        for a, b in zip(plain, padded, strict=True):
            assert all(abs(x.score - y.score) < 1e-4 for x, y in zip(a, b, strict=True))


def test_a_batch_that_runs_out_of_memory_is_searched_in_halves(model, sources, capsys, monkeypatch) -> None:
    """A GPU out of memory (validation beside training's reserved memory) halves the batch, down to one
    sentence, instead of failing the rank; the results are those of an unhindered search, in order."""
    cfg = SearchConfig(beam=3, nbest=2)
    calls: list[int] = []

    def small_only(model_, src, cfg_, controls, generator=None):
        calls.append(src.size(0))
        if src.size(0) > 3:
            raise torch.OutOfMemoryError("CUDA out of memory (simulated)")
        return search(model_, src, cfg_, controls)

    monkeypatch.setattr(batches, "search", small_only)
    halved = decode_ids(model, [row[row.ne(PAD_ID)][:-1].tolist() for row in sources], cfg)
    monkeypatch.setattr(batches, "search", search)
    whole = decode_ids(model, [row[row.ne(PAD_ID)][:-1].tolist() for row in sources], cfg)
    assert [[h.tokens for h in x] for x in halved] == [[h.tokens for h in x] for x in whole]
    assert max(calls) > 3 and min(calls) <= 3
    assert capsys.readouterr().err.count("ran out of cpu memory") == 1

    def never(model_, src, cfg_, controls, generator=None):
        raise torch.OutOfMemoryError("CUDA out of memory (simulated)")

    monkeypatch.setattr(batches, "search", never)
    with pytest.raises(torch.OutOfMemoryError):
        decode_ids(model, [[5, 6, 7]], cfg)


@pytest.mark.parametrize("cfg", [SearchConfig(beam=4, nbest=2, beam_tokens=12 * 4),
                                 SearchConfig(beam=1, beam_tokens=12)])
def test_searches_side_by_side_give_what_one_search_gives(model, sources, cfg, monkeypatch) -> None:
    """Two one-thread searches taking the batches (`side_by_side`) give every line's hypotheses, scores
    and all, in its place, as one search on one thread does; each search thread runs on one torch
    thread, and the caller's thread count is its own again after. (Against one search of 2 threads a
    score may differ in its last bits: on an AMD EPYC Zen 4 torch's 2-thread ops sum in another order.)"""
    lines = [row[row.ne(PAD_ID)][:-1].tolist() for row in sources]
    seen: list[tuple[str, int]] = []

    def recorded(*args, **kwargs):
        seen.append((threading.current_thread().name, torch.get_num_threads()))
        return search(*args, **kwargs)

    monkeypatch.setattr(batches, "search", recorded)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        alone = decode_ids(model, lines, cfg)
        assert {name for name, _ in seen} == {threading.current_thread().name}
        seen.clear()
        torch.set_num_threads(2)
        together = decode_ids(model, lines, cfg, searches=2)
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
    assert len(seen) >= 4 and {threads for _, threads in seen} == {1}
    assert {name for name, _ in seen} <= {"nmtk-search-0", "nmtk-search-1"}
    assert [[(h.tokens, h.score) for h in x] for x in together] == [[(h.tokens, h.score) for h in x] for x in alone]


def test_a_failing_batch_among_searches_side_by_side_fails_the_call_and_no_new_batch_starts(
        model, sources, monkeypatch) -> None:
    lines = [row[row.ne(PAD_ID)][:-1].tolist() for row in sources]
    calls: list[int] = []

    def third_fails(*args, **kwargs):
        calls.append(1)
        if len(calls) == 3:
            raise ValueError("a broken batch")
        return search(*args, **kwargs)

    monkeypatch.setattr(batches, "search", third_fails)
    with pytest.raises(ValueError, match="a broken batch"):
        decode_ids(model, lines, SearchConfig(beam=2, beam_tokens=4 * 2), searches=2)
    time.sleep(0.5)  # the other thread finishes the batch in its hands, and takes no other
    assert 3 <= len(calls) <= 4 < len(lines)


def test_ctrl_c_ends_the_wait_for_searches_side_by_side_at_once(model, sources, monkeypatch) -> None:
    """A SIGINT (whichever thread the kernel hands it to) ends the caller's wait within a poll, while both
    search threads are still busy; they take no new batch after it."""
    lines = [row[row.ne(PAD_ID)][:-1].tolist() for row in sources]
    release, calls = threading.Event(), []

    def stuck(*args, **kwargs):
        calls.append(1)
        release.wait(20)
        return search(*args, **kwargs)

    monkeypatch.setattr(batches, "search", stuck)
    threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT)).start()
    start = time.monotonic()
    try:
        with pytest.raises(KeyboardInterrupt):
            decode_ids(model, lines, SearchConfig(beam=2, beam_tokens=4 * 2), searches=2)
        assert time.monotonic() - start < 5 and len(calls) == 2
    finally:
        release.set()
    time.sleep(0.5)
    assert len(calls) == 2


@pytest.mark.parametrize("cfg", [SearchConfig(beam=4, max_len_b=8), SearchConfig(beam=1, max_len_b=8),
                                 SearchConfig(beam=1, max_len_b=8, sampling=SamplingConfig(topk=5))],
                         ids=["beam", "greedy", "sampling"])
def test_every_search_runs_without_autograd(model, sources, cfg, monkeypatch) -> None:
    """Beam search recorded each step's graph until issue 64's review: twice the memory of decoding, and
    none of the CPU's decoding paths. Every search the chooser picks now runs with no graph at all."""
    seen = []
    decode_step = model.decode_step

    def watched(tokens, cache):
        seen.append(torch.is_inference_mode_enabled() and not torch.is_grad_enabled())
        return decode_step(tokens, cache)

    monkeypatch.setattr(model, "decode_step", watched)
    with torch.enable_grad():
        hyps = search(model, sources[:4], cfg, generator=torch.Generator().manual_seed(1))
    assert len(hyps) == 4 and seen and all(seen)


@pytest.mark.parametrize("cfg", [SearchConfig(beam=1), SearchConfig(beam=4, nbest=2),
                                 SearchConfig(beam=1, sampling=SamplingConfig(seed=3))],
                         ids=["greedy", "beam", "sample"])
def test_a_shortlist_covering_the_output_changes_no_search(model, sources, cfg) -> None:
    """Restricted to candidates (`restrict_output`), a search works on their columns and maps them back:
    with the whole vocabulary as candidates its hypotheses and scores are the unrestricted ones exactly;
    greedy search, with only the pieces its translations use (and the specials), the same tokens. (Beam
    search and sampling renormalise over the candidates: fewer may rank or draw otherwise.)"""
    plain = search(model, sources, cfg)
    used = sorted({t for hyps in plain for h in hyps for t in h.tokens} | set(range(4)))
    greedy = cfg.beam == 1 and cfg.sampling is None
    candidates = [torch.arange(model.cfg.tgt_vocab)] + ([torch.tensor(used)] if greedy else [])
    for ids in candidates:
        model.restrict_output(ids)
        try:
            listed = search(model, sources, cfg)
        finally:
            model.restrict_output(None)
        assert [[h.tokens for h in hyps] for hyps in listed] == [[h.tokens for h in hyps] for hyps in plain]
        if len(ids) == model.cfg.tgt_vocab:
            assert [h.score for hyps in listed for h in hyps] == pytest.approx(
                [h.score for hyps in plain for h in hyps], abs=1e-5)


@pytest.mark.parametrize("width", [5, BLOCK, 3 * BLOCK + 17, 8000])
def test_block_search_finds_the_best_extensions_of_all(width: int) -> None:
    """`_in_blocks` (block maxima, then the best blocks' columns) equals a `topk` over every beam's
    score plus every column's log-probability: widths below, at, and off a multiple of the block, with
    columns at -inf (forbidden tokens) and a dead beam (score -inf); `_by_topk`, the GPU's path, too."""
    generator = torch.Generator().manual_seed(width)
    b, k = 6, 4
    lprobs = torch.log_softmax(3 * torch.randn(b * k, width, generator=generator), dim=-1)
    lprobs[:, :2] = float("-inf")
    scores = -5 * torch.rand(b, k, generator=generator)
    scores[0, 3] = float("-inf")
    count = min(2 * k, k * width - k)
    got_scores, origin, column = _in_blocks(scores, lprobs, count)
    sums = (scores[..., None] + lprobs.view(b, k, width)).view(b, k * width)
    want_scores, index = sums.topk(count, dim=1)
    torch.testing.assert_close(got_scores, want_scores, atol=0, rtol=0)
    assert torch.equal(origin, index // width) and torch.equal(column, index % width)
    for got, want in zip(_by_topk(scores, lprobs, count), (got_scores, origin, column), strict=True):
        assert torch.equal(got, want)  # the GPU's path (one topk) finds the same


@pytest.mark.parametrize("cfg", [SearchConfig(beam=4, nbest=2, length_penalty=0.6),
                                 SearchConfig(beam=3, nbest=3, length_penalty=1.0, length_penalty_form="power"),
                                 SearchConfig(beam=4, max_len_a=0.0, max_len_b=3)])  # every line at its limit
def test_the_scripted_beam_step_is_the_python_one(model: Transformer, sources: torch.Tensor, cfg: SearchConfig,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """`beam._advance` as one TorchScript call on a CPU gives the hypotheses and scores of its Python form,
    to the bit, watched attention included (alignments)."""
    from nmtk.decode.search import beam as beam_module

    assert beam_module._scripted() is not None and beam_module._advance_on(sources.device) is beam_module._scripted()
    layer = model.decoder[-1].cross_attn

    def run() -> list[list[Hypothesis]]:
        with model.watch_cross_attention(-1) as watch:
            return search(model, sources, cfg) + search(model, sources, cfg, watch=watch)

    scripted = run()
    monkeypatch.setattr(beam_module, "_advance_on", lambda device: beam_module._advance)
    plain = run()
    assert layer.keep_weights == 0
    for ours, theirs in zip(scripted, plain, strict=True):
        assert [(h.tokens, h.score) for h in ours] == [(h.tokens, h.score) for h in theirs]
        for a, b in zip(ours, theirs, strict=True):
            assert (a.attention is None) == (b.attention is None)
            assert a.attention is None or np.array_equal(a.attention, b.attention)
