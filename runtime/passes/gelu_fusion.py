"""Recognise GELU written with Erf (how exporters spell it before opset 20) and replace it by one node.

    # Mul(Mul(x, 0.5), Add(Erf(Div(x, sqrt2)), 1)) -> Gelu(x)            (form 0)
    # Mul(Mul(x, Add(Erf(Div(x, sqrt2)), 1)), 0.5) -> Gelu(x)            (form 1)
    #   Div(x, sqrt2) may also be Mul(x, 1/sqrt2); Add and Mul operands in either order

Guards: float32; constants within 1e-6 of 0.5, 1 and sqrt(2) (or 1/sqrt(2)); every intermediate read only by
the pattern. The node keeps the constants so its NumPy path repeats the original arithmetic exactly.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from runtime.ir import Graph, Node
from runtime.passes.pipeline import Pass
from runtime.passes.util import GraphIndex, is_float32, make_node, scalar_of, substitute

if TYPE_CHECKING:
    from runtime.passes.pipeline import PassContext


def _binary(node: Node | None, op: str) -> bool:
    return node is not None and node.op_type == op and not node.domain and node.opset >= 7 and len(node.inputs) == 2


def _split_const(node: Node, index: GraphIndex) -> tuple[str, float] | None:
    """(variable input, constant scalar) of a binary node with one scalar-constant operand."""
    for var, const in ((0, 1), (1, 0)):
        value = scalar_of(index.constant(node.inputs[const]))
        if value is not None and index.constant(node.inputs[var]) is None:
            return node.inputs[var], value
    return None


def _near(a: float, b: float) -> bool:
    return abs(a - b) <= 1e-6 * max(1.0, abs(b))


def _erf_branch(name: str, index: GraphIndex, x: str | None) -> tuple[str, list[Node], str, float] | None:
    """``Add(Erf(Div(x, sqrt2)), 1)`` producing ``name``: (x, nodes, div op, constant)."""
    add = index.producers.get(name)
    if not _binary(add, "Add"):
        return None
    assert add is not None
    split = _split_const(add, index)
    if split is None or not _near(split[1], 1.0):
        return None
    erf = index.producers.get(split[0])
    if erf is None or erf.op_type != "Erf" or erf.domain or index.sole_consumer(erf.outputs[0]) is not add:
        return None
    scale = index.producers.get(erf.inputs[0])
    if scale is None or index.sole_consumer(scale.outputs[0]) is not erf:
        return None
    if _binary(scale, "Div"):
        value = scalar_of(index.constant(scale.inputs[1]))
        if value is None or not _near(value, math.sqrt(2.0)):
            return None
        var, op = scale.inputs[0], "Div"
    elif _binary(scale, "Mul"):
        split2 = _split_const(scale, index)
        if split2 is None or not _near(split2[1], 1.0 / math.sqrt(2.0)):
            return None
        var, op, value = split2[0], "Mul", split2[1]
    else:
        return None
    if x is not None and var != x:
        return None
    return var, [add, erf, scale], op, value


def _match(root: Node, index: GraphIndex) -> tuple[str, list[Node], dict[str, object]] | None:
    if not _binary(root, "Mul"):
        return None
    for a, b in ((0, 1), (1, 0)):
        inner = index.producers.get(root.inputs[a])
        if not _binary(inner, "Mul") or index.sole_consumer(root.inputs[a]) is not root:
            continue
        assert inner is not None
        # form 0: root = Mul(Mul(x, 0.5), Add(Erf(...), 1))
        split = _split_const(inner, index)
        if split is not None and _near(split[1], 0.5) and index.sole_consumer(root.inputs[b]) is root:
            branch = _erf_branch(root.inputs[b], index, split[0])
            if branch is not None:
                x, nodes, op, value = branch
                return x, [inner, *nodes], {"form": 0, "half": split[1], "div": value, "div_op": op}
        # form 1: root = Mul(Mul(x, Add(Erf(...), 1)), 0.5)
        half = scalar_of(index.constant(root.inputs[b]))
        if half is None or not _near(half, 0.5):
            continue
        for xi, ai in ((0, 1), (1, 0)):
            if index.sole_consumer(inner.inputs[ai]) is not inner:
                continue
            branch = _erf_branch(inner.inputs[ai], index, inner.inputs[xi])
            if branch is not None:
                x, nodes, op, value = branch
                return x, [inner, *nodes], {"form": 1, "half": half, "div": value, "div_op": op}
    return None


def run(graph: Graph, ctx: PassContext) -> int:
    index = GraphIndex(graph)
    fused = 0
    for root in list(graph.nodes):
        if root.op_type != "Mul" or root.domain or not is_float32(graph, root.outputs[0]):
            continue
        found = _match(root, index)
        if found is None:
            continue
        x, inner, attrs = found
        gelu = make_node(graph, "Gelu", [x], [root.outputs[0]], f"{root.name}_gelu", attributes=attrs)
        substitute(graph, index, root, [gelu], inner)
        fused += 1
    return fused


PASS = Pass(
    "gelu_fusion",
    run,
    "before matmul_fusion and elementwise_chain: the Erf pattern becomes one op before its Muls look fusable; after "
    "embedding_bag: no dependence, kept from the hand-written order",
    after=("embedding_bag",),
    before=("matmul_fusion", "elementwise_chain"),
)
