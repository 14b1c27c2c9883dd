"""ReduceMean over whole spatial or token axes becomes a global average pool."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from tests.runtime.graphs import const, model, vi
from tests.runtime.passes.conftest import compare, ops_of

rng = np.random.default_rng(11)


def _mean(
    shape: list[object], axes: list[int], keepdims: int, opset: int = 13, op: str = "ReduceMean"
) -> onnx.ModelProto:
    """``Relu(ReduceMean(x, axes, keepdims))`` (or ``op``), axes as an attribute (opset 13) or an input (18)."""
    if opset >= 18:
        nodes = [helper.make_node(op, ["x", "axes"], ["m"], keepdims=keepdims)]
        init = [const("axes", axes, np.int64)]
    else:
        nodes = [helper.make_node(op, ["x"], ["m"], axes=axes, keepdims=keepdims)]
        init = []
    nodes.append(helper.make_node("Relu", ["m"], ["y"]))
    return model(nodes, [vi("x", shape=shape)], [vi("y", TensorProto.FLOAT, None)], init, opset=opset)


@pytest.mark.parametrize("opset", [13, 18])
@pytest.mark.parametrize("keepdims", [0, 1])
def test_a_spatial_mean_of_an_nchw_map_is_a_global_average_pool(keepdims: int, opset: int) -> None:
    feeds = {"x": rng.standard_normal((2, 24, 5, 7)).astype(np.float32)}
    ops = ops_of(compare(_mean(["n", 24, 5, 7], [2, -1], keepdims, opset), feeds, passes=["global_mean"]))
    assert "ReduceMean" not in ops and "GlobalAveragePool" in ops, ops


@pytest.mark.parametrize("keepdims", [0, 1])
@pytest.mark.parametrize(("shape", "axes"), [((2, 49, 32), [1]), ((3, 8, 8, 24), [1, 2])])
def test_a_token_mean_is_the_nhwc_pool_of_its_rows(shape: tuple[int, ...], axes: list[int], keepdims: int) -> None:
    """ViT/Mixer heads (``x.mean(1)`` of [N, tokens, C]) and Swin's (``x.mean((1, 2))`` of [N, H, W, C])."""
    feeds = {"x": rng.standard_normal(shape).astype(np.float32)}
    exe = compare(_mean(["n", *shape[1:]], axes, keepdims), feeds, passes=["global_mean"])
    assert "ReduceMean" not in ops_of(exe) and "NhwcGlobalAveragePool" in ops_of(exe)
    want = np.mean(feeds["x"], axis=tuple(axes), keepdims=bool(keepdims))
    assert exe.run(dict(feeds))["y"].shape == want.shape


@pytest.mark.parametrize("opset", [13, 18])
@pytest.mark.parametrize(("shape", "axes", "pool"), [((2, 24, 5, 7), [2, 3], "GlobalMaxPool"),
                                                   ((2, 49, 32), [1], "NhwcGlobalMaxPool")])
def test_a_max_over_whole_axes_is_a_global_max_pool(shape: tuple[int, ...], axes: list[int], pool: str, opset: int):
    feeds = {"x": rng.standard_normal(shape).astype(np.float32)}
    exe = compare(_mean(["n", *shape[1:]], axes, 0, opset, op="ReduceMax"), feeds, passes=["global_mean"], exact=True)
    assert "ReduceMax" not in ops_of(exe) and pool in ops_of(exe)
    want = np.maximum(np.max(feeds["x"], axis=tuple(axes)), 0)
    np.testing.assert_array_equal(exe.run(dict(feeds))["y"], want)


@pytest.mark.parametrize(
    ("shape", "axes"),
    [
        ((2, 16, 32), [-1]),  # a written-out LayerNorm's mean: the pool would run one channel wide
        ((2, 16, 32), [0, 1]),  # the batch reduced too
        ((2, 4, 6, 8), [1, 3]),  # not one run of axes
    ],
)
def test_other_means_stay(shape: tuple[int, ...], axes: list[int]) -> None:
    feeds = {"x": rng.standard_normal(shape).astype(np.float32)}
    assert "ReduceMean" in ops_of(compare(_mean(list(shape), axes, 0), feeds, passes=["global_mean"]))


def test_a_mean_with_unknown_channels_stays() -> None:
    feeds = {"x": rng.standard_normal((2, 10, 12)).astype(np.float32)}
    assert "ReduceMean" in ops_of(compare(_mean(["n", "t", "c"], [1], 0), feeds, passes=["global_mean"]))


def test_the_head_of_a_convnet_runs_its_mean_in_nhwc() -> None:
    """Conv -> mean over H, W -> Gemm: the pool sinks into NHWC with the convolution, and the pooled [N, 1, 1, C]
    map is read as [N, C] without a layout change (one pixel: both layouts hold it alike)."""
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("ReduceMean", ["r"], ["m"], axes=[2, 3], keepdims=0),
        helper.make_node("Gemm", ["m", "fc", "b"], ["y"], transB=1),
    ]
    init = [
        const("w", rng.standard_normal((32, 16, 3, 3)) * 0.2),
        const("fc", rng.standard_normal((10, 32)) * 0.2),
        const("b", rng.standard_normal(10)),
    ]
    m = model(nodes, [vi("x", shape=["n", 16, 8, 8])], [vi("y", shape=["n", 10])], init)
    feeds = {"x": rng.standard_normal((2, 16, 8, 8)).astype(np.float32)}
    ops = ops_of(compare(m, feeds, layout="nhwc", rtol=1e-4))
    assert "NhwcGlobalAveragePool" in ops and "ReduceMean" not in ops and "ToNchw" not in ops, ops
