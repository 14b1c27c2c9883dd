"""Logic, comparison, IsInf/IsNaN and Where kernels."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from tests.runtime.kernels.backend_cases import backend_cases_test

OPS = [
    "And", "Or", "Xor", "Not", "Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual", "IsInf", "IsNaN",
    "Where",
]  # fmt: skip


test_backend_cases_pass = backend_cases_test(OPS)


@pytest.mark.parametrize(
    ("op", "ufunc"),
    [("Less", np.less), ("LessOrEqual", np.less_equal), ("Greater", np.greater), ("Equal", np.equal)],
)
@settings(max_examples=30, deadline=None)
@given(data=st.data())
def test_comparisons_broadcast_to_bool(op, ufunc, data, make_kernel) -> None:
    shapes = data.draw(hnp.mutually_broadcastable_shapes(num_shapes=2, max_dims=3, max_side=3))
    a = data.draw(hnp.arrays(np.int16, shapes.input_shapes[0], elements=st.integers(-3, 3)))
    b = data.draw(hnp.arrays(np.int16, shapes.input_shapes[1], elements=st.integers(-3, 3)))
    (out,) = make_kernel(op).run(a, b)
    assert out.dtype == np.bool_
    np.testing.assert_array_equal(out, ufunc(a, b))


def test_equal_compares_strings_by_value(make_kernel) -> None:
    a = np.array([["ab", "c"], ["", "x"]], dtype=object)
    b = np.array(["ab", "x"], dtype=object)
    (out,) = make_kernel("Equal", opset=19).run(a, b)
    assert out.dtype == np.bool_
    assert out.tolist() == [[True, False], [False, True]]


def test_isinf_honours_sign_flags(make_kernel) -> None:
    x = np.array([np.inf, -np.inf, np.nan, 1.0], dtype=np.float32)
    assert make_kernel("IsInf").run(x)[0].tolist() == [True, True, False, False]
    assert make_kernel("IsInf", detect_negative=0).run(x)[0].tolist() == [True, False, False, False]
    assert make_kernel("IsInf", detect_positive=0).run(x)[0].tolist() == [False, True, False, False]
    assert make_kernel("IsNaN").run(x)[0].tolist() == [False, False, True, False]


def test_narrow_float_comparisons(make_kernel) -> None:
    x = np.array([1.0, 2.0, np.nan], dtype=ml_dtypes.bfloat16)
    assert make_kernel("Greater").run(x, np.array(1.5, dtype=ml_dtypes.bfloat16))[0].tolist() == [
        False,
        True,
        False,
    ]
    assert make_kernel("IsNaN").run(x)[0].tolist() == [False, False, True]


def test_where_broadcasts_three_ways_and_keeps_dtype(make_kernel) -> None:
    condition = np.array([[True], [False]])
    x = np.array([1, 2, 3], dtype=np.int8)
    y = np.array(-1, dtype=np.int8)
    (out,) = make_kernel("Where").run(condition, x, y)
    assert out.dtype == np.int8
    assert out.tolist() == [[1, 2, 3], [-1, -1, -1]]


def test_legacy_logic_broadcast(make_kernel) -> None:
    a = np.ones((2, 3), dtype=bool)
    b = np.array([True, False])
    (out,) = make_kernel("And", opset=1, broadcast=1, axis=0).run(a, b)
    assert out.tolist() == [[True] * 3, [False] * 3]
