"""Per-target output vocabularies (`nmtk.model.languages`): each target language's softmax over its own
pieces, in training's loss head, in teacher-forced logits and in every search."""

from __future__ import annotations

import re
from functools import partial
from pathlib import Path

import pytest
import torch

from nmtk.checkpoint import Checkpoint, load_model
from nmtk.decode.search.beam import SearchConfig
from nmtk.decode.search.choose import search
from nmtk.model import ModelConfig, Transformer
from nmtk.model.languages import allowed_pieces, merge_allowed
from nmtk.train.loss import projected_label_smoothed_loss
from nmtk.vocab import PAD_ID, UNK_ID

VOCAB = 60
TAGS = (4, 5)
#: Target language 0 produces ids 7-29, language 1 ids 20-59 (20-29 shared).
PRODUCED = [torch.arange(7, 30), torch.arange(20, VOCAB)]


def model_of(languages: int = 2, seed: int = 0) -> Transformer:
    torch.manual_seed(seed)
    cfg = ModelConfig(src_vocab=VOCAB, tgt_vocab=VOCAB, d_model=32, heads=4, d_ff=64, encoder_layers=1,
                      decoder_layers=2, dropout=0.0, output_languages=languages)
    model = Transformer(cfg)
    if languages:
        model.set_output_languages(torch.tensor(TAGS), allowed_pieces(VOCAB, PRODUCED))
    return model


def sources(rows: int = 6) -> torch.Tensor:
    """Rows 0-2 tagged for language 0, 3-4 for language 1, the last untagged; padded at the end."""
    src = torch.randint(7, VOCAB, (rows, 9), generator=torch.Generator().manual_seed(1))
    src[:3, 0], src[3:5, 0] = TAGS[0], TAGS[1]
    src[1, -3:] = PAD_ID
    return src


def reference_loss(model: Transformer, src: torch.Tensor, tgt_in: torch.Tensor, target: torch.Tensor,
                   epsilon: float) -> torch.Tensor:
    """The loss from whole logits, foreign pieces at -inf, smoothing spread over each row's own pieces."""
    logits = model(src, tgt_in).float()  # masked by the model
    allowed = torch.isfinite(logits)
    lprobs = torch.log_softmax(logits, -1)
    keep = target.ne(PAD_ID)
    nll = -(lprobs.gather(-1, target[..., None])[..., 0] * keep).sum()
    smooth = -((lprobs.masked_fill(~allowed, 0).sum(-1) / allowed.sum(-1)) * keep).sum()
    return (1 - epsilon) * nll + epsilon * smooth


def test_the_loss_head_scores_each_language_over_its_own_pieces() -> None:
    """The grouped head (each language's sentences onto its columns, a few positions at a time) gives
    the loss and gradients of whole masked logits; a reference piece the language never produced is
    scored as <unk>; an untagged row is scored over every piece."""
    model = model_of()
    src = sources()
    gen = torch.Generator().manual_seed(2)
    tgt_in = torch.randint(7, VOCAB, (6, 7), generator=gen)
    target = torch.randint(20, 30, (6, 7), generator=gen)  # pieces both languages produce
    target[0, -2:] = PAD_ID
    target[5] = torch.randint(0, VOCAB - 7, (7,), generator=gen) + 7
    target[1, 0] = 45  # language 0 never produced it
    head = partial(projected_label_smoothed_loss, target=target, epsilon=0.1, pad_id=PAD_ID, chunk=5)
    loss, _ = model(src, tgt_in, head=head)
    loss.backward()
    grads = {name: p.grad.clone() for name, p in model.named_parameters()}
    model.zero_grad()
    unk_target = target.clone()
    unk_target[1, 0] = UNK_ID
    expected = reference_loss(model, src, tgt_in, unk_target, 0.1)
    expected.backward()
    assert loss.item() == pytest.approx(expected.item(), rel=1e-5)
    for name, p in model.named_parameters():
        torch.testing.assert_close(grads[name], p.grad, atol=1e-5, rtol=1e-4, msg=name)


def test_decoding_steps_mask_foreign_pieces_as_the_teacher_forced_logits_do() -> None:
    model = model_of().eval()
    src = sources()
    tgt_in = torch.randint(7, VOCAB, (6, 5), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        whole = model(src, tgt_in)
        cache = model.start_cache(model.encode(src))
        steps = torch.stack([model.decode_step(tgt_in[:, t], cache) for t in range(tgt_in.size(1))], dim=1)
    torch.testing.assert_close(steps, whole, atol=1e-5, rtol=1e-5)
    allowed = allowed_pieces(VOCAB, PRODUCED)
    for row, language in enumerate([0, 0, 0, 1, 1, None]):
        own = allowed[language] if language is not None else torch.ones(VOCAB, dtype=torch.bool)
        assert torch.isfinite(whole[row, 0]).tolist() == own.tolist()


@pytest.mark.parametrize("beam", [1, 4])
def test_a_batch_of_mixed_targets_is_searched_as_each_line_alone(beam: int) -> None:
    """Rows leave the batch as they finish and beams are reordered: each keeps its own pieces."""
    model = model_of(seed=4).eval()
    src = sources()
    cfg = SearchConfig(beam=beam, max_len_a=0.0, max_len_b=12)
    together = search(model, src, cfg)
    allowed = allowed_pieces(VOCAB, PRODUCED)
    for row, language in enumerate([0, 0, 0, 1, 1]):
        alone = search(model, src[row : row + 1], cfg)
        assert together[row][0].tokens == alone[0][0].tokens
        assert all(allowed[language, t] for t in together[row][0].tokens), together[row][0].tokens


def test_checkpoints_carry_the_languages_and_a_model_without_them_saves_as_before(tmp_path: Path) -> None:
    model = model_of()
    path = tmp_path / "checkpoint.pt"
    Checkpoint(model=model.state_dict(), model_config=model.cfg.to_dict()).save(path)
    loaded = load_model(path, torch.device("cpu"))
    assert loaded.cfg.output_languages == 2
    assert torch.equal(loaded.output_allowed, model.output_allowed) and loaded.output_tags.tolist() == list(TAGS)
    plain = model_of(languages=0)
    assert "output_languages" not in plain.cfg.to_dict() and "output_allowed" not in plain.state_dict()


def test_fine_tuning_keeps_the_pieces_of_both_models_by_tag() -> None:
    """The original's rows are matched by tag, not by position: another recipe may list its targets in
    another order."""
    ours = allowed_pieces(VOCAB, [torch.tensor([7, 8]), torch.tensor([40])])
    theirs = allowed_pieces(VOCAB, [torch.tensor([41]), torch.tensor([9]), torch.tensor([50])])
    merged = merge_allowed(torch.tensor([4, 5]), ours, torch.tensor([5, 4, 6]), theirs)
    assert merged[0].nonzero().flatten().tolist()[4:] == [7, 8, 9]
    assert merged[1].nonzero().flatten().tolist()[4:] == [40, 41]


def test_per_target_needs_several_pairs(tmp_path: Path) -> None:
    from nmtk.errors import NmtkError
    from nmtk.recipe import load_recipe

    path = tmp_path / "one.toml"
    path.write_text('[data]\nsource_lang = "en"\ntarget_lang = "de"\ntrain = [{ name = "t", source = "a", '
                    'target = "b" }]\nvalid = { name = "v", source = "c", target = "d" }\n[tokenizer]\n'
                    'vocab_size = 100\n[model]\noutput_vocab = "per-target"\n')
    with pytest.raises(NmtkError, match=re.escape('model.output_vocab = "per-target" needs several target')):
        load_recipe(path)


