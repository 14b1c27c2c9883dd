"""Remove nodes that pass their input through unchanged.

Rules (each guarded; when a guard fails the node stays):
    # Identity(x) -> x
    # Dropout(x) at inference (no training_mode, mask unused, opset >= 7) -> x
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from runtime.ir import Graph, Node
from runtime.passes.pipeline import Pass

if TYPE_CHECKING:
    from runtime.passes.pipeline import PassContext


def _is_passthrough(node: Node, consumers: dict[str, list[Node]], outputs: set[str]) -> bool:
    if node.domain or not node.inputs or not node.inputs[0] or not node.outputs or not node.outputs[0]:
        return False
    if node.op_type == "Identity":
        return len(node.outputs) == 1
    if node.op_type == "Dropout" and node.opset >= 7:
        training = node.inputs[2] if len(node.inputs) > 2 else ""
        mask_used = any(o and (o in consumers or o in outputs) for o in node.outputs[1:])
        return not training and not mask_used
    return False


def _read_by_subgraph(name: str, consumers: dict[str, list[Node]]) -> bool:
    return any(name not in n.inputs for n in consumers.get(name, ()))


def run(graph: Graph, ctx: PassContext) -> int:
    """Rewire readers of each pass-through node's output to its input; returns nodes removed."""
    removed = 0
    outputs = set(graph.output_names)
    consumers = graph.consumers()
    producers = graph.producers()
    keep: list[Node] = []
    for node in graph.nodes:
        if not _is_passthrough(node, consumers, outputs):
            keep.append(node)
            continue
        x, y = node.inputs[0], node.outputs[0]
        if _read_by_subgraph(y, consumers):
            keep.append(node)
            continue
        if y not in outputs:
            # Identity(x) -> x: every reader of y reads x instead.
            for reader in consumers.get(y, ()):
                reader.inputs = [x if i == y else i for i in reader.inputs]
                consumers.setdefault(x, []).append(reader)
            removed += 1
            continue
        # y is a graph output: rename x's producer output to y, if x is an ordinary internal value.
        producer = producers.get(x)
        if producer is None or x in outputs or _read_by_subgraph(x, consumers) or x in graph.initializers:
            keep.append(node)
            continue
        producer.outputs = [y if o == x else o for o in producer.outputs]
        for reader in consumers.get(x, ()):
            if reader is not node:
                reader.inputs = [y if i == x else i for i in reader.inputs]
        producers[y] = producer
        if x in graph.values and y not in graph.values:
            graph.values[y] = graph.values[x]
        removed += 1
    graph.nodes = keep
    return removed


PASS = Pass(
    "identity_elimination",
    run,
    "first: cheapest rewrite, and later passes then see producers and consumers directly connected",
    before=("constant_folding",),
)
