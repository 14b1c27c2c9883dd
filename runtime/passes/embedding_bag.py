"""Fuse an embedding bag (a recommendation model's sparse feature) into one EmbeddingBag op.

    # ReduceSum(Gather(table, ids, axis=0), axes=[1]) -> EmbeddingBag(table, ids)               ids [N, L]
    # ReduceMean(...)                                 -> EmbeddingBag(table, ids; mean=1)
    # ... with ids = Gather(all_ids, i, axis=1)       -> EmbeddingBag(table, all_ids; column=i)  all_ids [N, F, L]

PyTorch exports ``table(ids[:, i]).sum(1)`` as these three nodes per feature; fused, a bag is one compiled call.
Guards: a float32 ``[V, D]`` table, integer ids of known rank, the bag axis 1 (or -2) reduced, an int scalar
constant column, and every link read only by the next one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from runtime.ir import Graph, Node
from runtime.passes.util import GraphIndex, elem_type_of, is_float32, make_node, remove_nodes, replace_node, shape_of

if TYPE_CHECKING:
    from runtime.passes.pipeline import PassContext

_INT_IDS = (6, 7)  # TensorProto INT32, INT64


def _reduced_axes(node: Node, index: GraphIndex) -> list[int] | None:
    axes_input_from = {"ReduceSum": 13, "ReduceMean": 18}[node.op_type]
    if node.opset >= axes_input_from:
        if len(node.inputs) < 2 or not node.inputs[1]:
            return None
        axes = index.constant(node.inputs[1])
        return None if axes is None else [int(v) for v in axes.ravel()]
    return [int(v) for v in node.attrs.get("axes") or []] or None


def _column(ids: str, graph: Graph, index: GraphIndex) -> tuple[str, int] | None:
    """``(all_ids, i)`` when ``ids`` is ``Gather(all_ids, i, axis=1)`` of a rank-3 tensor, read only once."""
    pick = index.producers.get(ids)
    if pick is None or pick.op_type != "Gather" or pick.domain or len(pick.inputs) != 2:
        return None
    if int(pick.attrs.get("axis", 0)) != 1 or index.sole_consumer(ids) is None:
        return None
    source, i = pick.inputs
    shape, value = shape_of(graph, source), index.constant(i)
    if shape is None or len(shape) != 3 or value is None or value.ndim != 0 or value.dtype.kind != "i":
        return None
    width = shape[1]
    col = int(value)
    if not isinstance(width, int) or not -width <= col < width:
        return None
    return source, col % width


def _match(reduce: Node, graph: Graph, index: GraphIndex) -> tuple[list[Node], list[str], dict[str, int]] | None:
    if reduce.domain or reduce.op_type not in ("ReduceSum", "ReduceMean") or len(reduce.outputs) != 1:
        return None
    if int(reduce.attrs.get("noop_with_empty_axes", 0)):
        return None
    gather = index.producers.get(reduce.inputs[0])
    if gather is None or gather.op_type != "Gather" or gather.domain or int(gather.attrs.get("axis", 0)) != 0:
        return None
    if len(gather.inputs) != 2 or index.sole_consumer(gather.outputs[0]) is not reduce:
        return None
    table, ids = gather.inputs
    table_shape, ids_shape = shape_of(graph, table), shape_of(graph, ids)
    if table_shape is None or len(table_shape) != 2 or not is_float32(graph, table):
        return None
    if ids_shape is None or len(ids_shape) != 2 or elem_type_of(graph, ids) not in _INT_IDS:
        return None
    axes = _reduced_axes(reduce, index)
    if axes is None or [a % 3 for a in axes] != [1]:
        return None
    nodes = [gather]
    keepdims = int(reduce.attrs.get("keepdims", 1))
    attrs = {"column": -1, "mean": int(reduce.op_type == "ReduceMean"), "keepdims": keepdims}
    column = _column(ids, graph, index)
    if column is not None:
        ids, attrs["column"] = column
        nodes.append(index.producers[gather.inputs[1]])
    return nodes, [table, ids], attrs


def run(graph: Graph, ctx: PassContext) -> int:
    index = GraphIndex(graph)
    rewrites = 0
    for node in list(graph.nodes):
        found = _match(node, graph, index)
        if found is None:
            continue
        dead, inputs, attrs = found
        bag = make_node(graph, "EmbeddingBag", inputs, node.outputs, f"{node.name}_bag", attributes=attrs)
        replace_node(graph, node, [bag])
        remove_nodes(graph, dead)
        index.refresh()
        rewrites += 1
    return rewrites
