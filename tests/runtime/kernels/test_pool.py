"""Pooling kernels: the ONNX backend cases, and onnxruntime on random shapes and attribute mixes."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from tests.runtime.kernels.ort_compare import assert_matches_ort, rand

OPS = ["AveragePool", "MaxPool", "LpPool", "GlobalAveragePool", "GlobalMaxPool", "MaxUnpool"]


@pytest.mark.parametrize("op", OPS)
def test_backend_cases_pass(op: str, backend_failures) -> None:
    count, failures = backend_failures(op)
    assert count > 0, f"no backend cases found for {op}"
    assert not failures, "\n".join(failures)


WINDOWS: list[tuple[tuple[int, ...], dict[str, Any]]] = [
    ((1, 3, 8, 8), {"kernel_shape": [2, 2], "strides": [2, 2]}),
    ((2, 2, 9, 10), {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
    ((1, 2, 9, 10), {"kernel_shape": [3, 2], "strides": [2, 3], "pads": [1, 0, 0, 1], "ceil_mode": 1}),
    ((1, 2, 10, 9), {"kernel_shape": [3, 3], "strides": [2, 2], "auto_pad": "SAME_UPPER"}),
    ((1, 2, 10, 9), {"kernel_shape": [4, 3], "strides": [3, 2], "auto_pad": "SAME_LOWER"}),
    ((1, 2, 11, 11), {"kernel_shape": [3, 3], "strides": [2, 2], "dilations": [2, 2], "ceil_mode": 1}),
    ((2, 3, 13), {"kernel_shape": [4], "strides": [3], "pads": [1, 2]}),
    ((1, 2, 5, 6, 7), {"kernel_shape": [2, 3, 2], "strides": [2, 1, 2], "pads": [0, 1, 1, 1, 0, 0]}),
]


@pytest.mark.parametrize(("shape", "attrs"), WINDOWS)
def test_max_pool_with_indices_matches_onnxruntime(shape, attrs) -> None:
    x = rand(np.random.default_rng(0), *shape)
    assert_matches_ort("MaxPool", {"x": x}, outputs=("y", "indices"), opset=12, **attrs)


@pytest.mark.parametrize(("shape", "attrs"), WINDOWS)
def test_max_pool_without_indices_matches_onnxruntime(shape, attrs) -> None:
    """The compiled NCHW kernel (2-d float32 windows) and the NumPy path for the rest."""
    x = rand(np.random.default_rng(4), *shape).astype(np.float32)
    assert_matches_ort("MaxPool", {"x": x}, opset=12, **attrs)


@pytest.mark.parametrize(("shape", "attrs"), WINDOWS[:4])
def test_max_pool_column_major_indices_match_onnxruntime(shape, attrs) -> None:
    x = rand(np.random.default_rng(1), *shape)
    assert_matches_ort("MaxPool", {"x": x}, outputs=("y", "indices"), opset=12, storage_order=1, **attrs)


def test_max_pool_keeps_integer_dtype() -> None:
    x = np.random.default_rng(2).integers(0, 255, (1, 2, 6, 6)).astype(np.uint8)
    (y,) = assert_matches_ort("MaxPool", {"x": x}, opset=12, kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    assert y.dtype == np.uint8


@pytest.mark.parametrize("count_include_pad", [0, 1])
@pytest.mark.parametrize(("shape", "attrs"), WINDOWS)
def test_average_pool_matches_onnxruntime(shape, attrs, count_include_pad) -> None:
    x = rand(np.random.default_rng(3), *shape)
    assert_matches_ort("AveragePool", {"x": x}, opset=19, count_include_pad=count_include_pad, **attrs)


@pytest.mark.parametrize("p", [1, 2, 3])
@pytest.mark.parametrize(("shape", "attrs"), [w for w in WINDOWS if "dilations" not in w[1]])
def test_lp_pool_matches_onnxruntime(shape, attrs, p) -> None:
    x = rand(np.random.default_rng(4), *shape)
    assert_matches_ort("LpPool", {"x": x}, opset=18, p=p, **attrs)


@pytest.mark.parametrize("op", ["GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool"])
@pytest.mark.parametrize("shape", [(2, 3, 5), (1, 4, 6, 7), (2, 2, 3, 4, 5)])
def test_global_pools_match_onnxruntime(op: str, shape: tuple[int, ...]) -> None:
    assert_matches_ort(op, {"x": rand(np.random.default_rng(5), *shape)})


def test_max_unpool_inverts_max_pool_indices() -> None:
    x = rand(np.random.default_rng(6), 2, 3, 6, 8)
    attrs: dict[str, Any] = {"kernel_shape": [2, 2], "strides": [2, 2]}
    y, indices = assert_matches_ort("MaxPool", {"x": x}, outputs=("y", "indices"), opset=12, **attrs)
    (restored,) = assert_matches_ort("MaxUnpool", {"x": y, "i": indices}, opset=11, **attrs)
    kept = restored != 0
    np.testing.assert_array_equal(restored[kept], x[kept])
    assert kept.sum() == y.size
