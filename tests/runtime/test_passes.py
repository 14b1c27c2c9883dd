"""Graph passes: op counts before/after, numerical equality, the verifier after each pass, disabling by name."""

from __future__ import annotations

import os

import numpy as np
import onnx
import pytest
from onnx import helper

from runtime import Executable, RuntimeModelError, compile_model
from runtime.check import topological_order
from runtime.passes import pass_names
from tests.runtime.graphs import I64, const, model, vi


def _ops(exe: Executable) -> list[str]:
    return [n.op_type for n in exe.model.graph.nodes]


def _same_outputs(m: onnx.ModelProto, feeds: dict[str, np.ndarray], passes: list[str] | None = None) -> Executable:
    """Compile with and without passes; outputs must agree exactly and the optimised graph must verify."""
    plain = compile_model(m, passes=[])
    optimised = compile_model(m, passes=passes)
    topological_order(optimised.model.graph)  # verifier: every read defined, no cycle, single producers
    a, b = plain.run(feeds), optimised.run(feeds)
    assert a.keys() == b.keys()
    for name in a:
        np.testing.assert_array_equal(a[name], b[name])
    return optimised


def test_identity_elimination_rewires_readers_and_renames_into_outputs() -> None:
    nodes = [
        helper.make_node("Identity", ["x"], ["a"]),
        helper.make_node("Relu", ["a"], ["b"]),
        helper.make_node("Identity", ["b"], ["y"]),  # y is a graph output: Relu's output gets renamed to y
    ]
    m = model(nodes, [vi("x", shape=[3])], [vi("y", shape=[3])])
    exe = _same_outputs(m, {"x": np.array([-1.0, 0.0, 2.0], np.float32)}, passes=["identity_elimination"])
    assert _ops(exe) == ["Relu"]
    assert exe.stats["passes"] == {"identity_elimination": 2}


def test_identity_of_a_graph_input_into_a_graph_output_stays() -> None:
    m = model([helper.make_node("Identity", ["x"], ["y"])], [vi("x", shape=[1])], [vi("y", shape=[1])])
    exe = _same_outputs(m, {"x": np.ones(1, np.float32)})
    assert _ops(exe) == ["Identity"]


def test_inference_dropout_is_removed_but_training_dropout_stays() -> None:
    nodes = [helper.make_node("Dropout", ["x"], ["d"]), helper.make_node("Relu", ["d"], ["y"])]
    m = model(nodes, [vi("x", shape=[4])], [vi("y", shape=[4])])
    exe = _same_outputs(m, {"x": np.linspace(-1, 1, 4).astype(np.float32)})
    assert _ops(exe) == ["Relu"]

    training = [helper.make_node("Dropout", ["x", "r", "t"], ["y"])]
    m2 = model(
        training,
        [vi("x", shape=[4])],
        [vi("y", shape=[4])],
        [const("r", 0.5), const("t", True, np.bool_)],
    )
    assert _ops(compile_model(m2)) == ["Dropout"]


def test_constant_folding_evaluates_constant_subgraphs_with_the_kernels() -> None:
    nodes = [
        helper.make_node("Constant", [], ["c"], value=helper.make_tensor("v", onnx.TensorProto.FLOAT, [3], [1, 2, 3])),
        helper.make_node("Mul", ["c", "two"], ["c2"]),
        helper.make_node("Shape", ["c2"], ["shp"]),
        helper.make_node("Reshape", ["x", "shp"], ["xr"]),
        helper.make_node("Add", ["xr", "c2"], ["y"]),
    ]
    m = model(nodes, [vi("x", shape=[1, 3])], [vi("y", shape=[3])], [const("two", 2.0)])
    exe = _same_outputs(m, {"x": np.ones((1, 3), np.float32)})
    assert _ops(exe) == ["Reshape", "Add"]
    np.testing.assert_array_equal(exe.model.graph.initializers["c2"], [2.0, 4.0, 6.0])
    assert "two" not in exe.model.graph.initializers  # dead after folding


def test_overridable_initializers_and_random_ops_are_not_folded() -> None:
    nodes = [
        helper.make_node("Neg", ["w"], ["nw"]),
        helper.make_node("RandomUniformLike", ["nw"], ["r"]),
        helper.make_node("Add", ["nw", "x"], ["y"]),
    ]
    m = model(
        nodes,
        [vi("x", shape=[2]), vi("w", shape=[2])],
        [vi("y", shape=[2]), vi("r", shape=[2])],
        [const("w", [1.0, 2.0])],
    )
    assert _ops(compile_model(m)) == ["Neg", "RandomUniformLike", "Add"]


def test_folding_keeps_big_results_as_nodes() -> None:
    nodes = [helper.make_node("ConstantOfShape", ["shape"], ["big"]), helper.make_node("Add", ["big", "x"], ["y"])]
    m = model(nodes, [vi("x", shape=[1])], [vi("y")], [const("shape", [1 << 19], np.int64)])  # 2 MiB of float32
    assert _ops(compile_model(m)) == ["ConstantOfShape", "Add"]
    small = model(nodes, [vi("x", shape=[1])], [vi("y")], [const("shape", [16], np.int64)])
    assert _ops(compile_model(small)) == ["Add"]


def test_dead_nodes_and_unused_initializers_are_removed() -> None:
    nodes = [
        helper.make_node("Relu", ["x"], ["y"]),
        helper.make_node("Neg", ["x"], ["unused"]),
        helper.make_node("Exp", ["unused"], ["unused2"]),
    ]
    m = model(nodes, [vi("x", shape=[2])], [vi("y", shape=[2])], [const("orphan", [1.0])])
    exe = _same_outputs(m, {"x": np.ones(2, np.float32)}, passes=["dead_node_elimination"])
    assert _ops(exe) == ["Relu"]
    assert exe.stats["passes"] == {"dead_node_elimination": 3}


def test_values_read_only_by_subgraphs_are_kept() -> None:
    then_g = helper.make_graph([helper.make_node("Identity", ["hidden"], ["t"])], "t", [], [vi("t", shape=[1])])
    nodes = [
        helper.make_node("Neg", ["x"], ["hidden"]),
        helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=then_g),
    ]
    m = model(nodes, [vi("x", shape=[1]), vi("c", onnx.TensorProto.BOOL, [])], [vi("y", shape=[1])])
    exe = _same_outputs(m, {"x": np.ones(1, np.float32), "c": np.array(True)})
    assert _ops(exe) == ["Neg", "If"]


def test_passes_can_be_disabled_by_name_and_unknown_names_fail() -> None:
    nodes = [helper.make_node("Identity", ["x"], ["a"]), helper.make_node("Relu", ["a"], ["y"])]
    m = model(nodes, [vi("x", shape=[1])], [vi("y", shape=[1])])
    assert _ops(compile_model(m, disable=["identity_elimination"])) == ["Identity", "Relu"]
    assert _ops(compile_model(m)) == ["Relu"]
    with pytest.raises(RuntimeModelError, match="unknown pass 'fuse_everything'"):
        compile_model(m, disable=["fuse_everything"])


@pytest.mark.parametrize("only", pass_names())
def test_each_pass_alone_keeps_a_real_model_correct(only: str) -> None:
    path = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light", "light_squeezenet.onnx")
    m = onnx.load(path)
    data = next(i for i in m.graph.input if i.name not in {t.name for t in m.graph.initializer})
    name, shape = data.name, [d.dim_value for d in data.type.tensor_type.shape.dim]
    x = np.random.default_rng(0).random(shape, dtype=np.float32)
    before = len(compile_model(m, passes=[]).model.graph.nodes)
    exe = _same_outputs(m, {name: x}, passes=[only])
    assert len(exe.model.graph.nodes) <= before


def test_shape_of_int_constant_folds_to_int64() -> None:
    m = model(
        [helper.make_node("Shape", ["k"], ["s"]), helper.make_node("Reshape", ["x", "s"], ["y"])],
        [vi("x", shape=[4])],
        [vi("y", shape=[2, 2])],
        [const("k", np.zeros((2, 2)), np.int64)],
    )
    exe = _same_outputs(m, {"x": np.arange(4, dtype=np.float32)})
    assert exe.model.graph.initializers["s"].dtype == np.int64
    assert I64 == onnx.TensorProto.INT64
