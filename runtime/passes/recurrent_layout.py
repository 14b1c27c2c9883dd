"""Batch-first recurrent layers: PyTorch's transposes around the layer become the layer's ``layout = 1``.

PyTorch exports ``batch_first=True`` layers as a sequence-first ONNX layer between transposes:

# one direction:  Squeeze(LSTM(Transpose(x, [1,0,2]), ..., h0)[Y], [1]) -> s (seq, batch, H)
#                 ->  Reshape(LSTM(x, ..., Transpose(h0, [1,0,2]), layout=1)[Y], [0,0,-1]) -> b (batch, seq, H)
# two directions: Reshape(Transpose(Y, [0,2,1,3]), [0,0,-1]) -> s (seq, batch, 2H)
#                 ->  Reshape(Y with layout=1, [0,0,-1]) -> b (batch, seq, 2H)
# then:           Transpose(s, [1,0,2]) -> Identity(b);  any other reader of s reads Transpose(b, [1,0,2])

so the layer reads its batch-first input and writes its batch-first output in place, and the transposed copies
between it and the next layer (a stacked layer reads ``s``, which is again a transposed view of ``b``), the
output projection or a pooling disappear. Only layers whose sole output is ``Y`` (after ``recurrent_outputs``)
at opset 14 or later (which has ``layout``) are rewritten; initial states are transposed views, read in place.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from runtime.ir import Graph, Node
from runtime.passes.pipeline import Pass
from runtime.passes.recurrent_outputs import RECURRENT_OPS
from runtime.passes.util import add_constant, make_node, remove_nodes, set_value

if TYPE_CHECKING:
    from runtime.passes.pipeline import PassContext

SWAP = [1, 0, 2]


def _constant(graph: Graph, name: str) -> np.ndarray | None:
    value = graph.initializers.get(name) if name not in graph.input_names else None
    return None if value is None else np.asarray(value)


def _is_transpose(node: Node | None, perm: list[int]) -> bool:
    return node is not None and node.op_type == "Transpose" and not node.domain and node.attrs.get("perm") == perm


def _squeezes_axis_1(graph: Graph, node: Node) -> bool:
    if node.op_type != "Squeeze" or node.domain:
        return False
    axes: Any = node.attrs.get("axes")
    if len(node.inputs) > 1 and node.inputs[1]:
        axes = _constant(graph, node.inputs[1])
    return axes is not None and [int(a) for a in np.asarray(axes).reshape(-1)] == [1]


def _flattens_last_two(graph: Graph, node: Node) -> bool:
    if node.op_type != "Reshape" or node.domain or node.attrs.get("allowzero", 0) or len(node.inputs) < 2:
        return False
    shape = _constant(graph, node.inputs[1])
    return shape is not None and shape.reshape(-1).tolist() == [0, 0, -1]


def _sequence_chain(graph: Graph, node: Node, consumers: dict[str, list[Node]]) -> list[Node] | None:
    """The nodes between ``Y`` and the (seq, batch, dirs * H) sequence PyTorch reshapes it to, else None."""
    y = node.outputs[0]
    readers = consumers.get(y, [])
    if len(readers) != 1 or y in graph.output_names:
        return None
    first = readers[0]
    if node.attrs.get("direction", "forward") != "bidirectional":
        return [first] if _squeezes_axis_1(graph, first) else None
    if not _is_transpose(first, [0, 2, 1, 3]) or first.outputs[0] in graph.output_names:
        return None
    after = consumers.get(first.outputs[0], [])
    if len(after) != 1 or not _flattens_last_two(graph, after[0]):
        return None
    return [first, after[0]]


def _eligible(node: Node) -> bool:
    return (
        not node.domain
        and node.op_type in RECURRENT_OPS
        and node.opset >= 14
        and int(node.attrs.get("layout", 0)) == 0
        and len(node.outputs) == 1
        and bool(node.outputs[0])
    )


def _rewrite(graph: Graph, node: Node, chain: list[Node], consumers: dict[str, list[Node]]) -> None:
    producers = graph.producers()
    elem = graph.values[node.outputs[0]].elem_type if node.outputs[0] in graph.values else 1
    inputs = list(node.inputs)
    source = producers.get(inputs[0])
    if _is_transpose(source, SWAP):
        inputs[0] = source.inputs[0]  # type: ignore[union-attr]
    else:
        inputs[0] = _transposed(graph, inputs[0], elem, f"{node.name}__x")
    for k in (5, 6):  # initial_h, initial_c: (dirs, batch, H) -> (batch, dirs, H), a view read in place
        if len(inputs) > k and inputs[k]:
            inputs[k] = _transposed(graph, inputs[k], elem, f"{node.name}__state{k}")
    y = graph.unique_name(f"{node.outputs[0]}__batch_first")
    set_value(graph, y, elem, None)
    attrs = {a.name: a for a in node.attributes}
    from onnx import helper

    attrs["layout"] = helper.make_attribute("layout", 1)
    node.attributes = list(attrs.values())
    node._decoded = None
    node.inputs, node.outputs = inputs, [y]
    flat = graph.unique_name(f"{y}__flat")
    set_value(graph, flat, elem, None)
    shape = add_constant(graph, f"{node.name}__flat_shape", np.array([0, 0, -1], dtype=np.int64))
    graph.nodes.append(make_node(graph, "Reshape", [y, shape], [flat], f"{node.name}__flat", "", node.opset))
    sequence = chain[-1].outputs[0]
    remove_nodes(graph, chain)
    keep_sequence = sequence in graph.output_names
    for reader in consumers.get(sequence, []):
        if _is_transpose(reader, SWAP):  # back to batch-first: the layer's own output
            reader.op_type, reader.inputs, reader.attributes, reader._decoded = "Identity", [flat], [], None
        else:
            keep_sequence = True
    if keep_sequence:
        graph.nodes.append(
            make_node(graph, "Transpose", [flat], [sequence], f"{node.name}__sequence", "", 13, {"perm": SWAP})
        )


def _transposed(graph: Graph, name: str, elem: int, base: str) -> str:
    out = graph.unique_name(f"{name}__swapped")
    set_value(graph, out, elem, None)
    graph.nodes.append(make_node(graph, "Transpose", [name], [out], base, "", 13, {"perm": SWAP}))
    return out


def run(graph: Graph, ctx: PassContext) -> int:
    """Rewrite every batch-first recurrent layer PyTorch's way of exporting them; returns layers rewritten."""
    rewritten = 0
    for node in list(graph.nodes):
        if not _eligible(node):
            continue
        consumers = graph.consumers()
        chain = _sequence_chain(graph, node, consumers)
        if chain is None:
            continue
        _rewrite(graph, node, chain, consumers)
        rewritten += 1
    return rewritten


PASS = Pass(
    "recurrent_layout",
    run,
    "after recurrent_outputs (it takes layers whose only output is Y): PyTorch's batch-first transposes become the "
    "layer's layout 1; the next round's dead_node_elimination drops what they leave",
    after=("recurrent_outputs",),
)
