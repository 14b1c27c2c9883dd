"""1-d convolutions run as 2-d ones of height 1, with the ops between them, and reach the NHWC kernels."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper

from runtime import compile_model
from tests.runtime.graphs import const, model, vi
from tests.runtime.passes.conftest import compare, ops_of

rng = np.random.default_rng(5)
INIT = [
    const("w1", rng.standard_normal((9, 3, 11)) * 0.3),
    const("b1", rng.standard_normal(9)),
    const("w2", rng.standard_normal((6, 9, 3)) * 0.3),
    const("shift", rng.standard_normal((6, 1))),
    const("gamma", rng.random(6) + 0.5),
    const("beta", rng.standard_normal(6)),
    const("mean", rng.standard_normal(6) * 0.1),
    const("var", rng.random(6) + 0.5),
]


def audio(conv1: onnx.NodeProto | None = None) -> list[onnx.NodeProto]:
    """An audio front end: strided wide Conv1d, ReLU, MaxPool1d, Conv1d, BatchNorm, a bias add, mean over time."""
    return [
        conv1 or helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], strides=[2], pads=[5, 5]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[2], strides=[2]),
        helper.make_node("Conv", ["p1", "w2"], ["c2"], pads=[1, 1]),
        helper.make_node("BatchNormalization", ["c2", "gamma", "beta", "mean", "var"], ["n2"]),
        helper.make_node("Add", ["n2", "shift"], ["a2"]),
        helper.make_node("ReduceMean", ["a2"], ["out"], axes=[2], keepdims=0),
    ]


def _m(nodes: list[onnx.NodeProto], x: onnx.ValueInfoProto | None = None) -> onnx.ModelProto:
    return model(nodes, [x or vi("x", shape=["n", 3, 101])], [vi("out", shape=["n", 6])], INIT)


@pytest.mark.parametrize("batch", [1, 4])
def test_lifted_audio_net_matches_and_runs_nhwc(batch: int) -> None:
    feeds = {"x": rng.standard_normal((batch, 3, 101)).astype(np.float32)}
    exe = compare(_m(audio()), feeds, layout="nhwc", rtol=1e-4)
    ops = ops_of(exe)
    assert ops.count("NhwcConv") == 2 and "Conv" not in ops and "NhwcMaxPool" in ops
    assert ops.count("ToNhwc") == 1 and ops.count("ToNchw") == 1
    assert "NhwcGlobalAveragePool" in ops and "ReduceMean" not in ops  # the mean over time, NHWC too


@pytest.mark.parametrize(("length", "keepdims"), [(101, 0), ("t", 0), (101, 1)])
def test_a_max_over_time_is_a_global_max_pool_run_nhwc(length: int | str, keepdims: int) -> None:
    """A TCN's head (``x.amax(-1)``): its ReduceMax ran as NumPy after the NHWC convolutions, their map converted
    back to NCHW for it."""
    nodes = audio()
    nodes[-1] = helper.make_node("ReduceMax", ["a2"], ["out"], axes=[-1], keepdims=keepdims)
    out = vi("out", shape=["n", 6, 1] if keepdims else ["n", 6])
    m = model(nodes, [vi("x", shape=["n", 3, length])], [out], INIT)
    for batch in (1, 3):
        feeds = {"x": rng.standard_normal((batch, 3, 101)).astype(np.float32)}
        exe = compare(m, feeds, layout="nhwc", rtol=1e-5)
        ops = ops_of(exe)
        assert "NhwcGlobalMaxPool" in ops and "ReduceMax" not in ops and ops.count("ToNchw") == 1  # of one pixel
        assert exe.run(feeds)["out"].shape == ((batch, 6, 1) if keepdims else (batch, 6))


def test_lift_alone_keeps_the_numpy_answer(numpy_only: None) -> None:
    feeds = {"x": rng.standard_normal((2, 3, 101)).astype(np.float32)}
    exe = compare(_m(audio()), feeds, passes=["conv1d_lift"], layout="nchw", rtol=1e-5)
    ops = ops_of(exe)
    assert ops.count("Conv") == 2 and ops.count("Squeeze") == 1 and ops.count("Unsqueeze") == 1


def test_look_alikes_are_left_alone() -> None:
    # SAME padding of a 1-d Conv, and weights that are an input, stay 1-d (the second Conv is still lifted)
    same = helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], strides=[2], auto_pad="SAME_UPPER")
    fed = helper.make_node("Conv", ["x", "wx", "b1"], ["c1"], strides=[2], pads=[5, 5])
    inputs = [vi("x", shape=["n", 3, 101]), vi("wx", shape=[9, 3, 11])]
    for first in (same, fed):
        m = model(audio(first), inputs, [vi("out", shape=["n", 6])], INIT)
        nodes = compile_model(m, passes=["conv1d_lift"]).model.graph.nodes
        assert nodes[0].op_type == "Conv" and nodes[0].inputs[1] == first.input[1]
        assert [n.op_type for n in nodes].count("Unsqueeze") == 1


def _gate(length: int | str) -> onnx.ModelProto:
    """A WaveNet gate over a length the export left dynamic: tanh(filter conv) * sigmoid(gate conv), then a 1x1 conv.
    Shape inference names the two convolutions' output lengths apart."""
    nodes = [
        helper.make_node("Conv", ["x", "wf"], ["f"], pads=[2, 0], dilations=[2]),
        helper.make_node("Tanh", ["f"], ["tf"]),
        helper.make_node("Conv", ["x", "wg"], ["g"], pads=[2, 0], dilations=[2]),
        helper.make_node("Sigmoid", ["g"], ["sg"]),
        helper.make_node("Mul", ["tf", "sg"], ["z"]),
        helper.make_node("Conv", ["z", "wo"], ["out"]),
    ]
    init = [
        const("wf", rng.standard_normal((8, 4, 2)) * 0.3),
        const("wg", rng.standard_normal((8, 4, 2)) * 0.3),
        const("wo", rng.standard_normal((6, 8, 1)) * 0.3),
    ]
    return model(nodes, [vi("x", shape=[1, 4, length])], [vi("out", shape=[1, 6, length])], init)


@pytest.mark.parametrize("length", ["t", 37])
def test_a_gate_over_a_dynamic_length_stays_nhwc_between_its_convolutions(length: int | str) -> None:
    feeds = {"x": rng.standard_normal((1, 4, 37)).astype(np.float32)}
    exe = compare(_gate(length), feeds, layout="nhwc", rtol=1e-4)
    ops = ops_of(exe)
    # one change back to NCHW, at the output: the gate's product runs NHWC (each Conv reading x lifts it on its own)
    assert ops.count("NhwcConv") == 3 and ops.count("ToNchw") == 1
