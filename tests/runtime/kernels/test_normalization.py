"""Normalisation kernels: the ONNX backend cases, and onnxruntime on random shapes and attributes."""

from __future__ import annotations

import numpy as np
import pytest

from tests.runtime.kernels.backend_cases import backend_cases_test
from tests.runtime.kernels.ort_compare import assert_matches_ort, rand

OPS = [
    "BatchNormalization", "InstanceNormalization", "LayerNormalization", "GroupNormalization", "RMSNormalization",
    "LpNormalization", "MeanVarianceNormalization", "LRN",
]  # fmt: skip


test_backend_cases_pass = backend_cases_test(OPS)


@pytest.mark.parametrize("shape", [(2, 3), (2, 3, 5), (2, 3, 4, 5), (1, 3, 2, 3, 4)])
def test_batch_norm_inference_matches_onnxruntime(shape: tuple[int, ...]) -> None:
    rng = np.random.default_rng(0)
    c = shape[1]
    inputs = {
        "x": rand(rng, *shape),
        "scale": rand(rng, c),
        "bias": rand(rng, c),
        "mean": rand(rng, c),
        "var": rng.random(c).astype(np.float32) + 0.5,
    }
    assert_matches_ort("BatchNormalization", inputs, opset=15, epsilon=1e-3)


def test_batch_norm_training_uses_batch_statistics_and_updates_running_ones(make_kernel) -> None:
    rng = np.random.default_rng(1)
    x = rand(rng, 4, 3, 5)
    scale, bias = rand(rng, 3), rand(rng, 3)
    mean, var = np.zeros(3, np.float32), np.ones(3, np.float32)
    kernel = make_kernel("BatchNormalization", opset=15, training_mode=1, momentum=0.8)
    kernel.node = type(kernel.node)(name="bn", op_type="BatchNormalization", opset=15, n_inputs=5, n_outputs=3)
    y, run_mean, run_var = kernel.run(x, scale, bias, mean, var)
    batch_mean, batch_var = x.mean(axis=(0, 2)), x.var(axis=(0, 2))
    expected = (x - batch_mean[:, None]) / np.sqrt(batch_var[:, None] + 1e-5) * scale[:, None] + bias[:, None]
    np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(run_mean, 0.2 * batch_mean, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(run_var, 0.8 + 0.2 * batch_var, rtol=1e-5)


@pytest.mark.parametrize("shape", [(2, 3, 7), (2, 4, 3, 5)])
def test_instance_norm_matches_onnxruntime(shape: tuple[int, ...]) -> None:
    rng = np.random.default_rng(2)
    inputs = {"x": rand(rng, *shape), "scale": rand(rng, shape[1]), "bias": rand(rng, shape[1])}
    assert_matches_ort("InstanceNormalization", inputs, epsilon=1e-4)


@pytest.mark.parametrize("axis", [-1, -2, 1, 0])
def test_layer_norm_with_statistics_matches_onnxruntime(axis: int) -> None:
    rng = np.random.default_rng(3)
    x = rand(rng, 2, 3, 4, 5)
    norm_shape = x.shape[axis % 4 :]
    inputs = {"x": x, "scale": rand(rng, *norm_shape), "bias": rand(rng, *norm_shape)}
    assert_matches_ort("LayerNormalization", inputs, outputs=("y", "mean", "inv_std"), opset=17, axis=axis)


def test_layer_norm_float16_keeps_dtype_with_float32_statistics() -> None:
    rng = np.random.default_rng(4)
    x = rand(rng, 3, 8, dtype=np.float16)
    inputs = {"x": x, "scale": rand(rng, 8, dtype=np.float16)}
    y, mean, inv = assert_matches_ort(
        "LayerNormalization", inputs, outputs=("y", "mean", "inv_std"), opset=17, rtol=1e-2, atol=1e-2
    )
    assert (y.dtype, mean.dtype, inv.dtype) == (np.float16, np.float32, np.float32)


@pytest.mark.parametrize("shape", [(2, 6, 5), (1, 6, 3, 4)])
def test_group_norm_matches_onnxruntime(shape: tuple[int, ...]) -> None:
    rng = np.random.default_rng(5)
    inputs = {"x": rand(rng, *shape), "scale": rand(rng, shape[1]), "bias": rand(rng, shape[1])}
    assert_matches_ort("GroupNormalization", inputs, opset=21, num_groups=3, epsilon=1e-3)


@pytest.mark.parametrize("axis", [-1, 1])
def test_rms_norm_matches_onnxruntime(axis: int) -> None:
    rng = np.random.default_rng(6)
    x = rand(rng, 2, 3, 4)
    assert_matches_ort("RMSNormalization", {"x": x, "scale": rand(rng, *x.shape[axis:])}, opset=23, axis=axis)


@pytest.mark.parametrize(("p", "axis"), [(1, -1), (2, 1), (2, 0)])
def test_lp_normalization_matches_onnxruntime(p: int, axis: int) -> None:
    assert_matches_ort("LpNormalization", {"x": rand(np.random.default_rng(7), 3, 4, 5)}, p=p, axis=axis)


@pytest.mark.parametrize("axes", [[0, 2, 3], [1, 2]])
def test_mean_variance_normalization_matches_onnxruntime(axes: list[int]) -> None:
    x = rand(np.random.default_rng(8), 2, 3, 4, 5)
    assert_matches_ort("MeanVarianceNormalization", {"x": x}, opset=13, axes=axes)


@pytest.mark.parametrize("size", [1, 3, 5])  # onnxruntime accepts odd sizes only
def test_lrn_matches_onnxruntime(size: int) -> None:
    x = rand(np.random.default_rng(9), 2, 7, 3, 4)
    assert_matches_ort("LRN", {"x": x}, opset=13, size=size, alpha=2e-3, beta=0.6, bias=1.5)


def test_lrn_even_size_window_follows_the_spec(make_kernel) -> None:
    """size 4 sums channels c-1 .. c+2 (floor((size-1)/2) before, ceil((size-1)/2) after)."""
    x = np.random.default_rng(10).random((1, 6, 2, 2)).astype(np.float32)
    (y,) = make_kernel("LRN", opset=13, size=4, alpha=1e-1, beta=0.75, bias=1.0).run(x)
    sq = x * x
    window = np.stack([sq[:, max(0, c - 1) : c + 3].sum(axis=1) for c in range(6)], axis=1)
    np.testing.assert_allclose(y, x / (1.0 + 0.1 / 4 * window) ** 0.75, rtol=1e-6)
