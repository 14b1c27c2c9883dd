"""The training benchmark: the NumPy MLP trainer learns, is timed, and engines that cannot train are skipped."""

from __future__ import annotations

import math

import numpy as np
import pytest

from benchmarks.training import _NumpyMlp, run_training, synthetic_digits


def test_numpy_trainer_reaches_the_target_and_reports_times():
    result = run_training("numpy", batch=64, threads=1, epochs=2, samples=1024)
    assert result.status == "ok"
    assert result.final_accuracy >= 0.9
    assert result.epochs_to_accuracy >= 1 and result.seconds_to_accuracy > 0
    assert 0 < result.ms_per_step < result.seconds_per_epoch * 1e3
    assert "ms/step" in result.describe()


def test_an_unreachable_target_is_reported_as_never_reached():
    result = run_training("numpy", epochs=1, samples=512, target_accuracy=1.01)
    assert math.isnan(result.seconds_to_accuracy) and result.epochs_to_accuracy == 0


def test_backprop_gradient_matches_finite_differences():
    x, y = synthetic_digits(8, seed=1)
    stepped = _NumpyMlp(seed=0, lr=1.0, momentum=0.0)  # one plain SGD step: new = old - gradient
    before = stepped.weights[2].copy()
    stepped.step(x, y)
    gradient = before - stepped.weights[2]

    probe = _NumpyMlp(seed=0)  # same seed: the weights before the step

    def loss(weights: np.ndarray) -> float:
        probe.weights[2] = weights
        logits = probe.logits(x)[0].astype(np.float64)
        logits -= logits.max(axis=1, keepdims=True)
        log_probs = logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))
        return float(-log_probs[np.arange(len(y)), y].mean())

    for i, j in ((3, 4), (100, 0), (7, 9)):
        plus, minus = before.copy(), before.copy()
        plus[i, j] += 1e-2
        minus[i, j] -= 1e-2
        numeric = (loss(plus) - loss(minus)) / 2e-2
        assert gradient[i, j] == pytest.approx(numeric, rel=0.05, abs=1e-4)


@pytest.mark.parametrize("trainer", ["appopt-runtime", "onnxruntime"])
def test_inference_only_engines_are_skipped(trainer):
    result = run_training(trainer)
    assert result.status == "skipped"
    assert ("inference only" if trainer == "onnxruntime" else "training_bench") in result.reason


def test_unknown_trainer_is_an_error():
    with pytest.raises(ValueError, match="unknown trainer"):
        run_training("jax")
