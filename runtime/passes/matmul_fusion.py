"""Turn Gemm and float32 MatMul into FusedMatMul and pull scale, bias, residual and activation into it.

    # Gemm(A, B, C) -> FusedMatMul(A, B, beta*C)           C a constant vector along N (else a same-shape residual)
    # MatMul(A, B) -> FusedMatMul(A, B)                    float32
    # Mul(FusedMatMul(A, B), c) / Div(..., c) -> FusedMatMul(A, B, alpha=c or 1/c)   scalar c, nothing fused yet
    # Add(FusedMatMul(A, B), bias) -> FusedMatMul(A, B, bias)      bias a constant vector along N
    # Add(FusedMatMul(A, B), r) -> FusedMatMul(A, B, res=r)         r of the output's shape
    # Relu/Clip/LeakyRelu/Sigmoid/Gelu...(FusedMatMul(...)) -> FusedMatMul(..., activation)

Each absorption needs the FusedMatMul output to be read only by the absorbed node (and not be a graph output),
and keeps the unfused order of operations (scale, bias, residual, activation).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from runtime.ir import Graph, Node
from runtime.passes.pipeline import Pass
from runtime.passes.util import (
    GraphIndex,
    absorb_consumers,
    add_constant,
    is_float32,
    rebuild,
    scalar_of,
    shape_of,
)

if TYPE_CHECKING:
    from runtime.passes.pipeline import PassContext

_SLOTS = ("A", "B", "bias", "res")


def _from_gemm(node: Node, graph: Graph, index: GraphIndex) -> Node | None:
    """Rebuild a Gemm as FusedMatMul (in place); None when it stays a Gemm."""
    if node.opset < 7 or not all(is_float32(graph, i) for i in node.inputs[:2]):
        return None
    a_shape, b_shape = shape_of(graph, node.inputs[0]), shape_of(graph, node.inputs[1])
    if a_shape is None or b_shape is None or len(a_shape) != 2 or len(b_shape) != 2:
        return None
    trans_b = int(node.attrs.get("transB", 0))
    n = b_shape[0] if trans_b else b_shape[1]
    bias, res = "", ""
    c = node.inputs[2] if len(node.inputs) > 2 else ""
    beta = float(node.attrs.get("beta", 1.0))
    if c:
        const = index.constant(c)
        vector = const is not None and const.dtype == np.float32 and const.size == n and isinstance(n, int)
        if vector and const is not None and (const.ndim == 1 or (const.ndim == 2 and const.shape[0] == 1)):
            if beta == 1.0 and const.ndim == 1:
                bias = c
            else:
                scaled = (const * np.float32(beta)).astype(np.float32).reshape(n)
                bias = add_constant(graph, f"{c}_bias", scaled)
        if not bias:
            out_shape = shape_of(graph, node.outputs[0])
            if beta != 1.0 or shape_of(graph, c) != out_shape or out_shape is None or not is_float32(graph, c):
                return None
            res = c
    return rebuild(
        graph,
        node,
        "FusedMatMul",
        [node.inputs[0], node.inputs[1], bias, res],
        node.outputs,
        attributes={
            "transA": int(node.attrs.get("transA", 0)),
            "transB": trans_b,
            "alpha": float(node.attrs.get("alpha", 1.0)),
        },
    )


def _absorb_other(
    fused: Node, nxt: Node, ins: list[str], attrs: dict[str, Any], graph: Graph, index: GraphIndex
) -> bool:
    """A scalar scale (Mul, Div), then a bias vector along N or a same-shape residual (Add)."""
    nothing_yet = not ins[2] and not ins[3] and not attrs.get("activation")
    out = fused.outputs[0]
    if nxt.opset < 7 and nxt.op_type in ("Add", "Mul", "Div"):
        return False
    if nxt.op_type in ("Mul", "Div") and len(nxt.inputs) == 2 and nothing_yet and "div" not in attrs:
        other = nxt.inputs[1] if nxt.inputs[0] == out else nxt.inputs[0]
        if nxt.op_type == "Div" and nxt.inputs[0] != out:
            return False
        value = scalar_of(index.constant(other))
        if value is None or (nxt.op_type == "Div" and value == 0.0):
            return False
        if nxt.op_type == "Div":
            attrs["alpha"] = float(attrs.get("alpha", 1.0)) / value
            if float(fused.attrs.get("alpha", 1.0)) == 1.0:
                attrs["div"] = value
        else:
            attrs["alpha"] = float(attrs.get("alpha", 1.0)) * value
        return True
    if nxt.op_type != "Add" or len(nxt.inputs) != 2 or ins[3] or attrs.get("activation"):
        return False
    other = nxt.inputs[1] if nxt.inputs[0] == out else nxt.inputs[0]
    out_shape = shape_of(graph, out)
    if out_shape is None or shape_of(graph, nxt.outputs[0]) != out_shape:
        return False
    const = index.constant(other)
    n = out_shape[-1]
    if const is not None and not ins[2] and const.dtype == np.float32 and const.size == n:
        if const.ndim > 1 and any(d != 1 for d in const.shape[:-1]):
            return False
        ins[2] = other if const.ndim == 1 else add_constant(graph, f"{other}_vec", const.reshape(-1))
    elif const is None and shape_of(graph, other) == out_shape and is_float32(graph, other):
        ins[3] = other
    else:
        return False
    return True


def run(graph: Graph, ctx: PassContext) -> int:
    index = GraphIndex(graph)
    rewrites = 0
    for node in list(graph.nodes):
        if node.domain:
            continue
        if node.op_type == "Gemm" and _from_gemm(node, graph, index) is not None:
            rewrites += 1
        elif node.op_type == "MatMul" and all(is_float32(graph, i) for i in node.inputs[:2]):
            rebuild(graph, node, "FusedMatMul", node.inputs[:2], node.outputs)
            rewrites += 1
    index.refresh()
    return rewrites + absorb_consumers(graph, index, _is_fused_matmul, "FusedMatMul", _absorb_other)


def _is_fused_matmul(node: Node) -> bool:
    return node.op_type == "FusedMatMul" and node.domain == "com.appopt"


PASS = Pass(
    "matmul_fusion",
    run,
    "Gemm/MatMul absorb scale, bias, residual and activation while those are still separate nodes",
    before=("elementwise_chain",),
)
