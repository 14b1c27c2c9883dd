"""Reverse-mode differentiation of an IR graph into one forward + backward graph.

``differentiate(model, loss, wrt)`` walks the forward nodes in reverse topological order, asks each node's rule for
its input gradients, sums gradients of values read more than once, and returns a new model whose outputs are the
loss and ``d loss / d w`` for every ``w`` in ``wrt``. The seed ``d loss / d loss`` is an input (default name
``loss_grad``) so a trainer can feed a loss scale. The result is plain IR: it compiles and runs with the same
executor and kernels as inference (backward ops without an ONNX equivalent live in ``ai.appopt.training``).

Example::

    program = differentiate(Model.from_onnx(proto), loss="loss", wrt=["W", "B"])
    exe = compile_model(program.to_onnx(), passes=())
    out = exe.run({"x": x, "labels": y, "loss_grad": np.float32(1)})   # out["W__grad"], ...
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import onnx

from runtime.autodiff import rules as _rules  # noqa: F401  (registers every rule)
from runtime.autodiff.context import GradContext
from runtime.autodiff.registry import NO_GRADIENT_OPS, rule_for
from runtime.check import topological_order
from runtime.errors import ModelCheckError, RuntimeModelError
from runtime.ir import Graph, Model, Node, Value
from runtime.kernels.grad_base import GRAD_DOMAIN

_FLOAT_TYPES = frozenset(
    {
        onnx.TensorProto.FLOAT,
        onnx.TensorProto.DOUBLE,
        onnx.TensorProto.FLOAT16,
        onnx.TensorProto.BFLOAT16,
    }
)


@dataclass
class GradientProgram:
    """A differentiated model and how to read it."""

    model: Model
    loss: str
    #: The input that seeds the backward pass (``d loss / d loss``; feed 1, or the loss scale).
    seed: str
    #: ``wrt`` name -> output name of its gradient.
    gradients: dict[str, str]
    #: ``wrt`` names the loss does not depend on (no gradient output).
    unreachable: list[str] = field(default_factory=list)
    #: Backward nodes emitted.
    backward_nodes: int = 0

    def to_onnx(self) -> onnx.ModelProto:
        return self.model.to_onnx()


def differentiate(
    model: Model,
    loss: str,
    wrt: Sequence[str],
    *,
    outputs: Sequence[str] = (),
    seed_name: str = "loss_grad",
) -> GradientProgram:
    """Append the backward pass of ``loss`` with respect to ``wrt`` (graph inputs or initializers).

    Initializers in ``wrt`` become graph inputs that default to their initial value, so a trainer can feed the
    current weights. ``outputs`` are forward values to keep as extra outputs (e.g. logits for accuracy).
    """
    src = model.graph
    graph = Graph(
        name=src.name,
        inputs=list(src.inputs),
        outputs=[],
        initializers=dict(src.initializers),
        nodes=list(src.nodes),
        values=dict(src.values),
        opsets={**src.opsets, GRAD_DOMAIN: 1},
    )
    _check_names(graph, loss, wrt)
    order = topological_order(graph)
    requires = _forward_reach(order, set(wrt), graph)
    ctx = GradContext(graph)
    seed = ctx.fresh(seed_name)
    pending: dict[str, list[str]] = {loss: [seed]}

    def total(name: str) -> str | None:
        parts = pending.get(name)
        if not parts:
            return None
        if len(parts) > 1:
            ctx.node = None
            parts[:] = [ctx.emit("Sum", parts)[0]]
        return parts[0]

    for node in reversed(order):
        out_grads = [total(o) if o else None for o in node.outputs]
        if all(g is None for g in out_grads):
            continue
        needs = tuple(bool(i) and i in requires for i in node.inputs)
        if not any(needs):
            continue
        ctx.node, ctx.needs = node, needs
        in_grads = list(rule_for(node)(ctx, node, out_grads))
        if len(in_grads) < len(node.inputs):
            in_grads += [None] * (len(node.inputs) - len(in_grads))
        for name, grad, need in zip(node.inputs, in_grads, needs, strict=False):
            if grad and need:
                pending.setdefault(name, []).append(grad)

    ctx.node = None
    gradients: dict[str, str] = {}
    unreachable: list[str] = []
    grad_values: list[Value] = []
    for name in wrt:
        grad = total(name)
        if grad is None:
            unreachable.append(name)
            continue
        out_name = ctx.fresh(f"{name}__grad")
        ctx.nodes.append(
            Node(ctx.fresh(f"{name}__grad_out"), "Identity", "", [grad], [out_name], opset=graph.opsets[""])
        )
        gradients[name] = out_name
        grad_values.append(Value(out_name, "tensor", ctx.elem_type(name), ctx.shape(name)))

    loss_value = graph.values.get(loss) or Value(loss, "tensor", ctx.elem_type(loss), None)
    seed_value = Value(seed, "tensor", loss_value.elem_type or onnx.TensorProto.FLOAT, loss_value.shape)
    graph.nodes = list(order) + ctx.nodes
    declared = set(graph.input_names)
    graph.inputs += [_input_value(graph, w) for w in wrt if w not in declared and w in graph.initializers]
    graph.inputs.append(seed_value)
    graph.values[seed] = seed_value
    keep = [loss, *(o for o in outputs if o != loss)]
    graph.outputs = [graph.values.get(o) or Value(o, "tensor", ctx.elem_type(o), None) for o in keep] + grad_values
    for v in grad_values:
        graph.values[v.name] = v
    new_model = Model(
        graph,
        model.ir_version,
        {**model.opsets, GRAD_DOMAIN: 1},
        model.producer_name,
        dict(model.metadata),
    )
    return GradientProgram(new_model, loss, seed, gradients, unreachable, len(ctx.nodes))


def _check_names(graph: Graph, loss: str, wrt: Sequence[str]) -> None:
    produced = {o for n in graph.nodes for o in n.outputs if o}
    if loss not in produced:
        raise ModelCheckError(f"loss {loss!r} is not produced by any node of graph {graph.name!r}")
    known = produced | set(graph.initializers) | set(graph.input_names)
    for name in wrt:
        if name not in set(graph.initializers) | set(graph.input_names):
            where = "a computed value" if name in known else "not in the graph"
            raise ModelCheckError(
                f"cannot differentiate with respect to {name!r}: {where} (give an initializer or input)"
            )


def _is_float(graph: Graph, name: str) -> bool:
    value = graph.values.get(name)
    if value is None or not value.elem_type:
        arr = graph.initializers.get(name)
        return arr is None or arr.dtype.kind == "f"
    return value.elem_type in _FLOAT_TYPES


def _forward_reach(order: list[Node], roots: set[str], graph: Graph) -> set[str]:
    """Values that depend differentiably on ``roots``."""
    reach = set(roots)
    for node in order:
        if node.op_type in NO_GRADIENT_OPS and node.domain in ("", "ai.onnx"):
            continue
        if any(i in reach for i in node.inputs if i):
            reach.update(o for o in node.outputs if o and _is_float(graph, o))
    return reach


def _input_value(graph: Graph, name: str) -> Value:
    value = graph.values.get(name)
    if value is not None and value.kind == "tensor" and value.shape is not None:
        return value
    arr = graph.initializers[name]
    try:
        elem = onnx.helper.np_dtype_to_tensor_dtype(arr.dtype)
    except (KeyError, TypeError, ValueError) as exc:
        raise RuntimeModelError(f"initializer {name!r} has dtype {arr.dtype}, which cannot be trained") from exc
    return Value(name, "tensor", elem, tuple(int(d) for d in arr.shape))
