"""Feeding a planned run's own staged-input buffer skips its copy; any other array is still copied in."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from onnx import TensorProto, helper

from runtime import compile_model


def _add_model() -> bytes:
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "w"], ["s"]), helper.make_node("Mul", ["s", "s"], ["y"])],
        "add",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3]),
            helper.make_tensor_value_info("w", TensorProto.FLOAT, [2, 3]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def test_a_fed_staged_buffer_is_read_in_place_and_other_arrays_are_copied(monkeypatch: pytest.MonkeyPatch) -> None:
    exe = compile_model(_add_model(), 1)
    x, w = np.ones((2, 3), np.float32), np.full((2, 3), 2.0, np.float32)
    assert exe.input_buffers({"x": x, "w": w}) == {}  # not planned before a run of this signature
    for _ in range(2):  # the first run records, the second runs planned
        np.testing.assert_array_equal(exe.run({"x": x, "w": w})["y"], 9)
    staged = exe.input_buffers({"x": x, "w": w})
    assert set(staged) == {"x", "w"}
    assert staged["w"] is not w and np.array_equal(staged["w"], w)
    held = staged["w"]
    held += 1  # changed in place, as a trainer's optimiser does: the next run reads it where it lies
    copied_into: list[Any] = []
    copyto = np.copyto

    def counting_copyto(dst: Any, src: Any, *args: Any, **kwargs: Any) -> None:
        copied_into.append(dst)
        copyto(dst, src, *args, **kwargs)

    monkeypatch.setattr(np, "copyto", counting_copyto)
    np.testing.assert_array_equal(exe.run({"x": x, "w": held})["y"], 16)
    assert any(d is staged["x"] for d in copied_into) and not any(d is held for d in copied_into)
    monkeypatch.undo()
    w[...] = 5  # an array of the caller's is copied in, over what the buffer held
    np.testing.assert_array_equal(exe.run({"x": x, "w": w})["y"], 36)
    assert np.array_equal(held, w)
    assert exe.input_buffers({"x": np.ones((2, 3), np.float64), "w": w}) == {}  # another signature: none
