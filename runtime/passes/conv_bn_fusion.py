"""Fold an inference BatchNormalization, or a per-channel scale or shift, into the convolution that feeds it.

    # BatchNormalization(Conv(x, W, B), scale, bias, mean, var) -> Conv(x, W * s, (B - mean) * s + bias)
    #   where s = scale / sqrt(var + epsilon), per output channel
    # Mul(Conv(x, W, B), c) -> Conv(x, W * c, B * c)          c a constant scalar or per-channel vector
    # Add(Conv(x, W, B), c) -> Conv(x, W, B + c)              (Caffe2 exports write BatchNorm this way)
    # ConvTranspose in place of Conv: the same, W's output channels being its second axis (per group)

Guards (cheap first): BN in inference mode with only its first output used; Conv's output read only by the BN and
not a graph output; W, B, and the BN statistics are constants no caller can override; float weights; per-channel
statistics of the Conv's channel count. The folded weights are new initializers (the originals may be shared).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from runtime.ir import Graph, Node
from runtime.passes.pipeline import Pass
from runtime.passes.util import GraphIndex, add_constant, remove_nodes

if TYPE_CHECKING:
    from runtime.passes.pipeline import PassContext


def _inference_bn(node: Node, index: GraphIndex) -> bool:
    if node.op_type != "BatchNormalization" or node.domain or len(node.inputs) != 5:
        return False
    if node.opset >= 14 and int(node.attrs.get("training_mode", 0)):
        return False
    if node.opset < 7 and not int(node.attrs.get("is_test", 0)) and "is_test" in node.attrs:
        return False
    if node.opset < 9 and int(node.attrs.get("spatial", 1)) != 1:
        return False
    extra = [o for o in node.outputs[1:] if o]
    return not extra


_CONVS = ("Conv", "ConvTranspose")


def _out_channels(conv: Node, w: np.ndarray) -> int:
    """Output channels of a Conv (W ``[M, C/g, ...]``) or ConvTranspose (W ``[C, M/g, ...]``)."""
    return int(w.shape[0]) if conv.op_type == "Conv" else int(w.shape[1]) * int(conv.attrs.get("group", 1))


def _scaled(conv: Node, w: np.ndarray, c: np.ndarray) -> np.ndarray:
    """``W`` with each output channel's weights multiplied by ``c`` (length M)."""
    w64 = w.astype(np.float64)
    if conv.op_type == "Conv":
        return (w64 * c.reshape(-1, *([1] * (w.ndim - 1)))).astype(w.dtype)
    group = int(conv.attrs.get("group", 1))
    per_group = w64.reshape(group, w.shape[0] // group, w.shape[1], *w.shape[2:])
    scaled = per_group * c.reshape(group, 1, w.shape[1], *([1] * (w.ndim - 2)))
    return scaled.reshape(w.shape).astype(w.dtype)


def _foldable(conv: Node | None, index: GraphIndex, reader: Node) -> bool:
    """A Conv or ConvTranspose read only by ``reader``, with constant weights (and bias) of a whole group count."""
    if conv is None or conv.op_type not in _CONVS or conv.domain or index.sole_consumer(conv.outputs[0]) is not reader:
        return False
    w = index.constant(conv.inputs[1]) if len(conv.inputs) > 1 else None
    if w is None or w.dtype.kind != "f" or w.ndim < 3 or len([o for o in conv.outputs if o]) != 1:
        return False
    group = int(conv.attrs.get("group", 1))
    return conv.op_type == "Conv" or (group >= 1 and w.shape[0] % group == 0)


def _channel_constant(index: GraphIndex, graph: Graph, node: Node, conv_out: str, m: int) -> np.ndarray | None:
    """The other operand of a binary node on ``conv_out`` as a length-``m`` per-channel vector, if it is one."""
    from runtime.passes.util import shape_of

    other = node.inputs[1] if node.inputs[0] == conv_out else node.inputs[0]
    const = index.constant(other)
    out_shape = shape_of(graph, conv_out)
    if const is None or const.dtype.kind != "f" or out_shape is None or other == conv_out:
        return None
    rank = len(out_shape)
    if const.size == 1:
        return np.full(m, float(const.reshape(-1)[0]))
    if const.size != m or not (rank - 1 <= const.ndim <= rank) or const.shape[const.ndim - (rank - 1)] != m:
        return None
    return const.astype(np.float64).reshape(m)


def _fold_affine(graph: Graph, index: GraphIndex) -> int:
    """Mul/Add by per-channel constants right after a Conv."""
    folded = 0
    for node in list(graph.nodes):
        if node.op_type not in ("Mul", "Add") or node.domain or node.opset < 7 or len(node.inputs) != 2:
            continue
        conv = next((index.producers.get(i) for i in node.inputs if index.producers.get(i) is not None), None)
        if conv is None or not _foldable(conv, index, node):
            continue
        w = index.constant(conv.inputs[1])
        has_b = len(conv.inputs) > 2 and bool(conv.inputs[2])
        b = index.constant(conv.inputs[2]) if has_b else None
        if w is None or (has_b and b is None):
            continue
        m = _out_channels(conv, w)
        c = _channel_constant(index, graph, node, conv.outputs[0], m)
        if c is None or (b is not None and b.size != m):
            continue
        old_b = np.zeros(m) if b is None else b.astype(np.float64).reshape(m)
        if node.op_type == "Mul":
            w_name = add_constant(graph, f"{conv.inputs[1]}_scaled", _scaled(conv, w, c))
            new_b = old_b * c
        else:
            w_name = conv.inputs[1]
            new_b = old_b + c
        conv.inputs = [conv.inputs[0], w_name, add_constant(graph, f"{conv.name}_bias_folded", new_b.astype(w.dtype))]
        conv.outputs = [node.outputs[0]]
        remove_nodes(graph, [node])
        index.refresh()
        folded += 1
    return folded


def run(graph: Graph, ctx: PassContext) -> int:
    index = GraphIndex(graph)
    folded = 0
    dead: list[Node] = []
    for bn in list(graph.nodes):
        if not _inference_bn(bn, index):
            continue
        conv = index.producers.get(bn.inputs[0])
        if conv is None or not _foldable(conv, index, bn):
            continue
        w = index.constant(conv.inputs[1])
        b = index.constant(conv.inputs[2]) if len(conv.inputs) > 2 and conv.inputs[2] else None
        if w is None or (len(conv.inputs) > 2 and conv.inputs[2] and b is None):
            continue
        stats = [index.constant(name) for name in bn.inputs[1:]]
        m = _out_channels(conv, w)
        if any(s is None or s.size != m for s in stats) or (b is not None and b.size != m):
            continue
        scale, bias, mean, var = (np.asarray(s, dtype=np.float64).reshape(m) for s in stats)
        s = scale / np.sqrt(var + float(bn.attrs.get("epsilon", 1e-5)))
        new_w = _scaled(conv, w, s)
        old_b = np.zeros(m) if b is None else b.astype(np.float64).reshape(m)
        new_b = ((old_b - mean) * s + bias).astype(w.dtype)
        conv.inputs = [
            conv.inputs[0],
            add_constant(graph, f"{conv.inputs[1]}_bnfold", new_w),
            add_constant(graph, f"{conv.name}_bias_bnfold", new_b),
        ]
        conv.outputs = [bn.outputs[0]]
        dead.append(bn)
        folded += 1
    remove_nodes(graph, dead)
    index.refresh()
    return folded + _fold_affine(graph, index)


PASS = Pass(
    "conv_bn_fusion",
    run,
    "before conv_fusion: a BatchNormalization between a Conv and its activation would block that fusion",
    before=("conv_fusion",),
)
