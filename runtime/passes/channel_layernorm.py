"""A LayerNorm over the channels of an NCHW tensor, written out (ConvNeXt's ``channels_first`` LayerNorm), as one
LayerNormalization on the channels-last tensor:

    # u = ReduceMean(x, [1]); d = Sub(x, u); s = ReduceMean(Pow(d, 2), [1])
    # Add(Mul(Div(d, Sqrt(Add(s, eps))), w), b)            (w, b constants [C, 1, 1]; Mul and Add optional)
    #   -> ToNchw(LayerNormalization(ToNhwc(x), w, b, axis=-1, epsilon=eps))

The layout pass then cancels the ToNhwc against the NHWC convolution before it and sinks the ToNchw, so the stem and
downsampling norms of a ConvNeXt run NHWC instead of as nine NCHW ops between layout changes. PyTorch traces
``x - u`` twice: either Sub may feed Pow and Div. Every intermediate must be read only inside the pattern. Runs
only where the layout pass runs, before it; numerics are LayerNormalization's (equal up to rounding).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from runtime.ir import Graph, Node
from runtime.passes.pipeline import Pass
from runtime.passes.util import (
    FLOAT,
    GraphIndex,
    add_constant,
    is_float32,
    live_matches,
    make_node,
    scalar_of,
    set_value,
    shape_of,
    substitute,
)

if TYPE_CHECKING:
    from runtime.passes.pipeline import PassContext


def _op(node: Node | None, op: str) -> bool:
    arity = {"Sqrt": 1, "ReduceMean": (1, 2)}.get(op, 2)
    n_in = len(node.inputs) if node is not None else -1
    fits = n_in in arity if isinstance(arity, tuple) else n_in == arity
    return node is not None and node.op_type == op and not node.domain and len(node.outputs) == 1 and fits


def _channel_mean(node: Node | None, index: GraphIndex) -> str | None:
    """``x`` when ``node`` is ``ReduceMean(x, axes=[1], keepdims=1)`` of a 4-d tensor."""
    if not _op(node, "ReduceMean") or node is None or int(node.attrs.get("keepdims", 1)) != 1:
        return None
    if node.opset >= 18:
        axes = index.constant(node.inputs[1]) if len(node.inputs) > 1 and node.inputs[1] else None
        values = None if axes is None else [int(v) for v in axes.ravel()]
    else:
        values = [int(v) for v in node.attrs.get("axes") or []]
    return node.inputs[0] if values in ([1], [-3]) else None


def _other(node: Node, name: str) -> str:
    return node.inputs[1] if node.inputs[0] == name else node.inputs[0]


def _channel_vector(value: np.ndarray | None, c: int) -> np.ndarray | None:
    if value is None or value.dtype != np.float32 or value.size != c or value.ndim not in (3, 4):
        return None
    return value.reshape(c) if value.shape[value.ndim - 3] == c else None


def _channel_operand(op: str, out: str, c: int, index: GraphIndex) -> tuple[Node, np.ndarray] | None:
    """The sole reader of ``out`` when it is ``op`` (Mul, Add) with a constant per-channel vector, and the vector."""
    nxt = index.sole_consumer(out)
    if not _op(nxt, op) or nxt is None or len(nxt.inputs) != 2:
        return None
    vector = _channel_vector(index.constant(_other(nxt, out)), c)
    return None if vector is None else (nxt, vector)


def _match(
    div: Node, graph: Graph, index: GraphIndex
) -> tuple[str, list[Node], str, float, np.ndarray, np.ndarray] | None:
    if not _op(div, "Div") or len(div.inputs) != 2:
        return None
    sub2, sqrt = index.producers.get(div.inputs[0]), index.producers.get(div.inputs[1])
    add_eps = index.producers.get(sqrt.inputs[0]) if _op(sqrt, "Sqrt") and sqrt is not None else None
    if sqrt is None or sub2 is None or add_eps is None or not _op(sub2, "Sub") or not _op(add_eps, "Add"):
        return None
    var = next((index.producers.get(i) for i in add_eps.inputs if index.constant(i) is None), None)
    eps = scalar_of(index.constant(_other(add_eps, var.outputs[0]))) if var is not None else None
    pow_node = index.producers.get(var.inputs[0]) if var is not None and var.inputs else None
    if eps is None or var is None or _channel_mean(var, index) is None or not _op(pow_node, "Pow") or pow_node is None:
        return None
    if scalar_of(index.constant(pow_node.inputs[1])) != 2.0:
        return None
    sub1 = index.producers.get(pow_node.inputs[0])
    mean = index.producers.get(sub2.inputs[1])
    x = _channel_mean(mean, index)
    if x is None or mean is None or not _op(sub1, "Sub") or sub1 is None or sub2.inputs[0] != x:
        return None
    if sub1.inputs != sub2.inputs:
        return None
    shape = shape_of(graph, x)
    if shape is None or len(shape) != 4 or not isinstance(shape[1], int) or not is_float32(graph, x):
        return None
    c = shape[1]
    nodes: list[Node] = [mean, sub1, pow_node, var, add_eps, sqrt, div] + ([sub2] if sub2 is not sub1 else [])
    out = div.outputs[0]
    gamma: np.ndarray = np.ones(c, np.float32)
    beta: np.ndarray = np.zeros(c, np.float32)
    scaled = _channel_operand("Mul", out, c, index)
    if scaled is not None:
        mul, gamma = scaled
        nodes.append(mul)
        out = mul.outputs[0]
        shifted = _channel_operand("Add", out, c, index)
        if shifted is not None:
            add, beta = shifted
            nodes.append(add)
            out = add.outputs[0]
    inside = {id(n) for n in nodes}
    for n in nodes:
        if n.outputs[0] == out:
            continue
        readers = index.consumers.get(n.outputs[0], [])
        if n.outputs[0] in index.outputs or any(id(r) not in inside for r in readers):
            return None
    return x, nodes, out, float(eps), gamma, beta


def run(graph: Graph, ctx: PassContext) -> int:
    from runtime.passes.transpose_layout import layout_will_run

    if not layout_will_run(graph, ctx):
        return 0
    index = GraphIndex(graph)
    rewrites = 0
    for node, (x, nodes, out, eps, gamma, beta) in live_matches(graph, index, _match):
        n, c, h, w = shape_of(graph, x)  # type: ignore[misc]
        x_nhwc, y_nhwc = graph.unique_name(f"{x}_nhwc"), graph.unique_name(f"{out}_nhwc")
        set_value(graph, x_nhwc, FLOAT, (n, h, w, c))
        set_value(graph, y_nhwc, FLOAT, (n, h, w, c))
        g, b = add_constant(graph, f"{node.name}_gamma", gamma), add_constant(graph, f"{node.name}_beta", beta)
        new = [
            make_node(graph, "ToNhwc", [x], [x_nhwc], f"{node.name}_ln_in"),
            make_node(
                graph,
                "LayerNormalization",
                [x_nhwc, g, b],
                [y_nhwc],
                f"{node.name}_ln",
                domain="",
                opset=17,
                attributes={"axis": -1, "epsilon": eps},
            ),
            make_node(graph, "ToNchw", [y_nhwc], [out], f"{node.name}_ln_out"),
        ]
        last = next(n for n in nodes if n.outputs[0] == out)
        substitute(graph, index, last, new, [n for n in nodes if n is not last])
        rewrites += 1
    return rewrites


PASS = Pass(
    "channel_layernorm",
    run,
    "just before layout: a written-out LayerNorm over NCHW channels becomes an NHWC LayerNormalization; after "
    "transpose_layout: no dependence, kept from the hand-written order",
    after=("squeeze_excite", "transpose_layout"),
    before=("layout",),
)
