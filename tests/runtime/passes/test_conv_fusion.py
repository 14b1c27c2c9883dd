"""Conv absorbs bias, residual and activation into FusedConv."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper

from tests.runtime.graphs import const, model, vi
from tests.runtime.passes.conftest import compare, ops_of

rng = np.random.default_rng(2)
INIT = [
    const("w", rng.standard_normal((4, 4, 3, 3))),
    const("b", rng.standard_normal(4)),
    const("cb", rng.standard_normal((1, 4, 1, 1))),
    const("lo", 0.0),
    const("hi", 6.0),
]
FEEDS = {
    "x": rng.standard_normal((1, 4, 6, 6)).astype(np.float32),
    "r": rng.standard_normal((1, 4, 6, 6)).astype(np.float32),
}
INPUTS = [vi("x", shape=[1, 4, 6, 6]), vi("r", shape=[1, 4, 6, 6])]


def _m(nodes: list) -> onnx.ModelProto:
    return model(nodes, INPUTS, [vi("y", shape=[1, 4, 6, 6])], INIT)


CASES = {
    "bias+relu": [
        helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Add", ["c", "cb"], ["a"]),
        helper.make_node("Relu", ["a"], ["y"]),
    ],
    "residual+clip": [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Add", ["r", "c"], ["a"]),
        helper.make_node("Clip", ["a", "lo", "hi"], ["y"]),
    ],
    "sum": [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Sum", ["c", "r"], ["y"]),
    ],
}


@pytest.mark.parametrize("case", list(CASES))
def test_conv_epilogues_fuse_exactly_on_numpy(case: str, numpy_only: None) -> None:
    exe = compare(_m(CASES[case]), FEEDS, passes=["conv_fusion"], exact=True, layout="nchw")
    assert ops_of(exe) == ["FusedConv"]


def test_activation_after_residual_only_once() -> None:
    nodes = [
        *CASES["residual+clip"][:2],
        helper.make_node("Relu", ["a"], ["t"]),
        helper.make_node("Relu", ["t"], ["y"]),
    ]
    exe = compare(_m(nodes), FEEDS, passes=["conv_fusion"], layout="nchw")
    assert ops_of(exe) == ["FusedConv", "Relu"]


def test_a_conv_output_read_twice_is_not_fused() -> None:
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["t"]),
        helper.make_node("Add", ["t", "c"], ["y"]),
    ]
    assert ops_of(compare(_m(nodes), FEEDS, passes=["conv_fusion"], layout="nchw")) == ["Conv", "Relu", "Add"]
