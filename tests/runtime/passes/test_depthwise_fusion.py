"""Depthwise convolution + the 1x1 convolution reading it become one NhwcDwPwConv."""

from __future__ import annotations

from collections import Counter

import numpy as np
import onnx
import pytest
from onnx import helper

from runtime import compile_model, native
from tests.runtime.graphs import const, model, vi
from tests.runtime.passes.conftest import compare

rng = np.random.default_rng(6)


def _separable(stride: int = 1, channels: int = 24, residual: bool = False) -> onnx.ModelProto:
    nodes = [
        helper.make_node("Conv", ["x", "wd", "bd"], ["d"], pads=[1, 1, 1, 1], strides=[stride, stride], group=channels),
        helper.make_node("Clip", ["d", "lo", "hi"], ["a"]),
        helper.make_node("Conv", ["a", "wp", "bp"], ["p"]),
    ]
    out = 8 // stride
    if residual:
        nodes.append(helper.make_node("Add", ["p", "x2"], ["y"]))
    else:
        nodes[-1].output[0] = "y"
    init = [
        const("wd", rng.standard_normal((channels, 1, 3, 3))),
        const("bd", rng.standard_normal(channels)),
        const("wp", rng.standard_normal((40, channels, 1, 1))),
        const("bp", rng.standard_normal(40)),
        const("lo", 0.0),
        const("hi", 6.0),
    ]
    inputs = [vi("x", shape=[2, channels, 8, 8])]
    if residual:
        inputs.append(vi("x2", shape=[2, 40, out, out]))
    return model(nodes, inputs, [vi("y", shape=[2, 40, out, out])], init)


def _feeds(stride: int = 1, channels: int = 24, residual: bool = False) -> dict[str, np.ndarray]:
    feeds = {"x": rng.standard_normal((2, channels, 8, 8)).astype(np.float32)}
    if residual:
        feeds["x2"] = rng.standard_normal((2, 40, 8 // stride, 8 // stride)).astype(np.float32)
    return feeds


@pytest.mark.skipif(native.lib() is None, reason="the NHWC layout needs the compiled kernels")
@pytest.mark.parametrize(("stride", "channels", "residual"), [(1, 24, False), (2, 24, False), (1, 40, True)])
def test_separable_block_fuses_and_matches(stride: int, channels: int, residual: bool) -> None:
    exe = compare(_separable(stride, channels, residual), _feeds(stride, channels, residual), rtol=1e-4)
    ops = Counter(n.op_type for n in exe.model.graph.nodes)
    assert ops["NhwcDwPwConv"] == 1 and ops["NhwcConv"] == 0


def test_the_fused_node_runs_on_numpy_too(numpy_only: None) -> None:
    exe = compare(_separable(), _feeds(), rtol=1e-4, layout="nhwc")
    assert "NhwcDwPwConv" in [n.op_type for n in exe.model.graph.nodes]


def test_disabled_by_name() -> None:
    exe = compile_model(_separable(), layout="nhwc", disable=["depthwise_fusion"])
    assert Counter(n.op_type for n in exe.model.graph.nodes)["NhwcConv"] == 2


def test_a_depthwise_output_read_twice_stays_separate() -> None:
    m = _separable()
    m.graph.output.append(vi("a", shape=[2, 24, 8, 8]))
    exe = compile_model(m, layout="nhwc")
    assert "NhwcDwPwConv" not in [n.op_type for n in exe.model.graph.nodes]


def _separable_map(images: int, h: int, w: int, channels: int, out: int, stride: int) -> onnx.ModelProto:
    nodes = [
        helper.make_node("Conv", ["x", "wd"], ["d"], pads=[1, 1, 1, 1], strides=[stride, stride], group=channels),
        helper.make_node("Relu", ["d"], ["a"]),
        helper.make_node("Conv", ["a", "wp", "bp"], ["y"]),
    ]
    init = [
        const("wd", rng.standard_normal((channels, 1, 3, 3))),
        const("wp", rng.standard_normal((out, channels, 1, 1))),
        const("bp", rng.standard_normal(out)),
    ]
    return model(nodes, [vi("x", shape=[images, channels, h, w])], [vi("y", shape=None)], init)


@pytest.mark.skipif(native.lib() is None, reason="the NHWC layout needs the compiled kernels")
@pytest.mark.parametrize(
    ("images", "h", "w", "channels", "out", "stride"),
    [
        (3, 5, 7, 24, 40, 1),  # 7-pixel rows: strips of 12 cross row ends (and the border pixels there)
        (2, 9, 5, 32, 16, 2),  # 3-pixel rows, one-vector (16-channel) pointwise blocks: strips of 24 cross images
        (8, 7, 7, 96, 64, 1),  # many rows: several tasks, each spanning rows
        (1, 3, 40, 16, 40, 1),  # long rows: strips inside one row, as before
    ],
)
def test_strips_that_cross_rows_and_images_match(
    images: int, h: int, w: int, channels: int, out: int, stride: int
) -> None:
    m = _separable_map(images, h, w, channels, out, stride)
    feeds = {"x": rng.standard_normal((images, channels, h, w)).astype(np.float32)}
    for threads in (1, 2):
        plain = compile_model(m, passes=[]).run(feeds)["y"]
        fused = compile_model(m, threads=threads, layout="nhwc")
        assert "NhwcDwPwConv" in [n.op_type for n in fused.model.graph.nodes]
        np.testing.assert_allclose(fused.run(feeds)["y"], plain, rtol=1e-4, atol=1e-4)
