"""Losses: append one to a forward graph (for the autodiff), and the same losses in NumPy (for evaluation).

* ``cross_entropy``: ``SoftmaxCrossEntropyLoss(scores, labels)`` with mean reduction. A model that ends in Softmax
  is trained on the Softmax's input (the logits), one that ends in LogSoftmax with ``NegativeLogLikelihoodLoss``,
  so the exported model keeps its own output.
* ``mse``: ``ReduceMean((prediction - targets)^2)`` built from Sub, Mul and ReduceMean.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from onnx import TensorProto, helper

from runtime.ir import Dim, Graph, Node, Value
from runtime.training.config import TrainingError


@dataclass(frozen=True)
class AttachedLoss:
    """Names the loss added to the graph: the scalar loss, the target input, and what the loss reads."""

    loss: str
    target: str
    #: ``logits``, ``probabilities``, ``log_probabilities`` or ``values`` (MSE): how to read the model output.
    output_kind: str
    output: str


def attach_loss(graph: Graph, kind: str, output: str | None = None, target: str = "labels") -> AttachedLoss:
    """Append loss nodes reading model output ``output`` (default the first); add the target input."""
    output = output or graph.output_names[0]
    if output not in graph.output_names:
        raise TrainingError(f"output {output!r} is not a model output; outputs: {', '.join(graph.output_names)}")
    if target in graph.values or target in graph.input_names:
        target = _unique(graph, target)
    opset = graph.opsets.get("", 1)
    producers = graph.producers()
    out_value = graph.values.get(output) or Value(output, "tensor", TensorProto.FLOAT, None)
    loss = _unique(graph, "loss")
    if kind == "mse":
        diff, square = _unique(graph, "loss__diff"), _unique(graph, "loss__square")
        graph.nodes += [
            _node("loss__sub", "Sub", [output, target], [diff], opset),
            _node("loss__mul", "Mul", [diff, diff], [square], opset),
            _node("loss__mean", "ReduceMean", [square], [loss], opset, keepdims=0),
        ]
        graph.inputs.append(Value(target, "tensor", out_value.elem_type or TensorProto.FLOAT, out_value.shape))
        _declare(graph, loss, out_value.elem_type or TensorProto.FLOAT)
        return AttachedLoss(loss, target, "values", output)
    if kind != "cross_entropy":
        raise TrainingError(f"unknown loss {kind!r}; use cross_entropy or mse")
    if opset < 12:
        raise TrainingError(
            f"cross-entropy training needs opset 12 or newer (the model has {opset}); convert it with "
            "onnx.version_converter first"
        )
    producer = producers.get(output)
    scores, op, output_kind = output, "SoftmaxCrossEntropyLoss", "logits"
    if producer is not None and producer.domain == "" and producer.op_type in ("Softmax", "LogSoftmax"):
        axis, rank = _softmax_axis(producer), _rank(graph, output)
        if axis == 1 or (rank is not None and axis % rank == 1):
            scores = producer.inputs[0]
            output_kind = "probabilities" if producer.op_type == "Softmax" else "log_probabilities"
            if producer.op_type == "LogSoftmax":
                scores, op = output, "NegativeLogLikelihoodLoss"
    graph.nodes.append(_node("loss__op", op, [scores, target], [loss], opset, reduction="mean"))
    score_shape = (graph.values.get(scores) or out_value).shape
    label_shape: tuple[Dim, ...] = (score_shape[0], *score_shape[2:]) if score_shape else ("batch",)
    graph.inputs.append(Value(target, "tensor", TensorProto.INT64, label_shape))
    _declare(graph, loss, out_value.elem_type or TensorProto.FLOAT)
    return AttachedLoss(loss, target, output_kind, output)


def _softmax_axis(node: Node) -> int:
    return int(node.attrs.get("axis", 1 if node.opset < 13 else -1))


def _rank(graph: Graph, name: str) -> int | None:
    value = graph.values.get(name)
    return None if value is None or value.shape is None else len(value.shape)


def _node(name: str, op: str, inputs: list[str], outputs: list[str], opset: int, **attrs: object) -> Node:
    return Node(name, op, "", inputs, outputs, [helper.make_attribute(k, v) for k, v in attrs.items()], opset=opset)


def _declare(graph: Graph, name: str, elem_type: int) -> None:
    graph.values[name] = Value(name, "tensor", elem_type, ())


def _unique(graph: Graph, base: str) -> str:
    return graph.unique_name(base)


# -- the same losses in NumPy, for evaluation on a model's outputs -------------------------------------------
def numpy_loss(kind: str, output_kind: str, output: np.ndarray, target: np.ndarray) -> float:
    """Mean loss of model ``output`` against ``target``, matching what training minimises."""
    out = output.astype(np.float64)
    if kind == "mse":
        return float(np.mean((out - target) ** 2))
    if output_kind == "logits":
        shifted = out - out.max(axis=1, keepdims=True)
        log_prob = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    elif output_kind == "probabilities":
        log_prob = np.log(np.maximum(out, 1e-30))
    else:
        log_prob = out
    picked = np.take_along_axis(log_prob, target.astype(np.int64)[:, None, ...], axis=1)
    return float(-picked.mean())


def accuracy(output: np.ndarray, labels: np.ndarray) -> float:
    """Share of samples whose highest-scoring class (axis 1) is the label."""
    return float(np.mean(output.argmax(axis=1) == labels))
