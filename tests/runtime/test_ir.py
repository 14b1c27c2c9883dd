"""The IR: attribute decoding (the kernel contract), values, round trip to ONNX, outer-scope names."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import AttributeProto, TensorProto, helper, numpy_helper

from runtime.ir import Graph, Model, Value, decode_attribute, graph_free_names
from tests.runtime.graphs import model, vi


def _attr(name: str, value: object, **kw: object) -> AttributeProto:
    return helper.make_attribute(name, value, **kw)  # type: ignore[arg-type]


def test_scalar_and_list_attributes_decode_to_python_types() -> None:
    assert decode_attribute(_attr("i", 3)) == 3 and isinstance(decode_attribute(_attr("i", 3)), int)
    assert decode_attribute(_attr("f", 0.5)) == 0.5
    assert decode_attribute(_attr("s", "héllo")) == "héllo"
    assert decode_attribute(_attr("ints", [1, -2])) == [1, -2]
    assert decode_attribute(_attr("floats", [1.5, 2.5])) == [1.5, 2.5]
    assert decode_attribute(_attr("strings", ["a", "b"])) == ["a", "b"]


def test_tensor_sparse_graph_and_type_attributes() -> None:
    t = numpy_helper.from_array(np.arange(6, dtype=np.int32).reshape(2, 3))
    decoded = decode_attribute(_attr("t", t))
    assert isinstance(decoded, np.ndarray) and decoded.dtype == np.int32 and decoded.shape == (2, 3)

    values = numpy_helper.from_array(np.array([5.0, 7.0], dtype=np.float32), "v")
    indices = numpy_helper.from_array(np.array([1, 5], dtype=np.int64), "i")
    sparse = helper.make_sparse_tensor(values, indices, [2, 3])
    dense = decode_attribute(_attr("sp", sparse))
    np.testing.assert_array_equal(dense, [[0, 5, 0], [0, 0, 7]])

    g = helper.make_graph([], "body", [], [])
    assert decode_attribute(_attr("g", g)) is not None
    assert isinstance(decode_attribute(_attr("g", g)), onnx.GraphProto)
    graphs = decode_attribute(_attr("gs", [g, g]))
    assert isinstance(graphs, list) and len(graphs) == 2

    tp = helper.make_tensor_type_proto(TensorProto.FLOAT, [2])
    assert isinstance(decode_attribute(_attr("tp", tp)), onnx.TypeProto)


def test_values_know_kind_dtype_and_static_shape() -> None:
    v = Value.from_type("x", helper.make_tensor_type_proto(TensorProto.FLOAT, [2, "n"]))
    assert v.kind == "tensor" and v.dtype == np.float32 and v.shape == (2, "n") and v.static_shape is None
    seq = Value.from_type("s", helper.make_sequence_type_proto(helper.make_tensor_type_proto(TensorProto.FLOAT, None)))
    assert seq.kind == "sequence"


def test_model_round_trips_through_onnx() -> None:
    m = model(
        [helper.make_node("Add", ["x", "w"], ["y"], name="add")],
        [vi("x", shape=[2])],
        [vi("y", shape=[2])],
        [numpy_helper.from_array(np.array([1.0, 2.0], dtype=np.float32), "w")],
    )
    ir = Model.from_onnx(m)
    assert [n.op_type for n in ir.graph.nodes] == ["Add"]
    assert ir.graph.nodes[0].opset == 17
    back = ir.to_onnx()
    onnx.checker.check_model(back)
    assert [i.name for i in back.graph.initializer] == ["w"]


def test_unnamed_and_duplicate_node_names_become_unique() -> None:
    m = model(
        [helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Relu", ["a"], ["b"])],
        [vi("x")],
        [vi("b")],
    )
    ir = Graph.from_onnx(m.graph, {"": 17})
    names = [n.name for n in ir.nodes]
    assert len(set(names)) == 2 and all(names)


def test_free_names_of_a_subgraph_include_nested_bodies() -> None:
    inner = helper.make_graph([helper.make_node("Add", ["a", "outer2"], ["c"])], "inner", [], [vi("c")])
    body = helper.make_graph(
        [
            helper.make_node("Relu", ["outer1"], ["a"]),
            helper.make_node("If", ["cond"], ["c"], then_branch=inner, else_branch=inner),
        ],
        "body",
        [],
        [vi("c")],
    )
    assert graph_free_names(body) == {"outer1", "outer2", "cond"}
