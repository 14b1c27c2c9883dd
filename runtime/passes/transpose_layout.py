"""Name the model's own NCHW <-> NHWC transposes as layout changes, so the layout pass can cancel and sink them.

    # Transpose(x, perm=[0, 2, 3, 1]) -> ToNhwc(x)        4-d float32
    # Transpose(x, perm=[0, 3, 1, 2]) -> ToNchw(x)

ConvNeXt runs its LayerNorm and MLP channels-last: PyTorch exports ``dw(x).permute(0, 2, 3, 1)`` and
``.permute(0, 3, 1, 2)`` before the residual Add. Once these are layout nodes, the layout pass cancels the first
against the NHWC depthwise convolution's ToNchw and moves the residual Add into NHWC, so a block runs without a
transpose. Runs only where the layout pass runs (the same switch), just before it, and only in graphs with a
2-d convolution for it to convert.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from runtime.passes.pipeline import Pass
from runtime.passes.util import GraphIndex, is_float32, make_node, replace_node, shape_of

if TYPE_CHECKING:
    from runtime.ir import Graph, Node
    from runtime.passes.pipeline import PassContext

_LAYOUT_OPS: dict[tuple[int, ...], str] = {(0, 2, 3, 1): "ToNhwc", (0, 3, 1, 2): "ToNchw"}


def layout_will_run(graph: Graph, ctx: PassContext) -> bool:
    """Whether the layout pass runs here (its switch) and finds a 2-d convolution to convert."""
    if ctx.layout == "nchw":
        return False
    if ctx.layout == "auto":
        from runtime import native

        if native.lib() is None:
            return False
    index = GraphIndex(graph)
    return any(_layout_conv(n, index) for n in graph.nodes)


def run(graph: Graph, ctx: PassContext) -> int:
    if not layout_will_run(graph, ctx):
        return 0  # nothing for the layout pass to convert: leave the model's transposes alone
    rewrites = 0
    for node in list(graph.nodes):
        if node.op_type != "Transpose" or node.domain or len(node.inputs) != 1 or len(node.outputs) != 1:
            continue
        op = _LAYOUT_OPS.get(tuple(int(p) for p in node.attrs.get("perm") or ()))
        shape = shape_of(graph, node.inputs[0])
        if op is None or shape is None or len(shape) != 4 or not is_float32(graph, node.inputs[0]):
            continue
        replace_node(graph, node, [make_node(graph, op, node.inputs, node.outputs, f"{node.name}_layout")])
        rewrites += 1
    return rewrites


def _layout_conv(node: Node, index: GraphIndex) -> bool:
    """A 2-d convolution with constant weights (what the layout pass converts), or one it already converted."""
    if node.domain == "com.appopt" and node.op_type in ("NhwcConv", "NhwcDwPwConv"):
        return True
    if (node.domain, node.op_type) not in (("", "Conv"), ("com.appopt", "FusedConv")) or len(node.inputs) < 2:
        return False
    w = index.constant(node.inputs[1])
    return w is not None and w.ndim == 4


PASS = Pass(
    "transpose_layout",
    run,
    "just before layout: the model's own NCHW <-> NHWC transposes become layout nodes it can cancel and sink",
    after=("squeeze_excite",), before=("layout",),
)
