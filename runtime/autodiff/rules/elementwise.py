"""Rules for element-wise arithmetic (with broadcasting), casts and activations.

Broadcasting is undone by ``ctx.sum_to``: a no-op when the input already has the output's shape, else one
``SumToShape`` node.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from runtime.autodiff.context import GradContext
from runtime.autodiff.registry import grad_rule
from runtime.errors import ModelCheckError
from runtime.ir import Node

Grads = list[str | None]


@grad_rule("Identity")
def identity(ctx: GradContext, node: Node, grads: Grads) -> Sequence[str | None]:
    return [grads[0]]


def _pair(ctx: GradContext, grads: Grads, da: Callable[[str], str], db: Callable[[str], str]) -> Sequence[str | None]:
    """The gradients of a two-input op from the output's ``dy``: ``da(dy)`` and ``db(dy)``, each built only when
    that input needs one."""
    dy = grads[0]
    if dy is None:
        return [None, None]
    return [da(dy) if ctx.needs[0] else None, db(dy) if ctx.needs[1] else None]


@grad_rule("Add")
def add(ctx: GradContext, node: Node, grads: Grads) -> Sequence[str | None]:
    # y = a + b  ->  da = sum_to(dy), db = sum_to(dy)
    (a, b), y = node.inputs, node.outputs[0]
    return _pair(ctx, grads, lambda dy: ctx.sum_to(dy, a, y), lambda dy: ctx.sum_to(dy, b, y))


@grad_rule("Sub")
def sub(ctx: GradContext, node: Node, grads: Grads) -> Sequence[str | None]:
    # y = a - b  ->  da = sum_to(dy), db = -sum_to(dy)
    (a, b), y = node.inputs, node.outputs[0]
    return _pair(ctx, grads, lambda dy: ctx.sum_to(dy, a, y), lambda dy: ctx.op("Neg", ctx.sum_to(dy, b, y)))


@grad_rule("Mul")
def mul(ctx: GradContext, node: Node, grads: Grads) -> Sequence[str | None]:
    # y = a * b  ->  da = sum_to(dy * b), db = sum_to(dy * a)
    (a, b), y = node.inputs, node.outputs[0]
    return _pair(
        ctx, grads, lambda dy: ctx.sum_to(ctx.op("Mul", dy, b), a, y), lambda dy: ctx.sum_to(ctx.op("Mul", dy, a), b, y)
    )


@grad_rule("Div")
def div(ctx: GradContext, node: Node, grads: Grads) -> Sequence[str | None]:
    # y = a / b  ->  da = sum_to(dy / b), db = -sum_to(dy * y / b)
    (a, b), y = node.inputs, node.outputs[0]
    return _pair(
        ctx,
        grads,
        lambda dy: ctx.sum_to(ctx.op("Div", dy, b), a, y),
        lambda dy: ctx.op("Neg", ctx.sum_to(ctx.op("Mul", dy, ctx.op("Div", y, b)), b, y)),
    )


@grad_rule("Sum")
def sum_(ctx: GradContext, node: Node, grads: Grads) -> Sequence[str | None]:
    # y = x1 + ... + xn  ->  dxi = sum_to(dy)
    dy, y = grads[0], node.outputs[0]
    if dy is None:
        return [None] * len(node.inputs)
    return [ctx.sum_to(dy, x, y) if need else None for x, need in zip(node.inputs, ctx.needs, strict=True)]


@grad_rule("Neg")
def neg(ctx: GradContext, node: Node, grads: Grads) -> Sequence[str | None]:
    return [None if grads[0] is None else ctx.op("Neg", grads[0])]


@grad_rule("Cast")
def cast(ctx: GradContext, node: Node, grads: Grads) -> Sequence[str | None]:
    # y = cast(x, T)  ->  dx = cast(dy, type(x)); the AMP pass relies on this to keep fp32 master gradients
    dy, x = grads[0], node.inputs[0]
    if dy is None:
        return [None]
    to = ctx.elem_type(x)
    if not to:
        raise ModelCheckError(f"{node.label()}: the input's element type is unknown, so its gradient cannot be cast")
    if to == ctx.elem_type(node.outputs[0]):
        return [dy]
    return [ctx.op("Cast", dy, to=to)]


@grad_rule("Exp")
def exp(ctx: GradContext, node: Node, grads: Grads) -> Sequence[str | None]:
    # y = exp(x)  ->  dx = dy * y
    return [None if grads[0] is None else ctx.op("Mul", grads[0], node.outputs[0])]


@grad_rule("Log")
def log(ctx: GradContext, node: Node, grads: Grads) -> Sequence[str | None]:
    # y = log(x)  ->  dx = dy / x
    return [None if grads[0] is None else ctx.op("Div", grads[0], node.inputs[0])]


@grad_rule("Sqrt")
def sqrt(ctx: GradContext, node: Node, grads: Grads) -> Sequence[str | None]:
    # y = sqrt(x)  ->  dx = dy / (2 y)
    dy, y = grads[0], node.outputs[0]
    if dy is None:
        return [None]
    return [ctx.op("Div", dy, ctx.op("Mul", y, ctx.scalar_like(2.0, y)))]


@grad_rule("Reciprocal")
def reciprocal(ctx: GradContext, node: Node, grads: Grads) -> Sequence[str | None]:
    # y = 1 / x  ->  dx = -dy * y * y
    dy, y = grads[0], node.outputs[0]
    if dy is None:
        return [None]
    return [ctx.op("Neg", ctx.op("Mul", dy, ctx.op("Mul", y, y)))]


@grad_rule("Pow")
def pow_(ctx: GradContext, node: Node, grads: Grads) -> Sequence[str | None]:
    # y = a ** b  ->  da = sum_to(dy * b * a ** (b - 1)), db = sum_to(dy * y * log(a))
    (a, b), y = node.inputs, node.outputs[0]

    def da(dy: str) -> str:
        b_like_a = b if ctx.elem_type(b) == ctx.elem_type(a) else ctx.op("Cast", b, to=ctx.elem_type(a))
        power = ctx.op("Pow", a, ctx.op("Sub", b_like_a, ctx.scalar_like(1.0, a)))
        return ctx.sum_to(ctx.op("Mul", dy, ctx.op("Mul", b_like_a, power)), a, y)

    return _pair(ctx, grads, da, lambda dy: ctx.sum_to(ctx.op("Mul", dy, ctx.op("Mul", y, ctx.op("Log", a))), b, y))


@grad_rule("Where")
def where(ctx: GradContext, node: Node, grads: Grads) -> Sequence[str | None]:
    # y = where(c, a, b)  ->  da = sum_to(where(c, dy, 0)), db = sum_to(where(c, 0, dy))
    dy, (c, a, b), y = grads[0], node.inputs, node.outputs[0]
    if dy is None:
        return [None, None, None]
    zero = ctx.scalar_like(0.0, y)
    return [
        None,
        ctx.sum_to(ctx.op("Where", c, dy, zero), a, y) if ctx.needs[1] else None,
        ctx.sum_to(ctx.op("Where", c, zero, dy), b, y) if ctx.needs[2] else None,
    ]


@grad_rule("Expand")
def expand(ctx: GradContext, node: Node, grads: Grads) -> Sequence[str | None]:
    dy, x, y = grads[0], node.inputs[0], node.outputs[0]
    return [None if dy is None else ctx.sum_to(dy, x, y), None]


def _unary(grad_op: str, use_output: bool, *attr_names: str) -> None:
    """Register ``op -> grad_op(dY, Y or X)``, forwarding the named attributes."""

    def rule(ctx: GradContext, node: Node, grads: Grads) -> Sequence[str | None]:
        if grads[0] is None:
            return [None]
        ref = node.outputs[0] if use_output else node.inputs[0]
        attrs = {k: node.attrs[k] for k in attr_names if k in node.attrs}
        return [ctx.grad_op(grad_op, [grads[0], ref], **attrs)[0]]

    grad_rule(grad_op.removesuffix("Grad"))(rule)


_unary("ReluGrad", use_output=True)
_unary("SigmoidGrad", use_output=True)
_unary("TanhGrad", use_output=True)
_unary("LeakyReluGrad", False, "alpha")
_unary("GeluGrad", False, "approximate")
_unary("ErfGrad", use_output=False)


def _softmax_family(ctx: GradContext, node: Node, grads: Grads, grad_op: str) -> Sequence[str | None]:
    if grads[0] is None:
        return [None]
    legacy = node.opset < 13
    axis = int(node.attrs.get("axis", 1 if legacy else -1))
    return [ctx.grad_op(grad_op, [grads[0], node.outputs[0]], axis=axis, legacy=int(legacy))[0]]


@grad_rule("Softmax")
def softmax(ctx: GradContext, node: Node, grads: Grads) -> Sequence[str | None]:
    return _softmax_family(ctx, node, grads, "SoftmaxGrad")


@grad_rule("LogSoftmax")
def log_softmax(ctx: GradContext, node: Node, grads: Grads) -> Sequence[str | None]:
    return _softmax_family(ctx, node, grads, "LogSoftmaxGrad")
