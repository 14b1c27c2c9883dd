"""Pull the bias, residual addition and activation that follow a convolution into one FusedConv.

    # Conv(x, W, B) -> FusedConv(x, W, B)                       only when something below gets absorbed
    # Add(Conv(x, W), b) -> FusedConv(x, W, b)                  b a constant [M] or [1, M, 1, ...] and no B yet
    # Add(Conv(x, W, B), r) / Sum(...) -> FusedConv(x, W, B, res=r)     r of the output's shape
    # Relu/Clip/LeakyRelu/Sigmoid/Gelu...(FusedConv(...)) -> FusedConv(..., activation)   (util.activation_of)

The residual can never depend on the convolution (its output is read only by the Add), so the fused node keeps
the graph acyclic. Float32 only; the unfused order (bias, residual, activation) is kept.
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
    shape_of,
)

if TYPE_CHECKING:
    from runtime.passes.pipeline import PassContext


def _is_conv(node: Node) -> bool:
    return (node.op_type == "Conv" and not node.domain) or (node.op_type == "FusedConv" and node.domain == "com.appopt")


def _absorb_add(conv: Node, nxt: Node, ins: list[str], attrs: dict[str, Any], graph: Graph, index: GraphIndex) -> bool:
    """A bias (constant per-channel vector) or a residual (same shape) added to the convolution's output."""
    out = conv.outputs[0]
    two_input_sum = nxt.op_type == "Sum" and len(nxt.inputs) == 2
    if not ((nxt.op_type == "Add" and nxt.opset >= 7) or two_input_sum) or len(nxt.inputs) != 2:
        return False
    if ins[3] or attrs.get("activation"):
        return False
    other = nxt.inputs[1] if nxt.inputs[0] == out else nxt.inputs[0]
    out_shape = shape_of(graph, out)
    if out_shape is None or shape_of(graph, nxt.outputs[0]) != out_shape or other == out:
        return False
    const = index.constant(other)
    m = out_shape[1] if len(out_shape) > 1 else None
    if const is not None:
        rank = len(out_shape)
        channel_vector = (
            isinstance(m, int)
            and const.dtype == np.float32
            and const.size == m
            and rank - 1 <= const.ndim <= rank
            and const.shape[const.ndim - (rank - 1)] == m
        )
        if not channel_vector or ins[2]:
            return False
        ins[2] = add_constant(graph, f"{other}_vec", const.reshape(-1))
    elif shape_of(graph, other) == out_shape and is_float32(graph, other):
        ins[3] = other
    else:
        return False
    return True


def run(graph: Graph, ctx: PassContext) -> int:
    def fusable(conv: Node) -> bool:
        if not _is_conv(conv) or len(conv.inputs) < 2 or not is_float32(graph, conv.outputs[0]):
            return False
        return conv.op_type != "Conv" or conv.opset >= 1

    return absorb_consumers(graph, GraphIndex(graph), fusable, "FusedConv", _absorb_add)


PASS = Pass(
    "conv_fusion",
    run,
    "Conv absorbs bias, residual and activation (after BN folding, before the layout change); after matmul_fusion: no "
    "dependence, kept from the hand-written order",
    after=("conv_bn_fusion", "matmul_fusion"),
    before=("layout",),
)
