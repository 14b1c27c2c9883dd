"""Element-wise math kernels: the ONNX backend cases, plus broadcasting and dtype properties."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from runtime.errors import KernelError
from tests.runtime.kernels.backend_cases import backend_cases_test

OPS = [
    "Abs", "Neg", "Reciprocal", "Floor", "Ceil", "Round", "Sqrt", "Exp", "Log", "Sin", "Cos", "Tan", "Asin",
    "Acos", "Atan", "Sinh", "Cosh", "Asinh", "Acosh", "Atanh", "Tanh", "Erf", "Sign", "Add", "Sub", "Mul", "Div",
    "Pow", "Mod", "BitShift", "BitwiseAnd", "BitwiseOr", "BitwiseXor", "BitwiseNot", "Max", "Min", "Mean", "Sum",
]  # fmt: skip

NUMERIC_DTYPES = [np.int8, np.uint8, np.int32, np.int64, np.float16, np.float32, np.float64]


test_backend_cases_pass = backend_cases_test(OPS)


@st.composite
def broadcast_pair(draw: st.DrawFn) -> tuple[np.ndarray, np.ndarray]:
    """Two arrays of one numeric dtype with NumPy-broadcastable shapes."""
    dtype = np.dtype(draw(st.sampled_from(NUMERIC_DTYPES)))
    shapes = draw(hnp.mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=3, max_side=4))
    elements = hnp.from_dtype(dtype, allow_nan=False, allow_infinity=False)
    a = draw(hnp.arrays(dtype, shapes.input_shapes[0], elements=elements))
    b = draw(hnp.arrays(dtype, shapes.input_shapes[1], elements=elements))
    return a, b


@pytest.mark.parametrize(("op", "ufunc"), [("Add", np.add), ("Sub", np.subtract), ("Mul", np.multiply)])
@settings(max_examples=40, deadline=None)
@given(pair=broadcast_pair())
def test_arithmetic_broadcasts_and_wraps_in_input_dtype(op, ufunc, pair, make_kernel) -> None:
    a, b = pair
    (out,) = make_kernel(op).run(a, b)
    with np.errstate(all="ignore"):
        expected = ufunc(a, b)
    assert out.dtype == a.dtype
    assert out.shape == np.broadcast_shapes(a.shape, b.shape)
    np.testing.assert_array_equal(out, expected)


@settings(max_examples=60, deadline=None)
@given(
    a=hnp.arrays(np.int32, 6, elements=st.integers(-1000, 1000)),
    b=hnp.arrays(np.int32, 6, elements=st.integers(-50, 50).filter(bool)),
)
def test_integer_div_truncates_toward_zero(a, b, make_kernel) -> None:
    (out,) = make_kernel("Div").run(a, b)
    expected = [math.trunc(int(x) / int(y)) for x, y in zip(a, b, strict=True)]
    assert out.dtype == np.int32
    assert out.tolist() == expected


@settings(max_examples=60, deadline=None)
@given(
    a=hnp.arrays(np.int64, 5, elements=st.integers(-100, 100)),
    b=hnp.arrays(np.int64, 5, elements=st.integers(-9, 9).filter(bool)),
)
def test_mod_sign_follows_divisor_unless_fmod(a, b, make_kernel) -> None:
    (python_mod,) = make_kernel("Mod", fmod=0).run(a, b)
    (c_fmod,) = make_kernel("Mod", fmod=1).run(a, b)
    assert python_mod.tolist() == [int(x) % int(y) for x, y in zip(a, b, strict=True)]
    assert c_fmod.tolist() == [int(math.fmod(int(x), int(y))) for x, y in zip(a, b, strict=True)]


def test_pow_keeps_base_dtype_and_allows_negative_integer_exponents(make_kernel) -> None:
    base = np.array([2, 3, -2], dtype=np.int32)
    (out,) = make_kernel("Pow").run(base, np.array([3, -1, 2], dtype=np.int64))
    assert out.dtype == np.int32
    assert out.tolist() == [8, 0, 4]
    (mixed,) = make_kernel("Pow").run(np.array([4.0], dtype=np.float16), np.array([0.5], dtype=np.float32))
    assert mixed.dtype == np.float16 and mixed.tolist() == [2.0]


def test_legacy_broadcast_aligns_at_axis(make_kernel) -> None:
    a = np.zeros((2, 3, 4), dtype=np.float32)
    b = np.arange(3, dtype=np.float32)
    (out,) = make_kernel("Add", opset=6, broadcast=1, axis=1).run(a, b)
    np.testing.assert_array_equal(out, np.broadcast_to(b.reshape(3, 1), (2, 3, 4)))
    (numpy_style,) = make_kernel("Add", opset=7).run(a, np.arange(4, dtype=np.float32))
    assert numpy_style.shape == (2, 3, 4)


def test_bfloat16_stays_bfloat16(make_kernel) -> None:
    x = np.array([1.5, -2.0], dtype=ml_dtypes.bfloat16)
    (added,) = make_kernel("Add").run(x, x)
    (root,) = make_kernel("Abs").run(x)
    assert added.dtype == x.dtype and root.dtype == x.dtype
    assert added.astype(np.float32).tolist() == [3.0, -4.0]


def test_erf_matches_math_erf(make_kernel) -> None:
    x = np.linspace(-4, 4, 41)
    (out,) = make_kernel("Erf").run(x)
    np.testing.assert_allclose(out, [math.erf(v) for v in x], rtol=0, atol=1e-15)


def test_float32_erf_is_within_one_ulp_everywhere(make_kernel) -> None:
    x = np.concatenate([np.linspace(-7, 7, 20001), [0.0, 1e-30, -1e-8, 1.9999, 2.0, 2.0001, 5.99, 6.0, np.inf]])
    x = x.astype(np.float32)
    (out,) = make_kernel("Erf").run(x)
    expected = np.array([math.erf(float(v)) for v in x], dtype=np.float32)
    assert out.dtype == np.float32
    assert np.all(np.abs(out.view(np.int32).astype(np.int64) - expected.view(np.int32)) <= 1)
    (nan,) = make_kernel("Erf").run(np.array([np.nan, -np.inf], dtype=np.float16))
    assert np.isnan(nan[0]) and nan[1] == -1 and nan.dtype == np.float16


def test_zero_dim_results_are_arrays(make_kernel) -> None:
    (out,) = make_kernel("Mul").run(np.array(3, dtype=np.int8), np.array(100, dtype=np.int8))
    assert isinstance(out, np.ndarray) and out.dtype == np.int8 and out.shape == ()
    assert int(out) == 44  # 300 wraps modulo 256


def test_variadic_max_broadcasts_and_propagates_nan(make_kernel) -> None:
    a = np.array([[1.0, np.nan, 3.0]], dtype=np.float32)
    b = np.array([[2.0], [0.0]], dtype=np.float32)
    (out,) = make_kernel("Max").run(a, b, np.array(2.5, dtype=np.float32))
    assert out.shape == (2, 3)
    np.testing.assert_array_equal(out, [[2.5, np.nan, 3.0], [2.5, np.nan, 3.0]])
    (mean,) = make_kernel("Mean").run(np.array([1, 2], np.float16), np.array([2, 2], np.float16))
    assert mean.dtype == np.float16 and mean.tolist() == [1.5, 2.0]


def test_bitshift_rejects_unknown_direction(make_kernel) -> None:
    with pytest.raises(ValueError, match="direction"):
        make_kernel("BitShift", direction="UP")
    (out,) = make_kernel("BitShift", direction="LEFT").run(np.array([1, 255], np.uint8), np.array([3, 1], np.uint8))
    assert out.dtype == np.uint8 and out.tolist() == [8, 254]


def test_kernel_errors_name_the_node(make_kernel) -> None:
    with pytest.raises(KernelError, match="test_Add"):
        make_kernel("Add").run(np.zeros(3, np.float32), np.zeros(4, np.float32))
