"""Rules for the neural-network core: Conv, Gemm, MatMul, pools, normalisations and dropout."""

from __future__ import annotations

from collections.abc import Sequence

from runtime.autodiff.context import GradContext
from runtime.autodiff.registry import grad_rule
from runtime.errors import ModelCheckError
from runtime.ir import Node
from runtime.kernels.grad_base import GRAD_DOMAIN

Grads = list[str | None]


def _has(node: Node, index: int) -> bool:
    return len(node.inputs) > index and bool(node.inputs[index])


@grad_rule("Conv")
def conv(ctx: GradContext, node: Node, grads: Grads) -> Sequence[str | None]:
    # y = conv(x, w) + b  ->  ConvGrad(dy, x, w) = dx, dw, db (one node, only the wanted outputs)
    dy = grads[0]
    if dy is None:
        return [None] * len(node.inputs)
    wanted = [ctx.needs[0], ctx.needs[1], _has(node, 2) and ctx.needs[2]]
    outs = ctx.emit(
        "ConvGrad", [dy, node.inputs[0], node.inputs[1]], wanted, domain=GRAD_DOMAIN, attributes=node.attributes
    )
    return [o or None for o in outs[: len(node.inputs)]]


@grad_rule("Gemm")
def gemm(ctx: GradContext, node: Node, grads: Grads) -> Sequence[str | None]:
    # y = alpha op(a) op(b) + beta c  ->  transposed Gemms; dc = sum_to(beta dy)
    dy = grads[0]
    if dy is None:
        return [None] * len(node.inputs)
    a, b = node.inputs[0], node.inputs[1]
    alpha = float(node.attrs.get("alpha", 1.0))
    beta = float(node.attrs.get("beta", 1.0))
    ta, tb = int(node.attrs.get("transA", 0)), int(node.attrs.get("transB", 0))
    da = db = dc = None
    if ctx.needs[0]:
        da = {
            (0, 0): lambda: ctx.op("Gemm", dy, b, transB=1, alpha=alpha),
            (0, 1): lambda: ctx.op("Gemm", dy, b, alpha=alpha),
            (1, 0): lambda: ctx.op("Gemm", b, dy, transB=1, alpha=alpha),
            (1, 1): lambda: ctx.op("Gemm", b, dy, transA=1, transB=1, alpha=alpha),
        }[(ta, tb)]()
    if ctx.needs[1]:
        db = {
            (0, 0): lambda: ctx.op("Gemm", a, dy, transA=1, alpha=alpha),
            (0, 1): lambda: ctx.op("Gemm", dy, a, transA=1, alpha=alpha),
            (1, 0): lambda: ctx.op("Gemm", a, dy, alpha=alpha),
            (1, 1): lambda: ctx.op("Gemm", dy, a, transA=1, transB=1, alpha=alpha),
        }[(ta, tb)]()
    if _has(node, 2) and ctx.needs[2]:
        scaled = dy if beta == 1.0 else ctx.op("Mul", dy, ctx.scalar_like(beta, node.outputs[0]))
        dc = ctx.sum_to(scaled, node.inputs[2], node.outputs[0])
    return [da, db, dc][: len(node.inputs)]


@grad_rule("MatMul")
def matmul(ctx: GradContext, node: Node, grads: Grads) -> Sequence[str | None]:
    # y = a @ b  ->  MatMulGrad(dy, a, b) = dy @ b^T, a^T @ dy (batch/broadcast dims summed away)
    if grads[0] is None:
        return [None, None]
    outs = ctx.grad_op("MatMulGrad", [grads[0], *node.inputs], [ctx.needs[0], ctx.needs[1]])
    return [o or None for o in outs]


@grad_rule("MaxPool")
def max_pool(ctx: GradContext, node: Node, grads: Grads) -> Sequence[str | None]:
    if grads[0] is None:
        return [None]
    return [ctx.emit("MaxPoolGrad", [grads[0], node.inputs[0]], domain=GRAD_DOMAIN, attributes=node.attributes)[0]]


@grad_rule("AveragePool")
def average_pool(ctx: GradContext, node: Node, grads: Grads) -> Sequence[str | None]:
    if grads[0] is None:
        return [None]
    x_shape = ctx.shape_of(node.inputs[0])
    return [ctx.emit("AveragePoolGrad", [grads[0], x_shape], domain=GRAD_DOMAIN, attributes=node.attributes)[0]]


@grad_rule("GlobalAveragePool")
def global_average_pool(ctx: GradContext, node: Node, grads: Grads) -> Sequence[str | None]:
    if grads[0] is None:
        return [None]
    return [ctx.grad_op("GlobalAveragePoolGrad", [grads[0], ctx.shape_of(node.inputs[0])])[0]]


@grad_rule("GlobalMaxPool")
def global_max_pool(ctx: GradContext, node: Node, grads: Grads) -> Sequence[str | None]:
    if grads[0] is None:
        return [None]
    return [ctx.grad_op("GlobalMaxPoolGrad", [grads[0], node.inputs[0]])[0]]


def _batch_norm_training(node: Node) -> bool:
    if node.opset >= 14:
        return bool(node.attrs.get("training_mode", 0))
    return sum(1 for o in node.outputs if o) > 1


@grad_rule("BatchNormalization")
def batch_norm(ctx: GradContext, node: Node, grads: Grads) -> Sequence[str | None]:
    # training: batch statistics (recomputed from x); inference: running statistics are constants
    dy = grads[0]
    if dy is None:
        return [None] * len(node.inputs)
    eps = float(node.attrs.get("epsilon", 1e-5))
    x, scale = node.inputs[0], node.inputs[1]
    wanted = list(ctx.needs[:3])
    if _batch_norm_training(node):
        outs = ctx.grad_op("BatchNormGrad", [dy, x, scale], wanted, epsilon=eps, mode="batch")
    else:
        outs = ctx.grad_op(
            "BatchNormGrad", [dy, x, scale, node.inputs[3], node.inputs[4]], wanted, epsilon=eps, mode="running"
        )
    return [o or None for o in outs] + [None, None]


@grad_rule("BatchNormTraining", domain=GRAD_DOMAIN)
def batch_norm_training(ctx: GradContext, node: Node, grads: Grads) -> Sequence[str | None]:
    # the training-graph BatchNorm saved the batch mean and inverse std (outputs 3, 4) for this
    dy = grads[0]
    if dy is None:
        return [None] * 5
    eps = float(node.attrs.get("epsilon", 1e-5))
    inputs = [dy, node.inputs[0], node.inputs[1], node.outputs[3], node.outputs[4]]
    outs = ctx.grad_op("BatchNormGrad", inputs, list(ctx.needs[:3]), epsilon=eps, mode="batch")
    return [o or None for o in outs] + [None, None]


@grad_rule("LayerNormalization")
def layer_norm(ctx: GradContext, node: Node, grads: Grads) -> Sequence[str | None]:
    if any(g is not None for g in grads[1:]):
        raise ModelCheckError(f"{node.label()}: gradients through the Mean/InvStdDev outputs are not supported")
    dy = grads[0]
    if dy is None:
        return [None] * len(node.inputs)
    wanted = [ctx.needs[0], ctx.needs[1], _has(node, 2) and ctx.needs[2]]
    outs = ctx.grad_op(
        "LayerNormGrad",
        [dy, node.inputs[0], node.inputs[1]],
        wanted,
        axis=int(node.attrs.get("axis", -1)),
        epsilon=float(node.attrs.get("epsilon", 1e-5)),
    )
    return [o or None for o in outs[: len(node.inputs)]]


@grad_rule("Dropout")
def dropout(ctx: GradContext, node: Node, grads: Grads) -> Sequence[str | None]:
    # inference Dropout is the identity; a training one needs its mask output
    dy = grads[0]
    if dy is None:
        return [None] * len(node.inputs)
    training = _has(node, 2) and node.opset >= 12
    flag = ctx.graph.initializers.get(node.inputs[2]) if training else None
    if not training or (flag is not None and not bool(flag)):
        return [dy] + [None] * (len(node.inputs) - 1)
    mask = node.outputs[1] if len(node.outputs) > 1 else ""
    ratio = ctx.graph.initializers.get(node.inputs[1]) if _has(node, 1) else None
    if not mask or (_has(node, 1) and ratio is None):
        raise ModelCheckError(
            f"{node.label()}: a training-mode Dropout needs its mask output and a constant ratio to be "
            "differentiated (the trainer replaces Dropout with TrainingDropout)"
        )
    rate = float(ratio) if ratio is not None else float(node.attrs.get("ratio", 0.5))
    return [ctx.grad_op("DropoutGrad", [dy, mask], ratio=rate)[0]] + [None] * (len(node.inputs) - 1)


@grad_rule("TrainingDropout", domain=GRAD_DOMAIN)
def training_dropout(ctx: GradContext, node: Node, grads: Grads) -> Sequence[str | None]:
    if grads[0] is None:
        return [None, None]
    ratio = float(node.attrs.get("ratio", 0.5))
    return [ctx.grad_op("DropoutGrad", [grads[0], node.outputs[1]], ratio=ratio)[0], None]
