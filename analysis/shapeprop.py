"""Shapes the ONNX shape inference leaves open, resolved by folding the graph's shape arithmetic.

PyTorch's exporter writes a tensor's shape as arithmetic on ``Shape``: ``Shape -> Gather -> Div -> Cast -> Unsqueeze
-> Concat -> Reshape``, ``chunk`` as ``Slice`` with ends computed from ``Shape``, ``Split`` with computed sizes,
masks from ``Range``/``ConstantOfShape``/``Expand``. ``onnx.shape_inference`` (even with ``data_prop``) propagates
only part of that arithmetic, and every tensor after the first unresolved ``Reshape`` loses its shape: a transformer
block's matrix products then count 0 FLOPs.

``propagate_shapes`` walks the nodes once, in order, over two maps: tensor name -> concrete shape, and tensor name ->
value for small tensors (shape vectors, scalars, axes). A node whose inputs all have values is evaluated (NumPy for
the ops the exporters use, onnx's reference evaluator for the rest); a node with an open output shape gets it from
the node's own ONNX shape-inference rule, fed the values known so far. The model's batch and other dimensions are
concrete by then (``modelinfo`` fixes the graph inputs' shapes first), so every value is a plain number.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from collections.abc import Set as AbstractSet

import numpy as np
import onnx
from onnx import numpy_helper, shape_inference

Shape = tuple[int, ...]
#: Tensors with at most this many elements keep their values (shape vectors, scalars, axes, small index tables).
VALUE_MAX_ELEMENTS = 4096


def _attrs(node: onnx.NodeProto) -> dict[str, object]:
    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


def _ints(value: np.ndarray) -> list[int]:
    return [int(v) for v in np.asarray(value).reshape(-1)]


def _slice(data: np.ndarray, starts: np.ndarray, ends: np.ndarray, *rest: np.ndarray) -> np.ndarray:
    axes = _ints(rest[0]) if rest and rest[0] is not None else list(range(len(_ints(starts))))
    steps = _ints(rest[1]) if len(rest) > 1 and rest[1] is not None else [1] * len(axes)
    index: list[slice] = [slice(None)] * data.ndim
    for axis, start, end, step in zip(axes, _ints(starts), _ints(ends), steps, strict=True):
        index[axis % data.ndim] = slice(start, end, step)  # NumPy clamps out-of-range bounds as ONNX does
    return data[tuple(index)]


def _reshape(data: np.ndarray, shape: np.ndarray, allowzero: int = 0) -> np.ndarray:
    dims = _ints(shape)
    if not allowzero:
        dims = [data.shape[i] if d == 0 else d for i, d in enumerate(dims)]
    return data.reshape(dims)


def _div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if np.issubdtype(a.dtype, np.integer):
        return np.trunc(a / b).astype(a.dtype)  # ONNX integer division truncates towards zero
    return np.asarray(a / b, dtype=a.dtype)


def _shape_of(node: onnx.NodeProto, shape: Shape) -> np.ndarray:
    attrs = _attrs(node)
    start, end = attrs.get("start", 0), attrs.get("end")
    dims = list(shape)[int(start) if isinstance(start, int) else 0 : int(end) if isinstance(end, int) else None]
    return np.array(dims, dtype=np.int64)


_Evaluator = Callable[[onnx.NodeProto, list[np.ndarray]], list[np.ndarray]]

#: NumPy forms of the ops exporters use for shape arithmetic (the rest go to onnx's reference evaluator).
_NUMPY_OPS: dict[str, _Evaluator] = {
    "Identity": lambda n, x: [x[0]],
    "Cast": lambda n, x: [
        x[0].astype(onnx.helper.tensor_dtype_to_np_dtype(int(_attrs(n)["to"])))  # type: ignore[call-overload]
    ],
    "Add": lambda n, x: [np.asarray(x[0] + x[1], dtype=x[0].dtype)],
    "Sub": lambda n, x: [np.asarray(x[0] - x[1], dtype=x[0].dtype)],
    "Mul": lambda n, x: [np.asarray(x[0] * x[1], dtype=x[0].dtype)],
    "Div": lambda n, x: [_div(x[0], x[1])],
    "Neg": lambda n, x: [-x[0]],
    "Equal": lambda n, x: [np.equal(x[0], x[1])],
    "Less": lambda n, x: [np.less(x[0], x[1])],
    "Greater": lambda n, x: [np.greater(x[0], x[1])],
    "Not": lambda n, x: [np.logical_not(x[0])],
    "Where": lambda n, x: [np.where(x[0], x[1], x[2])],
    "Max": lambda n, x: [np.maximum.reduce(x)],
    "Min": lambda n, x: [np.minimum.reduce(x)],
    "Gather": lambda n, x: [np.take(x[0], x[1], axis=int(_attrs(n).get("axis", 0)))],  # type: ignore[call-overload]
    "Unsqueeze": lambda n, x: [np.expand_dims(x[0], tuple(a % (x[0].ndim + len(x[1])) for a in _ints(x[1])))],
    "Squeeze": lambda n, x: [np.squeeze(x[0], tuple(_ints(x[1]))) if len(x) > 1 else np.squeeze(x[0])],
    "Concat": lambda n, x: [np.concatenate(x, axis=int(_attrs(n)["axis"]))],  # type: ignore[call-overload]
    "Slice": lambda n, x: [_slice(*x)],
    "Reshape": lambda n, x: [_reshape(x[0], x[1], int(_attrs(n).get("allowzero", 0)))],  # type: ignore[call-overload]
    "Range": lambda n, x: [np.arange(x[0].item(), x[1].item(), x[2].item()).astype(x[0].dtype)],
    "Expand": lambda n, x: [x[0] * np.ones(_ints(x[1]), dtype=x[0].dtype)],
}


def _evaluate(node: onnx.NodeProto, inputs: list[np.ndarray], opset: int) -> list[np.ndarray] | None:
    """The node's outputs from its input values, or ``None`` when it cannot be evaluated here."""
    try:
        numpy_op = _NUMPY_OPS.get(node.op_type) if node.domain in ("", "ai.onnx") else None
        if numpy_op is not None:
            return [np.asarray(v) for v in numpy_op(node, inputs)]
        from onnx.reference import ReferenceEvaluator

        feeds = dict(zip([name for name in node.input if name], inputs, strict=True))
        evaluator = ReferenceEvaluator(node, opsets={"": opset})
        return [np.asarray(v) for v in evaluator.run(None, feeds)]
    except Exception:  # an op the evaluators reject (unknown domain, bad attribute): its shapes stay open
        return None


def _constant_value(node: onnx.NodeProto) -> list[np.ndarray] | None:
    """A ``Constant`` node's value (dense forms only; a sparse constant stays unknown)."""
    attribute = node.attribute[0]
    if attribute.name == "value":
        return [numpy_helper.to_array(attribute.t)]
    dtypes = {"value_float": np.float32, "value_floats": np.float32, "value_int": np.int64, "value_ints": np.int64}
    if attribute.name in dtypes:
        return [np.array(onnx.helper.get_attribute_value(attribute), dtype=dtypes[attribute.name])]
    return None


def _output_too_large(node: onnx.NodeProto, inputs: list[np.ndarray]) -> bool:
    """Whether an op that grows its input (a fill, a broadcast, a range, a tile) would make a large tensor."""
    try:
        if node.op_type == "ConstantOfShape":
            return math.prod(_ints(inputs[0])) > VALUE_MAX_ELEMENTS
        if node.op_type == "Expand":
            return math.prod(np.broadcast_shapes(inputs[0].shape, tuple(_ints(inputs[1])))) > VALUE_MAX_ELEMENTS
        if node.op_type == "Range":
            start, limit, delta = (float(v) for v in inputs)
            return delta == 0 or (limit - start) / delta > VALUE_MAX_ELEMENTS
        if node.op_type == "Tile":
            return inputs[0].size * math.prod(_ints(inputs[1])) > VALUE_MAX_ELEMENTS
    except (ValueError, TypeError, IndexError):
        return True
    return False


def _tensor_type(elem_type: int, shape: Shape | None) -> onnx.TypeProto:
    return onnx.helper.make_tensor_type_proto(elem_type, list(shape) if shape is not None else None)


def _node_inferred_shapes(
    node: onnx.NodeProto,
    shapes: Mapping[str, Shape],
    types: Mapping[str, int],
    values: Mapping[str, np.ndarray],
    opset_imports: list[onnx.OperatorSetIdProto],
) -> dict[str, tuple[int, Shape | None]]:
    """Output name -> (element type, shape or None) from the node's ONNX inference rule, fed the known values."""
    version = next((o.version for o in opset_imports if o.domain == node.domain), None)
    if version is None:
        return {}
    try:
        schema = onnx.defs.get_schema(node.op_type, version, node.domain)
    except Exception:  # an op onnx does not define (a runtime's contrib op)
        return {}
    input_types = {name: _tensor_type(types[name], shapes.get(name)) for name in node.input if name and types.get(name)}
    if len(input_types) < sum(1 for name in node.input if name):
        return {}
    input_data = {name: numpy_helper.from_array(values[name], name) for name in node.input if name in values}
    try:
        outputs = shape_inference.infer_node_outputs(schema, node, input_types, input_data, None, opset_imports)
    except Exception:  # the rule needs something still unknown, or rejects the inputs
        return {}
    resolved: dict[str, tuple[int, Shape | None]] = {}
    for name, type_proto in outputs.items():
        tensor = type_proto.tensor_type
        dims = [d.dim_value if d.HasField("dim_value") else None for d in tensor.shape.dim]
        known = tensor.HasField("shape") and all(d is not None and d >= 0 for d in dims)
        resolved[name] = (tensor.elem_type, tuple(int(d) for d in dims if d is not None) if known else None)
    return resolved


def _fold(
    node: onnx.NodeProto,
    shapes: Mapping[str, Shape],
    values: Mapping[str, np.ndarray],
    opset: int,
    never_evaluated: AbstractSet[str],
) -> list[np.ndarray] | None:
    """The node's output values when they follow from known shapes and values, else ``None``."""
    inputs = [values.get(name) for name in node.input if name]
    try:
        if node.op_type == "Constant" and node.domain in ("", "ai.onnx") and node.attribute:
            return _constant_value(node)
        if node.op_type in ("Shape", "Size") and node.domain in ("", "ai.onnx") and node.input[0] in shapes:
            shape = shapes[node.input[0]]
            return [_shape_of(node, shape) if node.op_type == "Shape" else np.array(math.prod(shape), np.int64)]
        known = [value for value in inputs if value is not None]
        if node.op_type in never_evaluated or len(known) < len(inputs) or _output_too_large(node, known):
            return None
    except Exception:  # a malformed attribute or value: leave the outputs to shape inference
        return None
    return _evaluate(node, known, opset)


def propagate_shapes(
    model: onnx.ModelProto,
    shapes: dict[str, Shape],
    types: dict[str, int],
    initializers: Mapping[str, onnx.TensorProto],
    *,
    never_evaluated: AbstractSet[str],
) -> int:
    """Fill ``shapes`` and ``types`` in place for tensors whose shapes whole-graph inference left open; returns how
    many were added. ``initializers``: the small initializers whose values are known (shape vectors, axes...);
    ``never_evaluated``: op types whose values must not be computed here (random draws, control flow)."""
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 17)
    values: dict[str, np.ndarray] = {}
    for name, tensor in initializers.items():
        if math.prod(tensor.dims) <= VALUE_MAX_ELEMENTS:
            values[name] = numpy_helper.to_array(tensor)
    added = 0
    for node in model.graph.node:
        outputs = [name for name in node.output if name]
        folded = _fold(node, shapes, values, opset, never_evaluated)
        if folded is not None and len(folded) == len(outputs):
            for name, value in zip(outputs, folded, strict=True):
                try:
                    elem_type = int(onnx.helper.np_dtype_to_tensor_dtype(value.dtype))
                except (KeyError, TypeError, ValueError):  # a string or object tensor: not shape arithmetic
                    continue
                if value.size <= VALUE_MAX_ELEMENTS:
                    values[name] = value
                if name not in shapes:
                    shapes[name] = tuple(int(d) for d in value.shape)
                    added += 1
                types.setdefault(name, elem_type)
        if all(name in shapes for name in outputs):
            continue
        for name, (elem_type, inferred) in _node_inferred_shapes(
            node, shapes, types, values, list(model.opset_import)
        ).items():
            if elem_type:
                types.setdefault(name, elem_type)
            if inferred is not None and name not in shapes:
                shapes[name] = inferred
                added += 1
    return added
