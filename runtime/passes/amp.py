"""Automatic mixed precision: cast per op list, after MXNet's AMP (``mxnet/contrib/amp/lists/symbol_fp16.py``).

* ``LOW_PRECISION_OPS`` (Conv, Gemm, MatMul: the GEMM-bound ops tensor cores speed up) run in fp16 or bf16;
  their fp32 inputs, weights included, get a ``Cast`` in front. The weights themselves stay fp32 (master weights):
  the autodiff's Cast rule brings their gradients back to fp32.
* ``FP32_OPS`` (normalisations, means and sums, softmax, exp/log/pow, losses) run in fp32: low-precision inputs
  are cast up.
* ``WIDEST_TYPE_OPS`` (Add, Mul, Concat, ...) run in the widest type among their inputs.
* ``EITHER_OPS`` (Relu, pools, reshapes, ...) run in whatever type arrives.
* Any other op, and any op whose ONNX schema at the model's opset does not accept the low type (bf16 Conv needs
  opset 22), is treated as fp32: when unsure, keep what was there.

The pass only touches values it lowered itself, never a model's own fp16 tensors, and graph outputs keep their
declared type (a final Cast back). On CPUs without fast fp16/bf16 GEMM (NumPy has none) expect a slowdown: the
recipe is for GPUs and the planner's GPU routes.

Example::

    report = apply_amp(model.graph, "float16")   # model: runtime.ir.Model
    report.casts, report.low_nodes
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import onnx
from onnx import TensorProto, helper

from runtime.check import topological_order
from runtime.errors import ModelCheckError
from runtime.ir import Graph, Node, Value
from runtime.op_traits import EITHER_OPS, LOW_PRECISION_OPS, WIDEST_TYPE_OPS
from runtime.op_traits import FP32_OPS as FP32_OPS  # re-exported: named in the docstring, read by callers

# The four op classes are declared on the kernels (``Kernel.amp_class``) and derived in runtime.op_traits.

_LOW_TYPES = {"float16": TensorProto.FLOAT16, "bfloat16": TensorProto.BFLOAT16}


@dataclass
class AmpReport:
    """What the pass did: casts inserted, nodes that run low, and ops kept in fp32 because their schema refused."""

    low_type: int
    casts: int = 0
    low_nodes: list[str] = field(default_factory=list)
    fp32_nodes: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)


def low_type_of(name: str) -> int:
    """``"float16"``/``"fp16"`` or ``"bfloat16"``/``"bf16"`` to the ONNX element type."""
    key = {"fp16": "float16", "bf16": "bfloat16", "half": "float16"}.get(name, name)
    if key not in _LOW_TYPES:
        raise ModelCheckError(f"AMP low precision must be float16 or bfloat16, not {name!r}")
    return _LOW_TYPES[key]


def accepts(op_type: str, opset: int, elem_type: int, domain: str = "") -> bool:
    """Whether the op's schema at ``opset`` takes ``elem_type`` for its float inputs."""
    try:
        schema = onnx.defs.get_schema(op_type, max(opset, 1), domain)
    except onnx.defs.SchemaError:
        return False
    wanted = f"tensor({TensorProto.DataType.Name(elem_type).lower()})"
    return any(wanted in c.allowed_type_strs for c in schema.type_constraints)


def apply_amp(graph: Graph, low: str = "float16") -> AmpReport:
    """Insert the casts of the AMP recipe into ``graph`` (in place)."""
    low_type = low_type_of(low)
    report = AmpReport(low_type)
    opset = graph.opsets.get("", 1)
    if not accepts("Cast", opset, low_type):
        raise ModelCheckError(f"mixed precision with {low} needs Cast to accept it (opset {opset} is too old)")
    state = _State(graph, report, opset)
    new_nodes: list[Node] = []
    for node in topological_order(graph):
        new_nodes.extend(state.visit(node))
        new_nodes.append(node)
    graph.nodes = new_nodes
    graph.nodes.extend(state.restore_outputs())
    return report


def run(graph: Graph, ctx: object = None) -> int:
    """Pipeline-style entry (``(graph, ctx) -> rewrites``): fp16 AMP, returns the casts inserted."""
    return apply_amp(graph, "float16").casts


class _State:
    """Tracks every value's current element type and which values the pass lowered."""

    def __init__(self, graph: Graph, report: AmpReport, opset: int) -> None:
        self.graph = graph
        self.report = report
        self.opset = opset
        self.low = report.low_type
        self.types: dict[str, int] = {n: v.elem_type for n, v in graph.values.items() if v.kind == "tensor"}
        for value in graph.inputs:  # an input added without a value entry (a loss's target) is typed by its own
            if value.kind == "tensor" and value.elem_type:
                self.types.setdefault(value.name, value.elem_type)
        for name, arr in graph.initializers.items():
            if arr.dtype != object:
                self.types[name] = helper.np_dtype_to_tensor_dtype(arr.dtype)
        self.lowered: set[str] = set()
        self.casts: dict[tuple[str, int], str] = {}
        taken = set(graph.values) | set(graph.initializers) | set(graph.input_names)
        self.taken = taken | {o for n in graph.nodes for o in n.outputs} | {n.name for n in graph.nodes}

    def fresh(self, base: str) -> str:
        name, i = base, 0
        while name in self.taken:
            i += 1
            name = f"{base}_{i}"
        self.taken.add(name)
        return name

    def visit(self, node: Node) -> list[Node]:
        """Casts to put before ``node``; rewires its inputs and records its outputs' new types."""
        op = node.op_type if node.domain in ("", "ai.onnx") else ""
        fp32_in = [i for i, n in enumerate(node.inputs) if n and self.types.get(n) == TensorProto.FLOAT]
        low_in = [i for i, n in enumerate(node.inputs) if n in self.lowered]
        accepts_low = accepts(op, node.opset or self.opset, self.low) if op else False
        if op in LOW_PRECISION_OPS and accepts_low and (fp32_in or low_in):
            self.report.low_nodes.append(node.name)
            casts = self._cast_inputs(node, fp32_in, self.low)
            self._lower_outputs(node)
            return casts
        if op in LOW_PRECISION_OPS and not accepts_low:
            self.report.refused.append(node.name)
        if op in (WIDEST_TYPE_OPS | EITHER_OPS) and low_in and accepts_low:
            if fp32_in:  # mixed inputs: the widest type, fp32, wins
                return self._cast_inputs(node, low_in, TensorProto.FLOAT)
            self._lower_outputs(node)
            return []
        if low_in:
            if op in WIDEST_TYPE_OPS | EITHER_OPS and not accepts_low:
                self.report.refused.append(node.name)
            elif op not in LOW_PRECISION_OPS:
                self.report.fp32_nodes.append(node.name)
            return self._cast_inputs(node, low_in, TensorProto.FLOAT)
        return []

    def _cast_inputs(self, node: Node, indices: Iterable[int], to: int) -> list[Node]:
        made: list[Node] = []
        for i in indices:
            src = node.inputs[i]
            key = (src, to)
            if key not in self.casts:
                out = self.fresh(f"{src}__{'fp32' if to == TensorProto.FLOAT else 'low'}")
                cast = Node(
                    self.fresh(f"{out}__cast"),
                    "Cast",
                    "",
                    [src],
                    [out],
                    [helper.make_attribute("to", to)],
                    opset=self.opset,
                )
                made.append(cast)
                self.casts[key] = out
                self.types[out] = to
                old = self.graph.values.get(src)
                self.graph.values[out] = Value(out, "tensor", to, old.shape if old is not None else None)
                if to == self.low:
                    self.lowered.add(out)
                self.report.casts += 1
            node.inputs[i] = self.casts[key]
        return made

    def _lower_outputs(self, node: Node) -> None:
        for out in node.outputs:
            if out and self.types.get(out) == TensorProto.FLOAT:
                self.types[out] = self.low
                self.lowered.add(out)
                old = self.graph.values.get(out)
                self.graph.values[out] = Value(out, "tensor", self.low, old.shape if old is not None else None)

    def restore_outputs(self) -> list[Node]:
        """Graph outputs the pass lowered are renamed inside and cast back to fp32 under their own name."""
        made: list[Node] = []
        for value in self.graph.outputs:
            name = value.name
            if name not in self.lowered:
                continue
            inner = self.fresh(f"{name}__low")
            for node in self.graph.nodes:
                node.outputs = [inner if o == name else o for o in node.outputs]
                node.inputs = [inner if i == name else i for i in node.inputs]
            old = self.graph.values.pop(name)
            self.graph.values[inner] = Value(inner, "tensor", self.low, old.shape)
            self.graph.values[name] = Value(name, "tensor", TensorProto.FLOAT, old.shape)
            self.lowered.discard(name)
            self.lowered.add(inner)
            made.append(
                Node(
                    self.fresh(f"{name}__cast"),
                    "Cast",
                    "",
                    [inner],
                    [name],
                    [helper.make_attribute("to", TensorProto.FLOAT)],
                    opset=self.opset,
                )
            )
            self.report.casts += 1
        self.graph.outputs = [self.graph.values.get(v.name, v) for v in self.graph.outputs]
        return made
