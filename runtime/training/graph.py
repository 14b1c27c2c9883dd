"""Build the training graph of a model: forward in training mode + loss (+ AMP casts) + backward, in one IR graph.

Order matters: the loss is attached first so the AMP pass sees it (losses run in fp32); the AMP casts go in
before the training-mode rewrite, which swaps BatchNormalization for ``BatchNormTraining`` (batch statistics,
updated running statistics as outputs) and Dropout for ``TrainingDropout`` (mask from a fed seed); the autodiff
runs last. Parameters become graph inputs so every step feeds the current weights; the graph compiles with the
same ``compile_model`` as inference, with no graph passes so its ops stay as built.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import TensorProto, helper

from runtime.autodiff import NO_GRADIENT_OPS, GradientProgram, differentiate, has_rule
from runtime.autodiff.gradcheck import typed_model
from runtime.functions import ExpansionStats, expand_graph, local_function_table
from runtime.ir import Graph, Node, Value
from runtime.kernels.grad_base import GRAD_DOMAIN
from runtime.passes.amp import AmpReport, apply_amp
from runtime.training.config import TrainingError
from runtime.training.losses import AttachedLoss, attach_loss


@dataclass
class TrainingGraph:
    """The differentiated training graph and the names a trainer feeds and reads."""

    program: GradientProgram
    loss: AttachedLoss
    #: Model inputs fed with data (besides the target).
    data_inputs: list[str]
    #: Trainable initializers, in a fixed order, and their initial values.
    params: dict[str, np.ndarray]
    #: Running statistics: initializer -> output holding its updated value after a step.
    buffers: dict[str, str]
    buffer_values: dict[str, np.ndarray]
    #: Float initializers left untrained (frozen on request, no path to the loss, or 0-d constants).
    frozen: list[str]
    #: Input feeding the dropout masks' seed (None without Dropout).
    dropout_seed: str | None
    #: Output flag "every gradient is finite" (AMP only).
    finite_flag: str | None
    amp: AmpReport | None = None
    stats: dict[str, int] = field(default_factory=dict)

    def to_onnx(self) -> onnx.ModelProto:
        return self.program.to_onnx()


def build_training_graph(
    proto: onnx.ModelProto,
    *,
    loss: str = "cross_entropy",
    output: str | None = None,
    precision: str = "fp32",
    trainable: Sequence[str] | None = None,
) -> TrainingGraph:
    """Everything a training step runs, as one graph (see the module docstring for the order of the rewrites)."""
    model = typed_model(proto)
    graph = model.graph
    data_inputs = [v.name for v in graph.inputs if v.name not in graph.initializers]
    expand_graph(graph, local_function_table(proto), _differentiable_as_is, ExpansionStats())
    attached = attach_loss(graph, loss, output)
    amp = apply_amp(graph, {"fp16": "float16", "bf16": "bfloat16"}[precision]) if precision != "fp32" else None
    buffers, dropout_seed = _training_mode(graph)
    buffer_values = {name: graph.initializers[name] for name in buffers}
    candidates = _trainable(graph, set(buffers), trainable)
    extra = [attached.output, *buffers.values()]
    if attached.output != _scores(graph, attached):
        extra.append(_scores(graph, attached))
    program = differentiate(model, attached.loss, list(candidates), outputs=extra)
    params = {name: graph.initializers[name] for name in candidates if name in program.gradients}
    frozen = sorted(
        name
        for name, arr in graph.initializers.items()
        if arr.dtype.kind == "f" and name not in params and name not in buffers
    )
    _feed_buffers(program, buffer_values)
    finite = _add_finite_flag(program) if amp is not None else None
    stats = {"forward_nodes": len(graph.nodes), "backward_nodes": program.backward_nodes}
    return TrainingGraph(
        program, attached, data_inputs, params, buffers, buffer_values, frozen, dropout_seed, finite, amp, stats
    )


def _differentiable_as_is(node: Node) -> bool:
    """Nodes kept whole before differentiating: those with a gradient rule or no gradient at all."""
    return has_rule(node.op_type, node.domain) or node.op_type in NO_GRADIENT_OPS


def _scores(graph: Graph, attached: AttachedLoss) -> str:
    """The value the loss op reads (the logits when the model ends in Softmax)."""
    for node in graph.nodes:
        if attached.loss in node.outputs:
            return node.inputs[0]
    return attached.output


def _trainable(graph: Graph, buffers: set[str], requested: Sequence[str] | None) -> list[str]:
    floats = [n for n, a in graph.initializers.items() if a.dtype.kind == "f" and n not in buffers]
    if requested is None:
        return [n for n in floats if graph.initializers[n].ndim > 0]
    unknown = [n for n in requested if n not in floats]
    if unknown:
        raise TrainingError(
            f"trainable: {unknown[0]!r} is not a float initializer of the model (running statistics excluded)"
        )
    return list(requested)


def _training_mode(graph: Graph) -> tuple[dict[str, str], str | None]:
    """Swap BatchNormalization and Dropout for their training forms; return buffers and the dropout seed input."""
    buffers: dict[str, str] = {}
    seed: str | None = None
    nodes: list[Node] = []
    for index, node in enumerate(graph.nodes):
        if node.domain == "" and node.op_type == "BatchNormalization":
            nodes.append(_batch_norm_training(graph, node, buffers))
        elif node.domain == "" and node.op_type == "Dropout":
            if seed is None:
                seed = graph.unique_name("dropout_seed")
                graph.inputs.append(Value(seed, "tensor", TensorProto.INT64, ()))
                graph.values[seed] = graph.inputs[-1]
            nodes.append(_dropout_training(graph, node, seed, index))
        else:
            nodes.append(node)
    graph.nodes = nodes
    return buffers, seed


def _batch_norm_training(graph: Graph, node: Node, buffers: dict[str, str]) -> Node:
    x, scale, bias, mean, var = node.inputs[:5]
    for stat in (mean, var):
        if stat not in graph.initializers:
            raise TrainingError(f"{node.label()}: running statistic {stat!r} must be an initializer to be trained")
        if stat in buffers:
            raise TrainingError(f"{node.label()}: running statistic {stat!r} is shared with another BatchNorm")
    used_stats = [o for o in node.outputs[1:] if o]
    if used_stats:
        raise TrainingError(f"{node.label()}: training a BatchNormalization that outputs {used_stats} is not supported")
    names = [
        graph.unique_name(f"{base}__train")
        for base in (mean, var, f"{node.name}.saved_mean", f"{node.name}.saved_inv_std")
    ]
    channel_shape = tuple(int(d) for d in graph.initializers[mean].shape)
    for name in names:
        graph.values[name] = Value(name, "tensor", TensorProto.FLOAT, channel_shape)
    buffers[mean], buffers[var] = names[0], names[1]
    attrs = [
        helper.make_attribute("epsilon", float(node.attrs.get("epsilon", 1e-5))),
        helper.make_attribute("momentum", float(node.attrs.get("momentum", 0.9))),
    ]
    return Node(
        node.name,
        "BatchNormTraining",
        GRAD_DOMAIN,
        [x, scale, bias, mean, var],
        [node.outputs[0], *names],
        attrs,
        opset=1,
    )


def _dropout_training(graph: Graph, node: Node, seed: str, salt: int) -> Node:
    ratio = float(node.attrs.get("ratio", 0.5))
    if len(node.inputs) > 1 and node.inputs[1]:
        value = graph.initializers.get(node.inputs[1])
        if value is None:
            raise TrainingError(f"{node.label()}: the dropout ratio must be a constant to train")
        ratio = float(value)
    mask = node.outputs[1] if len(node.outputs) > 1 and node.outputs[1] else graph.unique_name(f"{node.name}.mask")
    graph.values[mask] = Value(mask, "tensor", TensorProto.BOOL, None)
    attrs = [helper.make_attribute("ratio", ratio), helper.make_attribute("salt", salt)]
    return Node(
        node.name, "TrainingDropout", GRAD_DOMAIN, [node.inputs[0], seed], [node.outputs[0], mask], attrs, opset=1
    )


def _feed_buffers(program: GradientProgram, buffers: dict[str, np.ndarray]) -> None:
    """Running statistics become inputs (defaulting to their initial values): each step feeds the latest."""
    graph = program.model.graph
    declared = set(graph.input_names)
    for name, arr in buffers.items():
        if name not in declared:
            value = Value(name, "tensor", helper.np_dtype_to_tensor_dtype(arr.dtype), tuple(arr.shape))
            graph.inputs.append(value)
            graph.values[name] = value


def _add_finite_flag(program: GradientProgram) -> str:
    """Append ``IsAllFinite(all gradients)`` as an output (the dynamic loss scaler reads it)."""
    graph = program.model.graph
    flag = graph.unique_name("gradients_finite")
    graph.nodes.append(
        Node(
            graph.unique_name("gradients_finite__check"),
            "IsAllFinite",
            GRAD_DOMAIN,
            list(program.gradients.values()),
            [flag],
            opset=1,
        )
    )
    value = Value(flag, "tensor", TensorProto.BOOL, ())
    graph.values[flag] = value
    graph.outputs.append(value)
    return flag
