"""Remove nodes and initializers nothing reads.

# node whose outputs are neither read nor graph outputs -> (removed)
# initializer nobody reads (and not a graph input) -> (removed)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from runtime.ir import Graph, node_reads
from runtime.passes.pipeline import Pass

if TYPE_CHECKING:
    from runtime.passes.pipeline import PassContext


def run(graph: Graph, ctx: PassContext) -> int:
    """Sweep backwards from the graph outputs; returns nodes plus initializers removed."""
    needed = set(graph.output_names)
    live = []
    for node in reversed(graph.nodes):
        if any(o and o in needed for o in node.outputs):
            live.append(node)
            needed.update(node_reads(node))
    removed = len(graph.nodes) - len(live)
    graph.nodes = list(reversed(live))
    inputs = set(graph.input_names)
    for name in [n for n in graph.initializers if n not in needed and n not in inputs]:
        del graph.initializers[name]
        removed += 1
    return removed


PASS = Pass(
    "dead_node_elimination",
    run,
    "removes what the earlier passes orphaned (folded producers, unused initializers)",
    after=("transpose_reshape",),
)
