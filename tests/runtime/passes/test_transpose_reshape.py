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


def _patch_tokens(target: list[int]) -> object:
    """A ViT's patch embedding: Conv, then ``flatten(2).transpose(1, 2)``, then LayerNorm over the channels."""
    rng = np.random.default_rng(8)
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], strides=[4, 4]),
        helper.make_node("Reshape", ["c", "target"], ["r"]),
        helper.make_node("Transpose", ["r"], ["t"], perm=[0, 2, 1]),
        helper.make_node("LayerNormalization", ["t", "scale"], ["y"], axis=-1),
    ]
    init = [
        const("w", rng.standard_normal((16, 3, 4, 4)) * 0.3),
        const("target", target, np.int64),
        const("scale", rng.uniform(0.5, 2, 16)),
    ]
    return model(nodes, [vi("x", shape=["n", 3, 16, 16])], [vi("y", shape=["n", 16, 16])], init)


def test_patch_tokens_of_an_nhwc_map_are_its_rows() -> None:
    feeds = {"x": np.random.default_rng(9).standard_normal((2, 3, 16, 16)).astype(np.float32)}
    for target in ([0, 16, -1], [0, 16, 16]):
        ops = ops_of(compare(_patch_tokens(target), feeds, layout="nhwc", rtol=1e-4))  # type: ignore[arg-type]
        assert "ToNchw" not in ops and "Transpose" not in ops, (target, ops)


def test_a_reshape_that_is_not_a_flattening_of_the_map_keeps_its_transpose() -> None:
    """[N, 16, 4, 4] read as [N, 8, 32]: channels split across rows, not the map's own rows."""
    rng = np.random.default_rng(8)
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], strides=[4, 4]),
        helper.make_node("Reshape", ["c", "target"], ["r"]),
        helper.make_node("Transpose", ["r"], ["y"], perm=[0, 2, 1]),
    ]
    init = [const("w", rng.standard_normal((16, 3, 4, 4)) * 0.3), const("target", [0, 8, -1], np.int64)]
    m = model(nodes, [vi("x", shape=["n", 3, 16, 16])], [vi("y", shape=["n", 32, 8])], init)
    feeds = {"x": rng.standard_normal((2, 3, 16, 16)).astype(np.float32)}
    assert "Transpose" in ops_of(compare(m, feeds, layout="nhwc", rtol=1e-4))
