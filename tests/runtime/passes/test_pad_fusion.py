"""A zero Pad of the spatial dims folds into the Convs reading it; other pads stay."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper

from tests.runtime.graphs import const, model, vi
from tests.runtime.passes.conftest import compare, ops_of

rng = np.random.default_rng(13)
PASSES = ["pad_fusion"]
X = {"x": rng.standard_normal((2, 4, 30)).astype(np.float32)}


def _gated(pads: list[int], fill: float = 0.0, mode: str = "constant") -> onnx.ModelProto:
    """WaveNet's causal gated unit: F.pad(x, (4, 0)) read by a filter and a gate Conv."""
    nodes = [
        helper.make_node("Pad", ["x", "pads", "fill"], ["p"], mode=mode),
        helper.make_node("Conv", ["p", "wf", "bf"], ["f"], dilations=[2], pads=[1, 1]),
        helper.make_node("Conv", ["p", "wg"], ["g"]),
        helper.make_node("Tanh", ["f"], ["tf"]),
        helper.make_node("Sigmoid", ["g"], ["sg"]),
        helper.make_node("Mul", ["tf", "sg"], ["y"]),
    ]
    init = [
        const("pads", pads, np.int64),
        const("fill", fill),
        const("wf", rng.standard_normal((4, 4, 3)) * 0.3),
        const("bf", rng.standard_normal(4)),
        const("wg", rng.standard_normal((4, 4, 3)) * 0.3),
    ]
    return model(nodes, [vi("x", shape=[2, 4, 30])], [vi("y", shape=None)], init)


def test_a_causal_pad_folds_into_both_convs_reading_it() -> None:
    m = _gated([0, 0, 4, 0, 0, 0])
    exe = compare(m, X, passes=PASSES)
    assert "Pad" not in ops_of(exe)
    pads = sorted(tuple(n.attrs["pads"]) for n in exe.model.graph.nodes if n.op_type == "Conv")
    assert pads == [(4, 0), (5, 1)]  # the filter's own padding kept


def test_pads_that_are_not_zero_spatial_or_not_read_by_convs_only_stay() -> None:
    batch = _gated([1, 0, 4, 0, 0, 0])  # pads the batch dim too
    filled = _gated([0, 0, 4, 0, 0, 0], fill=1.0)
    reflected = _gated([0, 0, 4, 0, 0, 0], mode="reflect")
    shared = _gated([0, 0, 4, 0, 0, 0])  # the Pad is read by a Mul too
    shared.graph.node[5].input[:] = ["p", "p"]
    for m in (batch, filled, reflected, shared):
        assert "Pad" in ops_of(compare(m, X, passes=PASSES))
