"""Layout choice: run 2-d convolutions, and the ops between them, in NHWC where the compiled kernels make it pay.

onnxruntime's CPU speed on convnets comes mostly from its blocked NCHWc layout; ours comes from NHWC, where a
direct convolution keeps a strip of output pixels x 32 channels in registers and reads the input without any
im2col copy. Layout changes are explicit nodes, pushed through layout-agnostic ops until they meet and cancel:

    # Conv/FusedConv(x, W, B, r) -> ToNchw(NhwcConv(ToNhwc(x), W, B, ToNhwc(r)))    2-d, float32, constant W
    # ConvTranspose and Resize of ToNchw(t): NHWC versions (runtime.passes.layout_upsample)
    # op(ToNchw(a), ToNchw(b), ...) -> ToNchw(op(a, b, ...))    elementwise ops, pools, Concat(axis=1) (as
    #                                                          NhwcConcat), inference
    #                                                          BatchNormalization (as a per-channel affine)
    # channel shuffle Reshape-Transpose-Reshape on ToNchw(t) -> ToNchw(ChannelShuffle(t))
    # ToNhwc(ToNchw(t)) -> t ;  ToNchw(ToNhwc(t)) -> t

The pass runs when the compiled kernels are available (``PassContext.layout`` "auto"), or always ("nhwc"), or
never ("nchw"). With tuning on and static shapes, a convolution whose NCHW (im2col + BLAS) form measures faster
stays NCHW.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from runtime.ir import Graph, Node
from runtime.kernels.conv import resolve_pads
from runtime.passes.pipeline import Pass
from runtime.passes.util import (
    FLOAT,
    GraphIndex,
    activation_of,
    add_constant,
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
    {
        "Relu",
        "LeakyRelu",
        "Sigmoid",
        "Tanh",
        "Clip",
        "HardSigmoid",
        "Elu",
        "Selu",
        "Softplus",
        "Erf",
        "Neg",
        "Abs",
        "Exp",
        "Sqrt",
        "HardSwish",
        "Identity",
    }
)
_BINARY = frozenset({"Add", "Sub", "Mul", "Div", "Sum", "Max", "Min", "Mean"})


def nhwc_shape(shape: tuple[Any, ...] | None) -> tuple[Any, ...] | None:
    if shape is None or len(shape) != 4:
        return None
    n, c, h, w = shape
    return (n, h, w, c)


def nhwc_value(graph: Graph, y: str, elem_type: int = FLOAT) -> str:
    """A new value for the NCHW tensor ``y`` computed in NHWC (shape permuted), by the op that will replace y's."""
    y_nhwc = graph.unique_name(f"{y}_nhwc")
    set_value(graph, y_nhwc, elem_type, nhwc_shape(shape_of(graph, y)))
    return y_nhwc


def replace_with_nhwc(graph: Graph, node: Node, nhwc_nodes: Sequence[Node], y_nhwc: str) -> None:
    """Replace ``node`` by ``nhwc_nodes``, which compute its output in NHWC as ``y_nhwc``, then a ToNchw back to
    the output's own name (which its readers keep using)."""
    back = make_node(graph, "ToNchw", [y_nhwc], [node.outputs[0]], f"{node.name}_to_nchw")
    replace_node(graph, node, [*nhwc_nodes, back])


def _explicit_pads(node: Node, x_shape: tuple[Any, ...] | None, w: np.ndarray) -> list[int] | None:
    kernel = list(w.shape[2:])
    strides = list(node.attrs.get("strides") or [1, 1])
    dilations = list(node.attrs.get("dilations") or [1, 1])
    auto_pad = str(node.attrs.get("auto_pad", "NOTSET"))
    same = auto_pad in ("SAME_UPPER", "SAME_LOWER")
    if same and (x_shape is None or not all(isinstance(d, int) for d in x_shape[2:])):
        return None
    spatial = [int(d) if isinstance(d, int) else 0 for d in (x_shape[2:] if x_shape else (0, 0))]
    pads = resolve_pads(auto_pad, node.attrs.get("pads"), spatial, kernel, strides, dilations)
    if any(p < 0 for p in pads):
        return None
    return [pads[0], pads[1], pads[2], pads[3]]


def _convertible_conv(node: Node, graph: Graph, index: GraphIndex) -> tuple[list[int], np.ndarray] | None:
    if not (
        (node.op_type == "Conv" and not node.domain) or (node.op_type == "FusedConv" and node.domain == "com.appopt")
    ):
        return None
    if len(node.inputs) < 2 or not is_float32(graph, node.inputs[0]) or not is_float32(graph, node.outputs[0]):
        return None
    w = index.constant(node.inputs[1])
    if w is None or w.ndim != 4 or w.dtype != np.float32:
        return None
    if len(node.inputs) > 2 and node.inputs[2]:
        b = index.constant(node.inputs[2])
        if b is None or b.dtype != np.float32 or b.size != w.shape[0]:
            return None
    x_shape = shape_of(graph, node.inputs[0])
    if x_shape is not None and (
        len(x_shape) != 4
        or (isinstance(x_shape[1], int) and x_shape[1] != w.shape[1] * int(node.attrs.get("group", 1)))
    ):
        return None
    pads = _explicit_pads(node, x_shape, w)
    if pads is None:
        return None
    return pads, w


def _to_nhwc(graph: Graph, index: GraphIndex, name: str, new_nodes: list[Node]) -> str:
    """An NHWC version of NCHW ``name``: the ToNchw's input when there is one, else a new ToNhwc."""
    producer = index.producers.get(name)
    if producer is not None and producer.op_type == "ToNchw" and producer.domain == "com.appopt":
        return producer.inputs[0]
    out = graph.unique_name(f"{name}_nhwc")
    new_nodes.append(make_node(graph, "ToNhwc", [name], [out], f"{name}_to_nhwc"))
    set_value(graph, out, FLOAT, nhwc_shape(shape_of(graph, name)))
    return out


def _convert_conv(node: Node, pads: list[int], graph: Graph, index: GraphIndex) -> None:
    attrs = plain_attrs(node)
    ins = list(node.inputs) + [""] * (4 - len(node.inputs))
    new_nodes: list[Node] = []
    x = _to_nhwc(graph, index, ins[0], new_nodes)
    res = _to_nhwc(graph, index, ins[3], new_nodes) if ins[3] else ""
    y_nhwc = nhwc_value(graph, node.outputs[0])
    conv_attrs = {
        "pads": pads,
        "strides": list(attrs.get("strides") or [1, 1]),
        "dilations": list(attrs.get("dilations") or [1, 1]),
        "group": int(attrs.get("group", 1)),
        "activation": attrs.get("activation") or None,
        "act_lo": attrs.get("act_lo"),
        "act_hi": attrs.get("act_hi"),
    }
    inputs = [x, ins[1], ins[2], res]
    while inputs and not inputs[-1]:
        inputs.pop()
    conv = make_node(graph, "NhwcConv", inputs, [y_nhwc], f"{node.name}_nhwc", attributes=conv_attrs)
    replace_with_nhwc(graph, node, [*new_nodes, conv], y_nhwc)


def _nhwc_inputs(node: Node, index: GraphIndex, graph: Graph | None = None) -> list[str] | None:
    """For a node whose tensor inputs all come from ToNchw: the NHWC names. Constants may be scalars, or (with
    ``graph``) per-channel vectors in NCHW broadcast form (``[C, 1, 1]``, ``[1, C, 1, 1]``), which become ``[C]``."""
    names: list[str] = []
    seen_layout = False
    channels = None
    for name in node.inputs:
        producer = index.producers.get(name) if name else None
        if producer is not None and producer.op_type == "ToNchw" and producer.domain == "com.appopt" and graph:
            shape = shape_of(graph, name)
            channels = shape[1] if shape is not None and len(shape) == 4 else channels
    for name in node.inputs:
        if not name:
            names.append(name)
            continue
        producer = index.producers.get(name)
        if producer is not None and producer.op_type == "ToNchw" and producer.domain == "com.appopt":
            names.append(producer.inputs[0])
            seen_layout = True
            continue
        const = index.constant(name)
        if const is not None and const.size == 1:
            names.append(name)
            continue
        if (
            const is not None
            and graph is not None
            and isinstance(channels, int)
            and const.size == channels
            and 3 <= const.ndim <= 4
            and const.shape[const.ndim - 3] == channels
        ):
            names.append(add_constant(graph, f"{name}_nhwc", np.ascontiguousarray(const.reshape(channels))))
            continue
        return None
    return names if seen_layout else None


def _sink(node: Node, graph: Graph, index: GraphIndex) -> bool:
    """Rewrite ``node`` to read NHWC inputs and produce NHWC, with a ToNchw after it. False when it cannot."""
    if node.domain == "com.appopt" and node.op_type == "SqueezeExcite":
        from runtime.passes.squeeze_excite import sink_channels_last

        return sink_channels_last(node, graph, index)
    if node.domain or any(True for _ in node.subgraphs()) or not node.outputs or not node.outputs[0]:
        return False
    op = node.op_type
    new_attrs: dict[str, Any] = plain_attrs(node)
    new_op, new_domain = op, ""
    inputs: list[str] | None
    if op in _UNARY or op in _BINARY:
        if op in _BINARY and node.opset < 7:
            return False
        if op == "Clip" and node.opset >= 11 and activation_of(node, index) is None:
            return False
        inputs = _nhwc_inputs(node, index, graph if op in _BINARY else None)
        if inputs is None:
            return False
        if not one_rank(graph, [i for i in node.inputs if i and index.constant(i) is None]):
            return False
    elif op in ("MaxPool", "AveragePool") and len([o for o in node.outputs if o]) == 1 and len(node.outputs) == 1:
        kernel = node.attrs.get("kernel_shape") or []
        inputs = _nhwc_inputs(node, index)
        if inputs is None or len(kernel) != 2 or not is_float32(graph, node.inputs[0]):
            return False
        new_op, new_domain = f"Nhwc{op}", "com.appopt"
        new_attrs.pop("storage_order", None)
    elif op in ("GlobalAveragePool", "GlobalMaxPool"):
        inputs = _nhwc_inputs(node, index)
        if inputs is None or not is_float32(graph, node.inputs[0]):
            return False
        new_op, new_domain = f"Nhwc{op}", "com.appopt"
    elif op == "Concat" and int(node.attrs.get("axis", 0)) in (1, -3) and node.opset >= 4:
        inputs = _nhwc_inputs(node, index)
        if inputs is None or any(index.constant(i) is not None for i in node.inputs):
            return False
        new_op, new_domain, new_attrs = "NhwcConcat", "com.appopt", {}
    elif op == "BatchNormalization":
        return _sink_batchnorm(node, graph, index)
    elif op == "Reshape":
        return _sink_channel_shuffle(node, graph, index)
    elif op in ("Resize", "ConvTranspose"):
        from runtime.passes.layout_upsample import sink_conv_transpose, sink_resize

        return (sink_resize if op == "Resize" else sink_conv_transpose)(node, graph, index)
    else:
        return False
    y_nhwc = nhwc_value(graph, node.outputs[0], FLOAT if is_float32(graph, node.outputs[0]) else 0)
    new = make_node(
        graph,
        new_op,
        inputs,
        [y_nhwc],
        f"{node.name}_nhwc",
        domain=new_domain,
        opset=node.opset if not new_domain else 1,
        attributes=new_attrs,
    )
    replace_with_nhwc(graph, node, [new], y_nhwc)
    return True


def _sink_batchnorm(node: Node, graph: Graph, index: GraphIndex) -> bool:
    """Inference BatchNormalization on an NHWC tensor: a per-channel multiply-add along the last axis, computed
    with the same float32 steps as the BatchNormalization kernel."""
    from runtime.kernels.fused import CHAIN_BINARY, KIND_INNER
    from runtime.passes.conv_bn_fusion import _inference_bn

    if not _inference_bn(node, index) or not is_float32(graph, node.inputs[0]):
        return False
    producer = index.producers.get(node.inputs[0])
    if producer is None or producer.op_type != "ToNchw" or producer.domain != "com.appopt":
        return False
    stats = [index.constant(n) for n in node.inputs[1:]]
    if any(s is None or s.ndim != 1 for s in stats):
        return False
    scale, bias, mean, var = (np.asarray(s, dtype=np.float32) for s in stats)
    eps = np.float32(float(node.attrs.get("epsilon", 1e-5)))
    inv = scale / np.sqrt(var + eps)
    shift = bias - mean * inv
    inv_name = add_constant(graph, f"{node.name}_scale", inv.astype(np.float32))
    shift_name = add_constant(graph, f"{node.name}_shift", shift.astype(np.float32))
    steps = [CHAIN_BINARY["Mul"], KIND_INNER, 0, 0, CHAIN_BINARY["Add"], KIND_INNER, 1, 0]
    y_nhwc = nhwc_value(graph, node.outputs[0])
    chain = make_node(
        graph,
        "ElementwiseChain",
        [producer.inputs[0], inv_name, shift_name],
        [y_nhwc],
        f"{node.name}_nhwc",
        attributes={"steps": steps, "scalars": [0.0]},
    )
    replace_with_nhwc(graph, node, [chain], y_nhwc)
    return True


def _sink_channel_shuffle(node: Node, graph: Graph, index: GraphIndex) -> bool:
    """ShuffleNet's channel shuffle on an NHWC tensor:

    # Reshape(ToNchw(t), [N, g, C/g, H, W]) -> Transpose([0, 2, 1, 3, 4]) -> Reshape([N, C, H, W])
    #   -> ToNchw(ChannelShuffle(t, groups=g))
    """
    producer = index.producers.get(node.inputs[0])
    if producer is None or producer.op_type != "ToNchw" or producer.domain != "com.appopt" or node.opset < 5:
        return False
    shape = shape_of(graph, node.inputs[0])
    split = index.constant(node.inputs[1]) if len(node.inputs) > 1 else None
    if shape is None or split is None or split.size != 5 or not all(isinstance(d, int) for d in shape[1:]):
        return False
    n, c, h, w = shape
    g, cg = int(split[1]), int(split[2])
    if g * cg != c or [int(v) for v in split[3:]] != [h, w] or int(split[0]) not in (0, -1, n):
        return False
    transpose = index.sole_consumer(node.outputs[0])
    if transpose is None or transpose.op_type != "Transpose" or transpose.domain:
        return False
    if list(transpose.attrs.get("perm", [])) != [0, 2, 1, 3, 4]:
        return False
    merge = index.sole_consumer(transpose.outputs[0])
    target = index.constant(merge.inputs[1]) if merge is not None and len(merge.inputs) > 1 else None
    if merge is None or merge.op_type != "Reshape" or merge.domain or target is None or target.size != 4:
        return False
    if [int(v) for v in target[1:]] != [c, h, w] or int(target[0]) not in (0, -1, n):
        return False
    t = producer.inputs[0]
    y_nhwc = graph.unique_name(f"{merge.outputs[0]}_nhwc")
    set_value(graph, y_nhwc, FLOAT, (n, h, w, c))
    new = [
        make_node(graph, "ChannelShuffle", [t], [y_nhwc], f"{node.name}_shuffle", attributes={"groups": g}),
        make_node(graph, "ToNchw", [y_nhwc], [merge.outputs[0]], f"{merge.name}_to_nchw"),
    ]
    replace_node(graph, node, new)
    remove_nodes(graph, [transpose, merge])
    return True


def _cancel(graph: Graph, index: GraphIndex) -> int:
    """ToNhwc(ToNchw(t)) -> t and ToNchw(ToNhwc(t)) -> t for every reader that is not a graph output."""
    inverse = {"ToNhwc": "ToNchw", "ToNchw": "ToNhwc"}
    removed = 0
    dead: list[Node] = []
    for node in graph.nodes:
        if node.domain != "com.appopt" or node.op_type not in inverse:
            continue
        producer = index.producers.get(node.inputs[0])
        if producer is None or producer.op_type != inverse[node.op_type] or producer.domain != "com.appopt":
            continue
        out, src = node.outputs[0], producer.inputs[0]
        if out in index.outputs:
            continue
        for reader in index.consumers.get(out, []):
            if any(True for _ in reader.subgraphs()):
                break
        else:
            for reader in index.consumers.get(out, []):
                reader.inputs = [src if i == out else i for i in reader.inputs]
            dead.append(node)
            removed += 1
    remove_nodes(graph, dead)
    return removed


def _dead_layout_nodes(graph: Graph, index: GraphIndex) -> int:
    dead = [
        n
        for n in graph.nodes
        if n.domain == "com.appopt"
        and n.op_type in ("ToNchw", "ToNhwc")
        and not index.consumers.get(n.outputs[0])
        and n.outputs[0] not in index.outputs
    ]
    remove_nodes(graph, dead)
    return len(dead)


def run(graph: Graph, ctx: PassContext) -> int:
    if ctx.layout == "nchw":
        return 0
    if ctx.layout == "auto":
        from runtime import native

        if native.lib() is None:
            return 0
    from runtime.passes.layout_upsample import seed_conv_transpose

    index = GraphIndex(graph)
    rewrites = 0
    for node in list(graph.nodes):
        found = _convertible_conv(node, graph, index)
        if found is None:
            if node.op_type == "ConvTranspose" and seed_conv_transpose(node, graph, index):
                index.refresh()
                rewrites += 1
            continue
        pads, w = found
        if ctx.layout == "auto" and not _nhwc_wins(node, pads, w, graph, ctx):
            continue
        _convert_conv(node, pads, graph, index)
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
        cancelled = _cancel(graph, index)
        if cancelled:
            index.refresh()
            rewrites += cancelled
            changed = True
        dead = _dead_layout_nodes(graph, index)
        if dead:
            index.refresh()
            changed = True
    return rewrites


def _nhwc_wins(node: Node, pads: list[int], w: np.ndarray, graph: Graph, ctx: PassContext) -> bool:
    """With tuning on and static shapes, measure both layouts of this convolution (cached); else NHWC."""
    if not ctx.tune:
        return True
    from runtime import tuning

    return tuning.conv_layout(node, pads, w, shape_of(graph, node.inputs[0])) == "nhwc"


PASS = Pass(
    "layout",
    run,
    "after the fusions: converts fused convolutions to NHWC and sinks the remaining ops between them",
    after=("conv_fusion",),
)
