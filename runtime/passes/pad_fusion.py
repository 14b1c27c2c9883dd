"""Fold a zero Pad of the spatial dims into the convolutions that read it.

    # Conv(Pad(x, p, 0), W, B; pads=q) -> Conv(x, W, B; pads=q + p)       p zero on the batch and channel dims

A causal 1-D convolution (WaveNet, TCN) is exported as ``F.pad`` then a Conv without padding; left apart, the Pad
is an NCHW op that the layout pass cannot sink, so each layer converts NHWC -> NCHW -> NHWC around it. A Pad read
by several Convs (a gated unit's filter and gate) is folded into each; it must be read by Convs only.
Guards: constant mode, a zero (or absent) fill, constant non-negative pads of the full rank (no ``axes`` input),
Conv with explicit pads (``auto_pad`` NOTSET), and the Pad output not a graph output.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from onnx import helper

from runtime.ir import Graph, Node
from runtime.passes.pipeline import Pass
from runtime.passes.util import GraphIndex, remove_nodes

if TYPE_CHECKING:
    from runtime.passes.pipeline import PassContext


def _spatial_pads(pad: Node, index: GraphIndex) -> tuple[list[int], list[int]] | None:
    """(begins, ends) of the spatial dims when ``pad`` is a zero constant Pad of those dims only."""
    if pad.domain or pad.op_type != "Pad" or len(pad.outputs) != 1 or pad.attrs.get("mode", "constant") not in (
        "constant",
        b"constant",
    ):
        return None
    if pad.opset < 11:
        values = pad.attrs.get("pads")
        fill = float(pad.attrs.get("value", 0.0))
    else:
        if len(pad.inputs) < 2 or (len(pad.inputs) > 3 and pad.inputs[3]):
            return None
        const = index.constant(pad.inputs[1])
        values = None if const is None or const.dtype.kind not in "iu" else const.reshape(-1).tolist()
        fill_value = index.constant(pad.inputs[2]) if len(pad.inputs) > 2 and pad.inputs[2] else None
        if len(pad.inputs) > 2 and pad.inputs[2] and (fill_value is None or fill_value.size != 1):
            return None
        fill = 0.0 if fill_value is None else float(fill_value.reshape(-1)[0])
    if values is None or fill != 0.0 or len(values) % 2 or len(values) < 6:
        return None
    rank = len(values) // 2
    begins, ends = [int(v) for v in values[:rank]], [int(v) for v in values[rank:]]
    if any(v < 0 for v in values) or begins[:2] != [0, 0] or ends[:2] != [0, 0]:
        return None
    return begins[2:], ends[2:]


def _foldable_conv(conv: Node, name: str, spatial: int) -> bool:
    if conv.domain or conv.op_type != "Conv" or not conv.inputs or conv.inputs[0] != name or name in conv.inputs[1:]:
        return False
    auto = conv.attrs.get("auto_pad", "NOTSET")
    if auto not in ("NOTSET", b"NOTSET"):
        return False
    kernel = conv.attrs.get("kernel_shape")
    return kernel is None or len(kernel) == spatial


def run(graph: Graph, ctx: PassContext) -> int:
    index = GraphIndex(graph)
    folded = 0
    for pad in list(graph.nodes):
        found = _spatial_pads(pad, index)
        if found is None:
            continue
        begins, ends = found
        name = pad.outputs[0]
        readers = index.consumers.get(name, [])
        if name in index.outputs or not readers or not all(_foldable_conv(r, name, len(begins)) for r in readers):
            continue
        for conv in readers:
            old = [int(v) for v in conv.attrs.get("pads") or [0] * (2 * len(begins))]
            new = [*(o + b for o, b in zip(old[: len(begins)], begins, strict=True)),
                   *(o + e for o, e in zip(old[len(begins) :], ends, strict=True))]  # fmt: skip
            conv.attributes = [*(a for a in conv.attributes if a.name != "pads"), helper.make_attribute("pads", new)]
            conv._decoded = None
            conv.inputs[0] = pad.inputs[0]
        remove_nodes(graph, [pad])
        index.refresh()
        folded += 1
    return folded


PASS = Pass(
    "pad_fusion",
    run,
    "before conv1d_lift and the layout pass: a causal conv's zero Pad becomes the Conv's own padding, so no NCHW op "
    "is left between NHWC convolutions",
    before=("conv1d_lift", "layout"),
)
