"""Gemm and MatMul: the ONNX backend cases, and onnxruntime on random shapes, transposes and C broadcasts."""

from __future__ import annotations

import numpy as np
import pytest

from tests.runtime.kernels.backend_cases import backend_cases_test
from tests.runtime.kernels.ort_compare import assert_matches_ort, rand

test_backend_cases_pass = backend_cases_test(["Gemm", "MatMul"])


@pytest.mark.parametrize("c_shape", [None, (), (1,), (7,), (1, 7), (5, 1), (5, 7)])
@pytest.mark.parametrize(("trans_a", "trans_b"), [(0, 0), (1, 0), (0, 1), (1, 1)])
def test_gemm_matches_onnxruntime(trans_a: int, trans_b: int, c_shape: tuple[int, ...] | None) -> None:
    rng = np.random.default_rng(0)
    a = rand(rng, *((4, 5) if trans_a else (5, 4)))
    b = rand(rng, *((7, 4) if trans_b else (4, 7)))
    c = None if c_shape is None else rand(rng, *c_shape)
    assert_matches_ort("Gemm", {"a": a, "b": b, "c": c}, transA=trans_a, transB=trans_b, alpha=0.7, beta=-1.3)


@pytest.mark.parametrize(
    ("a_shape", "b_shape"),
    [((3, 4), (4, 5)), ((2, 3, 4), (4, 5)), ((4,), (2, 4, 3)), ((2, 1, 3, 4), (5, 4, 2)), ((3, 4), (4,)), ((6,), (6,))],
)
def test_matmul_broadcasts_like_onnxruntime(a_shape: tuple[int, ...], b_shape: tuple[int, ...]) -> None:
    rng = np.random.default_rng(1)
    assert_matches_ort("MatMul", {"a": rand(rng, *a_shape), "b": rand(rng, *b_shape)}, opset=13)


@pytest.mark.parametrize("dtype", [np.float16, np.float64, np.int32, np.int64])
def test_matmul_keeps_input_dtype(dtype) -> None:
    rng = np.random.default_rng(2)
    a = (rng.standard_normal((3, 4)) * 4).astype(dtype)
    b = (rng.standard_normal((4, 2)) * 4).astype(dtype)
    (y,) = assert_matches_ort("MatMul", {"a": a, "b": b}, opset=13, rtol=2e-3, atol=2e-2)
    assert y.dtype == dtype
