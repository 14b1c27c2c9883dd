"""A ConvNeXt block's own permutes become layout nodes: the block then runs NHWC without a transpose."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper

from runtime import compile_model
from tests.runtime.graphs import const, gelu, gelu_constants, model, vi
from tests.runtime.passes.conftest import compare, ops_of

rng = np.random.default_rng(11)
C = 12
INIT = [
    const("ws", rng.standard_normal((C, 3, 2, 2)) * 0.3),
    const("wd", rng.standard_normal((C, 1, 7, 7)) * 0.2),
    const("bd", rng.standard_normal(C)),
    const("g", rng.random(C) + 0.5),
    const("b", rng.standard_normal(C)),
    const("m1", rng.standard_normal((C, 4 * C)) * 0.3),
    const("c1", rng.standard_normal(4 * C)),
    const("m2", rng.standard_normal((4 * C, C)) * 0.3),
    const("c2", rng.standard_normal(C)),
    *gelu_constants(),
]


def convnext(perm_in: tuple[int, ...] = (0, 2, 3, 1)) -> list[onnx.NodeProto]:
    return [
        helper.make_node("Conv", ["x", "ws"], ["s"], strides=[2, 2]),
        helper.make_node("Conv", ["s", "wd", "bd"], ["d"], pads=[3, 3, 3, 3], group=C),
        helper.make_node("Transpose", ["d"], ["t"], perm=list(perm_in)),
        helper.make_node("LayerNormalization", ["t", "g", "b"], ["n"], axis=-1),
        helper.make_node("MatMul", ["n", "m1"], ["h0"]),
        helper.make_node("Add", ["h0", "c1"], ["h1"]),
        *gelu("h1", "h"),
        helper.make_node("MatMul", ["h", "m2"], ["o0"]),
        helper.make_node("Add", ["o0", "c2"], ["o1"]),
        helper.make_node("Transpose", ["o1"], ["o"], perm=[0, 3, 1, 2]),
        helper.make_node("Add", ["s", "o"], ["out"]),
    ]


@pytest.mark.parametrize("batch", [1, 2])
def test_convnext_block_runs_without_transposes(batch: int) -> None:
    m = model(convnext(), [vi("x", shape=["n", 3, 10, 10])], [vi("out", shape=["n", C, 5, 5])], INIT)
    feeds = {"x": rng.standard_normal((batch, 3, 10, 10)).astype(np.float32)}
    ops = ops_of(compare(m, feeds, layout="nhwc", rtol=1e-4))
    assert "Transpose" not in ops and "Gelu" not in ops  # GELU runs in the first product's epilogue
    assert ops.count("ToNhwc") == 1 and ops.count("ToNchw") == 1


def test_gelu_joins_the_product_epilogue_exactly_on_numpy(numpy_only: None) -> None:
    nodes = [helper.make_node("MatMul", ["a", "m1"], ["h0"]), helper.make_node("Add", ["h0", "c1"], ["h1"])]
    m = model([*nodes, *gelu("h1", "out")], [vi("a", shape=[3, C])], [vi("out", shape=[3, 4 * C])], INIT)
    feeds = {"a": rng.standard_normal((3, C)).astype(np.float32)}
    exe = compare(m, feeds, passes=["gelu_fusion", "matmul_fusion"], exact=True)
    assert ops_of(exe) == ["FusedMatMul"]


def test_other_permutations_and_the_nchw_layout_keep_their_transposes() -> None:
    m = model(convnext(), [vi("x", shape=[1, 3, 10, 10])], [vi("out", shape=[1, C, 5, 5])], INIT)
    assert ops_of(compile_model(m, layout="nchw")).count("Transpose") == 2
    # a spatial transpose (H and W swap) is no layout change
    spatial = model(convnext((0, 1, 3, 2))[:3], [vi("x", shape=[1, 3, 10, 10])], [vi("t", shape=[1, C, 5, 5])], INIT)
    assert "Transpose" in ops_of(compile_model(spatial, layout="nhwc"))


LN_INIT = [
    *INIT,
    const("wl", rng.random((C, 1, 1)) + 0.5),
    const("bl", rng.standard_normal((C, 1, 1))),
    const("two", 2.0),
    const("four", 4.0),
    const("eps", 1e-6),
    const("wdown", rng.standard_normal((2 * C, C, 2, 2)) * 0.3),
]


def channels_first_layernorm(axes: tuple[int, ...] = (1,), power: float = 2.0) -> list[onnx.NodeProto]:
    """ConvNeXt's LayerNorm(data_format="channels_first") between its stem and a downsampling conv, as traced
    (``x - u`` twice)."""
    return [
        helper.make_node("Conv", ["x", "ws"], ["s"], strides=[2, 2]),
        helper.make_node("ReduceMean", ["s"], ["u"], axes=list(axes), keepdims=1),
        helper.make_node("Sub", ["s", "u"], ["d1"]),
        helper.make_node("Pow", ["d1", "two" if power == 2.0 else "four"], ["p"]),
        helper.make_node("ReduceMean", ["p"], ["v"], axes=list(axes), keepdims=1),
        helper.make_node("Sub", ["s", "u"], ["d2"]),
        helper.make_node("Add", ["v", "eps"], ["ve"]),
        helper.make_node("Sqrt", ["ve"], ["sd"]),
        helper.make_node("Div", ["d2", "sd"], ["n"]),
        helper.make_node("Mul", ["wl", "n"], ["nw"]),
        helper.make_node("Add", ["nw", "bl"], ["nb"]),
        helper.make_node("Conv", ["nb", "wdown"], ["out"], strides=[2, 2]),
    ]


@pytest.mark.parametrize("batch", [1, 2])
def test_channels_first_layernorm_runs_nhwc(batch: int) -> None:
    m = model(channels_first_layernorm(), [vi("x", shape=["n", 3, 12, 12])], [vi("out", shape=["n", 2 * C, 3, 3])],
              LN_INIT)  # fmt: skip
    feeds = {"x": rng.standard_normal((batch, 3, 12, 12)).astype(np.float32)}
    ops = ops_of(compare(m, feeds, layout="nhwc", rtol=1e-4))
    assert "LayerNormalization" in ops and not {"ReduceMean", "Pow", "Sqrt", "Div"} & set(ops)
    assert ops.count("ToNhwc") == 1 and ops.count("ToNchw") == 1


@pytest.mark.parametrize(("axes", "power"), [((2,), 2.0), ((1,), 4.0)])
def test_other_normalisations_are_left_alone(axes: tuple[int, ...], power: float) -> None:
    nodes = channels_first_layernorm(axes, power)
    m = model(nodes, [vi("x", shape=[1, 3, 12, 12])], [vi("out", shape=[1, 2 * C, 3, 3])], LN_INIT)
    feeds = {"x": rng.standard_normal((1, 3, 12, 12)).astype(np.float32)}
    assert "LayerNormalization" not in ops_of(compare(m, feeds, layout="nhwc", rtol=1e-4))
