"""Planned runs call stretches of prebound compiled kernels in one ``ap_run_program`` call, and answer as the
step-by-step run does; profiling still times every node."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper

from runtime import compile_model, native
from runtime.static_plan import _merge_compiled
from tests.runtime.graphs import model, vi

pytestmark = pytest.mark.skipif(native.lib() is None, reason=f"compiled kernels unavailable: {native.status()}")


def _softmax_chain(nodes: int, width: int = 16) -> onnx.ModelProto:
    made = [helper.make_node("Softmax", [f"t{i}" if i else "x"], [f"t{i + 1}"], axis=-1) for i in range(nodes)]
    made.append(helper.make_node("Mul", [f"t{nodes}", f"t{nodes}"], ["y"]))
    return model(made, [vi("x", shape=[2, width])], [vi("y", shape=[2, width])])


def test_a_chain_of_compiled_steps_runs_as_one_call() -> None:
    exe = compile_model(_softmax_chain(30), passes=[])
    x = np.random.default_rng(0).standard_normal((2, 16)).astype(np.float32) * 5
    first = exe.run({"x": x})["y"]
    static = next(iter(exe.plan._static.values()))  # type: ignore[union-attr]
    _, steps, merged, _ = static._state()
    bound = [entry for entry in steps if entry[0] == "bound"]
    assert len(bound) >= 30
    assert len(merged) < len(steps) - 25  # the Softmax stretch became one entry
    again = exe.run({"x": x})["y"]
    want = x
    for _ in range(30):
        e = np.exp(want - want.max(axis=-1, keepdims=True))
        want = e / e.sum(axis=-1, keepdims=True)
    np.testing.assert_allclose(first, want * want, rtol=1e-5)
    np.testing.assert_array_equal(again, first)
    with exe.profiling() as profile:
        profiled = exe.run({"x": x})["y"]
    np.testing.assert_array_equal(profiled, first)
    assert sum(n.calls for n in profile.nodes.values() if n.op_type == "Softmax") == 30


def test_steps_that_are_not_pure_compiled_calls_stay_apart() -> None:
    def python_step() -> None:
        pass

    entries = [("bound", python_step, None, None), ("run", None, None, None)]
    assert _merge_compiled(entries) == entries  # type: ignore[arg-type]


def _window_merge(dtype: int = onnx.TensorProto.FLOAT) -> onnx.ModelProto:
    """Swin's window reverse: a planned result reshaped, transposed, then reshaped again (a copy of a strided view),
    and the graph's output that copy itself."""
    nodes = [
        helper.make_node("Abs", ["x"], ["r"]),
        helper.make_node("Reshape", ["r", "split"], ["s"]),
        helper.make_node("Transpose", ["s"], ["t"], perm=[0, 1, 3, 2, 4, 5]),
        helper.make_node("Reshape", ["t", "merge"], ["y"]),
    ]
    init = [
        onnx.numpy_helper.from_array(np.array([2, 2, 2, 3, 4, 5], dtype=np.int64), "split"),
        onnx.numpy_helper.from_array(np.array([2, 4, 12, 5], dtype=np.int64), "merge"),
    ]
    return model(nodes, [vi("x", dtype, [2, 4, 12, 5])], [vi("y", dtype, [2, 4, 12, 5])], init)


@pytest.mark.parametrize("dtype", [onnx.TensorProto.FLOAT, onnx.TensorProto.INT64])
def test_a_reshape_of_a_strided_view_is_a_compiled_copy(dtype: int) -> None:
    exe = compile_model(_window_merge(dtype), passes=[])
    rng = np.random.default_rng(3)
    np_type = onnx.helper.tensor_dtype_to_np_dtype(dtype)
    want_of = lambda x: np.abs(x).reshape(2, 2, 2, 3, 4, 5).transpose(0, 1, 3, 2, 4, 5).reshape(2, 4, 12, 5)  # noqa: E731
    results = []
    for _ in range(3):  # run after run: the copy reads the planned buffer each time, and the output is detached
        x = (rng.standard_normal((2, 4, 12, 5)) * 10).astype(np_type)
        got = exe.run({"x": x})["y"]
        np.testing.assert_array_equal(got, want_of(x))
        results.append((got, want_of(x)))
    for got, want in results:
        np.testing.assert_array_equal(got, want)
    static = next(iter(exe.plan._static.values()))  # type: ignore[union-attr]
    _, steps, _, _ = static._state()
    kinds = {entry[2].node.op_type + str(i): entry[0] for i, entry in enumerate(steps)}
    assert [k for k, v in kinds.items() if k.startswith("Reshape")] and all(
        v == "bound" for k, v in kinds.items() if k.startswith("Reshape")
    ), kinds


def test_strided_rows_merge_what_is_contiguous() -> None:
    from runtime.native.convnets import strided_rows

    x = np.zeros((2, 2, 2, 3, 4, 5), dtype=np.float32).transpose(0, 1, 3, 2, 4, 5)
    outer, row = strided_rows(x)  # type: ignore[misc]
    assert row == 4 * 5 * 4 and [d for d, _ in outer] == [4, 3, 2]
    assert strided_rows(np.zeros((3, 4), dtype=np.float32).T) == ([(4, 4), (3, 16)], 4)


def test_a_kernel_reading_a_strided_view_is_bound_on_a_compiled_copy_of_it() -> None:
    """An MLP-Mixer's token mixing: a product reading a transposed planned buffer. The step is prebound on a copy
    the strided copy refreshes first, and answers as the unplanned run does, run after run."""
    rng = np.random.default_rng(5)
    w = rng.standard_normal((6, 5)).astype(np.float32)
    nodes = [
        helper.make_node("Abs", ["x"], ["a"]),
        helper.make_node("Transpose", ["a"], ["t"], perm=[0, 2, 1]),
        helper.make_node("MatMul", ["t", "w"], ["y"]),
    ]
    m = model(nodes, [vi("x", shape=[2, 6, 4])], [vi("y", shape=[2, 4, 5])], [onnx.numpy_helper.from_array(w, "w")])
    exe = compile_model(m)
    got = []
    for _ in range(3):
        x = rng.standard_normal((2, 6, 4)).astype(np.float32)
        y = exe.run({"x": x})["y"]
        np.testing.assert_allclose(y, np.abs(x).transpose(0, 2, 1) @ w, rtol=1e-5, atol=1e-6)
        got.append((y, np.abs(x).transpose(0, 2, 1) @ w))
    for y, want in got:  # outputs detached from the buffers the next runs reuse
        np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-6)
    static = next(iter(exe.plan._static.values()))  # type: ignore[union-attr]
    _, steps, _, _ = static._state()
    kinds = {entry[2].node.op_type: entry[0] for entry in steps}
    assert kinds["FusedMatMul"] == "bound", kinds


@pytest.mark.parametrize("dtype", [np.int8, np.float16, np.float32, np.int64, np.complex128])
def test_the_strided_copy_gathers_any_view_in_c_order(dtype: type) -> None:
    """Transposes (one element per row: the runs along the innermost strided dim), row blocks, slices with steps
    and reversed dims, at sizes that split across the copy's tasks mid-run."""
    from runtime.native.convnets import strided_copy_call

    lib = native.lib()
    assert lib is not None
    rng = np.random.default_rng(7)
    base = (rng.standard_normal((6, 70, 33, 5)) * 50).astype(dtype)
    views = [
        base.transpose(0, 2, 1, 3),
        base.transpose(3, 1, 2, 0),
        base.transpose(0, 1, 3, 2),
        base[:, ::3, 1:30:2, :],
        base[::-1, :, ::-1, 2],
        base[2].T,
        base[0, 5, 7, 1:2],  # one element: rank 0 after merging
    ]
    for view in views:
        out = np.zeros(view.shape, dtype=dtype)
        call = strided_copy_call(lib, view, out)
        assert call is not None, view.strides
        call()
        np.testing.assert_array_equal(out, view)
