"""Shape arithmetic over inferred shapes: static dims become constants, run-time Reshape targets become constant
ones, and the arithmetic then folds away; a dynamic batch keeps working."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper

from runtime import compile_model
from tests.runtime.graphs import I64, const, model, vi
from tests.runtime.passes.conftest import compare, ops_of

rng = np.random.default_rng(5)
PASSES = ["constant_folding", "shape_values", "dead_node_elimination"]


def _split_heads(allowzero: int = 0) -> onnx.ModelProto:
    """``x.reshape(b, n, heads, d // heads)`` as torch exports it, with b dynamic and n static."""
    nodes = [
        helper.make_node("Shape", ["x"], ["shape"]),
        helper.make_node("Gather", ["shape", "zero"], ["b"], axis=0),
        helper.make_node("Gather", ["shape", "one"], ["n"], axis=0),
        helper.make_node("Gather", ["shape", "two"], ["d"], axis=0),
        helper.make_node("Div", ["d", "heads"], ["dh"]),
        helper.make_node("Unsqueeze", ["b", "axes"], ["b1"]),
        helper.make_node("Unsqueeze", ["n", "axes"], ["n1"]),
        helper.make_node("Unsqueeze", ["dh", "axes"], ["dh1"]),
        helper.make_node("Concat", ["b1", "n1", "heads1", "dh1"], ["target"], axis=0),
        helper.make_node("Reshape", ["x", "target"], ["y"], allowzero=allowzero),
    ]
    inits = [
        const("zero", 0, np.int64),
        const("one", 1, np.int64),
        const("two", 2, np.int64),
        const("heads", 3, np.int64),
        const("heads1", [3], np.int64),
        const("axes", [0], np.int64),
    ]
    return model(nodes, [vi("x", shape=["batch", 5, 12])], [vi("y", shape=None)], inits)


def test_a_run_time_reshape_target_becomes_constant_and_its_arithmetic_folds() -> None:
    m = _split_heads()
    for batch in (1, 4):
        feeds = {"x": rng.standard_normal((batch, 5, 12)).astype(np.float32)}
        exe = compare(m, feeds, passes=PASSES, exact=True)
        assert ops_of(exe) == ["Reshape"]
        target = exe.model.graph.initializers[exe.model.graph.nodes[0].inputs[1]]
        assert list(target) == [0, 5, 3, 4]  # the batch copied from x, the rest known


def test_the_constant_reshape_is_a_fixed_view_in_the_memory_plan() -> None:
    exe = compile_model(_split_heads(), passes=PASSES)
    x = rng.standard_normal((2, 5, 12)).astype(np.float32)
    for _ in range(3):
        np.testing.assert_array_equal(exe.run({"x": x})["y"], x.reshape(2, 5, 3, 4))


def test_allowzero_reshapes_are_left_alone() -> None:
    m = _split_heads(allowzero=1)
    m.opset_import[0].version = 18
    exe = compare(m, {"x": rng.standard_normal((2, 5, 12)).astype(np.float32)}, passes=PASSES, exact=True)
    assert "Concat" in ops_of(exe)


def test_a_target_from_input_values_is_left_alone() -> None:
    nodes = [helper.make_node("Reshape", ["x", "s"], ["y"])]
    m = model(nodes, [vi("x", shape=["a", "b"]), vi("s", I64, [2])], [vi("y", shape=None)])
    feeds = {"x": rng.standard_normal((3, 4)).astype(np.float32), "s": np.array([4, 3], dtype=np.int64)}
    exe = compare(m, feeds, passes=PASSES, exact=True)
    assert exe.model.graph.nodes[0].inputs[1] == "s"


def test_a_dim_symbol_moved_to_another_place_is_left_alone() -> None:
    nodes = [
        helper.make_node("Shape", ["x"], ["shape"]),
        helper.make_node("Gather", ["shape", "zero"], ["b"], axis=0),
        helper.make_node("Unsqueeze", ["b", "axes"], ["b1"]),
        helper.make_node("Concat", ["minus1", "b1"], ["target"], axis=0),  # [-1, b]: b is not at place 1 of x
        helper.make_node("Reshape", ["x", "target"], ["y"]),
    ]
    inits = [const("zero", 0, np.int64), const("axes", [0], np.int64), const("minus1", [-1], np.int64)]
    m = model(nodes, [vi("x", shape=["batch", 6])], [vi("y", shape=None)], inits)
    exe = compare(m, {"x": rng.standard_normal((2, 6)).astype(np.float32)}, passes=PASSES, exact=True)
    assert "Concat" in ops_of(exe)


def test_a_static_dim_of_a_dynamic_shape_folds() -> None:
    nodes = [
        helper.make_node("Shape", ["x"], ["shape"]),
        helper.make_node("Gather", ["shape", "last"], ["d"], axis=0),
        helper.make_node("Cast", ["d"], ["df"], to=onnx.TensorProto.FLOAT),
        helper.make_node("Mul", ["x", "df"], ["y"]),
    ]
    m = model(nodes, [vi("x", shape=["batch", 7])], [vi("y", shape=["batch", 7])], [const("last", -1, np.int64)])
    exe = compare(m, {"x": rng.standard_normal((2, 7)).astype(np.float32)}, passes=PASSES, exact=True)
    assert ops_of(exe) == ["Mul"]


def test_a_sliced_shape_flattening_the_tail_becomes_constant() -> None:
    """``x.flatten(2)`` as torch exports it: Concat(Slice(Shape(x), 0, 2), [-1])."""
    nodes = [
        helper.make_node("Shape", ["x"], ["shape"]),
        helper.make_node("Slice", ["shape", "begin", "two"], ["lead"]),
        helper.make_node("Concat", ["lead", "minus1"], ["target"], axis=0),
        helper.make_node("Reshape", ["x", "target"], ["y"]),
    ]
    inits = [const("begin", [0], np.int64), const("two", [2], np.int64), const("minus1", [-1], np.int64)]
    m = model(nodes, [vi("x", shape=["batch", 4, 2, 3])], [vi("y", shape=None)], inits)
    exe = compare(m, {"x": rng.standard_normal((3, 4, 2, 3)).astype(np.float32)}, passes=PASSES, exact=True)
    assert ops_of(exe) == ["Reshape"]
    assert list(exe.model.graph.initializers[exe.model.graph.nodes[0].inputs[1]]) == [0, 4, -1]


def test_a_reshape_output_shape_read_from_its_target_lets_a_later_shape_fold() -> None:
    """The scale ``1/sqrt(Shape(q)[-1])`` of an exported scaled_dot_product_attention, where inference lost q's last
    dim behind a Reshape whose target holds it: the whole scale chain becomes one constant."""
    nodes = [
        helper.make_node("Shape", ["x"], ["shape"]),
        helper.make_node("Gather", ["shape", "zero"], ["b"], axis=0),
        helper.make_node("Unsqueeze", ["b", "axes"], ["b1"]),
        helper.make_node("Concat", ["b1", "rest"], ["target"], axis=0),
        helper.make_node("Reshape", ["x", "target"], ["q"]),  # x (batch, 24) -> q (batch, 3, 8)
        helper.make_node("Shape", ["q"], ["q_shape"]),
        helper.make_node("Slice", ["q_shape", "last", "end"], ["d"]),
        helper.make_node("Cast", ["d"], ["df"], to=onnx.TensorProto.FLOAT),
        helper.make_node("Sqrt", ["df"], ["root"]),
        helper.make_node("Div", ["q", "root"], ["y"]),
    ]
    inits = [
        const("zero", 0, np.int64),
        const("axes", [0], np.int64),
        const("rest", [3, 8], np.int64),
        const("last", [-1], np.int64),
        const("end", [2**62], np.int64),
    ]
    m = model(nodes, [vi("x", shape=["batch", 24])], [vi("y", shape=None)], inits)
    exe = compare(m, {"x": rng.standard_normal((2, 24)).astype(np.float32)}, passes=PASSES, exact=True)
    assert ops_of(exe) == ["Reshape", "Div"]


def _merge_batch_heads(scale_input: str = "heads", minus1: bool = False) -> onnx.ModelProto:
    """``x.view(n, b * heads, d)`` of an ``[n, b, heads * d]`` tensor, as ``nn.MultiheadAttention`` exports it: the
    middle element is computed (``b * heads``) from the run-time batch, so no constant names it."""
    nodes = [
        helper.make_node("Shape", ["x"], ["shape"]),
        helper.make_node("Gather", ["shape", "one"], ["b"], axis=0),
        helper.make_node("Mul", ["b", scale_input], ["bh"]),
        helper.make_node("Unsqueeze", ["bh", "axes"], ["bh1"]),
        helper.make_node("Concat", ["n1", "bh1", "minus1" if minus1 else "d1"], ["target"], axis=0),
        helper.make_node("Reshape", ["x", "target"], ["y"]),
    ]
    inits = [
        const("one", 1, np.int64),
        const("heads", 3, np.int64),
        const("axes", [0], np.int64),
        const("n1", [5], np.int64),
        const("d1", [4], np.int64),
        const("minus1", [-1], np.int64),
    ]
    inputs = [vi("x", shape=[5, "batch", 12])]
    if scale_input == "h":
        inputs.append(vi("h", I64, []))
    return model(nodes, inputs, [vi("y", shape=None)], inits)


def test_a_computed_batch_times_heads_element_becomes_minus_one() -> None:
    m = _merge_batch_heads()
    for batch in (1, 3):
        x = rng.standard_normal((5, batch, 12)).astype(np.float32)
        exe = compare(m, {"x": x}, passes=PASSES, exact=True)
        assert ops_of(exe) == ["Reshape"]
        assert list(exe.model.graph.initializers[exe.model.graph.nodes[0].inputs[1]]) == [5, -1, 4]
        np.testing.assert_array_equal(exe.run({"x": x})["y"], x.reshape(5, batch * 3, 4))


def test_a_computed_element_beside_a_minus_one_or_from_an_input_value_is_left_alone() -> None:
    x = rng.standard_normal((5, 2, 12)).astype(np.float32)
    exe = compare(_merge_batch_heads(minus1=True), {"x": x}, passes=PASSES, exact=True)
    assert "Concat" in ops_of(exe)  # two unknown elements: the -1 could not say which is which
    feeds = {"x": x, "h": np.array(3, dtype=np.int64)}
    exe = compare(_merge_batch_heads(scale_input="h"), feeds, passes=PASSES, exact=True)
    assert "Concat" in ops_of(exe)  # b * h with h a graph input: not a shape
