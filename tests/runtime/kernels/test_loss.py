"""Loss kernels: the ONNX backend cases, and onnxruntime over reductions, class weights and ignore_index."""

from __future__ import annotations

import numpy as np
import pytest

from tests.runtime.kernels.backend_cases import backend_cases_test
from tests.runtime.kernels.ort_compare import assert_matches_ort, rand

test_backend_cases_pass = backend_cases_test(["SoftmaxCrossEntropyLoss", "NegativeLogLikelihoodLoss"])


def loss_inputs(extra_dims: tuple[int, ...], weighted: bool, ignore: int | None) -> dict:
    rng = np.random.default_rng(len(extra_dims) + 10 * weighted)
    n, c = 4, 5
    labels = rng.integers(0, c, (n, *extra_dims)).astype(np.int64)
    if ignore is not None:
        labels.reshape(-1)[::3] = ignore
    return {
        "x": rand(rng, n, c, *extra_dims),
        "labels": labels,
        "w": rng.random(c).astype(np.float32) if weighted else None,
    }


CASES = [((), False, None), ((3,), True, None), ((2, 3), False, 1), ((2, 3), True, -1), ((), True, 2)]


@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
@pytest.mark.parametrize(("extra_dims", "weighted", "ignore"), CASES)
def test_softmax_cross_entropy_matches_onnxruntime(extra_dims, weighted, ignore, reduction) -> None:
    inputs = loss_inputs(extra_dims, weighted, ignore)
    attrs = {"reduction": reduction} | ({} if ignore is None else {"ignore_index": ignore})
    assert_matches_ort("SoftmaxCrossEntropyLoss", inputs, ("loss", "log_prob"), opset=13, **attrs)


@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
@pytest.mark.parametrize(("extra_dims", "weighted", "ignore"), CASES)
def test_nll_loss_matches_onnxruntime(extra_dims, weighted, ignore, reduction) -> None:
    inputs = loss_inputs(extra_dims, weighted, ignore)
    attrs = {"reduction": reduction} | ({} if ignore is None else {"ignore_index": ignore})
    assert_matches_ort("NegativeLogLikelihoodLoss", inputs, ("loss",), opset=13, **attrs)
