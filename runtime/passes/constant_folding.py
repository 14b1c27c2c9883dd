"""Evaluate nodes whose inputs are all constant with the runtime's own kernels.

    # Constant() -> initializer
    # op(c1, c2, ...) with every input constant -> initializer (deterministic ops, no subgraphs, result small)

Initializers that are also graph inputs can be overridden at run time, so they are not constants here.

Results are kept up to ``fold_limit_bytes`` (the model must not balloon), except values read as weights (the
second and later inputs of Conv, Gemm, MatMul, BatchNormalization...): those are allocated by every run when left
as nodes (e.g. the model zoo's ConstantOfShape weights) and must be constants for the fusion and layout passes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import onnx

from runtime import kernels
from runtime.check import _constant_attr
from runtime.errors import RuntimeModelError
from runtime.ir import Graph, Node, value_of_array
from runtime.kernels.base import Kernel
from runtime.op_traits import NEVER_FOLD
from runtime.passes.pipeline import Pass
from runtime.steps import node_context

if TYPE_CHECKING:
    from runtime.passes.pipeline import PassContext

def _foldable(node: Node) -> bool:
    if node.domain or node.op_type in NEVER_FOLD or any(True for _ in node.subgraphs()):
        return False
    try:
        schema = onnx.defs.get_schema(node.op_type, node.opset or 1, node.domain)
    except onnx.defs.SchemaError:
        return False
    return not getattr(schema, "non_deterministic", False)


def _kernel(node: Node) -> Kernel | None:
    try:
        cls = kernels.resolve(node.op_type, node.domain, node.opset or 10_000)
    except RuntimeModelError:
        return None
    context = node_context(node)
    try:
        return cls(context, dict(node.attrs))
    except Exception:
        return None


#: Ops whose inputs from this position on are parameters (weights, biases, statistics).
WEIGHT_INPUTS = {
    "Conv": 1,
    "ConvTranspose": 1,
    "Gemm": 1,
    "MatMul": 1,
    "BatchNormalization": 1,
    "InstanceNormalization": 1,
    "LayerNormalization": 1,
    "PRelu": 1,
}


def weight_names(graph: Graph) -> set[str]:
    """Names read as parameters by the ops in ``WEIGHT_INPUTS``."""
    names: set[str] = set()
    for node in graph.nodes:
        start = WEIGHT_INPUTS.get(node.op_type) if not node.domain else None
        if start is not None:
            names.update(i for i in node.inputs[start:] if i)
    return names


def run(graph: Graph, ctx: PassContext) -> int:
    """Fold in graph order; returns the number of nodes replaced by initializers."""
    overridable = set(graph.input_names)
    consts = {k: v for k, v in graph.initializers.items() if k not in overridable}
    weights = weight_names(graph)
    folded = 0
    keep: list[Node] = []
    for node in graph.nodes:
        limit = ctx.weight_limit_bytes if any(o in weights for o in node.outputs) else ctx.fold_limit_bytes
        results = _fold(node, consts, limit)
        if results is None:
            keep.append(node)
            continue
        for name, value in zip(node.outputs, results, strict=False):
            if not name:
                continue
            consts[name] = value
            graph.initializers[name] = value
            known = graph.values.get(name)
            if known is None or known.kind in ("unknown", "tensor"):
                graph.values[name] = value_of_array(name, value)
        folded += 1
    graph.nodes = keep
    return folded


def _fold(node: Node, consts: dict[str, np.ndarray], limit: int) -> list[np.ndarray] | None:
    if node.op_type == "Constant" and not node.domain and len(node.outputs) == 1:
        value = _constant_attr(node.attrs)
        return [value] if value is not None else None
    inputs = [i for i in node.inputs if i]
    if not inputs or any(i not in consts for i in inputs) or not _foldable(node):
        return None
    kernel = _kernel(node)
    if kernel is None:
        return None
    try:
        results = kernel.run(*[consts[i] if i else None for i in node.inputs])
    except Exception:  # leave it to run time, where the error names the node with real inputs
        return None
    arrays = [np.asarray(r) if isinstance(r, np.generic) else r for r in results]
    if len(arrays) < len([o for o in node.outputs if o]) or not all(isinstance(a, np.ndarray) for a in arrays):
        return None
    in_bytes = sum(consts[i].nbytes for i in inputs)
    if any(a.nbytes > max(limit, in_bytes) for a in arrays):
        return None
    return arrays


PASS = Pass(
    "constant_folding",
    run,
    "after identities are gone, so chains of constant ops fold in one sweep; turns Constant nodes into initializers",
    after=("identity_elimination",),
)
