"""Rules for the ONNX loss ops. MSE needs none of its own: it is built from Sub, Mul and ReduceMean."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from runtime.autodiff.context import GradContext
from runtime.autodiff.registry import grad_rule
from runtime.ir import Node

Grads = list[str | None]


def _loss_attrs(node: Node) -> dict[str, Any]:
    attrs: dict[str, Any] = {"reduction": node.attrs.get("reduction", "mean")}
    if "ignore_index" in node.attrs:
        attrs["ignore_index"] = int(node.attrs["ignore_index"])
    return attrs


@grad_rule("SoftmaxCrossEntropyLoss")
def softmax_cross_entropy(ctx: GradContext, node: Node, grads: Grads) -> Sequence[str | None]:
    # loss = nll(log_softmax(scores), labels)  ->  d scores = (softmax - onehot) * weight scale
    parts: list[str] = []
    weights = node.inputs[2:3]
    if grads[0] is not None:
        inputs = [grads[0], node.inputs[0], node.inputs[1], *weights]
        parts.append(ctx.grad_op("SoftmaxCrossEntropyLossGrad", inputs, **_loss_attrs(node))[0])
    if len(grads) > 1 and grads[1] is not None:  # the log-probability output was used too
        parts.append(ctx.grad_op("LogSoftmaxGrad", [grads[1], node.outputs[1]], axis=1)[0])
    grad = parts[0] if len(parts) == 1 else ctx.op("Sum", *parts)
    return [grad] + [None] * (len(node.inputs) - 1)


@grad_rule("NegativeLogLikelihoodLoss")
def nll_loss(ctx: GradContext, node: Node, grads: Grads) -> Sequence[str | None]:
    # loss = -input[n, labels[n]] * w  ->  d input = -w scale at each target, 0 elsewhere
    if grads[0] is None:
        return [None] * len(node.inputs)
    inputs = [grads[0], node.inputs[1], ctx.shape_of(node.inputs[0]), *node.inputs[2:3]]
    grad = ctx.grad_op("NegativeLogLikelihoodLossGrad", inputs, **_loss_attrs(node))[0]
    return [grad] + [None] * (len(node.inputs) - 1)
