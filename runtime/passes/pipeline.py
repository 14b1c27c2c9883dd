"""The ordered pass list. Each entry says why it sits where it does; any pass can be disabled by name.

Every pass takes ``(graph, ctx)``, rewrites the graph in place and returns how many rewrites it made. When a
guard is unsure (value read by a subgraph, graph output, overridable initializer...) a pass leaves the graph as is.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from runtime.check import topological_order
from runtime.errors import RuntimeModelError
from runtime.ir import Graph, Model
from runtime.passes import (
    attention_fusion,
    channel_layernorm,
    constant_folding,
    conv1d_lift,
    conv_bn_fusion,
    conv_fusion,
    dead_nodes,
    depthwise_fusion,
    elementwise_chain,
    embedding_bag,
    gelu_fusion,
    identity_elimination,
    layout,
    matmul_fusion,
    pad_fusion,
    recurrent_layout,
    recurrent_outputs,
    shape_values,
    silu_fusion,
    squeeze_excite,
    transpose_layout,
    transpose_reshape,
    view_chain,
)
from runtime.passes.util import APPOPT_DOMAIN


@dataclass(frozen=True)
class PassContext:
    #: Constant folding keeps a result only up to this many bytes (or the size of its inputs), so a folded
    #: model does not balloon (e.g. ConstantOfShape weight generators stay nodes).
    fold_limit_bytes: int = 1 << 20
    #: Folded values read as weights may be this large (they are materialised at run time anyway).
    weight_limit_bytes: int = 1 << 31
    #: "auto": NHWC where the compiled kernels exist; "nhwc": always (tests); "nchw": never.
    layout: str = "auto"
    #: Let passes measure alternatives (runtime.tuning) when shapes are static.
    tune: bool = True


PassFn = Callable[[Graph, PassContext], int]


@dataclass(frozen=True)
class Pass:
    name: str
    run: PassFn
    reason: str


PIPELINE: tuple[Pass, ...] = (
    Pass(
        "identity_elimination",
        identity_elimination.run,
        "first: cheapest rewrite, and later passes then see producers and consumers directly connected",
    ),
    Pass(
        "constant_folding",
        constant_folding.run,
        "after identities are gone, so chains of constant ops fold in one sweep; turns Constant nodes into "
        "initializers",
    ),
    Pass(
        "shape_values",
        shape_values.run,
        "after constant folding, which then (next round) folds the shape arithmetic reading the static dims it "
        "writes; Reshapes get constant targets before the fusions look at them",
    ),
    Pass(
        "view_chain",
        view_chain.run,
        "after shape_values (Reshape targets are constants by then), before the fusions: head splits become one "
        "Reshape, Transpose and Gather, the form attention_fusion reads in place",
    ),
    Pass(
        "pad_fusion",
        pad_fusion.run,
        "before conv1d_lift and the layout pass: a causal conv's zero Pad becomes the Conv's own padding, so no "
        "NCHW op is left between NHWC convolutions",
    ),
    Pass(
        "conv1d_lift",
        conv1d_lift.run,
        "before the conv fusions: a 1-d Conv becomes a 2-d one of height 1, then fuses and goes NHWC like the rest",
    ),
    Pass(
        "conv_bn_fusion",
        conv_bn_fusion.run,
        "before conv_fusion: a BatchNormalization between a Conv and its activation would block that fusion",
    ),
    Pass(
        "embedding_bag",
        embedding_bag.run,
        "after constant folding (the bag's column index is then a constant): Gather + ReduceSum become one op",
    ),
    Pass(
        "gelu_fusion",
        gelu_fusion.run,
        "before matmul_fusion and elementwise_chain: the Erf pattern becomes one op before its Muls look fusable",
    ),
    Pass(
        "attention_fusion",
        attention_fusion.run,
        "before matmul_fusion: attention's MatMuls and their scale Mul must still be plain ops to be recognised",
    ),
    Pass(
        "matmul_fusion",
        matmul_fusion.run,
        "Gemm/MatMul absorb scale, bias, residual and activation while those are still separate nodes",
    ),
    Pass(
        "conv_fusion",
        conv_fusion.run,
        "Conv absorbs bias, residual and activation (after BN folding, before the layout change)",
    ),
    Pass(
        "silu_fusion",
        silu_fusion.run,
        "after conv_fusion and matmul_fusion (bias and residual absorbed first): x * sigmoid(x) joins the epilogue",
    ),
    Pass(
        "squeeze_excite",
        squeeze_excite.run,
        "after silu_fusion (its layers carry their activations), before layout, which then sinks it into NHWC",
    ),
    Pass(
        "transpose_layout",
        transpose_layout.run,
        "just before layout: the model's own NCHW <-> NHWC transposes become layout nodes it can cancel and sink",
    ),
    Pass(
        "channel_layernorm",
        channel_layernorm.run,
        "just before layout: a written-out LayerNorm over NCHW channels becomes an NHWC LayerNormalization",
    ),
    Pass(
        "layout",
        layout.run,
        "after the fusions: converts fused convolutions to NHWC and sinks the remaining ops between them",
    ),
    Pass(
        "depthwise_fusion",
        depthwise_fusion.run,
        "after layout, on NHWC convolutions: a depthwise conv and the 1x1 conv reading it become one pass",
    ),
    Pass(
        "elementwise_chain",
        elementwise_chain.run,
        "after layout: what is left elementwise (e.g. BatchNormalization turned affine, then Relu) joins one chain",
    ),
    Pass(
        "transpose_reshape",
        transpose_reshape.run,
        "late: layout changes and fusions have settled, so only truly redundant shuffles remain",
    ),
    Pass(
        "dead_node_elimination",
        dead_nodes.run,
        "removes what the earlier passes orphaned (folded producers, unused initializers)",
    ),
    Pass(
        "recurrent_outputs",
        recurrent_outputs.run,
        "after dead_node_elimination, once readers are final: a recurrent layer computes only what is read (Y "
        "alone runs as one prebound call)",
    ),
    Pass(
        "recurrent_layout",
        recurrent_layout.run,
        "after recurrent_outputs (it takes layers whose only output is Y): PyTorch's batch-first transposes "
        "become the layer's layout 1; the next round's dead_node_elimination drops what they leave",
    ),
    Pass(
        "memory_plan",
        lambda graph, ctx: 0,
        "last, and run by the executor: static buffer reuse once every shape is known (no graph change, so it "
        "stays on with passes=[]; disable it by name)",
    ),
)

#: The pipeline repeats while it still changes something, at most this often.
MAX_ROUNDS = 3

#: Called as ``verifier(graph, pass_name)`` after every pass that changed something (tests install one).
verifier: Callable[[Graph, str], None] | None = None


def verify_graph(graph: Graph, after: str = "") -> None:
    """Structural checks a rewritten graph must pass: every read defined, one producer per value, no cycle,
    a kernel for every node, every graph output produced. Raises ``ModelCheckError`` naming the pass."""
    from runtime import kernels
    from runtime.errors import ModelCheckError

    try:
        order = topological_order(graph)
        for node in order:
            kernels.resolve(node.op_type, node.domain, node.opset or 10_000)
    except RuntimeModelError as exc:
        raise ModelCheckError(f"after pass {after!r}: {exc}") from None
    produced = {o for n in graph.nodes for o in n.outputs if o}
    known = produced | set(graph.initializers) | set(graph.input_names)
    missing = [o for o in graph.output_names if o not in known]
    if missing:
        raise ModelCheckError(f"after pass {after!r}: graph output {missing[0]!r} is no longer produced")


def pass_names() -> list[str]:
    return [p.name for p in PIPELINE]


def run_passes(
    model: Model,
    names: Sequence[str] | None = None,
    disable: Sequence[str] = (),
    max_alloc_bytes: int | None = None,
    layout_mode: str = "auto",
    tune: bool = True,
) -> dict[str, int]:
    """Run the selected passes (default: all, in pipeline order) on ``model``; return rewrites per pass."""
    known = pass_names()
    for name in [*(names or ()), *disable]:
        if name not in known:
            raise RuntimeModelError(f"unknown pass {name!r}; known passes: {', '.join(known)}")
    wanted = set(names) if names is not None else set(known)
    selected = [p for p in PIPELINE if p.name in wanted and p.name not in set(disable)]
    limit = 1 << 20
    if max_alloc_bytes is not None:
        limit = min(limit, max_alloc_bytes)
    weight_limit = max_alloc_bytes if max_alloc_bytes is not None else PassContext.weight_limit_bytes
    ctx = PassContext(fold_limit_bytes=limit, weight_limit_bytes=weight_limit, layout=layout_mode, tune=tune)
    counts = {p.name: 0 for p in selected}
    for _ in range(MAX_ROUNDS):
        changed = 0
        for p in selected:
            n = p.run(model.graph, ctx)
            if n:
                # rewrites may place a fused node before a producer it now reads: restore topological order,
                # which also verifies every read is still defined
                model.graph.nodes = topological_order(model.graph)
                if verifier is not None:
                    verifier(model.graph, p.name)
            counts[p.name] += n
            changed += n
        if not changed:
            break
    if APPOPT_DOMAIN in model.graph.opsets or any(n.domain == APPOPT_DOMAIN for n in model.graph.nodes):
        model.opsets.setdefault(APPOPT_DOMAIN, 1)
    return counts
