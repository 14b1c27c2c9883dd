"""Values one input signature fixes (runtime/fixed_values.py) are computed once by the static plan, and only those:
a shape read from a value whose shape can change between runs, and what the caller receives, stay per run."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper

from runtime import compile_model
from runtime.executor import Executable
from tests.runtime.graphs import const, model, vi

I64 = TensorProto.INT64


def _zero_state_model() -> onnx.ModelProto:
    """y = x + zeros([batch, 8]) where the zeros are rebuilt from x's shape, as torch.onnx exports a zero state."""
    nodes = [
        helper.make_node("Shape", ["x"], ["shape"]),
        helper.make_node("Gather", ["shape", "zero"], ["batch"], axis=0),
        helper.make_node("Unsqueeze", ["batch", "axes"], ["batch1"]),
        helper.make_node("Concat", ["batch1", "width"], ["dims"], axis=0),
        helper.make_node("ConstantOfShape", ["dims"], ["zeros"], value=helper.make_tensor("v", 1, [1], [0.5])),
        helper.make_node("Add", ["x", "zeros"], ["s"]),
        helper.make_node("Reshape", ["s", "dims"], ["y"]),
    ]
    init = [const("zero", 0, np.int64), const("axes", [0], np.int64), const("width", [8], np.int64)]
    return model(nodes, [vi("x", shape=["n", 8])], [vi("y", shape=["n", 8])], init)


def _skipped(exe: Executable) -> list[str]:
    static = next(iter(exe.plan._static.values()))  # type: ignore[union-attr]
    return sorted(exe.plan.steps[i].node.op_type for i in static.fixed)


def test_a_zero_state_rebuilt_from_shapes_is_computed_once_per_signature() -> None:
    exe = compile_model(_zero_state_model(), passes=[])
    for batch in (2, 2, 3, 3, 2):
        x = np.arange(batch * 8, dtype=np.float32).reshape(batch, 8)
        np.testing.assert_array_equal(exe.run({"x": x})["y"], x + 0.5)
    assert _skipped(exe) == ["Concat", "ConstantOfShape", "Gather", "Shape", "Unsqueeze"]


def test_a_shape_that_follows_input_values_is_read_every_run() -> None:
    # y = zeros(shape(x[:k])): x[:k] has the same signature for every k
    nodes = [
        helper.make_node("Slice", ["x", "start", "k"], ["part"]),
        helper.make_node("Shape", ["part"], ["shape"]),
        helper.make_node("ConstantOfShape", ["shape"], ["y"]),
    ]
    m = model(nodes, [vi("x", shape=[6, 4]), vi("k", I64, [1])], [vi("y")], [const("start", [0], np.int64)])
    exe = compile_model(m)
    x = np.ones((6, 4), dtype=np.float32)
    for k in (3, 3, 5, 2):
        assert exe.run({"x": x, "k": np.array([k], np.int64)})["y"].shape == (k, 4)


def test_what_the_caller_receives_is_never_fixed() -> None:
    nodes = [helper.make_node("Shape", ["x"], ["shape"]), helper.make_node("Relu", ["x"], ["y"])]
    exe = compile_model(model(nodes, [vi("x", shape=[2, 3])], [vi("shape", I64), vi("y")]))
    x = np.ones((2, 3), dtype=np.float32)
    first = exe.run({"x": x})["shape"]
    first[:] = 7  # the caller owns what it receives
    for _ in range(2):
        np.testing.assert_array_equal(exe.run({"x": x})["shape"], [2, 3])
    assert _skipped(exe) == []


def _class_token_model(target: str) -> onnx.ModelProto:
    """A ViT's class token expanded to the batch read from its patch tokens, a view of a computed value reshaped by
    ``target`` (a constant, or a graph input's values), then the tokens concatenated after it."""
    nodes = [
        helper.make_node("Relu", ["x"], ["r"]),
        helper.make_node("Reshape", ["r", target], ["tokens"]),
        helper.make_node("Shape", ["tokens"], ["shape"]),
        helper.make_node("Gather", ["shape", "zero"], ["batch"], axis=0),
        helper.make_node("Unsqueeze", ["batch", "axes"], ["batch1"]),
        helper.make_node("Concat", ["batch1", "one_c"], ["dims"], axis=0),
        helper.make_node("Expand", ["cls", "dims"], ["cls_n"]),
        helper.make_node("Concat", ["cls_n", "tokens"], ["y"], axis=1),
    ]
    init = [
        const("zero", 0, np.int64),
        const("axes", [0], np.int64),
        const("one_c", [1, 4], np.int64),
        const("cls", np.full((1, 1, 4), 7.0)),
        const("fixed_target", [0, -1, 4], np.int64),
    ]
    inputs = [vi("x", shape=["n", 4, 3, 2]), vi("given_target", I64, [3])]
    return model(nodes, inputs, [vi("y", shape=["n", 7, 4])], init)


def test_a_shape_read_from_a_view_shaped_by_constants_is_fixed_and_by_values_is_not() -> None:
    for target, fixed in (("fixed_target", True), ("given_target", False)):
        exe = compile_model(_class_token_model(target), passes=[])
        for batch in (2, 2, 3):
            x = np.arange(batch * 24, dtype=np.float32).reshape(batch, 4, 3, 2) - 20
            want = np.concatenate([np.full((batch, 1, 4), 7.0, np.float32), np.maximum(x, 0).reshape(batch, 6, 4)], 1)
            feeds = {"x": x, "given_target": np.array([0, -1, 4], np.int64)}
            np.testing.assert_array_equal(exe.run(feeds)["y"], want)
        assert ("Shape" in _skipped(exe)) is fixed, (target, _skipped(exe))
