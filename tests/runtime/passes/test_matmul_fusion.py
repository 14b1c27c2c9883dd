"""Gemm/MatMul become FusedMatMul and absorb scale, bias, residual and activation."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import pytest
from onnx import helper

from runtime import compile_model
from tests.runtime.graphs import const, model, vi
from tests.runtime.passes.conftest import compare, ops_of

rng = np.random.default_rng(1)
A = {"a": rng.standard_normal((2, 5, 8)).astype(np.float32)}
W = const("w", rng.standard_normal((8, 6)))
BIAS = const("bias", rng.standard_normal(6))


def _chain(*after: tuple[str, str | None, dict[str, Any]], extra: tuple = ()) -> onnx.ModelProto:
    nodes = [helper.make_node("MatMul", ["a", "w"], ["t0"])]
    for i, (op, other, attrs) in enumerate(after):
        ins = [f"t{i}"] + ([other] if other else [])
        nodes.append(helper.make_node(op, ins, [f"t{i + 1}"], **attrs))
    nodes[-1].output[0] = "y"
    return model(nodes, [vi("a", shape=[2, 5, 8]), *extra], [vi("y", shape=[2, 5, 6])], [W, BIAS, const("k", 0.25)])


@pytest.mark.parametrize(
    ("after", "fused"),
    [
        ([("Add", "bias", {})], 1),
        ([("Div", "k", {}), ("Add", "bias", {}), ("Relu", None, {})], 1),
        ([("Mul", "k", {}), ("Add", "bias", {}), ("LeakyRelu", None, {"alpha": 0.2})], 1),
    ],
)
def test_matmul_absorbs_its_epilogue(after: list, fused: int, numpy_only: None) -> None:
    exe = compare(_chain(*after), A, passes=["matmul_fusion"], exact=True)
    assert ops_of(exe) == ["FusedMatMul"] * fused


def test_the_same_on_the_compiled_kernels() -> None:
    exe = compare(_chain(("Div", "k", {}), ("Add", "bias", {}), ("Relu", None, {})), A, passes=["matmul_fusion"])
    assert ops_of(exe) == ["FusedMatMul"]


def test_residual_addition_is_absorbed() -> None:
    m = _chain(("Add", "bias", {}), ("Add", "r", {}), extra=(vi("r", shape=[2, 5, 6]),))
    feeds = {**A, "r": rng.standard_normal((2, 5, 6)).astype(np.float32)}
    exe = compare(m, feeds, passes=["matmul_fusion"])
    assert ops_of(exe) == ["FusedMatMul"]
    assert exe.model.graph.nodes[0].inputs[3] == "r"


def test_gemm_with_trans_alpha_beta() -> None:
    node = helper.make_node("Gemm", ["x", "w2", "c"], ["y"], transB=1, alpha=0.5, beta=2.0)
    m = model(
        [node],
        [vi("x", shape=[3, 8])],
        [vi("y", shape=[3, 6])],
        [const("w2", rng.standard_normal((6, 8))), const("c", rng.standard_normal(6))],
    )
    exe = compare(m, {"x": rng.standard_normal((3, 8)).astype(np.float32)}, passes=["matmul_fusion"])
    assert ops_of(exe) == ["FusedMatMul"]


def test_an_intermediate_graph_output_is_not_absorbed() -> None:
    m = _chain(("Add", "bias", {}), ("Relu", None, {}))
    m.graph.output.append(vi("t1", shape=[2, 5, 6]))
    assert ops_of(compare(m, A, passes=["matmul_fusion"])) == ["FusedMatMul", "Relu"]


def test_integer_matmul_is_left_alone() -> None:
    from onnx import TensorProto

    node = helper.make_node("MatMul", ["a", "b"], ["y"])
    m = model(
        [node],
        [vi("a", TensorProto.INT32, [2, 3]), vi("b", TensorProto.INT32, [3, 2])],
        [vi("y", TensorProto.INT32, [2, 2])],
    )
    assert ops_of(compile_model(m, passes=["matmul_fusion"])) == ["MatMul"]
