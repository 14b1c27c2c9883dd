"""Fuse squeeze-excite (EfficientNet, MobileNetV3) into one SqueezeExcite op.

    # Mul(y, FusedConv1x1(FusedConv1x1(GlobalAveragePool(y), W1, B1, act1), W2, B2, gate))
    #   -> SqueezeExcite(y, W1, B1, W2, B2; act1, gate)
    # (ReduceMean(y, axes=[2, 3], keepdims=1) in place of GlobalAveragePool; plain Conv for either FusedConv)

It runs after conv_fusion and silu_fusion, so both layers carry their activations, and before the layout pass,
which then sinks the op into NHWC: left apart, the broadcast Mul of a ``[N, C, 1, 1]`` gate is not sunk, and every
block pays an NHWC -> NCHW -> NHWC round trip. Guards: float32, 4-d ``y`` with known channels, constant 1x1
weights of matching shapes, unit strides and dilations, no padding, one group, no residual, and every link read
only by the next one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from runtime.ir import Graph, Node
from runtime.native.abi import ACTIVATIONS
from runtime.passes.layout import nhwc_value, replace_with_nhwc
from runtime.passes.pipeline import Pass
from runtime.passes.util import (
    GraphIndex,
    is_float32,
    make_node,
    plain_attrs,
    shape_of,
    substitute,
)

if TYPE_CHECKING:
    from runtime.passes.pipeline import PassContext


def _is_pool(node: Node, index: GraphIndex) -> bool:
    if node.domain or len(node.outputs) != 1:
        return False
    if node.op_type == "GlobalAveragePool":
        return True
    if node.op_type != "ReduceMean" or int(node.attrs.get("keepdims", 1)) != 1:
        return False
    if node.opset >= 18:
        axes = index.constant(node.inputs[1]) if len(node.inputs) > 1 else None
        values = None if axes is None else [int(v) for v in axes.ravel()]
    else:
        values = [int(v) for v in node.attrs.get("axes") or []]
    return values is not None and sorted(v % 4 for v in values) == [2, 3]


def _layer(node: Node | None, index: GraphIndex, cin: int) -> tuple[np.ndarray, str, tuple[str, float, float]] | None:
    """``(W, bias name, activation)`` of a 1x1 convolution from ``cin`` channels on a 1x1 image, else None."""
    if node is None or len(node.inputs) < 2 or len(node.outputs) != 1:
        return None
    if (node.domain, node.op_type) not in (("", "Conv"), ("com.appopt", "FusedConv")):
        return None
    if len(node.inputs) > 3 and node.inputs[3]:
        return None
    w = index.constant(node.inputs[1])
    if w is None or w.dtype != np.float32 or w.ndim != 4 or w.shape[1:] != (cin, 1, 1):
        return None
    bias = node.inputs[2] if len(node.inputs) > 2 else ""
    if bias:
        b = index.constant(bias)
        if b is None or b.dtype != np.float32 or b.size != w.shape[0]:
            return None
    a = node.attrs
    if int(a.get("group", 1)) != 1 or str(a.get("auto_pad", "NOTSET")) not in ("NOTSET", "VALID"):
        return None
    if any(int(v) != 1 for v in [*(a.get("strides") or []), *(a.get("dilations") or [])]):
        return None
    if any(int(v) != 0 for v in a.get("pads") or []):
        return None
    act = str(a.get("activation", "") or "")
    if act not in ACTIVATIONS:
        return None
    return w, bias, (act, float(a.get("act_lo", 0.0)), float(a.get("act_hi", 0.0)))


def _match(mul: Node, graph: Graph, index: GraphIndex) -> tuple[str, list[Node], list[str], dict[str, Any]] | None:
    if mul.op_type != "Mul" or mul.domain or mul.opset < 7 or len(mul.inputs) != 2 or len(mul.outputs) != 1:
        return None
    for y, gate in (mul.inputs, mul.inputs[::-1]):
        shape = shape_of(graph, y)
        if y == gate or shape is None or len(shape) != 4 or not isinstance(shape[1], int):
            continue
        if not is_float32(graph, y) or shape_of(graph, mul.outputs[0]) != shape:
            continue
        second = index.producers.get(gate)
        first = index.producers.get(second.inputs[0]) if second is not None and second.inputs else None
        pool = index.producers.get(first.inputs[0]) if first is not None and first.inputs else None
        if pool is None or first is None or second is None or not _is_pool(pool, index) or pool.inputs[0] != y:
            continue
        chain = [pool, first, second]
        links = zip(chain, [first, second, mul], strict=True)
        if any(index.sole_consumer(n.outputs[0]) is not nxt for n, nxt in links):
            continue
        inner = _layer(first, index, shape[1])
        if inner is None:
            continue
        outer = _layer(second, index, inner[0].shape[0])
        if outer is None or outer[0].shape[0] != shape[1]:
            continue
        attrs = {
            "act1": inner[2][0] or None,
            "act1_lo": inner[2][1],
            "act1_hi": inner[2][2],
            "activation": outer[2][0] or None,
            "act_lo": outer[2][1],
            "act_hi": outer[2][2],
            "channels_last": 0,
        }
        inputs = [y, first.inputs[1], inner[1], second.inputs[1], outer[1]]
        return y, chain, inputs, attrs
    return None


def run(graph: Graph, ctx: PassContext) -> int:
    index = GraphIndex(graph)
    rewrites = 0
    for node in list(graph.nodes):
        found = _match(node, graph, index)
        if found is None:
            continue
        _, chain, inputs, attrs = found
        while inputs and not inputs[-1]:
            inputs.pop()
        fused = make_node(graph, "SqueezeExcite", inputs, node.outputs, f"{node.name}_se", attributes=attrs)
        substitute(graph, index, node, [fused], chain)
        rewrites += 1
    return rewrites


def sink_channels_last(node: Node, graph: Graph, index: GraphIndex) -> bool:
    """For the layout pass: SqueezeExcite on a tensor that comes from ToNchw runs on the NHWC tensor instead.

    # SqueezeExcite(ToNchw(t), ...; channels_last=0) -> ToNchw(SqueezeExcite(t, ...; channels_last=1))
    """
    producer = index.producers.get(node.inputs[0]) if node.inputs else None
    if producer is None or producer.op_type != "ToNchw" or producer.domain != "com.appopt":
        return False
    if int(node.attrs.get("channels_last", 0)) or len(node.outputs) != 1:
        return False
    y_nhwc = nhwc_value(graph, node.outputs[0])
    attrs = {**plain_attrs(node), "channels_last": 1}
    inputs = [producer.inputs[0], *node.inputs[1:]]
    new = make_node(graph, node.op_type, inputs, [y_nhwc], f"{node.name}_nhwc", attributes=attrs)
    replace_with_nhwc(graph, node, [new], y_nhwc)
    return True


PASS = Pass(
    "squeeze_excite",
    run,
    "after silu_fusion (its layers carry their activations), before layout, which then sinks it into NHWC",
    after=("silu_fusion",),
    before=("layout",),
)
