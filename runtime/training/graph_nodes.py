"""What the framework translations of an ONNX graph (``torch_module``, ``tf_module``) read from it first: the nodes
checked against their op table, each node's attributes, the running statistics, and the data inputs and outputs."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

import onnx
from onnx import helper

from runtime.training.config import TrainingError


@dataclass(frozen=True)
class GraphNodes:
    opset: int
    nodes: list[onnx.NodeProto]
    #: Each node's attributes by name, in node order.
    attrs: list[dict[str, Any]]
    #: BatchNormalization's running mean and variance initializers (updated in training mode, never trained).
    statistics: set[str]
    input_names: list[str]
    output_names: list[str]


def graph_nodes(proto: onnx.ModelProto, known: Collection[str], engine: str) -> GraphNodes:
    """``proto``'s nodes; one outside ``known`` fails naming the node and the ops ``engine`` knows."""
    graph = proto.graph
    nodes = list(graph.node)
    for node in nodes:
        if node.domain not in ("", "ai.onnx") or node.op_type not in known:
            raise TrainingError(
                f"node {node.name or node.op_type!r}: {engine} cannot train op {node.op_type!r} "
                f"(it knows {', '.join(sorted(known))})"
            )
    constant = {init.name for init in graph.initializer}
    return GraphNodes(
        opset=next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), 13),
        nodes=nodes,
        attrs=[{a.name: helper.get_attribute_value(a) for a in node.attribute} for node in nodes],
        statistics={n.input[i] for n in nodes if n.op_type == "BatchNormalization" for i in (3, 4)},
        input_names=[vi.name for vi in graph.input if vi.name not in constant],
        output_names=[vi.name for vi in graph.output],
    )
