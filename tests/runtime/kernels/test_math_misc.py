"""Einsum, Det and Trilu kernels."""

from __future__ import annotations

import numpy as np
import pytest

from tests.runtime.kernels.backend_cases import backend_cases_test

OPS = ["Einsum", "Det", "Trilu"]


test_backend_cases_pass = backend_cases_test(OPS)


def test_einsum_batched_matmul_and_spaces(make_kernel) -> None:
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((2, 3, 4)), rng.standard_normal((2, 4, 5))
    (out,) = make_kernel("Einsum", equation="bij, bjk -> bik").run(a, b)
    np.testing.assert_allclose(out, a @ b)
    (trace,) = make_kernel("Einsum", equation="ii").run(np.eye(3, dtype=np.int32) * 2)
    assert trace.dtype == np.int32 and int(trace) == 6


def test_det_of_a_stack_and_of_float16(make_kernel) -> None:
    stack = np.array([[[2.0, 0.0], [0.0, 3.0]], [[1.0, 2.0], [3.0, 4.0]]], dtype=np.float32)
    (out,) = make_kernel("Det").run(stack)
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, [6.0, -2.0], rtol=1e-6)
    (half,) = make_kernel("Det").run(stack.astype(np.float16))
    assert half.dtype == np.float16


@pytest.mark.parametrize(("upper", "k"), [(1, 0), (1, -1), (0, 1), (0, -2)])
def test_trilu_matches_numpy_on_batches(upper, k, make_kernel) -> None:
    x = np.arange(2 * 3 * 4).reshape(2, 3, 4)
    (out,) = make_kernel("Trilu", upper=upper).run(x, np.array(k, dtype=np.int64))
    np.testing.assert_array_equal(out, np.triu(x, k) if upper else np.tril(x, k))
