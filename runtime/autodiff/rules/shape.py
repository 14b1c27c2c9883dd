"""Rules for data-movement ops (Reshape, Flatten, Squeeze, Unsqueeze, Transpose, Concat, Gather, Slice) and the
ReduceSum/ReduceMean reductions. Shape-like inputs (shapes, axes, indices) get no gradient."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from runtime.autodiff.context import GradContext
from runtime.autodiff.registry import grad_rule
from runtime.ir import Node
from runtime.kernels.grad_base import GRAD_DOMAIN

Grads = list[str | None]


@grad_rule("Reshape", "Flatten", "Squeeze", "Unsqueeze")
def reshape_like(ctx: GradContext, node: Node, grads: Grads) -> Sequence[str | None]:
    # y = reshape(x)  ->  dx = reshape(dy, shape(x))
    rest = [None] * (len(node.inputs) - 1)
    if grads[0] is None:
        return [None, *rest]
    return [ctx.op("Reshape", grads[0], ctx.shape_of(node.inputs[0])), *rest]


@grad_rule("Transpose")
def transpose(ctx: GradContext, node: Node, grads: Grads) -> Sequence[str | None]:
    # y = transpose(x, perm)  ->  dx = transpose(dy, argsort(perm)); the default (reversed) perm is its own inverse
    if grads[0] is None:
        return [None]
    perm = node.attrs.get("perm")
    if perm is None:
        return [ctx.op("Transpose", grads[0])]
    inverse = [int(i) for i in np.argsort(perm)]
    return [ctx.op("Transpose", grads[0], perm=inverse)]


@grad_rule("Concat")
def concat(ctx: GradContext, node: Node, grads: Grads) -> Sequence[str | None]:
    # y = concat(x1..xn, axis)  ->  dx1..dxn = split(dy) by the inputs' sizes along axis
    if grads[0] is None:
        return [None] * len(node.inputs)
    shapes = [ctx.shape_of(x) for x in node.inputs]
    outs = ctx.grad_op("ConcatGrad", [grads[0], *shapes], list(ctx.needs), axis=int(node.attrs["axis"]))
    return [o or None for o in outs]


@grad_rule("Gather")
def gather(ctx: GradContext, node: Node, grads: Grads) -> Sequence[str | None]:
    # y = gather(data, idx, axis)  ->  d data = scatter_add(zeros, idx, dy)
    if grads[0] is None:
        return [None, None]
    data, indices = node.inputs
    axis = int(node.attrs.get("axis", 0))
    return [ctx.grad_op("GatherGrad", [grads[0], indices, ctx.shape_of(data)], axis=axis)[0], None]


@grad_rule("Slice")
def slice_(ctx: GradContext, node: Node, grads: Grads) -> Sequence[str | None]:
    # y = x[slices]  ->  dx = zeros_like(x) with dy written into the slices
    rest = [None] * (len(node.inputs) - 1)
    if grads[0] is None:
        return [None, *rest]
    inputs = [grads[0], ctx.shape_of(node.inputs[0]), *node.inputs[1:]]
    return [ctx.emit("SliceGrad", inputs, domain=GRAD_DOMAIN, attributes=node.attributes)[0], *rest]


def _reduce(ctx: GradContext, node: Node, grads: Grads, mean: bool) -> Sequence[str | None]:
    # y = reduce(x, axes)  ->  dx = broadcast(dy, shape(x)) (/ count for the mean)
    if grads[0] is None:
        return [None] * len(node.inputs)
    inputs = [grads[0], ctx.shape_of(node.inputs[0]), *node.inputs[1:2]]
    attrs: dict[str, Any] = {
        "keepdims": int(node.attrs.get("keepdims", 1)),
        "noop_with_empty_axes": int(node.attrs.get("noop_with_empty_axes", 0)),
        "mean": int(mean),
    }
    if "axes" in node.attrs:
        attrs["axes"] = [int(a) for a in node.attrs["axes"]]
    return [ctx.grad_op("ReduceGrad", inputs, **attrs)[0]] + [None] * (len(node.inputs) - 1)


@grad_rule("ReduceSum")
def reduce_sum(ctx: GradContext, node: Node, grads: Grads) -> Sequence[str | None]:
    return _reduce(ctx, node, grads, mean=False)


@grad_rule("ReduceMean")
def reduce_mean(ctx: GradContext, node: Node, grads: Grads) -> Sequence[str | None]:
    return _reduce(ctx, node, grads, mean=True)
