"""Remove layout shuffles that do nothing or undo each other.

    # Transpose(Transpose(x, p), q) -> Transpose(x, p[q])       and -> x when p[q] is the identity
    # Transpose(x, identity) -> x
    # Reshape(Reshape(x, s1), s2) -> Reshape(x, s2)             s2 constant without 0 entries
    # Reshape(x, s) -> x                                         x already has the (static) target shape
    # Transpose(Reshape(ToNchw(t), [N, C, H*W]), [0, 2, 1])
    #     -> Reshape(t, [0, -1, C])                              a vision transformer's patch tokens (``flatten(2)
    #                                                            .transpose(1, 2)``) of an NHWC map: its own rows
    # Reshape(ToNchw(t), s) -> Reshape(t, s)                     t a one-pixel map [N, 1, 1, C] (a global pool's), s
    #                                                            copying no dim but the batch

Readers are rewired only when the removed value is not a graph output and no subgraph reads it; a Transpose or
Reshape whose output becomes unread is left for dead-node elimination.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from runtime.ir import Graph, Node
from runtime.passes.pipeline import Pass
from runtime.passes.util import GraphIndex, add_constant, make_node, replace_node, shape_of

if TYPE_CHECKING:
    from runtime.passes.pipeline import PassContext


def _rewire(index: GraphIndex, old: str, new: str) -> bool:
    readers = index.consumers.get(old, [])
    if old in index.outputs or any(any(True for _ in r.subgraphs()) for r in readers):
        return False
    for reader in readers:
        reader.inputs = [new if i == old else i for i in reader.inputs]
    return bool(readers)


def _perm(node: Node, rank: int | None) -> list[int] | None:
    perm = node.attrs.get("perm")
    if perm is not None:
        return [int(p) for p in perm]
    return list(reversed(range(rank))) if rank is not None else None


def _static(shape: object) -> bool:
    return isinstance(shape, tuple) and all(isinstance(d, int) for d in shape)


def _nhwc_tokens(node: Node, perm: list[int], graph: Graph, index: GraphIndex) -> tuple[str, int] | None:
    """``t`` and its channels ``C`` when ``node`` is ``Transpose(Reshape(ToNchw(t), [N, C, H*W]), [0, 2, 1])``: the
    tokens of an NCHW map ``t`` holds in NHWC, which are ``t``'s own rows, ``[N, H*W, C]`` in ``h * W + w`` order
    either way."""
    reshape = index.producers.get(node.inputs[0])
    if perm != [0, 2, 1] or reshape is None or reshape.op_type != "Reshape" or reshape.domain or reshape.opset < 5:
        return None
    to_nchw = index.producers.get(reshape.inputs[0])
    if to_nchw is None or to_nchw.op_type != "ToNchw" or to_nchw.domain != "com.appopt":
        return None
    t, target = to_nchw.inputs[0], index.constant(reshape.inputs[1])
    nhwc = shape_of(graph, t)
    if nhwc is None or len(nhwc) != 4 or target is None or target.size != 3:
        return None
    n, h, w, c = nhwc
    batch, channels, length = (int(v) for v in target.reshape(-1))
    same_batch = batch == 0 or (isinstance(n, int) and batch == n)  # 0 copies the input's batch (allowzero off)
    whole_map = length == -1 or (isinstance(h, int) and isinstance(w, int) and length == h * w)
    if not (same_batch and whole_map and isinstance(c, int) and channels == c) or reshape.attrs.get("allowzero"):
        return None
    return t, c


def _patch_tokens(node: Node, t: str, channels: int, graph: Graph) -> Node:
    """``Reshape(t, [0, -1, channels])`` writing ``node``'s output."""
    target = add_constant(graph, f"{node.name}_tokens", np.array([0, -1, channels], dtype=np.int64))
    return make_node(graph, "Reshape", [t, target], [node.outputs[0]], f"{node.name}_tokens", domain="", opset=14)


def run(graph: Graph, ctx: PassContext) -> int:
    index = GraphIndex(graph)
    rewrites = 0
    for node in list(graph.nodes):
        if node.domain or not node.outputs or not node.inputs:
            continue
        out = node.outputs[0]
        if node.op_type == "Transpose":
            in_shape = shape_of(graph, node.inputs[0])
            perm = _perm(node, len(in_shape) if in_shape is not None else None)
            if perm is None:
                continue
            tokens = _nhwc_tokens(node, perm, graph, index)
            if tokens is not None:
                replace_node(graph, node, [_patch_tokens(node, *tokens, graph)])
                index.refresh()
                rewrites += 1
                continue
            if perm == list(range(len(perm))):
                if _rewire(index, out, node.inputs[0]):
                    rewrites += 1
                continue
            inner = index.producers.get(node.inputs[0])
            if inner is not None and inner.op_type == "Transpose" and not inner.domain:
                inner_shape = shape_of(graph, inner.inputs[0])
                p = _perm(inner, len(inner_shape) if inner_shape is not None else None)
                if p is None or len(p) != len(perm):
                    continue
                composed = [p[q] for q in perm]
                if composed == list(range(len(composed))):
                    if _rewire(index, out, inner.inputs[0]):
                        rewrites += 1
                else:
                    from onnx import helper

                    node.inputs = [inner.inputs[0]]
                    node.attributes = [a for a in node.attributes if a.name != "perm"]
                    node.attributes.append(helper.make_attribute("perm", composed))
                    node._decoded = None
                    rewrites += 1
                index.refresh()
        elif node.op_type == "Reshape" and node.opset >= 5 and len(node.inputs) == 2:
            in_shape, out_shape = shape_of(graph, node.inputs[0]), shape_of(graph, out)
            if _static(in_shape) and in_shape == out_shape:
                if _rewire(index, out, node.inputs[0]):
                    rewrites += 1
                    index.refresh()
                continue
            inner = index.producers.get(node.inputs[0])
            target = index.constant(node.inputs[1])
            if inner is None or target is None:
                continue
            if (inner.op_type == "Reshape" and not inner.domain and not (target == 0).any()) or _one_pixel(
                inner, target, graph
            ):
                node.inputs = [inner.inputs[0], node.inputs[1]]
                index.refresh()
                rewrites += 1
    return rewrites


def _one_pixel(to_nchw: Node, target: np.ndarray, graph: Graph) -> bool:
    """Whether ``to_nchw`` is a ``ToNchw`` of a one-pixel map ``[N, 1, 1, C]`` (a global pool's), which holds its
    values in the same order as its NCHW form, and the Reshape's target copies no dim but the batch."""
    if to_nchw.op_type != "ToNchw" or to_nchw.domain != "com.appopt":
        return False
    shape = shape_of(graph, to_nchw.inputs[0])
    return shape is not None and len(shape) == 4 and shape[1] == 1 and shape[2] == 1 and not (target[1:] == 0).any()


PASS = Pass(
    "transpose_reshape",
    run,
    "late: layout changes and fusions have settled, so only truly redundant shuffles remain",
    after=("layout", "depthwise_fusion", "elementwise_chain"),
)
