"""Index kernels beyond the backend cases: Python-slice semantics, negative indices, reductions, tie order, and
random inputs compared with onnxruntime (an independent implementation)."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from onnx import helper

from runtime.errors import KernelError
from runtime.kernels import NodeContext, resolve
from runtime.kernels.base import Kernel

OPSET = 18


def kernel(op: str, opset: int = OPSET, n_outputs: int = 1, **attrs: Any) -> Kernel:
    node = NodeContext(name=f"test_{op}", op_type=op, opset=opset, n_outputs=n_outputs)
    return resolve(op, "", opset)(node, attrs)


def onnxruntime_run(op: str, inputs: list[np.ndarray], n_outputs: int = 1, **attrs: Any) -> list[np.ndarray]:
    """Run one node in onnxruntime (input types come from the arrays; output types are inferred)."""
    names = [f"in{i}" for i in range(len(inputs))]
    outs = [f"out{i}" for i in range(n_outputs)]
    graph = helper.make_graph(
        [helper.make_node(op, names, outs, **attrs)],
        "g",
        [
            helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(x.dtype), x.shape)
            for n, x in zip(names, inputs, strict=True)
        ],
        [onnx.ValueInfoProto(name=n) for n in outs],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=9)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, dict(zip(names, inputs, strict=True)))


def i64(*values: int) -> np.ndarray:
    return np.array(values, dtype=np.int64)


BIG = 2**63 - 1


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(0, 7),
    start=st.sampled_from([-BIG, -9, -3, -1, 0, 1, 3, 9, BIG]),
    end=st.sampled_from([-BIG, -9, -3, -1, 0, 1, 3, 9, BIG]),
    step=st.sampled_from([-3, -1, 1, 2]),
)
def test_slice_clamps_like_onnxruntime(n: int, start: int, end: int, step: int) -> None:
    assume(not (step < 0 and end >= n))  # onnxruntime departs from the spec there: see the test below
    x = np.arange(n, dtype=np.float32)
    args = [x, i64(start), i64(end), i64(0), i64(step)]
    (ours,) = kernel("Slice").run(*args)
    (theirs,) = onnxruntime_run("Slice", args)
    np.testing.assert_array_equal(ours, theirs)


def test_slice_negative_step_clamps_end_to_last_index_as_the_spec_says() -> None:
    # end >= dim with a negative step clamps to dim - 1 (exclusive), so [start=-BIG -> 0 : end -> 0 : -1] is empty
    x = np.arange(3, dtype=np.float32)
    assert kernel("Slice").run(x, i64(-BIG), i64(BIG), i64(0), i64(-1))[0].tolist() == []
    assert kernel("Slice").run(x, i64(BIG), i64(-BIG), i64(0), i64(-1))[0].tolist() == [2, 1, 0]
    assert kernel("Slice").run(x, i64(5), i64(1), i64(0), i64(-1))[0].tolist() == [2]


def test_slice_opset1_attribute_form() -> None:
    x = np.arange(12).reshape(3, 4)
    (out,) = kernel("Slice", opset=1, starts=[1, -3], ends=[BIG, -1], axes=[0, 1]).run(x)
    np.testing.assert_array_equal(out, x[1:, -3:-1])


def test_gather_accepts_negative_indices_and_rejects_out_of_range() -> None:
    x = np.arange(10).reshape(5, 2)
    np.testing.assert_array_equal(kernel("Gather").run(x, i64(-1, 0))[0], x[[4, 0]])
    with pytest.raises(KernelError, match="out of range"):
        kernel("Gather").run(x, i64(5))


@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_gather_elements_and_scatter_elements_match_onnxruntime(data: st.DataObject) -> None:
    shape = data.draw(hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=4))
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    x = data.draw(hnp.arrays(np.float32, shape, elements=st.floats(-9, 9, width=32)))
    dim = shape[axis]
    idx_shape = tuple(
        data.draw(st.integers(1, s)) if i != axis % len(shape) else data.draw(st.integers(1, 4))
        for i, s in enumerate(shape)
    )
    idx = data.draw(hnp.arrays(np.int64, idx_shape, elements=st.integers(-dim, dim - 1)))
    (ours,) = kernel("GatherElements", axis=axis).run(x, idx)
    np.testing.assert_array_equal(ours, onnxruntime_run("GatherElements", [x, idx], axis=axis)[0])
    updates = data.draw(hnp.arrays(np.float32, idx_shape, elements=st.floats(-9, 9, width=32)))
    (scattered,) = kernel("ScatterElements", axis=axis, reduction="add").run(x, idx, updates)
    expected = onnxruntime_run("ScatterElements", [x, idx, updates], axis=axis, reduction="add")[0]
    np.testing.assert_allclose(scattered, expected, rtol=1e-5, atol=1e-5)


def test_scatter_elements_reductions_accumulate_duplicates() -> None:
    data = np.ones(3, np.float32)
    idx = i64(1, 1, 2)
    upd = np.array([2, 3, 5], np.float32)
    expect = {"add": [1, 6, 6], "mul": [1, 6, 5], "max": [1, 3, 5], "min": [1, 1, 1]}
    for reduction, values in expect.items():
        assert kernel("ScatterElements", reduction=reduction).run(data, idx, upd)[0].tolist() == values
    assert data.tolist() == [1, 1, 1]  # the input is untouched


@pytest.mark.parametrize("batch_dims", [0, 1])
def test_gather_nd_matches_onnxruntime(batch_dims: int) -> None:
    rng = np.random.default_rng(batch_dims)
    x = rng.standard_normal((2, 3, 4)).astype(np.float32)
    d0, d1 = x.shape[batch_dims], x.shape[batch_dims + 1]  # the two dims each index tuple addresses
    idx = np.stack([rng.integers(-d0, d0, (2, 5)), rng.integers(-d1, d1, (2, 5))], axis=-1).astype(np.int64)
    (ours,) = kernel("GatherND", batch_dims=batch_dims).run(x, idx)
    np.testing.assert_array_equal(ours, onnxruntime_run("GatherND", [x, idx], batch_dims=batch_dims)[0])


@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
def test_scatter_nd_matches_onnxruntime(reduction: str) -> None:
    rng = np.random.default_rng(1)
    data = rng.standard_normal((4, 3, 2)).astype(np.float32)
    idx = i64(0, 2, 3, 1).reshape(4, 1) if reduction == "none" else i64(0, 2, 0, 1).reshape(4, 1)
    upd = rng.standard_normal((4, 3, 2)).astype(np.float32)
    (ours,) = kernel("ScatterND", reduction=reduction).run(data, idx, upd)
    expected = onnxruntime_run("ScatterND", [data, idx, upd], reduction=reduction)[0]
    np.testing.assert_allclose(ours, expected, rtol=1e-6)


def test_top_k_keeps_lower_index_first_on_ties() -> None:
    x = np.array([[3, 1, 3, 2, 1]], np.int64)
    values, indices = kernel("TopK", n_outputs=2).run(x, i64(3))
    assert values.tolist() == [[3, 3, 2]] and indices.tolist() == [[0, 2, 3]]
    values, indices = kernel("TopK", n_outputs=2, largest=0).run(x, i64(3))
    assert values.tolist() == [[1, 1, 2]] and indices.tolist() == [[1, 4, 3]]
    assert indices.dtype == np.int64


def test_top_k_on_unsigned_ints_and_opset1_attribute_k() -> None:
    x = np.array([0, 255, 7], np.uint8)
    values, indices = kernel("TopK", n_outputs=2).run(x, i64(2))
    assert values.tolist() == [255, 7] and indices.tolist() == [1, 2]
    values, _ = kernel("TopK", opset=1, n_outputs=2, k=1).run(x)
    assert values.tolist() == [255]


def test_unique_unsorted_orders_by_first_occurrence() -> None:
    x = np.array([2, 1, 1, 3, 4, 3], np.float32)
    y, first, inverse, counts = kernel("Unique", n_outputs=4, sorted=0).run(x)
    assert y.tolist() == [2, 1, 3, 4]
    assert first.tolist() == [0, 1, 3, 4]
    assert inverse.tolist() == [0, 1, 1, 2, 3, 2]
    assert counts.tolist() == [1, 2, 2, 1]
    np.testing.assert_array_equal(y[inverse], x)


def test_unique_along_an_axis_rebuilds_the_input() -> None:
    x = np.array([[1, 0], [1, 0], [2, 3], [1, 0]], np.int64)
    y, _, inverse, counts = kernel("Unique", n_outputs=4, axis=0).run(x)
    assert y.tolist() == [[1, 0], [2, 3]] and counts.tolist() == [3, 1]
    np.testing.assert_array_equal(y[inverse], x)


def test_one_hot_axis_and_out_of_range_indices() -> None:
    (out,) = kernel("OneHot", axis=0).run(i64(0, -1, 5), np.array(3.0), np.array([0, 9], np.int32))
    assert out.dtype == np.int32
    assert out.tolist() == [[9, 0, 0], [0, 0, 0], [0, 9, 0]]


def test_non_zero_and_compress() -> None:
    x = np.array([[0, 2], [3, 0]])
    assert kernel("NonZero").run(x)[0].tolist() == [[0, 1], [1, 0]]
    assert kernel("Compress").run(x, np.array([0, 1, 1], bool))[0].tolist() == [2, 3]
    assert kernel("Compress", axis=1).run(x, np.array([0, 1], bool))[0].tolist() == [[2], [0]]


def test_reverse_sequence_reverses_each_batch_prefix() -> None:
    x = np.arange(8).reshape(4, 2)  # [time, batch]
    (out,) = kernel("ReverseSequence").run(x, i64(3, 0))
    assert out[:, 0].tolist() == [4, 2, 0, 6]
    assert out[:, 1].tolist() == [1, 3, 5, 7]
