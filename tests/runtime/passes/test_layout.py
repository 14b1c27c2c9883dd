"""NHWC layout: convolutions and the ops between them change layout once, at the graph's edges."""

from __future__ import annotations

from collections import Counter

import numpy as np
import onnx
import pytest
from onnx import helper

from runtime import compile_model, native
from tests.runtime.graphs import const, model, vi
from tests.runtime.passes.conftest import compare

rng = np.random.default_rng(3)


def _block() -> onnx.ModelProto:
    """conv-bn-relu -> maxpool -> two branches (1x1 conv, 3x3 depthwise) -> concat -> per-channel affine -> GAP."""
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1], strides=[2, 2]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
        helper.make_node("Conv", ["p1", "w2"], ["c2"]),
        helper.make_node("Conv", ["p1", "w3"], ["c3"], pads=[1, 1, 1, 1], group=8),
        helper.make_node("Concat", ["c2", "c3"], ["cat"], axis=1),
        helper.make_node("BatchNormalization", ["cat", "s", "t", "mu", "var"], ["bn"]),
        helper.make_node("Mul", ["bn", "chan"], ["sc"]),
        helper.make_node("Clip", ["sc", "lo", "hi"], ["cl"]),
        helper.make_node("AveragePool", ["cl"], ["ap"], kernel_shape=[2, 2], strides=[1, 1]),
        helper.make_node("GlobalAveragePool", ["ap"], ["y"]),
    ]
    init = [
        const("w1", rng.standard_normal((8, 3, 3, 3))),
        const("b1", rng.standard_normal(8)),
        const("w2", rng.standard_normal((8, 8, 1, 1))),
        const("w3", rng.standard_normal((8, 1, 3, 3))),
        const("s", rng.uniform(0.5, 2, 16)),
        const("t", rng.standard_normal(16)),
        const("mu", rng.standard_normal(16)),
        const("var", rng.uniform(0.5, 2, 16)),
        const("chan", rng.uniform(0.5, 2, (16, 1, 1))),
        const("lo", 0.0),
        const("hi", 6.0),
    ]
    return model(nodes, [vi("x", shape=[2, 3, 32, 32])], [vi("y", shape=[2, 16, 1, 1])], init)


FEEDS = {"x": rng.standard_normal((2, 3, 32, 32)).astype(np.float32)}


@pytest.mark.skipif(native.lib() is None, reason="layout 'auto' needs the compiled kernels")
def test_one_layout_change_in_and_one_out() -> None:
    exe = compare(_block(), FEEDS, rtol=1e-4)
    ops = Counter(n.op_type for n in exe.model.graph.nodes)
    assert ops["ToNhwc"] == 1 and ops["ToNchw"] == 1
    assert ops["NhwcConv"] == 3 and ops["NhwcMaxPool"] == 1 and ops["NhwcAveragePool"] == 1
    assert ops["NhwcConcat"] == 1 and ops["NhwcGlobalAveragePool"] == 1
    assert "BatchNormalization" not in ops and "Conv" not in ops


def test_forced_nhwc_runs_on_numpy_too(numpy_only: None) -> None:
    exe = compare(_block(), FEEDS, rtol=1e-4, layout="nhwc")
    assert Counter(n.op_type for n in exe.model.graph.nodes)["ToNhwc"] == 1


def test_nchw_mode_and_disabling_keep_the_layout() -> None:
    for kwargs in ({"layout": "nchw"}, {"disable": ["layout"]}):
        exe = compile_model(_block(), **kwargs)
        assert not any(n.op_type.startswith("Nhwc") for n in exe.model.graph.nodes)


def test_a_conv_with_runtime_weights_stays_nchw() -> None:
    node = helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])
    m = model([node], [vi("x", shape=[1, 3, 8, 8]), vi("w", shape=[4, 3, 3, 3])], [vi("y", shape=[1, 4, 8, 8])])
    exe = compile_model(m, layout="nhwc")
    assert [n.op_type for n in exe.model.graph.nodes] == ["Conv"]


def test_same_padding_is_resolved_from_static_shapes() -> None:
    node = helper.make_node("Conv", ["x", "w"], ["y"], auto_pad="SAME_UPPER", strides=[2, 2])
    m = model(
        [node],
        [vi("x", shape=[1, 3, 9, 9])],
        [vi("y", shape=[1, 4, 5, 5])],
        [const("w", rng.standard_normal((4, 3, 3, 3)))],
    )
    exe = compare(m, {"x": rng.standard_normal((1, 3, 9, 9)).astype(np.float32)}, layout="nhwc", rtol=1e-4)
    assert "NhwcConv" in [n.op_type for n in exe.model.graph.nodes]


def test_channel_shuffle_moves_to_nhwc_without_layout_changes() -> None:
    groups, c = 4, 16
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Reshape", ["c1", "split"], ["r1"]),
        helper.make_node("Transpose", ["r1"], ["t1"], perm=[0, 2, 1, 3, 4]),
        helper.make_node("Reshape", ["t1", "merge"], ["r2"]),
        helper.make_node("Conv", ["r2", "w2"], ["y"], group=groups),
    ]
    init = [
        const("w1", rng.standard_normal((c, 3, 3, 3))),
        const("w2", rng.standard_normal((c, c // groups, 1, 1))),
        const("split", [1, groups, c // groups, 6, 6], np.int64),
        const("merge", [1, c, 6, 6], np.int64),
    ]
    m = model(nodes, [vi("x", shape=[1, 3, 6, 6])], [vi("y", shape=[1, c, 6, 6])], init)
    exe = compare(m, {"x": rng.standard_normal((1, 3, 6, 6)).astype(np.float32)}, layout="nhwc", rtol=1e-4)
    ops = Counter(n.op_type for n in exe.model.graph.nodes)
    assert ops["ToNhwc"] == 1 and ops["ToNchw"] == 1 and ops["ChannelShuffle"] == 1 and not ops["Transpose"]


def test_a_relu_after_an_nhwc_concat_becomes_a_compiled_chain() -> None:
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["a"], pads=[1, 1, 1, 1]),
        helper.make_node("Conv", ["x", "w2"], ["b"], pads=[1, 1, 1, 1]),
        helper.make_node("Concat", ["a", "b"], ["c"], axis=1),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("Conv", ["r", "w3"], ["y"]),
    ]
    init = [
        const("w1", rng.standard_normal((4, 3, 3, 3))),
        const("w2", rng.standard_normal((4, 3, 3, 3))),
        const("w3", rng.standard_normal((5, 8, 1, 1))),
    ]
    m = model(nodes, [vi("x", shape=[1, 3, 6, 6])], [vi("y", shape=[1, 5, 6, 6])], init)
    exe = compare(m, {"x": rng.standard_normal((1, 3, 6, 6)).astype(np.float32)}, layout="nhwc", rtol=1e-4)
    ops = [n.op_type for n in exe.model.graph.nodes]
    assert "Relu" not in ops and "ElementwiseChain" in ops and "NhwcConcat" in ops


def test_a_product_broadcasting_two_nhwc_tensors_stays_nhwc() -> None:
    """conv(x) * conv(GAP(x)): [N, 8, H, W] times [N, 8, 1, 1], both from NHWC convolutions. Broadcasting commutes
    with the one permutation both operands take, so the product runs NHWC and the graph changes layout once out."""
    nodes = [
        helper.make_node("Conv", ["x", "wa"], ["a"], pads=[1, 1, 1, 1]),
        helper.make_node("GlobalAveragePool", ["x"], ["g"]),
        helper.make_node("Conv", ["g", "wb"], ["b"]),
        helper.make_node("Mul", ["a", "b"], ["m"]),
        helper.make_node("Conv", ["m", "wc"], ["y"]),
    ]
    init = [
        const("wa", rng.standard_normal((8, 3, 3, 3))),
        const("wb", rng.standard_normal((8, 3, 1, 1))),
        const("wc", rng.standard_normal((4, 8, 1, 1))),
    ]
    m = model(nodes, [vi("x", shape=["n", 3, 9, 9])], [vi("y", shape=["n", 4, 9, 9])], init)
    exe = compare(m, {"x": rng.standard_normal((2, 3, 9, 9)).astype(np.float32)}, layout="nhwc", rtol=1e-4)
    ops = Counter(n.op_type for n in exe.model.graph.nodes)
    assert ops["NhwcConv"] == 3 and ops["ToNchw"] == 1
