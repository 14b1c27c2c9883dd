"""Fuse a depthwise convolution into the 1x1 convolution that reads it (MobileNet's separable block).

    # NhwcConv(NhwcConv(x, Wd, Bd; depthwise, act1), Wp, Bp, R; 1x1, stride 1, act2)
    #   -> NhwcDwPwConv(x, Wd, Bd, Wp, Bp, R)

The depthwise result for a strip of pixels is consumed from a stack buffer, so the (often expanded, six times wider)
tensor between the two never goes to memory. Guards: both NHWC convolutions with constant float32 weights; the
first depthwise (one filter per channel) without a residual; its output read only by the second, which is 1x1,
stride 1, unpadded, ungrouped; at most 2048 depthwise channels (the kernel's buffer).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from runtime.ir import Graph, Node
from runtime.passes.pipeline import Pass
from runtime.passes.util import GraphIndex, make_node, substitute

if TYPE_CHECKING:
    from runtime.passes.pipeline import PassContext

#: Widest depthwise layer fused (``DP_MAXC`` in runtime/native/kernels.c).
MAX_CHANNELS = 2048


def _is_nhwc_conv(node: Node | None) -> bool:
    return node is not None and node.op_type == "NhwcConv" and node.domain == "com.appopt"


def _depthwise(node: Node, index: GraphIndex) -> bool:
    w = index.constant(node.inputs[1]) if len(node.inputs) > 1 else None
    if w is None or w.ndim != 4 or w.shape[1] != 1 or int(node.attrs.get("group", 1)) != w.shape[0]:
        return False
    if len(node.inputs) > 3 and node.inputs[3]:
        return False
    bias_ok = len(node.inputs) < 3 or not node.inputs[2] or index.constant(node.inputs[2]) is not None
    return bias_ok and w.shape[0] <= MAX_CHANNELS


def _pointwise(node: Node, index: GraphIndex) -> bool:
    w = index.constant(node.inputs[1]) if len(node.inputs) > 1 else None
    if w is None or w.ndim != 4 or w.shape[2:] != (1, 1) or int(node.attrs.get("group", 1)) != 1:
        return False
    if [int(s) for s in node.attrs.get("strides") or [1, 1]] != [1, 1]:
        return False
    if any(int(p) for p in node.attrs.get("pads") or [0, 0, 0, 0]):
        return False
    return len(node.inputs) < 3 or not node.inputs[2] or index.constant(node.inputs[2]) is not None


def run(graph: Graph, ctx: PassContext) -> int:
    index = GraphIndex(graph)
    fused = 0
    for dw in list(graph.nodes):
        if not _is_nhwc_conv(dw) or not _depthwise(dw, index):
            continue
        pw = index.sole_consumer(dw.outputs[0])
        if pw is None or not _is_nhwc_conv(pw) or pw.inputs[0] != dw.outputs[0] or not _pointwise(pw, index):
            continue
        dw_in = list(dw.inputs) + [""] * (3 - len(dw.inputs))
        pw_in = list(pw.inputs) + [""] * (4 - len(pw.inputs))
        inputs = [dw_in[0], dw_in[1], dw_in[2], pw_in[1], pw_in[2], pw_in[3]]
        while inputs and not inputs[-1]:
            inputs.pop()
        attributes = {
            "dw_pads": dw.attrs.get("pads"),
            "dw_strides": dw.attrs.get("strides"),
            "dw_dilations": dw.attrs.get("dilations"),
            "dw_activation": dw.attrs.get("activation") or None,
            "dw_act_lo": dw.attrs.get("act_lo"),
            "dw_act_hi": dw.attrs.get("act_hi"),
            "activation": pw.attrs.get("activation") or None,
            "act_lo": pw.attrs.get("act_lo"),
            "act_hi": pw.attrs.get("act_hi"),
        }
        node = make_node(graph, "NhwcDwPwConv", inputs, pw.outputs, f"{dw.name}_dwpw", attributes=attributes)
        substitute(graph, index, dw, [node], [pw])
        fused += 1
    return fused


PASS = Pass(
    "depthwise_fusion",
    run,
    "after layout, on NHWC convolutions: a depthwise conv and the 1x1 conv reading it become one pass",
    after=("layout",),
)
