"""Recurrent layers produce only the outputs something reads, as ``Y`` alone where they can.

# LSTM(x, W, R, ...) -> (Y, Y_h, Y_c) with Y_h, Y_c unread  ->  LSTM(x, W, R, ...) -> (Y)
# GRU(x, W, R, ...) -> (Y, Y_h) with Y unread, bidirectional  ->  GRU(x, W, R, ...) -> ("", Y_h)
# GRU(x, W, R, B) -> ("", Y_h), one direction, all steps     ->  Y_h = Gather(GRU(x, W, R, B) -> (Y), -1, axis=0)

ONNX lets a node leave optional outputs out: an empty name is not computed, trailing ones are dropped. A layer
left with ``Y`` alone runs as one prebound compiled call writing into its planned buffer (a layer with several
outputs runs through Python each time); an output left out is never written. The last rule serves a seq2seq
encoder's final state: without ``sequence_lens`` one direction's ``Y_h`` is ``Y`` at its last step (the first
for ``reverse``), the same values. A value that is a graph output or read anywhere (a subgraph included) is kept.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from runtime.ir import Graph, Node
from runtime.passes.pipeline import Pass
from runtime.passes.util import add_constant, make_node, set_value

if TYPE_CHECKING:
    from runtime.passes.pipeline import PassContext

RECURRENT_OPS = frozenset({"RNN", "GRU", "LSTM"})


def run(graph: Graph, ctx: PassContext) -> int:
    """Blank the unread outputs of every recurrent node; returns the outputs left out."""
    consumers = graph.consumers()
    graph_outputs = set(graph.output_names)
    dropped = 0
    for node in graph.nodes:
        if node.domain or node.op_type not in RECURRENT_OPS:
            continue
        outputs = [o if o and (o in consumers or o in graph_outputs) else "" for o in node.outputs]
        if not any(outputs):
            continue  # nothing reads the node: dead_nodes removes it
        dropped += sum(1 for old, new in zip(node.outputs, outputs, strict=True) if old and not new)
        while not outputs[-1]:
            outputs.pop()
        node.outputs = outputs
        if _state_from_y(graph, node):
            dropped += 1
    return dropped


def _state_from_y(graph: Graph, node: Node) -> bool:
    """Rewrite a one-direction layer read only through ``Y_h`` (all steps run) into ``Y`` and a Gather of its
    last step; False (unchanged) where that is not the same value."""
    if len(node.outputs) != 2 or node.outputs[0] or not node.outputs[1]:
        return False
    direction = node.attrs.get("direction", "forward")
    has_lens = len(node.inputs) > 4 and bool(node.inputs[4])
    if direction not in ("forward", "reverse") or has_lens or (node.opset or 0) < 11:
        return False  # Gather takes a negative index from opset 11
    state = node.outputs[1]
    y = graph.unique_name(f"{state}__sequence")
    known = graph.values.get(state)
    set_value(graph, y, known.elem_type if known is not None else 1, None)
    node.outputs = [y]
    step = add_constant(graph, f"{state}__last_step", np.array(-1 if direction == "forward" else 0, np.int64))
    axis = 1 if int(node.attrs.get("layout", 0)) else 0
    gather = make_node(graph, "Gather", [y, step], [state], f"{node.name}__state", "", node.opset, {"axis": axis})
    graph.nodes.append(gather)
    return True


PASS = Pass(
    "recurrent_outputs",
    run,
    "after dead_node_elimination, once readers are final: a recurrent layer computes only what is read (Y alone runs "
    "as one prebound call)",
    after=("dead_node_elimination",),
)
