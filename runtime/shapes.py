"""Shape and dtype inference: onnx's inference as the base, plus the runtime's own size arithmetic.

``infer_model`` runs onnx's strict inference (type checks and data propagation), so dtype mismatches and
impossible static shapes surface as ``ModelCheckError`` naming the node. onnx occasionally fails inside the body of
a function-defined op on a valid model; such nested failures are tolerated (inference is redone non-strictly and
the reason kept in the stats), because a false rejection is worse than a late, still-named kernel error.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx
from onnx import shape_inference

from runtime.errors import ModelCheckError

_OP_MENTION = re.compile(r"\(op_type:")


#: onnx's inference serialises the model, and protobuf caps a message at 2 GiB: above this size the large
#: initializers are handed to inference as typed graph inputs instead (their shapes still propagate).
INFERENCE_SIZE_LIMIT = 1 << 30
_LARGE_INITIALIZER = 1 << 16


def infer_model(proto: onnx.ModelProto, stats: dict[str, Any]) -> onnx.ModelProto:
    """Return ``proto`` annotated with inferred value types; raise ModelCheckError on a type/shape error."""
    if proto.ByteSize() > INFERENCE_SIZE_LIMIT:
        proto = without_large_initializers(proto)
        stats["inference_note"] = "large initializers given to inference as typed inputs"
    try:
        return shape_inference.infer_shapes(proto, check_type=True, strict_mode=True, data_prop=True)
    except shape_inference.InferenceError as exc:
        message = _clean_message(str(exc))
        if len(_OP_MENTION.findall(str(exc))) > 1:
            stats["inference_warning"] = f"strict inference failed inside a function body: {message}"
        else:
            raise ModelCheckError(message) from None
    except (ValueError, RuntimeError, MemoryError) as exc:  # protobuf too large, malformed subgraph, a huge shape
        raise ModelCheckError(f"shape/type inference failed: {_clean_message(str(exc))}") from None
    try:
        return shape_inference.infer_shapes(proto, check_type=False, strict_mode=False, data_prop=True)
    except Exception:  # non-strict inference should not fail; keep the model un-annotated if it does
        return proto


_NODE_MESSAGE = re.compile(r"\(op_type:([\w.]+)(?:, node name: ([^)]*))?\): (?:\[\w+\] )?(.*)$")


def without_large_initializers(proto: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of ``proto`` whose big initializers are replaced by graph inputs of the same type and shape."""
    graph = proto.graph
    light = onnx.ModelProto(ir_version=proto.ir_version, opset_import=proto.opset_import)
    light.functions.extend(proto.functions)
    light.graph.name = graph.name
    light.graph.node.extend(graph.node)
    light.graph.output.extend(graph.output)
    light.graph.value_info.extend(graph.value_info)
    light.graph.sparse_initializer.extend(graph.sparse_initializer)
    declared = {vi.name for vi in graph.input}
    light.graph.input.extend(graph.input)
    for init in graph.initializer:
        if len(init.raw_data) > _LARGE_INITIALIZER:
            if init.name not in declared:
                light.graph.input.append(onnx.helper.make_tensor_value_info(init.name, init.data_type, init.dims))
        else:
            light.graph.initializer.append(init)
    return light


def _clean_message(text: str) -> str:
    """onnx's ``[ShapeInferenceError] (op_type:Add, node name: add): msg`` -> ``node 'add' (Add): msg``."""
    text = " ".join(text.split())
    match = _NODE_MESSAGE.search(text)
    if match:
        op, name, rest = match.groups()
        text = f"node {name or '?'!r} ({op}): {rest}"
    return text if len(text) < 400 else text[:400] + "..."


def num_elements(shape: Sequence[int]) -> int:
    return int(math.prod(int(d) for d in shape))


def broadcast_shapes(*shapes: Sequence[int]) -> tuple[int, ...] | None:
    """NumPy broadcast of static shapes; ``None`` when incompatible."""
    try:
        return tuple(int(d) for d in np.broadcast_shapes(*[tuple(s) for s in shapes]))
    except ValueError:
        return None


def _ints(value: Any) -> list[int] | None:
    if value is None:
        return None
    arr = np.asarray(value)
    if arr.dtype.kind not in "iu" or arr.ndim > 1:
        return None
    return [int(v) for v in arr.reshape(-1)]


def estimate_output_elements(
    op_type: str,
    inputs: Sequence[Any],
    input_shapes: Sequence[tuple[int, ...] | None],
    attrs: dict[str, Any],
) -> int | None:
    """Elements of the (largest) output of a size-creating op from constant inputs, or None if unknown.

    ``inputs`` holds known constant values (arrays) or None; ``input_shapes`` static shapes or None.
    Covers the ops whose output size is set by *values* rather than input shapes, the usual way to ask
    for an absurd allocation. Values it cannot read (wrong types, odd ranks) give None: the kernel judges them.
    """
    try:
        return _estimate_output_elements(op_type, inputs, input_shapes, attrs)
    except (ValueError, TypeError, OverflowError, IndexError, ZeroDivisionError):
        return None


def _estimate_output_elements(
    op_type: str,
    inputs: Sequence[Any],
    input_shapes: Sequence[tuple[int, ...] | None],
    attrs: dict[str, Any],
) -> int | None:

    def shape_in(i: int) -> tuple[int, ...] | None:
        if i < len(inputs) and isinstance(inputs[i], np.ndarray):
            return tuple(inputs[i].shape)
        return input_shapes[i] if i < len(input_shapes) else None

    def value_in(i: int) -> list[int] | None:
        return _ints(inputs[i]) if i < len(inputs) else None

    if op_type == "ConstantOfShape":
        dims = value_in(0)
        return _checked_prod(dims)
    if op_type == "Expand":
        dims, x = value_in(1), shape_in(0)
        if dims is None or x is None:
            return None
        out = _broadcast_dims(list(x), dims)
        return _checked_prod(out)
    if op_type == "Tile":
        reps, x = value_in(1), shape_in(0)
        if reps is None or x is None or len(reps) != len(x):
            return None
        return _checked_prod([a * b for a, b in zip(x, reps, strict=True)])
    if op_type == "Range" and len(inputs) >= 3:
        vals = [np.asarray(v).reshape(-1) for v in inputs[:3] if isinstance(v, np.ndarray)]
        if len(vals) != 3 or any(v.size != 1 for v in vals):
            return None
        start, limit, delta = (float(v[0]) for v in vals)
        if delta == 0 or not all(math.isfinite(v) for v in (start, limit, delta)):
            return None
        return max(math.ceil((limit - start) / delta), 0)
    if op_type in ("Resize", "Upsample"):
        x = shape_in(0)
        if x is None:
            return None
        sizes = value_in(3) if op_type == "Resize" and len(inputs) > 3 else None
        if sizes:
            return _checked_prod(sizes) if len(sizes) == len(x) else None
        scales_idx = 2 if op_type == "Resize" else 1
        scales = inputs[scales_idx] if scales_idx < len(inputs) else None
        if scales is None and op_type == "Upsample":
            scales = attrs.get("scales")
        if scales is None:
            return None
        sc = np.asarray(scales, dtype=np.float64).reshape(-1)
        if sc.size != len(x) or not np.all(np.isfinite(sc)):
            return None
        return _checked_prod([math.floor(d * s) for d, s in zip(x, sc, strict=True)])
    if op_type == "Pad":
        x = shape_in(0)
        pads = value_in(1) if len(inputs) > 1 else _ints(attrs.get("pads"))
        if x is None or pads is None or len(pads) % 2:
            return None
        axes = value_in(3) if len(inputs) > 3 and inputs[3] is not None else None
        axes = [a % len(x) for a in axes] if axes is not None and x else list(range(len(x)))
        if len(pads) != 2 * len(axes):
            return None
        out = list(x)
        for i, axis in enumerate(axes):
            out[axis] += pads[i] + pads[i + len(axes)]
        return _checked_prod(out)
    if op_type == "OneHot":
        indices, depth = shape_in(0), inputs[1] if len(inputs) > 1 else None
        if indices is None or not isinstance(depth, np.ndarray) or depth.size != 1:
            return None
        value = float(depth.reshape(-1)[0])
        if not math.isfinite(value):
            return None
        return _checked_prod([*indices, max(int(value), 0)])
    return None


def _broadcast_dims(x: list[int], target: list[int]) -> list[int]:
    rank = max(len(x), len(target))
    a = [1] * (rank - len(x)) + x
    b = [1] * (rank - len(target)) + target
    return [q if p == 1 else p for p, q in zip(a, b, strict=True)]


def _checked_prod(dims: Sequence[int] | None) -> int | None:
    if dims is None:
        return None
    if any(d < 0 for d in dims):
        return None
    return num_elements(dims)
