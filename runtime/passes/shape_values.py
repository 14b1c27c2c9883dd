"""Give shape arithmetic the values shape inference already knows, so that it folds away.

    # Shape(x) -> constant                       every dim of x it reports is static
    # Gather(Shape(x), i) -> constant            the dims it picks are static (i a constant)
    # Reshape(x, s) -> Reshape(x, [0|d|-1, ...])  s computed at run time; the inferred output shape names every
    #     dim as x's dim at the same place (0), a static size (d) or, once, the rest (-1)

Exporters write ``x.reshape(b, n, heads, d)`` as Shape -> Gather -> Unsqueeze -> Concat -> Reshape with a dynamic
batch: a dozen nodes per attention layer that run every time, and a Reshape the memory plan cannot fix as a view
because a run-time value shapes it. After this pass the Reshape has a constant target, constant folding takes
what reads the new constants, and dead-node elimination removes the shape arithmetic nobody reads any more.

The rewrite trusts the inferred shapes (symbols equal only where inference proved them equal), as every pass
reading ``shape_of`` does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from runtime.ir import Graph, Node, value_of_array
from runtime.passes.util import GraphIndex, add_constant, shape_of

if TYPE_CHECKING:
    from runtime.passes.pipeline import PassContext


def _static(dims: Any) -> list[int] | None:
    if dims is None or not all(isinstance(d, int) and d >= 0 for d in dims):
        return None
    return [int(d) for d in dims]


def _shape_dims(node: Node, graph: Graph) -> tuple[Any, ...] | None:
    """The dims ``Shape(x)`` reports (its start/end slice from opset 15), static or symbolic."""
    shape = shape_of(graph, node.inputs[0])
    if shape is None:
        return None
    rank = len(shape)
    start = int(node.attrs.get("start", 0)) if node.opset >= 15 else 0
    end = node.attrs.get("end") if node.opset >= 15 else None
    start = min(max(start + rank if start < 0 else start, 0), rank)
    stop = rank if end is None else int(end)
    stop = min(max(stop + rank if stop < 0 else stop, 0), rank)
    return tuple(shape[start:stop])


def _constant_value(node: Node, graph: Graph, index: GraphIndex) -> np.ndarray | None:
    """The value of a Shape, or of a Gather from a Shape, when every dim it reads is static."""
    if node.op_type == "Shape" and len(node.inputs) == 1:
        dims = _static(_shape_dims(node, graph))
        return None if dims is None else np.asarray(dims, dtype=np.int64)
    if node.op_type != "Gather" or len(node.inputs) != 2 or int(node.attrs.get("axis", 0)) != 0:
        return None
    source = index.producers.get(node.inputs[0])
    picks = index.constant(node.inputs[1])
    if source is None or source.domain or source.op_type != "Shape" or picks is None or picks.dtype.kind not in "iu":
        return None
    dims = _shape_dims(source, graph)
    if dims is None or picks.ndim > 1 or any(not -len(dims) <= int(i) < len(dims) for i in picks.reshape(-1)):
        return None
    chosen = _static([dims[int(i)] for i in picks.reshape(-1)])
    return None if chosen is None else np.asarray(chosen, dtype=np.int64).reshape(picks.shape)


def _reshape_target(node: Node, graph: Graph, index: GraphIndex) -> np.ndarray | None:
    """A constant target equivalent to a Reshape's run-time one, from the inferred input and output shapes."""
    if len(node.inputs) != 2 or int(node.attrs.get("allowzero", 0)) or index.constant(node.inputs[1]) is not None:
        return None
    src, out = shape_of(graph, node.inputs[0]), shape_of(graph, node.outputs[0])
    if src is None or out is None:
        return None
    target = []
    for i, dim in enumerate(out):
        if isinstance(dim, int) and dim > 0:
            target.append(dim)
        elif isinstance(dim, str) and i < len(src) and src[i] == dim:
            target.append(0)  # the input's dim at the same place
        else:
            target.append(-1)
    if target.count(-1) > 1:
        return None
    return np.asarray(target, dtype=np.int64)


def run(graph: Graph, ctx: PassContext) -> int:
    index = GraphIndex(graph)
    rewrites = 0
    keep: list[Node] = []
    for node in graph.nodes:
        if node.domain:
            keep.append(node)
            continue
        value = _constant_value(node, graph, index)
        if value is not None and node.outputs[0] not in index.outputs:
            name = node.outputs[0]
            graph.initializers[name] = value
            graph.values[name] = value_of_array(name, value)
            rewrites += 1
            continue
        if node.op_type == "Reshape":
            target = _reshape_target(node, graph, index)
            if target is not None:
                node.inputs[1] = add_constant(graph, f"{node.name}_target", target)
                rewrites += 1
        keep.append(node)
    graph.nodes = keep
    return rewrites
