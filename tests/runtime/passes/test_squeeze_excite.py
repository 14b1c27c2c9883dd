"""SiLU joins the conv/product epilogue; squeeze-excite becomes one SqueezeExcite op that the layout pass keeps NHWC."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper

from runtime import compile_model
from tests.runtime.graphs import const, model, vi
from tests.runtime.passes.conftest import compare, ops_of

rng = np.random.default_rng(7)
C, CR, M = 13, 5, 7  # odd channel counts: the kernels' vector tails
INIT = [
    const("w0", rng.standard_normal((C, 3, 3, 3)) * 0.3),
    const("b0", rng.standard_normal(C)),
    const("w1", rng.standard_normal((CR, C, 1, 1)) * 0.5),
    const("b1", rng.standard_normal(CR)),
    const("w2", rng.standard_normal((C, CR, 1, 1)) * 0.5),
    const("b2", rng.standard_normal(C)),
    const("w3", rng.standard_normal((M, C, 1, 1)) * 0.3),
    const("axes", [2, 3], np.int64),
]


def silu(x: str, y: str) -> list[onnx.NodeProto]:
    return [helper.make_node("Sigmoid", [x], [f"{y}_sig"]), helper.make_node("Mul", [x, f"{y}_sig"], [y])]


def se_block(pool: str = "GlobalAveragePool", gate: str = "Sigmoid", scaled: str = "y") -> list[onnx.NodeProto]:
    """Conv + SiLU, then squeeze-excite on its output, then a 1x1 projection (EfficientNet's MBConv tail)."""
    pool_node = (
        helper.make_node("GlobalAveragePool", ["y"], ["p"])
        if pool == "GlobalAveragePool"
        else helper.make_node("ReduceMean", ["y"], ["p"], axes=[2, 3], keepdims=1)
    )
    return [
        helper.make_node("Conv", ["x", "w0", "b0"], ["c"], pads=[1, 1, 1, 1]),
        *silu("c", "y"),
        pool_node,
        helper.make_node("Conv", ["p", "w1", "b1"], ["h0"]),
        *silu("h0", "h"),
        helper.make_node("Conv", ["h", "w2", "b2"], ["g0"]),
        helper.make_node(gate, ["g0"], ["g"]),
        helper.make_node("Mul", [scaled, "g"], ["o"]),
        helper.make_node("Conv", ["o", "w3"], ["out"]),
    ]


def _m(nodes: list[onnx.NodeProto], extra: list[onnx.ValueInfoProto] | None = None) -> onnx.ModelProto:
    return model(nodes, [vi("x", shape=["n", 3, 9, 11])], [vi("out", shape=["n", M, 9, 11]), *(extra or [])], INIT)


def _feeds(batch: int) -> dict[str, np.ndarray]:
    return {"x": rng.standard_normal((batch, 3, 9, 11)).astype(np.float32)}


@pytest.mark.parametrize("pool", ["GlobalAveragePool", "ReduceMean"])
@pytest.mark.parametrize("gate", ["Sigmoid", "HardSigmoid"])
def test_squeeze_excite_fuses_exactly_on_numpy(pool: str, gate: str, numpy_only: None) -> None:
    passes = ["conv_fusion", "silu_fusion", "squeeze_excite"]
    exe = compare(_m(se_block(pool, gate)), _feeds(2), passes=passes, exact=True, layout="nchw")
    assert ops_of(exe) == ["FusedConv", "SqueezeExcite", "Conv"]


@pytest.mark.parametrize("batch", [1, 3])
def test_squeeze_excite_runs_nhwc_on_the_compiled_kernels(batch: int) -> None:
    exe = compare(_m(se_block()), _feeds(batch), layout="nhwc", rtol=1e-4)
    se = next(n for n in exe.model.graph.nodes if n.op_type == "SqueezeExcite")
    assert se.attrs["channels_last"] == 1 and se.attrs["act1"] == "Silu"
    ops = ops_of(exe)
    assert ops.count("ToNhwc") == 1 and ops.count("ToNchw") == 1  # in at the input, out at the output only
    assert "Sigmoid" not in ops and "Mul" not in ops


def test_silu_joins_conv_and_gemm_epilogues_exactly_on_numpy(numpy_only: None) -> None:
    nodes = [helper.make_node("Conv", ["x", "w0", "b0"], ["c"], pads=[1, 1, 1, 1]), *silu("c", "out")]
    m = model(nodes, [vi("x", shape=[2, 3, 9, 11])], [vi("out", shape=[2, C, 9, 11])], INIT)
    assert ops_of(compare(m, _feeds(2), passes=["conv_fusion", "silu_fusion"], exact=True, layout="nchw")) == [
        "FusedConv"
    ]
    gemm = [helper.make_node("Gemm", ["a", "wg", "bg"], ["t"], transB=1), *silu("t", "out")]
    init = [const("wg", rng.standard_normal((6, 10))), const("bg", rng.standard_normal(6))]
    m = model(gemm, [vi("a", shape=[3, 10])], [vi("out", shape=[3, 6])], init)
    feeds = {"a": rng.standard_normal((3, 10)).astype(np.float32)}
    assert ops_of(compare(m, feeds, passes=["matmul_fusion", "silu_fusion"], exact=True)) == ["FusedMatMul"]


@pytest.mark.parametrize("act", ["Sigmoid", "HardSigmoid", "HardSwish", "Silu"])
def test_new_epilogue_activations_match_on_the_compiled_kernels(act: str) -> None:
    tail = silu("c", "out") if act == "Silu" else [helper.make_node(act, ["c"], ["out"])]
    nodes = [helper.make_node("Conv", ["x", "w0", "b0"], ["c"], pads=[1, 1, 1, 1]), *tail]
    m = model(nodes, [vi("x", shape=[1, 3, 9, 11])], [vi("out", shape=[1, C, 9, 11])], INIT)
    feeds = {"x": (rng.standard_normal((1, 3, 9, 11)) * 4).astype(np.float32)}
    exe = compare(m, feeds, layout="nhwc", rtol=1e-5)
    assert ops_of(exe) == ["ToNhwc", "NhwcConv", "ToNchw"]


def test_look_alikes_are_left_alone() -> None:
    # the gate scales another tensor than the one pooled
    other = se_block(scaled="c")
    assert "SqueezeExcite" not in ops_of(compile_model(_m(other)))
    # the pooled vector is also a graph output
    exposed = _m(se_block(), [vi("p", shape=["n", C, 1, 1])])
    assert "SqueezeExcite" not in ops_of(compile_model(exposed))
    # a mean over one axis only is no squeeze
    nodes = se_block()
    nodes[3] = helper.make_node("ReduceMean", ["y"], ["p"], axes=[3], keepdims=1)
    nodes[4] = helper.make_node("Conv", ["p", "w1", "b1"], ["h0"], kernel_shape=[1, 1])
    assert "SqueezeExcite" not in ops_of(compile_model(_m(nodes)))
    # SiLU's Sigmoid read twice: the Mul is not x * sigmoid(x) alone
    twice = [helper.make_node("Conv", ["x", "w0", "b0"], ["c"], pads=[1, 1, 1, 1]), *silu("c", "out")]
    m = model(twice, [vi("x", shape=[1, 3, 9, 11])], [vi("out", shape=[1, C, 9, 11]), vi("out_sig")], INIT)
    exe = compile_model(m, layout="nchw")
    assert "Mul" in ops_of(exe) or "ElementwiseChain" in ops_of(exe)
