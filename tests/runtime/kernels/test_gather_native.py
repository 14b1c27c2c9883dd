"""Gather over the static plan's fixed arrays runs the compiled row copy (``ap_gather``): the same values as
``np.take`` on every axis and element type, the indices read afresh each run, a bad index one line naming the node."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from runtime import compile_model, native
from runtime.errors import KernelError

pytestmark = pytest.mark.skipif(native.lib() is None, reason=f"compiled kernels unavailable: {native.status()}")

ONNX_TYPES = {np.float32: TensorProto.FLOAT, np.int64: TensorProto.INT64, np.bool_: TensorProto.BOOL,
              np.float16: TensorProto.FLOAT16}  # fmt: skip


def _gather_model(data: np.ndarray, index_shape: list[int], axis: int, index_type: int = TensorProto.INT64):
    node = helper.make_node("Gather", ["data", "ids"], ["y"], name="pick", axis=axis)
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("ids", index_type, index_shape)],
        [helper.make_tensor_value_info("y", ONNX_TYPES[data.dtype.type], None)],
        [numpy_helper.from_array(data, "data")],
    )  # fmt: skip
    return compile_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), threads=1)


@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.bool_, np.float16])
@pytest.mark.parametrize("axis", [0, 1, 2, -1])
def test_every_axis_and_type_picks_what_take_picks_run_after_run(
    dtype: type, axis: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    import runtime.kernels.tensor_index as tensor_index

    bound: list[object] = []
    real = tensor_index.gather_call
    monkeypatch.setattr(tensor_index, "gather_call", lambda *a: bound.append(real(*a)) or bound[-1])
    rng = np.random.default_rng(0)
    data = (rng.standard_normal((5, 6, 7)) * 3).astype(dtype)
    dim = data.shape[axis]
    exe = _gather_model(data, [2, 3], axis)
    for _ in range(3):  # the staged index buffer is refilled each run; the bound call reads it again
        ids = rng.integers(-dim, dim, (2, 3))
        np.testing.assert_array_equal(exe.run({"ids": ids})["y"], np.take(data, ids, axis=axis))
    assert bound and all(call is not None for call in bound)  # the static plan ran the compiled call


def test_int32_and_scalar_indices() -> None:
    data = np.arange(24, dtype=np.float32).reshape(4, 6)
    exe = _gather_model(data, [], 1, TensorProto.INT32)
    for i in (-6, 0, 5):
        np.testing.assert_array_equal(exe.run({"ids": np.array(i, np.int32)})["y"], data[:, i])


@pytest.mark.parametrize("bad", [6, -7])
def test_an_index_outside_the_axis_is_one_line_naming_the_node_and_the_next_run_is_fine(bad: int) -> None:
    data = np.arange(24, dtype=np.float32).reshape(4, 6)
    exe = _gather_model(data, [3], 1)
    exe.run({"ids": np.array([0, 1, 2])})
    message = rf"^node 'pick' \(Gather\): index {bad} is out of range for a dimension of size 6$"  # the compiled path's
    with pytest.raises(KernelError, match=message):
        exe.run({"ids": np.array([0, bad, 2])})
    np.testing.assert_array_equal(exe.run({"ids": np.array([5, -1, 0])})["y"], data[:, [5, 5, 0]])
