"""Fuse an embedding bag (a recommendation model's sparse feature) into one EmbeddingBag op.

    # ReduceSum(Gather(table, ids, axis=0), axes=[1]) -> EmbeddingBag(table, ids)               ids [N, L]
    # ReduceMean(...)                                 -> EmbeddingBag(table, ids; mean=1)
    # ... with ids = Gather(all_ids, i, axis=1)       -> EmbeddingBag(table, all_ids; column=i)  all_ids [N, F, L]
    # Loop(M, true) { ReduceSum(Gather(table, Slice(idx, starts[i], ends[i])), [0]) }
    #                                                 -> EmbeddingBagRanges(table, idx, starts, ends, M)

PyTorch exports ``table(ids[:, i]).sum(1)`` as these three nodes per feature, and ``nn.EmbeddingBag`` as a Loop
over the bags whose body slices, gathers and sums one bag; fused, either is one compiled call.
Guards: a float32 ``[V, D]`` table, integer ids of known rank, the bag axis 1 (or -2) reduced, an int scalar
constant column, and every link read only by the next one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from onnx import GraphProto, numpy_helper

from runtime.ir import Graph, Node
from runtime.passes.pipeline import Pass
from runtime.passes.util import (
    GraphIndex,
    elem_type_of,
    is_float32,
    make_node,
    reduced_axes,
    replace_node,
    shape_of,
    substitute,
)

if TYPE_CHECKING:
    from runtime.passes.pipeline import PassContext

_INT_IDS = (6, 7)  # TensorProto INT32, INT64


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
    axes = reduced_axes(reduce, index)
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


def _body_values(body: GraphProto) -> dict[str, np.ndarray]:
    """The body's Constant outputs (``value`` attribute) by name."""
    values = {}
    for node in body.node:
        if node.op_type == "Constant" and len(node.attribute) == 1 and node.attribute[0].name == "value":
            values[node.output[0]] = numpy_helper.to_array(node.attribute[0].t)
    return values


def _ints(name: str, values: dict[str, np.ndarray], index: GraphIndex) -> list[int] | None:
    value = values.get(name)
    if value is None:
        value = index.constant(name)
    return None if value is None or value.dtype.kind not in "iu" else [int(v) for v in value.ravel()]


def _is_true(name: str, values: dict[str, np.ndarray], index: GraphIndex) -> bool:
    value = values.get(name)
    if value is None:
        value = index.constant(name)
    return value is not None and value.size == 1 and bool(value.reshape(-1)[0])


def _loop_bags(loop: Node, graph: Graph, index: GraphIndex) -> tuple[list[str], dict[str, int]] | None:
    """``(table, idx, starts, ends, M)`` and the mode of a Loop that sums (or averages) one slice of bags per
    iteration, as PyTorch exports ``nn.EmbeddingBag``; None for any other Loop."""
    if loop.op_type != "Loop" or loop.domain or len(loop.inputs) != 2 or len(loop.outputs) != 1:
        return None
    trip, cond = loop.inputs
    bodies = list(loop.subgraphs())
    if not trip or len(bodies) != 1 or (cond and not _is_true(cond, {}, index)):
        return None
    body = bodies[0]
    values = _body_values(body)
    nodes = [n for n in body.node if n.op_type != "Constant"]
    made = {out: n for n in nodes for out in n.output}
    if len(body.input) != 2 or len(body.output) != 2 or len(nodes) != 8:
        return None
    iteration, cond_in = body.input[0].name, body.input[1].name
    keep = made.get(body.output[0].name)
    if keep is None or keep.op_type not in ("Cast", "Identity") or keep.domain:
        return None
    if keep.input[0] != cond_in and not _is_true(keep.input[0], values, index):
        return None
    reduce = made.get(body.output[1].name)
    if reduce is None or reduce.op_type not in ("ReduceSum", "ReduceMean") or reduce.domain:
        return None
    attrs = {a.name: a for a in reduce.attribute}
    if "keepdims" not in attrs or attrs["keepdims"].i != 0:
        return None
    axes = (
        _ints(reduce.input[1], values, index)
        if len(reduce.input) > 1
        else list(attrs["axes"].ints)
        if "axes" in attrs
        else None
    )
    gather = made.get(reduce.input[0])
    if axes != [0] or gather is None or gather.op_type != "Gather" or any(a.i != 0 for a in gather.attribute):
        return None
    if len(gather.input) != 2:
        return None
    table, row = gather.input
    cut = made.get(row)
    if cut is None or cut.op_type != "Slice" or len(cut.input) not in (3, 4) or table in made:
        return None
    if len(cut.input) == 4 and _ints(cut.input[3], values, index) != [0]:
        return None
    idx, bounds = cut.input[0], []
    for name in cut.input[1:3]:
        lift = made.get(name)
        pick = made.get(lift.input[0]) if lift is not None and lift.op_type == "Unsqueeze" else None
        if lift is None or pick is None or len(lift.input) != 2 or _ints(lift.input[1], values, index) != [0]:
            return None
        if pick.op_type != "Gather" or pick.input[1] != iteration or any(a.i != 0 for a in pick.attribute):
            return None
        bounds.append(pick.input[0])
    outer = [table, idx, *bounds]
    if any(name in made or name in (iteration, cond_in) for name in outer):
        return None
    table_shape, idx_shape = shape_of(graph, table), shape_of(graph, idx)
    if table_shape is None or len(table_shape) != 2 or not is_float32(graph, table):
        return None
    if idx_shape is None or len(idx_shape) != 1 or elem_type_of(graph, idx) not in _INT_IDS:
        return None
    return [table, idx, *bounds, trip], {"mean": int(reduce.op_type == "ReduceMean")}


def _through_casts(name: str, index: GraphIndex) -> Node | None:
    node = index.producers.get(name)
    while node is not None and node.op_type == "Cast" and not node.domain:
        node = index.producers.get(node.inputs[0])
    return node


def _dim_of(name: str, source: str, axis: int, index: GraphIndex, graph: Graph) -> bool:
    """Whether ``name`` is ``Gather(Shape(source), axis)`` (through casts), or the constant that the shape
    arithmetic folded it to where that dim is static (``shape_values``)."""
    known = index.constant(name)
    if known is not None:
        dims = shape_of(graph, source)
        dim = dims[axis] if dims is not None and len(dims) > axis else None
        return known.size == 1 and isinstance(dim, int) and int(known.reshape(-1)[0]) == dim
    pick = _through_casts(name, index)
    if pick is None or pick.op_type != "Gather" or len(pick.inputs) != 2 or int(pick.attrs.get("axis", 0)) != 0:
        return False
    shape = index.producers.get(pick.inputs[0])
    at = index.constant(pick.inputs[1])
    if shape is None or shape.op_type != "Shape" or shape.inputs[0] != source or shape.attributes:
        return False
    return at is not None and at.size == 1 and int(at.reshape(-1)[0]) == axis


def _fixed_length_ids(inputs: list[str], graph: Graph, index: GraphIndex) -> str | None:
    """``ids [N, L]`` when the ranges are PyTorch's for a 2-d ``nn.EmbeddingBag`` input: ``idx = Reshape(ids,
    [-1])``, ``starts = Concat(Range(0, numel(ids), L), [numel])``, ``ends = starts[1:]`` and ``M = len(ends)``;
    bag i is then row i of ids."""
    _, idx, starts, ends, trip = inputs
    flat = index.producers.get(idx)
    target = index.constant(flat.inputs[1]) if flat is not None and len(flat.inputs) == 2 else None
    if flat is None or flat.op_type != "Reshape" or target is None or target.reshape(-1).tolist() != [-1]:
        return None
    ids = flat.inputs[0]
    shape = shape_of(graph, ids)
    concat = index.producers.get(starts)
    if shape is None or len(shape) != 2 or concat is None or concat.op_type != "Concat" or len(concat.inputs) != 2:
        return None
    offsets, total = (index.producers.get(i) for i in concat.inputs)
    if offsets is None or offsets.op_type != "Range" or total is None or total.op_type != "Unsqueeze":
        return None
    first = index.constant(offsets.inputs[0])
    if first is None or first.size != 1 or int(first.reshape(-1)[0]) != 0:
        return None
    numel = _through_casts(offsets.inputs[1], index)
    if numel is None or numel.op_type != "ReduceProd" or int(numel.attrs.get("keepdims", 1)) != 0:
        return None
    counted = index.producers.get(numel.inputs[0])
    if counted is None or counted.op_type != "Shape" or counted.inputs[0] != ids or counted.attributes:
        return None
    if not _dim_of(offsets.inputs[2], ids, 1, index, graph) or not _dim_of(total.inputs[0], idx, 0, index, graph):
        return None
    cut = index.producers.get(ends)
    if cut is None or cut.op_type != "Slice" or cut.inputs[0] != starts or len(cut.inputs) < 3:
        return None
    bounds = [index.constant(n) if n else None for n in [*cut.inputs[1:], "", ""][:4]]
    begin, end, axes, steps = (None if b is None else b.reshape(-1).tolist() for b in bounds)
    if begin != [1] or end is None or end[0] < 2**31 - 1 or axes not in (None, [0]) or steps not in (None, [1]):
        return None
    return ids if _dim_of(trip, ends, 0, index, graph) else None


def run(graph: Graph, ctx: PassContext) -> int:
    index = GraphIndex(graph)
    rewrites = 0
    for node in list(graph.nodes):
        bags = _loop_bags(node, graph, index)
        if bags is not None:
            ids = _fixed_length_ids(bags[0], graph, index)
            if ids is not None:  # rows of a 2-d input: the plain bag, and the offsets' subgraph goes dead
                attrs = {"column": -1, "mean": bags[1]["mean"], "keepdims": 0}
                fused = make_node(graph, "EmbeddingBag", [bags[0][0], ids], node.outputs, f"{node.name}_bag",
                                  attributes=attrs)  # fmt: skip
            else:
                fused = make_node(graph, "EmbeddingBagRanges", bags[0], node.outputs, f"{node.name}_bags",
                                  attributes=bags[1])  # fmt: skip
            replace_node(graph, node, [fused])
            index.refresh()
            rewrites += 1
            continue
        found = _match(node, graph, index)
        if found is None:
            continue
        dead, inputs, attrs = found
        bag = make_node(graph, "EmbeddingBag", inputs, node.outputs, f"{node.name}_bag", attributes=attrs)
        substitute(graph, index, node, [bag], dead)
        rewrites += 1
    return rewrites


PASS = Pass(
    "embedding_bag",
    run,
    "after constant folding (the bag's column index is then a constant): Gather + ReduceSum become one op; after "
    "conv_bn_fusion: no dependence, kept from the hand-written order",
    after=("constant_folding", "conv_bn_fusion"),
)
