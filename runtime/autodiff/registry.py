"""The gradient-rule registry: one rule per op, keyed like the kernel registry by ``(domain, op_type)``.

A rule receives the :class:`~runtime.autodiff.context.GradContext`, the forward node and the gradients of the
node's outputs (``None`` where an output gets none) and returns one gradient name (or ``None``) per node input.
It emits the backward nodes through the context, which knows which inputs need a gradient (``ctx.needs``).

Example::

    @grad_rule("Relu")
    def relu(ctx, node, grads):
        return [ctx.grad_op("ReluGrad", [grads[0], node.outputs[0]])[0]]
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from runtime.errors import UnsupportedOpError

if TYPE_CHECKING:
    from runtime.autodiff.context import GradContext
    from runtime.ir import Node

Rule = Callable[["GradContext", "Node", list[str | None]], Sequence[str | None]]

GRAD_RULES: dict[tuple[str, str], Rule] = {}

#: Ops whose outputs carry no gradient (integer, boolean or piecewise-constant results): differentiation stops
#: there without needing a rule.
NO_GRADIENT_OPS = frozenset(
    {
        "Shape",
        "Size",
        "ArgMax",
        "ArgMin",
        "NonZero",
        "Equal",
        "Less",
        "LessOrEqual",
        "Greater",
        "GreaterOrEqual",
        "Not",
        "And",
        "Or",
        "Xor",
        "IsNaN",
        "IsInf",
        "Floor",
        "Ceil",
        "Round",
        "Sign",
        "ConstantOfShape",
        "Constant",
        "EyeLike",
        "RandomNormal",
        "RandomUniform",
        "RandomNormalLike",
        "RandomUniformLike",
        "Multinomial",
        "Bernoulli",
        "OneHot",
        "TopK",
        "Range",
        "BitShift",
    }
)


def grad_rule(*op_types: str, domain: str = "") -> Callable[[Rule], Rule]:
    """Decorator: register ``fn`` as the gradient rule of ``op_types`` in ``domain``."""

    def add(fn: Rule) -> Rule:
        for op in op_types:
            key = (domain, op)
            if key in GRAD_RULES and GRAD_RULES[key] is not fn:
                raise TypeError(f"gradient rule for {op!r} registered twice")
            GRAD_RULES[key] = fn
        return fn

    return add


def has_rule(op_type: str, domain: str = "") -> bool:
    return ("" if domain == "ai.onnx" else domain, op_type) in GRAD_RULES


def rule_for(node: Node) -> Rule:
    """The rule of ``node``'s op; the error names the node and lists the ops that have rules."""
    domain = "" if node.domain == "ai.onnx" else node.domain
    rule = GRAD_RULES.get((domain, node.op_type))
    if rule is None:
        known = ", ".join(sorted(op for d, op in GRAD_RULES if d == ""))
        raise UnsupportedOpError(f"{node.label()}: no gradient rule for {node.op_type!r}; ops with rules: {known}")
    return rule
