"""The layout pass's rewrites for decoder and upsampling ops (``runtime.passes.layout`` calls them), so that U-Net
and detection-head decoders stay NHWC from one convolution to the next. Both move only an NHWC tensor (one a
convolution made): alone between graph edges, the layout changes around them would cost more than they save.

    # ConvTranspose(ToNchw(t), W, B) -> ToNchw(NhwcConvTranspose(t, W, B))     2-d, float32, group 1, constant W, B
    # ConvTranspose(x, W, B) -> ToNchw(NhwcConvTranspose(ToNhwc(x), W, B))    x from no convolution, and the
    #     result (through activations) feeds another ConvTranspose or Conv: the layout pass seeds NHWC here as
    #     at a convolution (a decoder of ConvTransposes alone: VAE, DCGAN); a lone one stays NCHW
    # Resize(ToNchw(t), roi, scales, sizes) -> ToNchw(NhwcResize(t, roi, scales, sizes))     opset >= 11, 4-d

``NhwcResize`` keeps Resize's inputs and attributes as they are (they still name NCHW axes), so any Resize moves;
Concat and the elementwise ops after them already move in ``layout._sink``.
"""

from __future__ import annotations

import numpy as np

from runtime.ir import Graph, Node
from runtime.passes.layout import nhwc_shape, nhwc_value, replace_with_nhwc
from runtime.passes.util import (
    APPOPT_DOMAIN,
    FLOAT,
    GraphIndex,
    is_float32,
    make_node,
    plain_attrs,
    set_value,
    shape_of,
)


def _from_nhwc(name: str, index: GraphIndex) -> str | None:
    """The NHWC tensor that ``name`` is the ToNchw of, if it is one."""
    producer = index.producers.get(name)
    if producer is None or producer.op_type != "ToNchw" or producer.domain != APPOPT_DOMAIN:
        return None
    return producer.inputs[0]


def _convertible_conv_transpose(node: Node, graph: Graph, index: GraphIndex, seed: bool = False) -> bool:
    """A ConvTranspose the NHWC kernel takes, reading a ToNchw result (or, to ``seed`` NHWC, anything else)."""
    if node.op_type != "ConvTranspose" or node.domain or len(node.inputs) < 2 or not node.outputs[0]:
        return False
    if (_from_nhwc(node.inputs[0], index) is None) != seed or len([o for o in node.outputs if o]) != 1:
        return False
    if not is_float32(graph, node.inputs[0]) or not is_float32(graph, node.outputs[0]):
        return False
    x_shape = shape_of(graph, node.inputs[0])
    w = index.constant(node.inputs[1])
    if x_shape is None or len(x_shape) != 4 or w is None or w.ndim != 4 or w.dtype != np.float32:
        return False
    if int(node.attrs.get("group", 1)) != 1 or (isinstance(x_shape[1], int) and x_shape[1] != w.shape[0]):
        return False
    if len(node.inputs) > 2 and node.inputs[2]:
        b = index.constant(node.inputs[2])
        if b is None or b.dtype != np.float32 or b.shape != (w.shape[1],):
            return False
    return True


def sink_conv_transpose(node: Node, graph: Graph, index: GraphIndex) -> bool:
    """ConvTranspose of a ToNchw result -> NhwcConvTranspose; False (graph unchanged) when it does not qualify."""
    if not _convertible_conv_transpose(node, graph, index):
        return False
    x = _from_nhwc(node.inputs[0], index)
    if x is None:
        return False
    _to_nhwc_conv_transpose(node, x, graph, [])
    return True


def seed_conv_transpose(node: Node, graph: Graph, index: GraphIndex) -> bool:
    """ConvTranspose of an NCHW tensor no convolution made -> NhwcConvTranspose between layout changes (as the
    layout pass converts a convolution); False (graph unchanged) when it does not qualify."""
    if not _convertible_conv_transpose(node, graph, index, seed=True) or not _feeds_a_convolution(node, index):
        return False
    x = node.inputs[0]
    x_nhwc = graph.unique_name(f"{x}_nhwc")
    set_value(graph, x_nhwc, FLOAT, nhwc_shape(shape_of(graph, x)))
    to_nhwc = make_node(graph, "ToNhwc", [x], [x_nhwc], f"{node.name}_to_nhwc")
    _to_nhwc_conv_transpose(node, x_nhwc, graph, [to_nhwc])
    return True


#: Ops a decoder puts between its upsampling layers (they all move to NHWC with the layout pass).
_BETWEEN = ("Relu", "LeakyRelu", "Sigmoid", "Tanh", "Elu", "Clip", "BatchNormalization")


def _feeds_a_convolution(node: Node, index: GraphIndex) -> bool:
    """Whether ``node``'s result reaches a Conv or ConvTranspose through at most a few activations."""
    name = node.outputs[0]
    for _ in range(4):
        reader = index.sole_consumer(name)
        if reader is None or reader.domain or not reader.outputs:
            return False
        if reader.op_type in ("Conv", "ConvTranspose") and reader.inputs[0] == name:
            return True
        if reader.op_type not in _BETWEEN or reader.inputs[0] != name:
            return False
        name = reader.outputs[0]
    return False


def _to_nhwc_conv_transpose(node: Node, x_nhwc: str, graph: Graph, before: list[Node]) -> None:
    y_nhwc = nhwc_value(graph, node.outputs[0])
    inputs = [x_nhwc, *node.inputs[1:3]]
    while inputs and not inputs[-1]:
        inputs.pop()
    conv = make_node(graph, "NhwcConvTranspose", inputs, [y_nhwc], f"{node.name}_nhwc", attributes=plain_attrs(node))
    replace_with_nhwc(graph, node, [*before, conv], y_nhwc)


def sink_resize(node: Node, graph: Graph, index: GraphIndex) -> bool:
    """Resize of a ToNchw result -> NhwcResize of the NHWC tensor, with a ToNchw after it."""
    if node.op_type != "Resize" or node.domain or node.opset < 11 or not node.inputs or not node.outputs[0]:
        return False
    t = _from_nhwc(node.inputs[0], index)
    if t is None or not is_float32(graph, node.inputs[0]) or len([o for o in node.outputs if o]) != 1:
        return False
    y_nhwc = nhwc_value(graph, node.outputs[0])
    new = make_node(
        graph,
        "NhwcResize",
        [t, *node.inputs[1:]],
        [y_nhwc],
        f"{node.name}_nhwc",
        attributes=plain_attrs(node),
    )
    replace_with_nhwc(graph, node, [new], y_nhwc)
    return True
