"""Run 1-d convolutions (audio, sequence models) as 2-d ones of height 1, so they reach the NHWC direct kernels.

    # Conv(x [N, C, L], W [M, C/g, K]) -> Squeeze(Conv(Unsqueeze(x, 2), W [M, C/g, 1, K]), 2)
    # op(Squeeze(t, 2), ...) -> Squeeze(op(t, ...), 2)       unary elementwise ops, binary ones whose other operand is
    #                                                        lifted the same way or a scalar / [C, 1] constant,
    #                                                        inference BatchNormalization, 1-d Max/AveragePool
    #                                                        (kernel [1, k]), global pools
    # ReduceMean(Squeeze(t, 2), axes=[2]) -> Squeeze(GlobalAveragePool(t), [2, 3])
    # ReduceMax(Squeeze(t, 2), axes=[2])  -> Squeeze(GlobalMaxPool(t), [2, 3])
    # Unsqueeze(Squeeze(t, 2), 2) -> t

It runs before the convolution fusions, so a lifted Conv then absorbs its bias and activation like any 2-d one,
and the layout pass takes it, and the pools between, into NHWC. A Squeeze of a 4-d tensor's unit axis 2 is sunk
wherever it comes from. What the rewrite cannot lift is left as it was.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from runtime.ir import Graph, Node
from runtime.passes.global_mean import GLOBAL_POOLS
from runtime.passes.pipeline import Pass
from runtime.passes.util import (
    GraphIndex,
    add_constant,
    elem_type_of,
    is_float32,
    make_node,
    one_rank,
    plain_attrs,
    remove_nodes,
    replace_node,
    set_value,
    shape_of,
)

if TYPE_CHECKING:
    from runtime.passes.pipeline import PassContext

_UNARY = frozenset(
    {"Relu", "LeakyRelu", "Sigmoid", "Tanh", "HardSigmoid", "HardSwish", "Elu", "Selu", "Softplus", "Erf", "Neg",
     "Abs", "Exp", "Sqrt", "Identity", "Clip"}
)  # fmt: skip
_BINARY = frozenset({"Add", "Sub", "Mul", "Div", "Max", "Min"})
_POOLS = frozenset({"MaxPool", "AveragePool"})
_GLOBAL = frozenset({"GlobalAveragePool", "GlobalMaxPool"})


def _lifted(shape: tuple[Any, ...] | None) -> tuple[Any, ...] | None:
    return None if shape is None else (*shape[:2], 1, *shape[2:])


def _axes_node(graph: Graph, op: str, x: str, y: str, opset: int, name: str, axes: tuple[int, ...] = (2,)) -> Node:
    """``Unsqueeze``/``Squeeze`` of ``axes`` in the form the node's opset reads (axes input from opset 13)."""
    if opset >= 13:
        const = add_constant(graph, f"{name}_axes", np.array(axes, dtype=np.int64))
        return make_node(graph, op, [x, const], [y], name, domain="", opset=opset)
    return make_node(graph, op, [x], [y], name, domain="", opset=opset, attributes={"axes": list(axes)})


def _squeezed_axis2(node: Node | None, graph: Graph, index: GraphIndex) -> str | None:
    """``t`` when ``node`` is ``Squeeze(t, axes=[2])`` of a 4-d ``t`` with a unit axis 2."""
    if node is None or node.op_type != "Squeeze" or node.domain or len(node.outputs) != 1:
        return None
    if node.opset >= 13:
        axes = index.constant(node.inputs[1]) if len(node.inputs) > 1 and node.inputs[1] else None
        values = None if axes is None else [int(v) for v in axes.ravel()]
    else:
        values = [int(v) for v in node.attrs.get("axes") or []]
    shape = shape_of(graph, node.inputs[0])
    if values not in ([2], [-2]) or shape is None or len(shape) != 4 or shape[2] != 1:
        return None
    return node.inputs[0]


def _one_d(attrs: dict[str, Any], pads: int) -> bool:
    """Whether the geometry attributes that are given have their 1-d lengths (one stride, two pads...)."""
    lengths = {"strides": 1, "dilations": 1, "pads": pads}
    return all(len(attrs[k]) == n for k, n in lengths.items() if attrs.get(k) is not None)


def _lift_conv(node: Node, graph: Graph, index: GraphIndex) -> bool:
    if node.op_type != "Conv" or node.domain or len(node.inputs) < 2 or len(node.outputs) != 1:
        return False
    w = index.constant(node.inputs[1])
    x_shape, y_shape = shape_of(graph, node.inputs[0]), shape_of(graph, node.outputs[0])
    if w is None or w.ndim != 3 or x_shape is None or len(x_shape) != 3 or y_shape is None:
        return False
    if not is_float32(graph, node.inputs[0]) or w.dtype != np.float32:
        return False
    a = plain_attrs(node)
    if str(a.get("auto_pad", "NOTSET")) not in ("NOTSET", "VALID") or not _one_d(a, 2):
        return False
    if list(a.get("kernel_shape") or [w.shape[2]]) != [w.shape[2]]:
        return False  # a malformed node stays as it is, for the checks to refuse
    pads = [int(p) for p in a.get("pads") or [0, 0]]
    attrs = {
        "group": int(a.get("group", 1)),
        "kernel_shape": [1, int(w.shape[2])],
        "strides": [1, *[int(s) for s in a.get("strides") or [1]]],
        "dilations": [1, *[int(d) for d in a.get("dilations") or [1]]],
        "pads": [0, pads[0], 0, pads[1]],
        "auto_pad": str(a.get("auto_pad", "NOTSET")),
    }
    x4 = graph.unique_name(f"{node.inputs[0]}_2d")
    y4 = graph.unique_name(f"{node.outputs[0]}_2d")
    set_value(graph, x4, 1, _lifted(x_shape))
    set_value(graph, y4, 1, _lifted(y_shape))
    w4 = add_constant(graph, f"{node.inputs[1]}_2d", np.ascontiguousarray(w[:, :, None, :]))
    lift = _axes_node(graph, "Unsqueeze", node.inputs[0], x4, node.opset, f"{node.name}_lift")
    conv = make_node(graph, "Conv", [x4, w4, *node.inputs[2:]], [y4], f"{node.name}_2d", domain="", opset=node.opset,
                     attributes=attrs)  # fmt: skip
    drop = _axes_node(graph, "Squeeze", y4, node.outputs[0], node.opset, f"{node.name}_drop")
    replace_node(graph, node, [lift, conv, drop])
    return True


def _lifted_inputs(node: Node, graph: Graph, index: GraphIndex) -> list[str] | None:
    """The node's inputs, lifted: squeezed tensors by their 4-d source, constants of a binary op broadcasting
    against ``[N, C, L]`` by a copy with the unit axis 2 (rank <= 1 constants as they are); None when one is neither
    lifted nor constant."""
    names: list[str] = []
    lifted = 0
    for name in node.inputs:
        source = _squeezed_axis2(index.producers.get(name), graph, index) if name else None
        const = index.constant(name) if name else None
        if not name or source is not None:
            names.append(source or name)
            lifted += source is not None
        elif const is None or const.ndim > 3 or (const.ndim > 1 and node.op_type not in _BINARY):
            return None
        elif const.ndim <= 1:
            names.append(name)
        else:
            c3 = const.reshape((1,) * (3 - const.ndim) + const.shape)
            names.append(add_constant(graph, f"{name}_2d", np.ascontiguousarray(c3[:, :, None, :])))
    return names if lifted else None


def _sink(node: Node, graph: Graph, index: GraphIndex) -> bool:
    """``op(Squeeze(t, 2))`` -> ``Squeeze(op(t), 2)`` for the ops listed in the module docstring."""
    op = node.op_type
    if node.domain or len(node.outputs) != 1 or any(True for _ in node.subgraphs()):
        return False
    attrs = plain_attrs(node)
    if op in _BINARY:
        if not one_rank(graph, [i for i in node.inputs if index.constant(i) is None]) or node.opset < 7:
            return False
    elif op in _POOLS:
        kernel = attrs.get("kernel_shape") or []
        if len(kernel) != 1 or str(attrs.get("auto_pad", "NOTSET")) not in ("NOTSET", "VALID"):
            return False
        if not _one_d(attrs, 2) or len([o for o in node.outputs if o]) != 1:
            return False
        pads = [int(p) for p in attrs.get("pads") or [0, 0]]
        attrs["kernel_shape"] = [1, int(kernel[0])]
        attrs["strides"] = [1, *[int(s) for s in attrs.get("strides") or [1]]]
        attrs["pads"] = [0, pads[0], 0, pads[1]]
        if "dilations" in attrs:
            attrs["dilations"] = [1, *[int(d) for d in attrs["dilations"]]]
    elif op == "BatchNormalization":
        if int(attrs.get("training_mode", 0)):
            return False
    elif op in GLOBAL_POOLS:  # over the whole length: a TCN's or audio net's head
        return _sink_reduce_over_time(node, graph, index)
    elif op not in _UNARY and op not in _GLOBAL:
        return False
    inputs = _lifted_inputs(node, graph, index)
    if inputs is None:
        return False
    y = node.outputs[0]
    y4 = graph.unique_name(f"{y}_2d")
    set_value(graph, y4, elem_type_of(graph, y), _lifted(shape_of(graph, y)))
    new = make_node(graph, op, inputs, [y4], f"{node.name}_2d", domain="", opset=node.opset, attributes=attrs)
    drop = _axes_node(graph, "Squeeze", y4, y, node.opset, f"{node.name}_drop")
    replace_node(graph, node, [new, drop])
    return True


def _sink_reduce_over_time(node: Node, graph: Graph, index: GraphIndex) -> bool:
    """``ReduceMean(Squeeze(t, 2), axes=[2])`` -> ``Squeeze(GlobalAveragePool(t), [2, 3])`` (``[2]`` with
    keepdims), a ReduceMax likewise a GlobalMaxPool, which the layout pass then runs NHWC."""
    if node.opset >= 18:
        axes = index.constant(node.inputs[1]) if len(node.inputs) > 1 and node.inputs[1] else None
        values = None if axes is None else [int(v) for v in axes.ravel()]
    else:
        values = [int(v) for v in node.attrs.get("axes") or []]
    source = _squeezed_axis2(index.producers.get(node.inputs[0]), graph, index)
    if source is None or values not in ([2], [-1]) or not is_float32(graph, source):
        return False
    keep = int(node.attrs.get("keepdims", 1))
    pooled = graph.unique_name(f"{node.outputs[0]}_2d")
    shape = shape_of(graph, source)
    set_value(graph, pooled, elem_type_of(graph, source), None if shape is None else (*shape[:2], 1, 1))
    pool = GLOBAL_POOLS[node.op_type][0]
    gap = make_node(graph, pool, [source], [pooled], f"{node.name}_2d", domain="", opset=node.opset)
    axes_out = (2,) if keep else (2, 3)
    drop = _axes_node(graph, "Squeeze", pooled, node.outputs[0], node.opset, f"{node.name}_drop", axes_out)
    replace_node(graph, node, [gap, drop])
    return True


def _cancel(graph: Graph, index: GraphIndex) -> int:
    """``Unsqueeze(Squeeze(t, 2), 2)`` -> ``t`` for readers of the Unsqueeze."""
    dead = []
    for node in graph.nodes:
        if node.op_type != "Unsqueeze" or node.domain or node.outputs[0] in index.outputs:
            continue
        axes = index.constant(node.inputs[1]) if node.opset >= 13 and len(node.inputs) > 1 else None
        values = [int(v) for v in axes.ravel()] if axes is not None else node.attrs.get("axes")
        source = _squeezed_axis2(index.producers.get(node.inputs[0]), graph, index)
        readers = index.consumers.get(node.outputs[0], [])
        if source is None or list(values or []) != [2] or any(True for r in readers for _ in r.subgraphs()):
            continue
        for reader in readers:
            reader.inputs = [source if i == node.outputs[0] else i for i in reader.inputs]
        dead.append(node)
    remove_nodes(graph, dead)
    return len(dead)


def run(graph: Graph, ctx: PassContext) -> int:
    index = GraphIndex(graph)
    rewrites = 0
    for node in list(graph.nodes):
        if _lift_conv(node, graph, index):
            index.refresh()
            rewrites += 1
    if not rewrites:
        return 0
    changed = True
    while changed:
        changed = False
        for node in list(graph.nodes):
            if _sink(node, graph, index):
                index.refresh()
                rewrites += 1
                changed = True
        if _cancel(graph, index):
            index.refresh()
            changed = True
    # Squeezes the sinking left unread (kept only while they might still be sunk)
    remove_nodes(graph, [n for n in graph.nodes if _orphan_squeeze(n, graph, index)])
    return rewrites


def _orphan_squeeze(node: Node, graph: Graph, index: GraphIndex) -> bool:
    out = node.outputs[0] if node.outputs else ""
    unread = not index.consumers.get(out) and out not in index.outputs
    return unread and _squeezed_axis2(node, graph, index) is not None


PASS = Pass(
    "conv1d_lift",
    run,
    "before the conv fusions: a 1-d Conv becomes a 2-d one of height 1, then fuses and goes NHWC like the rest",
    before=("conv_bn_fusion", "conv_fusion"),
)
