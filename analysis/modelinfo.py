"""What a model costs to run: FLOPs, MACs, parameters and bytes, per op and per op class.

Two ways in, one type out, so the planner treats both alike:

* ``analyse_onnx(path_or_model, batch_size)`` walks an ONNX graph after ``onnx.shape_inference``;
* ``cost_from_architecture(arch, batch_size)`` scales a catalog architecture's published figures.

Counting rules (forward pass, one sample set of ``batch_size``):

* Conv / ConvTranspose / Gemm / MatMul (and their quantised forms) cost ``2 × MACs``; a bias adds one FLOP per output
  element. ``macs`` counts only these ops, which is what architecture tables quote as "MACs" or "mult-adds".
* Recurrent layers (LSTM, GRU, RNN) are matrix products too: each step multiplies its input and the hidden state by
  every gate's weights, in each direction, plus a few FLOPs per gate element for the activations and state update.
* Elementwise ops cost one FLOP per output element (``Sum`` of n inputs: n-1; a few transcendental ops a small
  constant, see ``_ELEMENTWISE_FLOPS``).
* Normalisation: Layer/Group/Instance normalisation about 5–8 per element. Local response normalisation (``lrn``,
  AlexNet/GoogLeNet) has its own class: a window sum over ``size`` channels and a power per element
  (2·size + 8 FLOPs), and implementations run it one to two orders of magnitude slower per element than LayerNorm.
  BatchNormalization at inference
  is a per-channel scale and shift (2 per element) and is classed as elementwise: optimising runtimes fold it into
  the preceding convolution, and it costs what an elementwise pass costs where they do not.
* Pooling: kernel size per output element; global pooling one per input element.
* Data movement (Reshape, Transpose, Concat, Gather…) costs no FLOPs but moves bytes; reductions one per input element.

Two classes are refined by shape, because they cost differently per FLOP from their op type's usual case:

* ``conv_dw``: depthwise(-like) convolutions (``group`` > 1 with at most ``DEPTHWISE_MAX_CHANNELS`` input channels per
  group, as in MobileNet and ShuffleNet): a few MACs per output element, so they are bound by memory, not compute;
* ``gemv``: matrix products with one row per sample (fully-connected layers on a vector per sample, as in MLPs and the
  classifier heads of CNNs): at small batches their cost is reading the weights, not the FLOPs.

A node whose inputs are all constant (initializers, ``Constant``, ``ConstantOfShape`` of a constant shape…) is treated
as folded: it costs nothing, and the floating-point constants that compute nodes read are the model's parameters.

This module imports neither ``runtime/`` nor the optimiser: the planner and the benchmarks both read it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Protocol

import onnx
from onnx import shape_inference
from pydantic import BaseModel, ConfigDict, Field

from analysis.shapeprop import propagate_shapes
from apperrors import SpecError

OpClass = Literal["conv", "conv_dw", "gemm", "gemv", "elementwise", "norm", "lrn", "pool", "other"]
OP_CLASSES: tuple[OpClass, ...] = ("conv", "conv_dw", "gemm", "gemv", "elementwise", "norm", "lrn", "pool", "other")
#: A grouped convolution with at most this many input channels per group is depthwise-like (class ``conv_dw``).
DEPTHWISE_MAX_CHANNELS = 4

#: Initializers with at most this many elements keep their values during shape inference (shape tensors, axes…);
#: larger ones are replaced by typed graph inputs so the proto handed to shape inference stays small.
_KEEP_VALUE_MAX_ELEMENTS = 4096


class OpCost(BaseModel):
    """One compute node's cost (for the batch the model was analysed at)."""

    model_config = ConfigDict(frozen=True)

    name: str
    op_type: str
    op_class: OpClass
    flops: float
    macs: float = 0.0
    #: Bytes of activations this node reads (excluding parameters) and writes.
    input_bytes: float = 0.0
    output_bytes: float = 0.0
    #: Bytes of parameters (weights, biases, norm statistics) this node reads.
    param_bytes: float = 0.0

    @property
    def bytes_moved(self) -> float:
        """Bytes a straightforward implementation reads and writes (the roofline's memory term)."""
        return self.input_bytes + self.output_bytes + self.param_bytes


class ClassCost(BaseModel):
    """Totals for one op class."""

    model_config = ConfigDict(frozen=True)

    count: int = 0
    flops: float = 0.0
    macs: float = 0.0
    bytes_moved: float = 0.0


class ModelCost(BaseModel):
    """A model's forward-pass cost at a batch size; the planner's view of "the model".

    Example::

        >>> cost = analyse_onnx("model.onnx", batch_size=8)          # doctest: +SKIP
        >>> round(cost.gmacs_per_sample, 2), cost.by_class["conv"].flops  # doctest: +SKIP
    """

    model_config = ConfigDict(frozen=True)

    #: The ONNX file path or ``architecture:<id>``.
    source: str
    derived_from: Literal["onnx", "architecture"]
    batch_size: int
    #: Forward FLOPs for the whole batch.
    flops: float
    #: Multiply-accumulates of the conv/gemm ops for the whole batch.
    macs: float
    params: int
    param_bytes: float
    #: Bytes of all intermediate outputs written in one forward pass of the batch (not the peak live set).
    activation_bytes: float
    #: Bytes all ops read and write (activations and parameters); the roofline's memory traffic.
    memory_bytes: float
    #: Graph input name -> concrete shape used (batch dimension included).
    input_shapes: dict[str, list[int]] = Field(default_factory=dict)
    by_class: dict[OpClass, ClassCost] = Field(default_factory=dict)
    ops: list[OpCost] = Field(default_factory=list)
    #: Nodes counted as 0 FLOPs because a shape they need stayed unresolved (also summed up in ``notes``).
    unresolved_nodes: list[str] = Field(default_factory=list)
    #: Things the analysis could not count exactly (unknown shapes, control flow, guessed dimensions).
    notes: list[str] = Field(default_factory=list)

    @property
    def gmacs_per_sample(self) -> float:
        return self.macs / self.batch_size / 1e9

    @property
    def gflops_per_sample(self) -> float:
        return self.flops / self.batch_size / 1e9

    @property
    def params_m(self) -> float:
        return self.params / 1e6

    @property
    def arithmetic_intensity(self) -> float:
        """FLOPs per byte moved (the roofline's x-axis)."""
        return self.flops / self.memory_bytes if self.memory_bytes else math.inf


# --------------------------------------------------------------------------------------------------------------------
# Op classification and FLOP rules
# --------------------------------------------------------------------------------------------------------------------

_CONV_OPS = {"Conv", "ConvTranspose", "ConvInteger", "QLinearConv", "DeformConv"}
_GEMM_OPS = {"Gemm", "MatMul", "MatMulInteger", "QLinearMatMul", "FusedMatMul", "Einsum"}
_NORM_FLOPS = {
    "LayerNormalization": 8.0,
    "SimplifiedLayerNormalization": 6.0,
    "SkipLayerNormalization": 9.0,
    "GroupNormalization": 8.0,
    "InstanceNormalization": 8.0,
    "MeanVarianceNormalization": 8.0,
    "LpNormalization": 3.0,
}
_POOL_OPS = {"MaxPool", "AveragePool", "LpPool", "GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool", "MaxRoiPool"}
#: FLOPs per output element; anything not listed here and not in another class is "other".
_ELEMENTWISE_FLOPS = {
    **dict.fromkeys(
        [
            "Add",
            "Sub",
            "Mul",
            "Div",
            "Neg",
            "Abs",
            "Relu",
            "Max",
            "Min",
            "Mean",
            "Sign",
            "Floor",
            "Ceil",
            "Round",
            "Reciprocal",
            "Mod",
            "Equal",
            "Less",
            "Greater",
            "LessOrEqual",
            "GreaterOrEqual",
            "And",
            "Or",
            "Xor",
            "Not",
            "Where",
            "Clip",
            "PRelu",
            "LeakyRelu",
            "ThresholdedRelu",
            "Identity",
            "Dropout",
            "Cast",
            "CastLike",
            "QuantizeLinear",
            "DequantizeLinear",
            "DynamicQuantizeLinear",
            "BitShift",
            "IsNaN",
            "IsInf",
            "Shrink",
        ],
        1.0,
    ),
    **dict.fromkeys(
        [
            "Sqrt",
            "Exp",
            "Log",
            "Pow",
            "Sigmoid",
            "HardSigmoid",
            "HardSwish",
            "Elu",
            "Selu",
            "Celu",
            "Softplus",
            "Softsign",
            "Erf",
            "Sin",
            "Cos",
            "Tan",
            "Asin",
            "Acos",
            "Atan",
            "Sinh",
            "Cosh",
            "Tanh",
            "Asinh",
            "Acosh",
            "Atanh",
            "Mish",
        ],
        4.0,
    ),
    **dict.fromkeys(["Gelu", "FastGelu", "BiasGelu", "QuickGelu"], 8.0),
    **dict.fromkeys(["Softmax", "LogSoftmax", "Hardmax"], 5.0),
    "Sum": 1.0,  # (n-1) per element, handled below
    "BiasAdd": 1.0,
    "BatchNormalization": 2.0,  # inference: a per-channel scale and shift
}
_REDUCE_OPS = {
    "ReduceSum",
    "ReduceMean",
    "ReduceMax",
    "ReduceMin",
    "ReduceProd",
    "ReduceL1",
    "ReduceL2",
    "ReduceLogSum",
    "ReduceLogSumExp",
    "ReduceSumSquare",
    "ArgMax",
    "ArgMin",
    "CumSum",
    "TopK",
}
#: Ops whose outputs differ per run even from constant inputs: never treated as folded (the runtime's
#: ``never_fold`` kernels but Dropout, which costs the identity it is at inference).
NONDETERMINISTIC_OPS = {
    "RandomNormal",
    "RandomUniform",
    "RandomNormalLike",
    "RandomUniformLike",
    "Multinomial",
    "Bernoulli",
}
_CONTROL_FLOW = {"If", "Loop", "Scan", "SequenceMap"}
#: Recurrent layers by their gates: each step multiplies the step's input and the hidden state by every gate's weights
#: (ONNX ``LSTM``: input, output, forget, cell; ``GRU``: update, reset, hidden; ``RNN``: one).
RECURRENT_GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}
#: FLOPs per gate element of a recurrent step besides its products: the gates' activations and the state update.
RECURRENT_GATE_FLOPS = 6.0


def op_class(op_type: str) -> OpClass:
    """The op class an ONNX op type belongs to (``other`` for data movement and anything unknown).

    By type alone: ``analyse_onnx`` refines ``conv`` to ``conv_dw`` and ``gemm`` to ``gemv`` from shapes
    (``refine_class``).
    """
    if op_type in _CONV_OPS:
        return "conv"
    if op_type in _GEMM_OPS or op_type in RECURRENT_GATES:
        return "gemm"
    if op_type == "LRN":
        return "lrn"
    if op_type in _NORM_FLOPS:
        return "norm"
    if op_type in _POOL_OPS:
        return "pool"
    if op_type in _ELEMENTWISE_FLOPS:
        return "elementwise"
    return "other"


Shape = tuple[int, ...]


def refine_class(node: onnx.NodeProto, klass: OpClass, shapes: Mapping[str, Shape], batch: int) -> OpClass:
    """``conv_dw`` for depthwise-like convolutions, ``gemv`` for one-row-per-sample matrix products, else ``klass``.

    ``batch``: the batch the shapes were inferred at (rows of a matrix product per sample = output rows / batch).
    """
    if klass == "conv" and node.op_type in ("Conv", "ConvInteger", "QLinearConv"):
        weight = shapes.get(node.input[3 if node.op_type == "QLinearConv" else 1])
        group = _attr(node, "group", 1)
        if weight is not None and len(weight) > 1 and isinstance(group, int) and group > 1:
            return "conv_dw" if weight[1] <= DEPTHWISE_MAX_CHANNELS else klass
    if klass == "gemm" and node.op_type != "Einsum" and node.output and node.output[0] in shapes:
        out = shapes[node.output[0]]
        rows = _numel(out[:-1]) if len(out) > 1 else 1
        if out and rows <= max(batch, 1):
            return "gemv"
    return klass


def _numel(shape: Shape) -> int:
    return math.prod(shape)


def _attr(node: onnx.NodeProto, name: str, default: object = None) -> object:
    for attribute in node.attribute:
        if attribute.name == name:
            return onnx.helper.get_attribute_value(attribute)
    return default


def _conv_macs(node: onnx.NodeProto, shapes: Mapping[str, Shape]) -> tuple[float, float]:
    """(MACs, bias FLOPs) of a Conv-like node; weight shape is (Cout, Cin/group, k...)."""
    weight_index = 3 if node.op_type == "QLinearConv" else 1
    weight, out = shapes[node.input[weight_index]], shapes[node.output[0]]
    per_output = _numel(weight[1:])  # Cin/group × kernel
    macs = float(_numel(out) * per_output)
    bias_index = 8 if node.op_type == "QLinearConv" else 2
    has_bias = len(node.input) > bias_index and node.input[bias_index] != ""
    return macs, float(_numel(out)) if has_bias else 0.0


def _conv_transpose_macs(node: onnx.NodeProto, shapes: Mapping[str, Shape]) -> tuple[float, float]:
    """ConvTranspose: every input element is scattered through (Cout/group × kernel) weights."""
    data, weight, out = shapes[node.input[0]], shapes[node.input[1]], shapes[node.output[0]]
    macs = float(_numel(data) * _numel(weight[1:]))
    has_bias = len(node.input) > 2 and node.input[2] != ""
    return macs, float(_numel(out)) if has_bias else 0.0


@dataclass(frozen=True)
class RecurrentShape:
    """A recurrent layer's extents: steps, batch, directions, input and hidden widths and gates."""

    steps: int
    batch: int
    directions: int
    inputs: int
    hidden: int
    gates: int


def recurrent_shape(node: onnx.NodeProto, shapes: Mapping[str, Shape]) -> RecurrentShape | None:
    """The extents of an ONNX LSTM, GRU or RNN node from its input ``X`` ([steps, batch, input], or [batch, steps,
    input] with ``layout`` 1) and weights ``W`` ([directions, gates x hidden, input]); None where unknown."""
    x, w = shapes.get(node.input[0]), shapes.get(node.input[1]) if len(node.input) > 1 else None
    gates = RECURRENT_GATES.get(node.op_type)
    if x is None or w is None or gates is None or len(x) != 3 or len(w) != 3:
        return None
    steps, batch = (x[1], x[0]) if _attr(node, "layout", 0) else (x[0], x[1])
    shape = RecurrentShape(int(steps), int(batch), int(w[0]), int(w[2]), int(w[1]) // gates, gates)
    if min(shape.steps, shape.batch, shape.directions, shape.inputs, shape.hidden) < 1:
        return None  # an empty or inconsistent layer: nothing to count
    return shape


def recurrent_macs(node: onnx.NodeProto, shapes: Mapping[str, Shape]) -> tuple[float, float]:
    """(MACs, gate elements) of a recurrent layer over its whole sequence: every step multiplies its input and the
    hidden state by each gate's weights, in each direction."""
    r = recurrent_shape(node, shapes)
    if r is None:
        return 0.0, 0.0
    gate_elements = float(r.steps * r.batch * r.directions * r.gates * r.hidden)
    return gate_elements * (r.inputs + r.hidden), gate_elements


def _gemm_macs(node: onnx.NodeProto, shapes: Mapping[str, Shape]) -> tuple[float, float]:
    """Gemm/MatMul: output elements × the contracted dimension."""
    out = shapes[node.output[0]]
    if node.op_type == "Gemm":
        a = shapes[node.input[0]]
        k = a[0] if _attr(node, "transA", 0) else a[-1]
        has_c = len(node.input) > 2 and node.input[2] != ""
        return float(_numel(out) * k), float(_numel(out)) if has_c else 0.0
    if node.op_type == "Einsum":
        # MACs = output elements × the extents of the letters summed away (those absent from the output).
        raw = _attr(node, "equation", b"")
        equation = raw.decode() if isinstance(raw, bytes) else str(raw)
        lhs, _, rhs = equation.replace(" ", "").partition("->")
        extents: dict[str, int] = {}
        for term, name in zip(lhs.split(","), node.input, strict=False):
            letters = term.replace("...", "")
            shape = shapes[name]
            for letter, extent in zip(letters, shape[len(shape) - len(letters) :], strict=False):
                extents[letter] = max(extents.get(letter, 1), extent)
        contracted = math.prod(v for k, v in extents.items() if k not in rhs)
        return float(_numel(out) * contracted), 0.0
    a = shapes[node.input[0]]
    k = a[-1] if a else 1
    return float(_numel(out) * k), 0.0


def _pool_flops(node: onnx.NodeProto, shapes: Mapping[str, Shape]) -> float:
    if node.op_type.startswith("Global"):
        return float(_numel(shapes[node.input[0]]))
    kernel = _attr(node, "kernel_shape")
    window = math.prod(int(k) for k in kernel) if isinstance(kernel, list | tuple) else 1
    return float(_numel(shapes[node.output[0]]) * window)


def _node_flops(node: onnx.NodeProto, klass: OpClass, shapes: Mapping[str, Shape]) -> tuple[float, float]:
    """(FLOPs, MACs) of one compute node whose shapes are all known."""
    out_elements = float(_numel(shapes[node.output[0]])) if node.output and node.output[0] in shapes else 0.0
    if klass in ("conv", "conv_dw"):
        macs, bias = (_conv_transpose_macs if node.op_type == "ConvTranspose" else _conv_macs)(node, shapes)
        return 2 * macs + bias, macs
    if node.op_type in RECURRENT_GATES:
        macs, gate_elements = recurrent_macs(node, shapes)
        return 2 * macs + RECURRENT_GATE_FLOPS * gate_elements, macs
    if klass in ("gemm", "gemv"):
        macs, bias = _gemm_macs(node, shapes)
        return 2 * macs + bias, macs
    if klass == "norm":
        return _NORM_FLOPS[node.op_type] * float(_numel(shapes[node.input[0]])), 0.0
    if klass == "lrn":
        size = _attr(node, "size", 5)
        per_element = 2.0 * (size if isinstance(size, int) else 5) + 8.0  # window sum, scale, power, divide
        return per_element * float(_numel(shapes[node.input[0]])), 0.0
    if klass == "pool":
        return _pool_flops(node, shapes), 0.0
    if klass == "elementwise":
        per_element = _ELEMENTWISE_FLOPS[node.op_type]
        if node.op_type in {"Sum", "Max", "Min", "Mean"}:
            per_element *= max(1, sum(1 for name in node.input if name) - 1)
        if node.op_type in {"Identity", "Dropout", "Cast", "CastLike"}:
            per_element = 0.0  # pure copies: bytes, no arithmetic
        return per_element * out_elements, 0.0
    if node.op_type in _REDUCE_OPS and node.input[0] in shapes:
        return float(_numel(shapes[node.input[0]])), 0.0
    return 0.0, 0.0


# --------------------------------------------------------------------------------------------------------------------
# Graph preparation: concrete input shapes, small proto, shape inference
# --------------------------------------------------------------------------------------------------------------------


def _load(path_or_model: str | Path | onnx.ModelProto) -> tuple[onnx.ModelProto, str]:
    if isinstance(path_or_model, onnx.ModelProto):
        return path_or_model, "<in-memory model>"
    path = Path(path_or_model)
    try:
        # Weights' values are never needed (only their shapes), so external data stays on disk.
        model = onnx.load(str(path), load_external_data=False)
    except FileNotFoundError:
        raise SpecError(f"{path}: ONNX model file not found") from None
    except Exception as error:  # protobuf raises DecodeError, RuntimeWarning, ValueError…: all mean "not ONNX"
        raise SpecError(f"{path}: not a readable ONNX model ({type(error).__name__}: {error})") from None
    if not model.graph.node:
        raise SpecError(f"{path}: not a readable ONNX model (the graph has no nodes)")
    return model, str(path)


def _tensor_type_shape(value: onnx.ValueInfoProto) -> list[int | str | None]:
    tensor_type = value.type.tensor_type
    if not tensor_type.HasField("shape"):
        return []
    return [d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in tensor_type.shape.dim]


def _shape_inference_model(
    model: onnx.ModelProto, batch_size: int | None, dims: Mapping[str, int], notes: list[str]
) -> tuple[onnx.ModelProto, dict[str, list[int]], float]:
    """A small copy of ``model`` with concrete input shapes, ready for shape inference.

    Returns the copy, the input shapes used, and the factor to scale batch-proportional figures by (≠ 1 only when the
    model has a fixed batch dimension different from ``batch_size``).
    """
    graph = model.graph
    initializer_names = {tensor.name for tensor in graph.initializer}
    true_inputs = [value for value in graph.input if value.name not in initializer_names]

    small = onnx.ModelProto()  # built field by field: copying ``model`` would copy its weights
    small.ir_version = model.ir_version
    small.opset_import.extend(model.opset_import)
    small.functions.extend(model.functions)
    small.graph.name = graph.name
    small.graph.node.extend(graph.node)
    small.graph.output.extend(graph.output)

    input_shapes: dict[str, list[int]] = {}
    scale = 1.0
    batch_fixed: int | None = None
    for position, value in enumerate(true_inputs):
        if not value.type.HasField("tensor_type") or not value.type.tensor_type.HasField("shape"):
            small.graph.input.append(value)
            notes.append(f"input '{value.name}' has no tensor shape; ops that depend on it are not counted")
            continue
        concrete: list[int] = []
        for axis, dim in enumerate(_tensor_type_shape(value)):
            if isinstance(dim, int) and dim > 0:
                if axis == 0 and position == 0:
                    batch_fixed = dim
                concrete.append(dim)
            elif isinstance(dim, str) and dim in dims:
                concrete.append(int(dims[dim]))
            elif axis == 0:
                concrete.append(batch_size or 1)
            else:
                concrete.append(1)
                notes.append(f"input '{value.name}' axis {axis} ('{dim or '?'}') is symbolic; assumed 1")
        new_input = onnx.helper.make_tensor_value_info(value.name, value.type.tensor_type.elem_type, concrete)
        small.graph.input.append(new_input)
        input_shapes[value.name] = concrete
    if batch_size is not None and batch_fixed is not None and batch_fixed != batch_size:
        scale = batch_size / batch_fixed
        notes.append(f"model has a fixed batch of {batch_fixed}; figures scaled linearly to batch {batch_size}")
        input_shapes = {name: [batch_size, *shape[1:]] if shape else shape for name, shape in input_shapes.items()}

    # Before IR version 4 an initializer is only visible to shape inference when it is also a graph input.
    declare_all = model.ir_version < 4
    for tensor in graph.initializer:
        keep_value = _numel(tuple(tensor.dims)) <= _KEEP_VALUE_MAX_ELEMENTS and not tensor.external_data
        if keep_value:
            small.graph.initializer.append(tensor)
        if declare_all or not keep_value:
            small.graph.input.append(
                onnx.helper.make_tensor_value_info(tensor.name, tensor.data_type, list(tensor.dims))
            )
    return small, input_shapes, scale


def _known_shapes(model: onnx.ModelProto) -> tuple[dict[str, Shape], dict[str, int]]:
    """Concrete shapes and element types of every tensor shape inference could resolve."""
    shapes: dict[str, Shape] = {}
    types: dict[str, int] = {}
    graph = model.graph
    for value in [*graph.input, *graph.value_info, *graph.output]:
        dims = _tensor_type_shape(value)
        types[value.name] = value.type.tensor_type.elem_type
        if value.type.tensor_type.HasField("shape") and all(isinstance(d, int) and d >= 0 for d in dims):
            shapes[value.name] = tuple(int(d) for d in dims)  # type: ignore[arg-type]
    for tensor in graph.initializer:
        shapes[tensor.name] = tuple(tensor.dims)
        types[tensor.name] = tensor.data_type
    return shapes, types


def inferred_shapes(small: onnx.ModelProto, source: str) -> tuple[dict[str, Shape], dict[str, int]]:
    """Shapes and element types after ONNX shape inference of ``small`` (``_shape_inference_model``'s copy), then
    the shapes it left open from folding the graph's shape arithmetic (``propagate_shapes``); ``SpecError`` naming
    ``source`` when inference fails."""
    try:
        inferred = shape_inference.infer_shapes(small, data_prop=True)
    except Exception as error:  # onnx raises InferenceError, ValidationError…
        first_line = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise SpecError(f"{source}: ONNX shape inference failed ({first_line})") from None
    shapes, types = _known_shapes(inferred)
    initializers = {tensor.name: tensor for tensor in small.graph.initializer}
    propagate_shapes(small, shapes, types, initializers, never_evaluated=NONDETERMINISTIC_OPS | _CONTROL_FLOW)
    return shapes, types


def _itemsize(elem_type: int) -> int:
    try:
        return int(onnx.helper.tensor_dtype_to_np_dtype(elem_type).itemsize)
    except (KeyError, TypeError, ValueError):
        return 0


_FLOAT_TYPES = {
    onnx.TensorProto.FLOAT,
    onnx.TensorProto.FLOAT16,
    onnx.TensorProto.BFLOAT16,
    onnx.TensorProto.DOUBLE,
}


def _constant_tensors(graph: onnx.GraphProto) -> set[str]:
    """Names of tensors known before the model runs (initializers and anything computed only from them)."""
    constant = {tensor.name for tensor in graph.initializer}
    for node in graph.node:
        if node.op_type in NONDETERMINISTIC_OPS or node.op_type in _CONTROL_FLOW:
            continue
        if all(name in constant for name in node.input if name):
            constant.update(name for name in node.output if name)
    return constant


# --------------------------------------------------------------------------------------------------------------------
# Public entry points
# --------------------------------------------------------------------------------------------------------------------


def analyse_onnx(
    path_or_model: str | Path | onnx.ModelProto,
    batch_size: int | None = None,
    dims: Mapping[str, int] | None = None,
    recorded: Mapping[str, tuple[Shape, int]] | None = None,
) -> ModelCost:
    """Per-op FLOPs, MACs, parameters and bytes of an ONNX model's forward pass.

    Symbolic batch dimensions (axis 0 of each graph input) become ``batch_size`` (1 if ``None``); other symbolic
    dimensions come from ``dims`` (``{"sequence": 128}``) or are taken as 1 with a note. A model with a fixed batch is
    analysed as it is and its batch-proportional figures scaled to ``batch_size``.

    Shapes come from ONNX shape inference, then from folding the graph's shape arithmetic
    (:func:`analysis.shapeprop.propagate_shapes`). ``recorded`` (tensor name -> (shape, ONNX element type), as a run
    of the model at ``batch_size`` records them) replaces both: the check that the resolved shapes are right.

    Raises ``SpecError`` (one line naming the file) when the file is missing or not a readable ONNX model.

    Example::

        >>> cost = analyse_onnx("resnet50.onnx", batch_size=32)  # doctest: +SKIP
        >>> f"{cost.gmacs_per_sample:.2f} GMACs, {cost.params_m:.1f} M params"  # doctest: +SKIP
        '3.87 GMACs, 25.6 M params'
    """
    if batch_size is not None and batch_size < 1:
        raise SpecError(f"batch_size: must be at least 1, got {batch_size}")
    model, source = _load(path_or_model)
    notes: list[str] = []
    small, input_shapes, scale = _shape_inference_model(model, batch_size, dims or {}, notes)
    if recorded is None:
        shapes, types = inferred_shapes(small, source)
    else:
        shapes = {t.name: tuple(t.dims) for t in model.graph.initializer} | {n: s for n, (s, _) in recorded.items()}
        types = {t.name: t.data_type for t in model.graph.initializer} | {n: t for n, (_, t) in recorded.items()}
    constant = _constant_tensors(model.graph)
    # the batch the shapes were inferred at (a fixed-batch model keeps its own): rows per sample of matrix products
    shape_batch = next((s[0] for n, s in input_shapes.items() if s), 1)
    shape_batch = max(1, round(shape_batch / scale))

    def nbytes(name: str) -> float:
        return float(_numel(shapes[name]) * _itemsize(types.get(name, 0))) if name in shapes else 0.0

    ops: list[OpCost] = []
    param_names: set[str] = set()
    unknown_shapes: list[str] = []
    for index, node in enumerate(model.graph.node):
        if all(name in constant for name in node.output if name) and node.output:
            continue  # folded at load time
        name = node.name or f"{node.op_type}_{index}"
        klass = op_class(node.op_type)
        if all(i in shapes for i in node.input[:2] if i):
            klass = refine_class(node, klass, shapes, shape_batch)
        params_read = [i for i in node.input if i and i in constant and types.get(i) in _FLOAT_TYPES]
        param_names.update(params_read)
        needed = [i for i in node.input if i] + [o for o in node.output[:1] if o]
        if node.op_type in _CONTROL_FLOW or node.domain not in ("", "ai.onnx", "com.microsoft"):
            notes.append(f"node '{name}' ({node.domain + '.' if node.domain else ''}{node.op_type}) not counted")
            flops, macs = 0.0, 0.0
        elif any(i not in shapes for i in needed):
            unknown_shapes.append(name)
            flops, macs = 0.0, 0.0
        else:
            flops, macs = _node_flops(node, klass, shapes)
        ops.append(
            OpCost(
                name=name,
                op_type=node.op_type,
                op_class=klass,
                flops=flops * scale,
                macs=macs * scale,
                input_bytes=sum(nbytes(i) for i in node.input if i and i not in constant) * scale,
                output_bytes=sum(nbytes(o) for o in node.output if o) * scale,
                param_bytes=sum(nbytes(i) for i in params_read),
            )
        )
    if unknown_shapes:
        shown = ", ".join(unknown_shapes[:5]) + (" …" if len(unknown_shapes) > 5 else "")
        notes.append(f"{len(unknown_shapes)} node(s) with unresolved shapes counted as 0 FLOPs: {shown}")

    params = sum(_numel(shapes[name]) for name in param_names if name in shapes)
    return _summarise(
        source=source,
        derived_from="onnx",
        batch_size=batch_size or next((s[0] for s in input_shapes.values() if s), 1),
        ops=ops,
        params=params,
        param_bytes=sum(nbytes(name) for name in param_names),
        input_shapes=input_shapes,
        notes=notes,
    ).model_copy(update={"unresolved_nodes": unknown_shapes})


def _summarise(
    *,
    source: str,
    derived_from: Literal["onnx", "architecture"],
    batch_size: int,
    ops: Iterable[OpCost],
    params: int,
    param_bytes: float,
    input_shapes: dict[str, list[int]],
    notes: list[str],
) -> ModelCost:
    op_list = list(ops)
    totals: dict[OpClass, dict[str, float]] = {
        klass: {"count": 0, "flops": 0.0, "macs": 0.0, "bytes_moved": 0.0} for klass in OP_CLASSES
    }
    for op in op_list:
        bucket = totals[op.op_class]
        bucket["count"] += 1
        bucket["flops"] += op.flops
        bucket["macs"] += op.macs
        bucket["bytes_moved"] += op.bytes_moved
    by_class = {
        klass: ClassCost(count=int(t["count"]), flops=t["flops"], macs=t["macs"], bytes_moved=t["bytes_moved"])
        for klass, t in totals.items()
    }
    return ModelCost(
        source=source,
        derived_from=derived_from,
        batch_size=batch_size,
        flops=sum(op.flops for op in op_list),
        macs=sum(op.macs for op in op_list),
        params=params,
        param_bytes=param_bytes,
        activation_bytes=sum(op.output_bytes for op in op_list),
        memory_bytes=sum(op.bytes_moved for op in op_list),
        input_shapes=input_shapes,
        by_class=by_class,
        ops=op_list,
        notes=notes,
    )


class PublishedArchitecture(Protocol):
    """The published figures of a named architecture (the catalog's ``Architecture`` has them)."""

    @property
    def id(self) -> str: ...
    @property
    def name(self) -> str: ...
    @property
    def task(self) -> str: ...
    @property
    def gmacs(self) -> float: ...
    @property
    def params_m(self) -> float: ...
    @property
    def activation_mbytes(self) -> float | None: ...
    @property
    def input_shape(self) -> list[int]: ...


def cost_from_architecture(arch: PublishedArchitecture, batch_size: int = 1) -> ModelCost:
    """The same ``ModelCost`` for a named catalog architecture, from its published MACs and parameters.

    All MACs are attributed to one op class (``conv`` for vision models, ``gemm`` otherwise): for the catalog's
    CNNs and transformers these carry well over 90% of the FLOPs. Parameters are taken as fp32. Memory traffic is
    each activation written once and read once plus the weights read once; without an activation estimate only the
    weights count (a note says so).
    """
    if batch_size < 1:
        raise SpecError(f"batch_size: must be at least 1, got {batch_size}")
    notes = [f"figures from the catalog entry '{arch.id}' (published MACs/params), not from a graph"]
    macs = arch.gmacs * 1e9 * batch_size
    params = round(arch.params_m * 1e6)
    param_bytes = params * 4.0
    if arch.activation_mbytes is None:
        activation_bytes = 0.0
        notes.append(f"'{arch.id}' has no activation estimate; memory traffic counts weights only")
    else:
        activation_bytes = arch.activation_mbytes * 1e6 * batch_size
    klass: OpClass = "conv" if arch.task == "vision" else "gemm"
    op = OpCost(
        name=arch.id,
        op_type=arch.name,
        op_class=klass,
        flops=2 * macs,
        macs=macs,
        input_bytes=activation_bytes,
        output_bytes=activation_bytes,
        param_bytes=param_bytes,
    )
    return _summarise(
        source=f"architecture:{arch.id}",
        derived_from="architecture",
        batch_size=batch_size,
        ops=[op],
        params=params,
        param_bytes=param_bytes,
        input_shapes={"input": [batch_size, *arch.input_shape]},
        notes=notes,
    )
