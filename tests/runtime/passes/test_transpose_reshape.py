"""Redundant Transpose and Reshape removal."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper

from tests.runtime.graphs import const, model, vi
from tests.runtime.passes.conftest import compare, ops_of

rng = np.random.default_rng(5)
X = {"x": rng.standard_normal((2, 3, 4, 5)).astype(np.float32)}


def test_inverse_transposes_cancel_and_others_compose() -> None:
    nodes = [
        helper.make_node("Transpose", ["x"], ["a"], perm=[0, 2, 3, 1]),
        helper.make_node("Transpose", ["a"], ["b"], perm=[0, 3, 1, 2]),
        helper.make_node("Relu", ["b"], ["r"]),
        helper.make_node("Transpose", ["r"], ["c"], perm=[1, 0, 2, 3]),
        helper.make_node("Transpose", ["c"], ["y"], perm=[0, 1, 3, 2]),
    ]
    m = model(nodes, [vi("x", shape=[2, 3, 4, 5])], [vi("y", shape=[3, 2, 5, 4])])
    exe = compare(m, X, passes=["transpose_reshape", "dead_node_elimination"], exact=True)
    assert ops_of(exe) == ["Relu", "Transpose"]


def test_reshape_chains_collapse_and_no_op_reshapes_vanish() -> None:
    nodes = [
        helper.make_node("Reshape", ["x", "s1"], ["a"]),
        helper.make_node("Reshape", ["a", "s2"], ["b"]),
        helper.make_node("Reshape", ["b", "s3"], ["c"]),  # already that shape: a no-op
        helper.make_node("Relu", ["c"], ["y"]),
    ]
    init = [const("s1", [6, 20], np.int64), const("s2", [2, 3, 20], np.int64), const("s3", [2, 3, 20], np.int64)]
    m = model(nodes, [vi("x", shape=[2, 3, 4, 5])], [vi("y", shape=[2, 3, 20])], init)
    exe = compare(m, X, passes=["transpose_reshape", "dead_node_elimination"], exact=True)
    assert ops_of(exe) == ["Reshape", "Relu"]


def test_a_reshape_with_zero_entries_keeps_its_input() -> None:
    nodes = [helper.make_node("Reshape", ["x", "s1"], ["a"]), helper.make_node("Reshape", ["a", "s2"], ["y"])]
    init = [const("s1", [6, 4, 5], np.int64), const("s2", [0, 20], np.int64)]
    m = model(nodes, [vi("x", shape=[2, 3, 4, 5])], [vi("y", TensorProto.FLOAT, [6, 20])], init)
    assert ops_of(compare(m, X, passes=["transpose_reshape"], exact=True)) == ["Reshape", "Reshape"]
