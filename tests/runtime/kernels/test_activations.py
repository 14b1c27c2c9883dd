"""Activation, Clip and Softmax-family kernels."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from tests.runtime.kernels.backend_cases import backend_cases_test

OPS = [
    "Relu", "LeakyRelu", "Elu", "Selu", "Celu", "PRelu", "Sigmoid", "HardSigmoid", "HardSwish", "Softplus",
    "Softsign", "Shrink", "ThresholdedRelu", "Gelu", "Mish", "Swish", "Clip", "Softmax", "LogSoftmax", "Hardmax",
]  # fmt: skip


test_backend_cases_pass = backend_cases_test(OPS)


@pytest.mark.parametrize("op", ["Sigmoid", "Softplus", "Mish", "Swish", "Elu", "Selu", "Celu", "Gelu"])
def test_extreme_inputs_stay_finite(op, make_kernel) -> None:
    x = np.array([-1e4, -90.0, 0.0, 90.0, 1e4], dtype=np.float32)
    (out,) = make_kernel(op).run(x)
    assert out.dtype == np.float32
    assert np.isfinite(out).all(), out


@settings(max_examples=30, deadline=None)
@given(x=hnp.arrays(np.float64, hnp.array_shapes(min_dims=1, max_dims=3, max_side=4), elements=st.floats(-50, 50)))
def test_softmax_rows_sum_to_one_and_log_softmax_agrees(x, make_kernel) -> None:
    (soft,) = make_kernel("Softmax", opset=13).run(x)
    (log_soft,) = make_kernel("LogSoftmax", opset=13).run(x)
    np.testing.assert_allclose(soft.sum(axis=-1), 1.0, rtol=1e-12)
    np.testing.assert_allclose(np.exp(log_soft), soft, rtol=1e-9, atol=1e-300)


def test_legacy_softmax_flattens_from_axis(make_kernel) -> None:
    x = np.random.default_rng(1).standard_normal((2, 3, 4))
    (legacy,) = make_kernel("Softmax", opset=11, axis=1).run(x)
    flat = x.reshape(2, 12)
    expected = np.exp(flat) / np.exp(flat).sum(axis=1, keepdims=True)
    np.testing.assert_allclose(legacy, expected.reshape(2, 3, 4), rtol=1e-12)
    (modern,) = make_kernel("Softmax", opset=13, axis=1).run(x)
    np.testing.assert_allclose(modern.sum(axis=1), 1.0, rtol=1e-12)
    assert not np.allclose(legacy, modern)


@pytest.mark.parametrize(("shape", "axis"), [((1, 1000, 1, 1), 1), ((2, 3, 4, 5), 2), ((2, 3, 4), -1)])
def test_legacy_softmax_in_float32_matches_the_flattened_reference(make_kernel, shape, axis) -> None:
    """float32 runs the compiled row kernel over the flattened trailing axes (an image classifier's output)."""
    x = np.random.default_rng(2).standard_normal(shape).astype(np.float32)
    (y,) = make_kernel("Softmax", opset=9, axis=axis).run(x)
    rows = int(np.prod(shape[: axis % len(shape)]))
    flat = x.astype(np.float64).reshape(rows, -1)
    expected = np.exp(flat - flat.max(axis=1, keepdims=True))
    expected /= expected.sum(axis=1, keepdims=True)
    assert y.dtype == np.float32
    np.testing.assert_allclose(y, expected.reshape(shape), rtol=1e-5, atol=1e-7)


def test_hardmax_marks_first_maximum(make_kernel) -> None:
    x = np.array([[1, 3, 3], [2, 0, 2]], dtype=np.float32)
    (out,) = make_kernel("Hardmax", opset=13).run(x)
    assert out.tolist() == [[0, 1, 0], [1, 0, 0]]


def test_clip_forms(make_kernel) -> None:
    x = np.array([-5, 0, 5, 20], dtype=np.int32)
    (out,) = make_kernel("Clip", opset=13).run(x, np.array(-1, np.int32), np.array(10, np.int32))
    assert out.dtype == np.int32 and out.tolist() == [-1, 0, 5, 10]
    (only_max,) = make_kernel("Clip", opset=13).run(x, None, np.array(1, np.int32))
    assert only_max.tolist() == [-5, 0, 1, 1]
    (inverted,) = make_kernel("Clip", opset=13).run(x, np.array(3, np.int32), np.array(2, np.int32))
    assert inverted.tolist() == [2, 2, 2, 2]  # min > max: every value becomes max
    (attrs,) = make_kernel("Clip", opset=6, min=-1.0).run(np.array([-3.0, np.nan, 1e30], dtype=np.float32))
    np.testing.assert_array_equal(attrs, np.array([-1.0, np.nan, 1e30], dtype=np.float32))


def test_prelu_legacy_slope_is_per_channel(make_kernel) -> None:
    x = -np.ones((1, 2, 2, 2), dtype=np.float32)
    slope = np.array([0.5, 2.0], dtype=np.float32)
    (legacy,) = make_kernel("PRelu", opset=6).run(x, slope)
    assert legacy[0, :, 0, 0].tolist() == [-0.5, -2.0]
    (modern,) = make_kernel("PRelu", opset=16).run(x, slope)  # NumPy broadcasting: slope runs along the last axis
    assert modern[0, 0, 0, :].tolist() == [-0.5, -2.0]


def test_gelu_exact_and_tanh_forms(make_kernel) -> None:
    x = np.linspace(-3, 3, 13)
    (exact,) = make_kernel("Gelu").run(x)
    (approx,) = make_kernel("Gelu", approximate="tanh").run(x)
    np.testing.assert_allclose(exact, [0.5 * v * (1 + math.erf(v / math.sqrt(2))) for v in x], rtol=1e-12)
    np.testing.assert_allclose(approx, exact, atol=1e-3)
    with pytest.raises(ValueError, match="approximate"):
        make_kernel("Gelu", approximate="fast")


def test_activations_keep_narrow_float_dtypes(make_kernel) -> None:
    x = np.array([-1.0, 0.5], dtype=ml_dtypes.bfloat16)
    for op in ("Relu", "LeakyRelu", "Sigmoid", "HardSwish"):
        (out,) = make_kernel(op).run(x)
        assert out.dtype == x.dtype, op


def test_relu_on_integers(make_kernel) -> None:
    (out,) = make_kernel("Relu", opset=14).run(np.array([-128, 5], dtype=np.int8))
    assert out.dtype == np.int8 and out.tolist() == [0, 5]
