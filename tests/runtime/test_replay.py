"""Runs 1, 2 and 3 of one compiled model give onnxruntime's answer when shapes, axes or counts come from graph inputs.

The first run of an input signature records shapes and later runs replay a static plan; a value that shapes a result
(Reshape's shape, Squeeze's axes, TopK's k...) may change between runs with the same input shapes, so the replay
must not fix it (issue 21: run 1 right, runs 2+ silently wrong).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from runtime import compile_model

ort = pytest.importorskip("onnxruntime", reason="onnxruntime: extra not installed (the peer compared with)")

F, I64 = TensorProto.FLOAT, TensorProto.INT64
RNG = np.random.default_rng(21)


def _f(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def _i(*values: int) -> np.ndarray:
    return np.array(values, dtype=np.int64)


def _model(op: str, inputs: dict[str, Any], attrs: dict[str, Any], opset: int, n_out: int = 1) -> onnx.ModelProto:
    """``op`` over graph inputs named after ``inputs`` (whose first feed gives dtype and rank; every dim is symbolic,
    so later runs may change shapes), then ``Relu`` on a float first result: a planned step downstream."""
    graph_inputs = [
        helper.make_tensor_value_info(
            name, helper.np_dtype_to_tensor_dtype(v.dtype), [f"{name}{d}" for d in range(v.ndim)]
        )
        for name, v in inputs.items()
    ]
    outs = [f"t{k}" for k in range(n_out)]
    nodes = [helper.make_node(op, list(inputs), outs, **attrs)]
    graph_outputs = [helper.make_empty_tensor_value_info(o) for o in outs]
    nodes.append(helper.make_node("Identity", [outs[0]], ["first"]))
    graph_outputs.append(helper.make_empty_tensor_value_info("first"))
    graph = helper.make_graph(nodes, op.lower(), graph_inputs, graph_outputs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def _with_relu(model: onnx.ModelProto) -> onnx.ModelProto:
    model.graph.node.append(helper.make_node("Relu", ["t0"], ["relu"]))
    model.graph.output.append(helper.make_empty_tensor_value_info("relu"))
    return model


#: (op, attrs, opset, outputs, a float first result, three feeds: what shapes the result changes each run)
CASES: list[tuple[str, dict[str, Any], int, int, bool, Sequence[dict[str, np.ndarray]]]] = [
    (
        "Reshape",
        {},
        17,
        1,
        True,
        [{"x": _f(8, 16), "s": _i(8, 16)}, {"x": _f(8, 16), "s": _i(4, 32)}, {"x": _f(8, 16), "s": _i(2, -1)}],
    ),
    (
        "Unsqueeze",
        {},
        17,
        1,
        True,
        [{"x": _f(4, 8), "a": _i(0)}, {"x": _f(4, 8), "a": _i(1)}, {"x": _f(4, 8), "a": _i(-1)}],
    ),
    (
        "Squeeze",
        {},
        17,
        1,
        True,
        [{"x": _f(1, 4, 1, 8), "a": _i(0)}, {"x": _f(1, 4, 1, 8), "a": _i(2)}, {"x": _f(1, 4, 1, 8), "a": _i(0)}],
    ),
    (
        "Expand",
        {},
        17,
        1,
        True,
        [{"x": _f(1, 4), "s": _i(3, 4)}, {"x": _f(1, 4), "s": _i(2, 4)}, {"x": _f(1, 4), "s": _i(5, 1)}],
    ),
    (
        "Tile",
        {},
        17,
        1,
        True,
        [{"x": _f(2, 3), "r": _i(1, 1)}, {"x": _f(2, 3), "r": _i(2, 3)}, {"x": _f(2, 3), "r": _i(3, 1)}],
    ),
    (
        "Slice",
        {},
        17,
        1,
        True,
        [
            {"x": _f(6, 8), "b": _i(0), "e": _i(3)},
            {"x": _f(6, 8), "b": _i(1), "e": _i(6)},
            {"x": _f(6, 8), "b": _i(2), "e": _i(8)},
        ],
    ),
    (
        "ConstantOfShape",
        {"value": helper.make_tensor("v", F, [1], [1.5])},
        17,
        1,
        True,
        [{"s": _i(2, 3)}, {"s": _i(4, 1)}, {"s": _i(1, 5)}],
    ),
    (
        "Range",
        {},
        17,
        1,
        True,
        [
            {"a": np.array(0, np.float32), "b": np.array(5, np.float32), "c": np.array(1, np.float32)},
            {"a": np.array(1, np.float32), "b": np.array(10, np.float32), "c": np.array(2, np.float32)},
            {"a": np.array(0, np.float32), "b": np.array(3, np.float32), "c": np.array(0.5, np.float32)},
        ],
    ),
    ("TopK", {}, 17, 2, True, [{"x": _f(10), "k": _i(3)}, {"x": _f(10), "k": _i(5)}, {"x": _f(10), "k": _i(1)}]),
    (
        "Pad",
        {},
        17,
        1,
        True,
        [
            {"x": _f(3, 4), "p": _i(0, 0, 0, 0)},
            {"x": _f(3, 4), "p": _i(1, 0, 0, 2)},
            {"x": _f(3, 4), "p": _i(2, 1, 1, 0)},
        ],
    ),
    (
        "ReduceSum",
        {"keepdims": 0},
        17,
        1,
        True,
        [{"x": _f(2, 3, 4), "a": _i(0)}, {"x": _f(2, 3, 4), "a": _i(1)}, {"x": _f(2, 3, 4), "a": _i(2)}],
    ),
    (
        "Split",
        {},
        17,
        2,
        True,
        [{"x": _f(10), "s": _i(5, 5)}, {"x": _f(10), "s": _i(3, 7)}, {"x": _f(10), "s": _i(1, 9)}],
    ),
    (
        "OneHot",
        {},
        17,
        1,
        True,
        [
            {"i": _i(0, 1, 2), "d": np.array(4, np.float32), "v": np.array([0, 1], np.float32)},
            {"i": _i(0, 1, 2), "d": np.array(6, np.float32), "v": np.array([0, 1], np.float32)},
            {"i": _i(0, 1, 2), "d": np.array(3, np.float32), "v": np.array([0, 1], np.float32)},
        ],
    ),
    (
        "Compress",
        {"axis": 0},
        17,
        1,
        True,
        [
            {"x": _f(6), "c": np.array([1, 0, 1, 0, 0, 0], bool)},
            {"x": _f(6), "c": np.array([1, 1, 1, 1, 0, 1], bool)},
            {"x": _f(6), "c": np.array([0, 0, 0, 0, 0, 1], bool)},
        ],
    ),
    (
        "NonZero",
        {},
        17,
        1,
        False,
        [
            {"x": np.array([0, 1, 0, 2, 3, 0], np.float32)},
            {"x": np.array([1, 1, 1, 2, 3, 0], np.float32)},
            {"x": np.array([0, 0, 0, 0, 3, 0], np.float32)},
        ],
    ),
    (
        "Gather",
        {"axis": 0},
        17,
        1,
        True,
        [{"x": _f(5, 3), "i": _i(0, 1)}, {"x": _f(5, 3), "i": _i(4, 2)}, {"x": _f(5, 3), "i": _i(3, 3)}],
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_runs_1_2_3_match_onnxruntime_when_inputs_shape_the_result(case: Any) -> None:
    op, attrs, opset, n_out, relu, feeds = case
    model = _model(op, feeds[0], attrs, opset, n_out)
    if relu:
        model = _with_relu(model)
    model = onnx.shape_inference.infer_shapes(model)
    exe = compile_model(model)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [o.name for o in model.graph.output]
    for run, feed in enumerate([*feeds, feeds[0]], start=1):
        ours = exe.run(feed)
        theirs = dict(zip(names, session.run(names, feed), strict=True))
        for name in names:
            assert ours[name].shape == theirs[name].shape, f"{op} run {run} output {name}"
            np.testing.assert_allclose(ours[name], theirs[name], rtol=1e-5, atol=1e-6, err_msg=f"{op} run {run}")


def test_a_view_shaped_by_an_input_feeds_a_planned_chain() -> None:
    """Reshape by an input shape, then a constant Transpose (a fixed view) and Relu (a prebound call)."""
    x = helper.make_tensor_value_info("x", F, [8, 16])
    s = helper.make_tensor_value_info("s", I64, [2])
    y = helper.make_tensor_value_info("y", F, None)
    nodes = [
        helper.make_node("Reshape", ["x", "s"], ["r"]),
        helper.make_node("Transpose", ["r"], ["t"], perm=[1, 0]),
        helper.make_node("Relu", ["t"], ["y"]),
    ]
    model = helper.make_model(helper.make_graph(nodes, "g", [x, s], [y]), opset_imports=[helper.make_opsetid("", 17)])
    exe = compile_model(model)
    for shape in ([8, 16], [4, 32], [2, 64], [4, 32], [8, 16]):
        xv = _f(8, 16)
        got = exe.run({"x": xv, "s": np.array(shape, np.int64)})["y"]
        np.testing.assert_array_equal(got, np.maximum(xv.reshape(shape).T, 0))
