"""Recurrent layers produce only the outputs something reads.

# LSTM(x, W, R, ...) -> (Y, Y_h, Y_c) with Y_h, Y_c unread  ->  LSTM(x, W, R, ...) -> (Y)
# GRU(x, W, R, ...) -> (Y, Y_h) with Y unread                ->  GRU(x, W, R, ...) -> ("", Y_h)

ONNX lets a node leave optional outputs out: an empty name is not computed, trailing ones are dropped. A layer
left with ``Y`` alone runs as one prebound compiled call writing into its planned buffer; an output left out is
never written. A value that is a graph output or read anywhere (a subgraph included) is kept.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from runtime.ir import Graph

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
    return dropped
