"""A tiny Transformer must actually learn: copying random sequences on CPU, in seconds."""

from __future__ import annotations

from helpers import copy_outcome

# Thresholds from tests/measure_spread.py copy-task: 20 trainings (5 seeds x {1, 2} threads x {fp32, bf16})
# of 800 updates on an AMD EPYC with AVX-512 BF16, 2026-11-25. Worst of 20 (median): held-out loss 0.0222
# (0.0029), token accuracy 0.9954 (1.0), sequences copied whole 96/100 (100). Margins: loss x2.3,
# accuracy 0.015, sequences 6. After 100 updates the best of 20 was loss 0.977, accuracy 0.587, 16
# sequences: every threshold fails a model that did not learn (the second test checks that).
MAX_LOSS = 0.05
MIN_TOKEN_ACCURACY = 0.98
MIN_SEQUENCES = 90


def failed_thresholds(outcome: dict[str, float]) -> list[str]:
    checks = {"loss": outcome["loss"] < MAX_LOSS, "token_accuracy": outcome["token_accuracy"] >= MIN_TOKEN_ACCURACY,
              "sequences": outcome["sequences"] >= MIN_SEQUENCES}
    return [name for name, ok in checks.items() if not ok]


def test_tiny_model_learns_to_copy(copy_models) -> None:
    outcome = copy_outcome(copy_models[800])
    assert failed_thresholds(outcome) == [], outcome


def test_each_threshold_fails_a_model_that_did_not_learn(copy_models) -> None:
    outcome = copy_outcome(copy_models[100])
    assert failed_thresholds(outcome) == ["loss", "token_accuracy", "sequences"], outcome
