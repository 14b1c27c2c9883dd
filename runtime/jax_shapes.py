"""ONNX's shape and data-movement ops as JAX code (``Shape``, ``Reshape``, ``Gather``, ``Slice``, ``Concat``…),
registered into ``runtime.jax_ops.OPS``.

They keep static inputs static: ``Shape`` of a traced value is a NumPy vector (shapes are static under ``jax.jit``),
and an op whose inputs are all static computes with NumPy, so the subgraphs that compute a ``Reshape`` target from
the batch size fold to Python ints at trace time. A shape, axes or pads input that depends on the input *data* is
refused naming the node: XLA needs it static.
"""

from __future__ import annotations

import math
from typing import Any

import jax.numpy as jnp
import numpy as np
from onnx import numpy_helper

from runtime.jax_ops import JaxNode, is_static, op, static_ints, static_value, xp

# --- shapes and data movement ------------------------------------------------------------------------------------


@op("Shape")
def _shape(node: JaxNode, x: Any) -> Any:
    dims = np.array(np.shape(x), dtype=np.int64)
    start, end = node.get("start", 0), node.get("end")
    return dims[start:end]


@op("Size")
def _size(node: JaxNode, x: Any) -> Any:
    return np.array(math.prod(np.shape(x)), dtype=np.int64)


@op("Constant")
def _constant(node: JaxNode) -> Any:
    for key in ("value", "value_float", "value_floats", "value_int", "value_ints"):
        if key in node.attrs:
            value = node.attrs[key]
            return np.array(numpy_helper.to_array(value)) if key == "value" else np.array(value)
    raise node.fail("only value/value_float(s)/value_int(s) constants are supported")


@op("ConstantOfShape")
def _constant_of_shape(node: JaxNode, shape: Any) -> Any:
    value = node.attrs.get("value")
    fill = numpy_helper.to_array(value).reshape(-1) if value is not None else np.zeros(1, np.float32)
    return np.full(static_ints(node, shape, "shape"), fill[0], dtype=fill.dtype)


@op("Range")
def _range(node: JaxNode, start: Any, limit: Any, delta: Any) -> Any:
    first, last, step = (static_value(node, v, name).reshape(-1)[0]
                         for v, name in ((start, "start"), (limit, "limit"), (delta, "delta")))
    return np.arange(first, last, step).astype(np.asarray(first).dtype)


@op("Reshape")
def _reshape(node: JaxNode, x: Any, shape: Any = None) -> Any:
    dims = static_ints(node, shape if node.opset >= 5 else node.get("shape"), "the target shape")
    if not node.get("allowzero", 0):
        dims = [np.shape(x)[i] if d == 0 else d for i, d in enumerate(dims)]
    return x.reshape(dims)


@op("Flatten")
def _flatten(node: JaxNode, x: Any) -> Any:
    axis = node.get("axis", 1) % (np.ndim(x) + 1) if node.get("axis", 1) < 0 else node.get("axis", 1)
    shape = np.shape(x)
    return x.reshape((math.prod(shape[:axis]), math.prod(shape[axis:])))


@op("Transpose")
def _transpose(node: JaxNode, x: Any) -> Any:
    perm = node.get("perm")
    return xp(x).transpose(x, perm if perm is not None else tuple(reversed(range(np.ndim(x)))))


@op("Squeeze")
def _squeeze(node: JaxNode, x: Any, axes: Any = None) -> Any:
    wanted = node.get("axes") if node.opset < 13 else static_ints(node, axes, "axes")
    m = xp(x)
    if not wanted:
        return m.squeeze(x)
    return m.squeeze(x, axis=tuple(int(a) % np.ndim(x) for a in wanted))


@op("Unsqueeze")
def _unsqueeze(node: JaxNode, x: Any, axes: Any = None) -> Any:
    wanted = node.get("axes") if node.opset < 13 else static_ints(node, axes, "axes")
    rank = np.ndim(x) + len(wanted)
    m = xp(x)
    for axis in sorted(int(a) % rank for a in wanted):
        x = m.expand_dims(x, axis)
    return x


@op("Concat")
def _concat(node: JaxNode, *xs: Any) -> Any:
    present = [x for x in xs if x is not None]
    return xp(*present).concatenate(present, axis=node.get("axis"))


@op("Split")
def _split(node: JaxNode, x: Any, split: Any = None) -> Any:
    axis = node.get("axis", 0) % np.ndim(x)
    sizes = node.get("split") if node.opset < 13 else static_ints(node, split, "split")
    if not sizes:
        length, parts = np.shape(x)[axis], node.outputs
        chunk = -(-length // parts)
        sizes = [min(chunk, length - i * chunk) for i in range(parts)]
    offsets = np.cumsum(sizes)[:-1].tolist()
    return tuple(xp(x).split(x, offsets, axis=axis))


@op("Slice")
def _slice(node: JaxNode, x: Any, starts: Any = None, ends: Any = None, axes: Any = None, steps: Any = None) -> Any:
    if node.opset < 10:
        begin, end, which, step = node.get("starts"), node.get("ends"), node.get("axes"), None
    else:
        begin, end = static_ints(node, starts, "starts"), static_ints(node, ends, "ends")
        which, step = static_ints(node, axes, "axes") or None, static_ints(node, steps, "steps") or None
    which = list(which) if which else list(range(len(begin)))
    step = list(step) if step else [1] * len(begin)
    index = [slice(None)] * np.ndim(x)
    for axis, b, e, s in zip(which, begin, end, step, strict=True):
        length = np.shape(x)[axis]
        b, e = max(min(b, length), -length - 1), max(min(e, length), -length - 1)  # INT64_MAX/MIN ends
        index[int(axis) % np.ndim(x)] = slice(b, e, s)
    return x[tuple(index)]


@op("Gather")
def _gather(node: JaxNode, data: Any, indices: Any) -> Any:
    axis = node.get("axis", 0)
    m = xp(data, indices)
    if m is np:
        return np.take(data, np.asarray(indices), axis=axis)
    length = np.shape(data)[axis]
    indices = jnp.asarray(indices)
    if is_static(data):
        data = jnp.asarray(data)
    return jnp.take(data, jnp.where(indices < 0, indices + length, indices), axis=axis)


@op("GatherElements")
def _gather_elements(node: JaxNode, data: Any, indices: Any) -> Any:
    axis = node.get("axis", 0)
    length = np.shape(data)[axis]
    return xp(data, indices).take_along_axis(data, indices % length, axis=axis)


@op("Expand")
def _expand(node: JaxNode, x: Any, shape: Any) -> Any:
    dims = static_ints(node, shape, "the shape")
    target = np.broadcast_shapes(np.shape(x), tuple(dims))
    return xp(x).broadcast_to(x, target)


@op("Tile")
def _tile(node: JaxNode, x: Any, repeats: Any) -> Any:
    return xp(x).tile(x, static_ints(node, repeats, "repeats"))


@op("Trilu")
def _trilu(node: JaxNode, x: Any, k: Any = None) -> Any:
    shift = static_ints(node, k, "k")[0] if k is not None else 0
    m = xp(x)
    return m.triu(x, shift) if node.get("upper", 1) else m.tril(x, shift)
