"""Reductions, ArgMax/ArgMin and CumSum/CumProd."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from tests.runtime.kernels.backend_cases import backend_cases_test

OPS = [
    "ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2", "ReduceLogSum",
    "ReduceLogSumExp", "ReduceSumSquare", "ArgMax", "ArgMin", "CumSum", "CumProd",
]  # fmt: skip

#: What each Reduce* computes, written plainly, for comparison.
FORMULAS = {
    "ReduceSum": lambda x, ax, kd: np.sum(x, axis=ax, keepdims=kd),
    "ReduceMean": lambda x, ax, kd: np.mean(x, axis=ax, keepdims=kd),
    "ReduceMax": lambda x, ax, kd: np.max(x, axis=ax, keepdims=kd),
    "ReduceMin": lambda x, ax, kd: np.min(x, axis=ax, keepdims=kd),
    "ReduceProd": lambda x, ax, kd: np.prod(x, axis=ax, keepdims=kd),
    "ReduceL1": lambda x, ax, kd: np.sum(np.abs(x), axis=ax, keepdims=kd),
    "ReduceL2": lambda x, ax, kd: np.sqrt(np.sum(x * x, axis=ax, keepdims=kd)),
    "ReduceLogSum": lambda x, ax, kd: np.log(np.sum(x, axis=ax, keepdims=kd)),
    "ReduceLogSumExp": lambda x, ax, kd: np.log(np.sum(np.exp(x), axis=ax, keepdims=kd)),
    "ReduceSumSquare": lambda x, ax, kd: np.sum(x * x, axis=ax, keepdims=kd),
}
INPUT_AXES_SINCE = {op: 13 if op == "ReduceSum" else 18 for op in FORMULAS}


test_backend_cases_pass = backend_cases_test(OPS)


@st.composite
def array_and_axes(draw: st.DrawFn) -> tuple[np.ndarray, tuple[int, ...]]:
    x = draw(hnp.arrays(np.float64, hnp.array_shapes(min_dims=1, max_dims=3, max_side=4), elements=st.floats(0.5, 2)))
    axes = draw(st.lists(st.integers(-x.ndim, x.ndim - 1), min_size=1, max_size=x.ndim, unique_by=lambda a: a % x.ndim))
    return x, tuple(axes)


@pytest.mark.parametrize("op", sorted(FORMULAS))
@settings(max_examples=15, deadline=None)
@given(case=array_and_axes(), keepdims=st.booleans())
def test_both_axes_forms_match_the_formula(op, case, keepdims, make_kernel) -> None:
    x, axes = case
    expected = FORMULAS[op](x, axes, keepdims)
    (from_attr,) = make_kernel(op, opset=INPUT_AXES_SINCE[op] - 1, axes=list(axes), keepdims=int(keepdims)).run(x)
    (from_input,) = make_kernel(op, opset=INPUT_AXES_SINCE[op], keepdims=int(keepdims)).run(
        x, np.array(axes, dtype=np.int64)
    )
    np.testing.assert_allclose(from_attr, expected, rtol=1e-12)
    np.testing.assert_allclose(from_input, expected, rtol=1e-12)
    assert from_input.shape == np.shape(expected) and from_input.dtype == np.float64


def test_no_axes_means_all_unless_noop(make_kernel) -> None:
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    (everything,) = make_kernel("ReduceSum", keepdims=0).run(x, None)
    assert everything.shape == () and float(everything) == 15.0
    (noop,) = make_kernel("ReduceSumSquare", noop_with_empty_axes=1).run(x, np.array([], dtype=np.int64))
    np.testing.assert_array_equal(noop, x * x)  # reducing over no axes reduces each element alone


def test_integer_sums_keep_their_dtype_and_wrap(make_kernel) -> None:
    x = np.array([[2**30, 2**30], [1, 2]], dtype=np.int32)
    (out,) = make_kernel("ReduceSum", keepdims=0).run(x, np.array([1], dtype=np.int64))
    assert out.dtype == np.int32
    assert out.tolist() == [-(2**31), 3]


def test_empty_reductions_give_identities(make_kernel) -> None:
    empty = np.zeros((2, 0, 3), dtype=np.float32)
    axes = np.array([1], dtype=np.int64)
    identities = {"ReduceSum": 0.0, "ReduceProd": 1.0, "ReduceMax": -np.inf, "ReduceMin": np.inf}
    identities |= {"ReduceLogSum": -np.inf, "ReduceLogSumExp": -np.inf, "ReduceL2": 0.0}
    for op, identity in identities.items():
        (out,) = make_kernel(op).run(empty, axes)
        assert out.shape == (2, 1, 3), op
        assert (out == identity).all(), op
    (ints,) = make_kernel("ReduceMax").run(empty.astype(np.int8), axes)
    assert (ints == -128).all()


def test_reduce_max_of_bools(make_kernel) -> None:
    x = np.array([[True, False], [False, False]])
    (out,) = make_kernel("ReduceMax", keepdims=0).run(x, np.array([1], dtype=np.int64))
    assert out.dtype == np.bool_ and out.tolist() == [True, False]


def test_arg_reductions_pick_first_or_last_tie(make_kernel) -> None:
    x = np.array([[1, 5, 5], [7, 7, 0]], dtype=np.float32)
    (first,) = make_kernel("ArgMax", axis=1).run(x)
    (last,) = make_kernel("ArgMax", axis=1, keepdims=0, select_last_index=1).run(x)
    (minimum,) = make_kernel("ArgMin", axis=0, keepdims=0, select_last_index=1).run(np.array([3, 1, 1, 2]))
    assert first.dtype == np.int64 and first.tolist() == [[1], [0]]
    assert last.tolist() == [2, 1]
    assert minimum.tolist() == 2


@pytest.mark.parametrize(("exclusive", "reverse"), [(0, 0), (1, 0), (0, 1), (1, 1)])
def test_cumulative_modes_match_a_loop(exclusive, reverse, make_kernel) -> None:
    x = np.array([[1, 2, 3, 4], [2, 2, 2, 2]], dtype=np.int32)
    for op, identity, step in (("CumSum", 0, int.__add__), ("CumProd", 1, int.__mul__)):
        (out,) = make_kernel(op, exclusive=exclusive, reverse=reverse).run(x, np.array(-1, dtype=np.int64))
        expected = []
        for row in x.tolist():
            values = row[::-1] if reverse else row
            acc, scanned = identity, []
            for v in values:
                if exclusive:
                    scanned.append(acc)
                acc = step(acc, v)
                if not exclusive:
                    scanned.append(acc)
            expected.append(scanned[::-1] if reverse else scanned)
        assert out.dtype == np.int32, op
        assert out.tolist() == expected, op
