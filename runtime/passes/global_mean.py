"""A mean (or max) over whole spatial or token axes becomes a global average (max) pool, so it runs compiled with
its neighbours.

    # ReduceMean(x[N, C, H, W], axes=[2, 3], keepdims=1)  -> GlobalAveragePool(x)
    # ReduceMean(x[N, C, H, W], axes=[2, 3], keepdims=0)  -> Reshape(GlobalAveragePool(x), [0, C])
    # ReduceMean(x[N, A.., B..], axes=A.., inner B.. > 1) -> Reshape(NhwcGlobalAveragePool(Reshape(x, [0, -1, 1, B])),
    #                                                                [0, (1..,) B..])

PyTorch exports ``x.mean((2, 3))`` (ConvNeXt-style heads) and ``x.mean(1)`` (the token mean of ViT, Swin and
MLP-Mixer heads) as ReduceMean, which ran as a NumPy call between compiled steps. Measured in a model run (an
NHWC map 8x8x96, 2 threads), that call took 60-120 us against 3-15 us alone: it broke the compiled program in two
and ran on caches the program had just evicted. As a global average pool, the NCHW form sinks into NHWC with the
convolutions before it (the layout pass), and the token form is the NHWC pool of its ``[N, tokens, 1, channels]``
view: both are one compiled call. A ReduceMax (``x.amax((2, 3))``, a max over tokens) is a global max pool alike.

Guards: a float32 input of known rank, constant axes forming one run of consecutive axes after the first (the
batch, kept as is), the dims after that run static (the pool's channels) and the output not read by a subgraph.
A mean over trailing axes other than the NCHW spatial pair (a written-out LayerNorm's) is left alone: the pool
would run one channel wide.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from runtime.ir import Graph, Node
from runtime.passes.pipeline import Pass
from runtime.passes.util import (
    GraphIndex,
    add_constant,
    is_float32,
    make_node,
    reduced_axes,
    replace_node,
    set_value,
    shape_of,
)

if TYPE_CHECKING:
    from runtime.passes.pipeline import PassContext

FLOAT = 1  # TensorProto.FLOAT


#: The reductions rewritten, and their global pool in NCHW and in NHWC (``conv1d_lift`` reads it too).
GLOBAL_POOLS = {
    "ReduceMean": ("GlobalAveragePool", "NhwcGlobalAveragePool"),
    "ReduceMax": ("GlobalMaxPool", "NhwcGlobalMaxPool"),
}


@dataclass(frozen=True)
class _Mean:
    """A mean (or max) this pass may rewrite: its input's shape, the reduced axes (sorted, non-negative), the static
    dims after them."""

    shape: tuple[Any, ...]
    block: list[int]
    inner: tuple[int, ...]


def _block(node: Node, graph: Graph, index: GraphIndex) -> _Mean | None:
    """What :class:`_Mean` says of ``node``, when it is a mean this pass may rewrite."""
    if node.op_type not in GLOBAL_POOLS or node.domain or not node.outputs or not node.inputs:
        return None
    x = node.inputs[0]
    shape = shape_of(graph, x)
    axes = reduced_axes(node, index)
    if shape is None or axes is None or not is_float32(graph, x):
        return None
    rank = len(shape)
    if any(not -rank <= a < rank for a in axes):
        return None
    block = sorted({a % rank for a in axes})
    if len(block) != len(axes) or block[0] < 1 or block != list(range(block[0], block[-1] + 1)):
        return None
    inner = shape[block[-1] + 1 :]
    if not all(isinstance(d, int) and d > 0 for d in inner):
        return None
    if any(any(True for _ in r.subgraphs()) for r in index.consumers.get(node.outputs[0], [])):
        return None
    return _Mean(tuple(shape), block, tuple(int(d) for d in inner))


def _reshape(graph: Graph, node: Node, x: str, target: list[int], out: str, suffix: str) -> Node:
    shape = add_constant(graph, f"{node.name}_{suffix}_shape", np.array(target, dtype=np.int64))
    return make_node(graph, "Reshape", [x, shape], [out], f"{node.name}_{suffix}", domain="", opset=14)


def _spatial_pool(node: Node, graph: Graph, batch: Any, channels: int, keepdims: bool) -> list[Node]:
    """The global pool of an NCHW map, flattened to ``[N, C]`` unless the reduction keeps its dims."""
    y, pool = node.outputs[0], GLOBAL_POOLS[node.op_type][0]
    if keepdims:
        return [make_node(graph, pool, [node.inputs[0]], [y], f"{node.name}_gap", domain="")]
    pooled = graph.unique_name(f"{node.name}_pooled")
    set_value(graph, pooled, FLOAT, (batch, channels, 1, 1))
    gap = make_node(graph, pool, [node.inputs[0]], [pooled], f"{node.name}_gap", domain="")
    return [gap, _reshape(graph, node, pooled, [0, channels], y, "flat")]


def _token_pool(node: Node, graph: Graph, mean: _Mean, keepdims: bool) -> list[Node]:
    """The NHWC pool of ``x`` viewed as ``[N, reduced, 1, inner]``, reshaped to the mean's output."""
    batch, inner, channels = mean.shape[0], mean.inner, math.prod(mean.inner)
    view, pooled = graph.unique_name(f"{node.name}_rows"), graph.unique_name(f"{node.name}_pooled")
    set_value(graph, view, FLOAT, (batch, None, 1, channels))
    set_value(graph, pooled, FLOAT, (batch, 1, 1, channels))
    kept = [1] * len(mean.block) if keepdims else []
    return [
        _reshape(graph, node, node.inputs[0], [0, -1, 1, channels], view, "rows"),
        make_node(graph, GLOBAL_POOLS[node.op_type][1], [view], [pooled], f"{node.name}_gap"),
        _reshape(graph, node, pooled, [0, *kept, *inner], node.outputs[0], "out"),
    ]


def run(graph: Graph, ctx: PassContext) -> int:
    index = GraphIndex(graph)
    rewrites = 0
    for node in list(graph.nodes):
        mean = _block(node, graph, index)
        if mean is None:
            continue
        keepdims = bool(int(node.attrs.get("keepdims", 1)))
        if len(mean.shape) == 4 and mean.block == [2, 3] and isinstance(mean.shape[1], int):
            new = _spatial_pool(node, graph, mean.shape[0], mean.shape[1], keepdims)
        elif mean.block[0] == 1 and math.prod(mean.inner) > 1:
            new = _token_pool(node, graph, mean, keepdims)
        else:
            continue
        replace_node(graph, node, new)
        index.refresh()
        rewrites += 1
    return rewrites


PASS = Pass(
    "global_mean",
    run,
    "after squeeze_excite and channel_layernorm (their own means match first), before layout, which then sinks the "
    "NCHW pool into NHWC with the convolutions before it",
    after=("squeeze_excite", "channel_layernorm"),
    before=("layout",),
)
