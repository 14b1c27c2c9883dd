"""Pull SiLU (``x * sigmoid(x)``, as PyTorch exports ``nn.SiLU``) into the convolution or product computing ``x``.

    # Mul(y, Sigmoid(y)), y = Conv/FusedConv/FusedMatMul(...) with no activation yet
    #   -> FusedConv/FusedMatMul(..., activation=Silu)

SiLU reads its input twice, so the single-consumer activation rule of conv_fusion and matmul_fusion never sees it.
Here ``y`` must be read by exactly the Sigmoid and the Mul, the Sigmoid only by the Mul, and neither may be a graph
output. The fused kernels compute ``y / (1 + exp(-y))`` natively; their NumPy path repeats ``y * sigmoid(y)``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from runtime.ir import Graph, Node
from runtime.passes.pipeline import Pass
from runtime.passes.util import GraphIndex, is_float32, plain_attrs, rebuild, remove_nodes

if TYPE_CHECKING:
    from runtime.passes.pipeline import PassContext

#: (domain, op) of a producer that can take SiLU -> the fused op it becomes.
_PRODUCERS = {
    ("", "Conv"): "FusedConv",
    ("com.appopt", "FusedConv"): "FusedConv",
    ("com.appopt", "FusedMatMul"): "FusedMatMul",
}


def silu_readers(name: str, graph: Graph, index: GraphIndex) -> tuple[Node, Node] | None:
    """``(sigmoid, mul)`` when ``name`` is read only by ``Mul(name, Sigmoid(name))`` (either operand order)."""
    readers = index.consumers.get(name, [])
    if name in index.outputs or len(readers) != 2 or not is_float32(graph, name):
        return None
    sig = next((r for r in readers if r.op_type == "Sigmoid" and not r.domain), None)
    mul = next((r for r in readers if r.op_type == "Mul" and not r.domain), None)
    if sig is None or mul is None or sig.opset < 6 or mul.opset < 7 or len(sig.outputs) != 1:
        return None
    if sorted(mul.inputs) != sorted([name, sig.outputs[0]]) or len(mul.inputs) != 2:
        return None
    if index.sole_consumer(sig.outputs[0]) is not mul or any(True for _ in mul.subgraphs()):
        return None
    return sig, mul


def run(graph: Graph, ctx: PassContext) -> int:
    index = GraphIndex(graph)
    rewrites = 0
    for node in list(graph.nodes):
        fused_op = _PRODUCERS.get((node.domain, node.op_type))
        if fused_op is None or not node.outputs or node.attrs.get("activation"):
            continue
        if node.op_type == "Conv" and len(node.inputs) < 2:
            continue
        found = silu_readers(node.outputs[0], graph, index)
        if found is None:
            continue
        sig, mul = found
        attrs = plain_attrs(node)
        attrs["activation"], attrs["act_lo"], attrs["act_hi"] = "Silu", 0.0, 0.0
        rebuild(graph, node, fused_op, node.inputs, mul.outputs, attributes=attrs)
        remove_nodes(graph, [sig, mul])
        index.refresh()
        rewrites += 1
    return rewrites


PASS = Pass(
    "silu_fusion",
    run,
    "after conv_fusion and matmul_fusion (bias and residual absorbed first): x * sigmoid(x) joins the epilogue",
    after=("conv_fusion", "matmul_fusion"),
)
