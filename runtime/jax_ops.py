"""ONNX ops as JAX code, for ``runtime.engine_jax``: elementwise, activations, reductions and the shape ops.

Each op is a function ``fn(node, *inputs)`` registered under its ONNX op type in ``OPS``; it returns one value or a
tuple (in output order). A value is either *static*, a NumPy array known when the graph is traced (initializers,
``Shape`` of an input, anything computed only from those), or a JAX value (a tracer under ``jax.jit``). An op whose
inputs are all static computes with NumPy, so shape-computing subgraphs (``Shape -> Gather -> Concat -> Reshape``)
fold into Python ints at trace time and every shape XLA sees is static; otherwise it computes with ``jax.numpy``.
The shape ops live in ``runtime.jax_shapes``, the neural-network ops (convolution, pooling, normalisation, resize,
recurrences) in ``runtime.jax_nn``; both register into the same table (``load_ops`` imports them).

jax is imported here at module level: only ``runtime.engine_jax`` imports this module, and only once jax is known
to be installed.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from onnx import helper

from runtime.errors import RuntimeModelError


class UnsupportedJaxOp(RuntimeModelError):
    """The graph uses an op (or an attribute value) this translator does not map to JAX; names op and node."""


@dataclass(frozen=True)
class JaxNode:
    """What an op function reads of its node: type, name, attributes (decoded), opset, and the outputs asked for."""

    op_type: str
    name: str
    attrs: dict[str, Any] = field(default_factory=dict)
    opset: int = 17
    outputs: int = 1

    def fail(self, what: str) -> UnsupportedJaxOp:
        return UnsupportedJaxOp(f"jax: {self.op_type} node {self.name or '?'}: {what}")

    def get(self, key: str, default: Any = None) -> Any:
        value = self.attrs.get(key, default)
        return value.decode() if isinstance(value, bytes) else value


def node_of(proto: Any, opset: int) -> JaxNode:
    attrs = {a.name: helper.get_attribute_value(a) for a in proto.attribute}
    return JaxNode(proto.op_type, proto.name, attrs, opset, len(proto.output))


OpFn = Callable[..., Any]
#: ONNX op type -> its JAX function (``load_ops`` adds the shape and neural-network ones).
OPS: dict[str, OpFn] = {}


#: op type -> ``pack(node, weight)``: the op's constant weight (input 1) put once, at load, in the layout XLA's
#: kernel reads, as (tag, array), or None to leave it. Weights are arguments of the compiled function, so a
#: transpose XLA inserts for them would otherwise run on every call. The op sees ``node.attrs["_packed"] == tag``.
PackFn = Callable[["JaxNode", np.ndarray], "tuple[str, np.ndarray] | None"]
PACKERS: dict[str, PackFn] = {}


def op(*names: str) -> Callable[[OpFn], OpFn]:
    def register(fn: OpFn) -> OpFn:
        for name in names:
            OPS[name] = fn
        return fn

    return register


def is_static(value: Any) -> bool:
    """Known at trace time (a NumPy array or scalar), as opposed to a JAX value."""
    return isinstance(value, (np.ndarray, np.generic, int, float, bool))


def xp(*values: Any) -> Any:
    """NumPy when every given value is static (shape arithmetic stays in Python), else ``jax.numpy``."""
    return np if all(is_static(v) for v in values if v is not None) else jnp


def static_ints(node: JaxNode, value: Any, what: str) -> list[int]:
    """A static integer vector (a shape, axes, pads) as Python ints; the op fails when it is computed from data."""
    if value is None:
        return []
    if not is_static(value):
        raise node.fail(f"{what} is computed from the model's input data at run time; XLA needs it static")
    return [int(v) for v in np.asarray(value).reshape(-1)]


def static_value(node: JaxNode, value: Any, what: str) -> np.ndarray:
    if not is_static(value):
        raise node.fail(f"{what} is computed from the model's input data at run time; XLA needs it static")
    return np.asarray(value)


#: ONNX tensor dtype -> NumPy dtype (jax maps 64-bit types to 32-bit ones unless x64 is on).
def onnx_dtype(code: int) -> np.dtype[Any]:
    return np.dtype(helper.tensor_dtype_to_np_dtype(code))


# --- elementwise -------------------------------------------------------------------------------------------------

_BINARY: dict[str, Callable[[Any], Callable[[Any, Any], Any]]] = {
    "Add": lambda m: m.add,
    "Sub": lambda m: m.subtract,
    "Mul": lambda m: m.multiply,
    "Pow": lambda m: m.power,
    "Equal": lambda m: m.equal,
    "Less": lambda m: m.less,
    "LessOrEqual": lambda m: m.less_equal,
    "Greater": lambda m: m.greater,
    "GreaterOrEqual": lambda m: m.greater_equal,
    "And": lambda m: m.logical_and,
    "Or": lambda m: m.logical_or,
    "Xor": lambda m: m.logical_xor,
    "BitShift": lambda m: m.left_shift,
}


def _binary(name: str) -> OpFn:
    def fn(node: JaxNode, a: Any, b: Any) -> Any:
        m = xp(a, b)
        if name == "Pow" and m is jnp:
            return jnp.power(a, b).astype(jnp.result_type(a))  # ONNX: the base's type
        return _BINARY[name](m)(a, b)

    return fn


for _name in _BINARY:
    OPS[_name] = _binary(_name)


def dtype_of(value: Any) -> np.dtype[Any]:
    return np.dtype(value.dtype) if hasattr(value, "dtype") else np.asarray(value).dtype


@op("Div")
def _div(node: JaxNode, a: Any, b: Any) -> Any:
    m = xp(a, b)
    if np.issubdtype(dtype_of(a), np.integer):  # ONNX: integer division truncates toward zero
        return m.trunc(m.divide(a, b)).astype(dtype_of(a))
    return m.divide(a, b)


@op("Mod")
def _mod(node: JaxNode, a: Any, b: Any) -> Any:
    m = xp(a, b)
    return m.fmod(a, b) if node.get("fmod", 0) else m.mod(a, b)


_UNARY: dict[str, Callable[[Any], Callable[[Any], Any]]] = {
    "Neg": lambda m: m.negative,
    "Abs": lambda m: m.abs,
    "Sqrt": lambda m: m.sqrt,
    "Exp": lambda m: m.exp,
    "Log": lambda m: m.log,
    "Reciprocal": lambda m: m.reciprocal,
    "Floor": lambda m: m.floor,
    "Ceil": lambda m: m.ceil,
    "Round": lambda m: m.round,
    "Sign": lambda m: m.sign,
    "Not": lambda m: m.logical_not,
    "Sin": lambda m: m.sin,
    "Cos": lambda m: m.cos,
    "Tanh": lambda m: m.tanh,
    "IsNaN": lambda m: m.isnan,
}


def _unary(name: str) -> OpFn:
    def fn(node: JaxNode, x: Any) -> Any:
        return _UNARY[name](xp(x))(x)

    return fn


for _name in _UNARY:
    OPS[_name] = _unary(_name)


@op("Identity", "Dropout")
def _identity(node: JaxNode, x: Any, *_: Any) -> Any:
    if node.outputs > 1:  # Dropout's mask: all kept at inference
        m = xp(x)
        return x, m.ones(np.shape(x) if m is np else x.shape, dtype=bool)
    return x


@op("Relu")
def _relu(node: JaxNode, x: Any) -> Any:
    return xp(x).maximum(x, 0)


@op("LeakyRelu")
def _leaky_relu(node: JaxNode, x: Any) -> Any:
    alpha = node.get("alpha", 0.01)
    m = xp(x)
    return m.where(x >= 0, x, x * alpha)


@op("Sigmoid")
def _sigmoid(node: JaxNode, x: Any) -> Any:
    return jax.nn.sigmoid(x)


@op("HardSigmoid")
def _hard_sigmoid(node: JaxNode, x: Any) -> Any:
    return jnp.clip(x * node.get("alpha", 0.2) + node.get("beta", 0.5), 0, 1)


@op("HardSwish")
def _hard_swish(node: JaxNode, x: Any) -> Any:
    return x * jnp.clip(x / 6 + 0.5, 0, 1)


@op("Softplus")
def _softplus(node: JaxNode, x: Any) -> Any:
    return jax.nn.softplus(x)


@op("Elu")
def _elu(node: JaxNode, x: Any) -> Any:
    alpha = node.get("alpha", 1.0)
    return jnp.where(x > 0, x, alpha * jnp.expm1(x))


@op("Erf")
def _erf(node: JaxNode, x: Any) -> Any:
    if is_static(x):
        return np.vectorize(math.erf, otypes=[np.asarray(x).dtype])(x)
    return jax.lax.erf(x)


@op("Gelu")
def _gelu(node: JaxNode, x: Any) -> Any:
    return jax.nn.gelu(x, approximate=node.get("approximate", "none") == "tanh")


@op("Clip")
def _clip(node: JaxNode, x: Any, lo: Any = None, hi: Any = None) -> Any:
    if node.opset < 11:
        lo, hi = node.get("min"), node.get("max")
    m = xp(x, lo, hi)
    if lo is not None:
        x = m.maximum(x, lo)
    return x if hi is None else m.minimum(x, hi)


@op("Where")
def _where(node: JaxNode, cond: Any, a: Any, b: Any) -> Any:
    return xp(cond, a, b).where(cond, a, b)


def _variadic(reduce: Callable[[Any], Callable[[Any, Any], Any]], mean: bool = False) -> OpFn:
    def fn(node: JaxNode, *xs: Any) -> Any:
        m = xp(*xs)
        out = xs[0]
        for x in xs[1:]:
            out = reduce(m)(out, x)
        return out / len(xs) if mean else out

    return fn


OPS["Sum"] = _variadic(lambda m: m.add)
OPS["Mean"] = _variadic(lambda m: m.add, mean=True)
OPS["Max"] = _variadic(lambda m: m.maximum)
OPS["Min"] = _variadic(lambda m: m.minimum)


def _astype(x: Any, dtype: np.dtype[Any]) -> Any:
    """NumPy keeps 64-bit types; jax computes them as 32-bit ones (its x64 mode is off), said here, not warned."""
    return x.astype(dtype) if is_static(x) else x.astype(jax.dtypes.canonicalize_dtype(dtype))


@op("Cast")
def _cast(node: JaxNode, x: Any) -> Any:
    return _astype(x, onnx_dtype(node.get("to")))


@op("CastLike")
def _cast_like(node: JaxNode, x: Any, like: Any) -> Any:
    return _astype(x, dtype_of(like))


# --- matrix products ---------------------------------------------------------------------------------------------


@op("MatMul")
def _matmul(node: JaxNode, a: Any, b: Any) -> Any:
    return xp(a, b).matmul(a, b)


@op("Gemm")
def _gemm(node: JaxNode, a: Any, b: Any, c: Any = None) -> Any:
    m = xp(a, b, c)
    a = a.T if node.get("transA", 0) else a
    b = b.T if node.get("transB", 0) and not node.get("_packed") else b
    y = m.matmul(a, b)
    alpha, beta = node.get("alpha", 1.0), node.get("beta", 1.0)
    if alpha != 1.0:
        y = y * alpha
    return y if c is None else y + (c * beta if beta != 1.0 else c)


def _pack_gemm(node: JaxNode, b: np.ndarray) -> tuple[str, np.ndarray] | None:
    # Gemm(a, B, transB=1) -> Gemm(a, B.T stored row-major)
    return ("T", np.ascontiguousarray(b.T)) if node.get("transB", 0) and b.ndim == 2 else None


PACKERS["Gemm"] = _pack_gemm


@op("Einsum")
def _einsum(node: JaxNode, *xs: Any) -> Any:
    return xp(*xs).einsum(node.get("equation"), *xs)


# --- softmax and reductions --------------------------------------------------------------------------------------


def _softmax_like(fn: Callable[..., Any]) -> OpFn:
    def run(node: JaxNode, x: Any) -> Any:
        if node.opset < 13:  # the input as 2-D [before axis, from axis]
            axis = node.get("axis", 1) % x.ndim
            flat = x.reshape((math.prod(x.shape[:axis]), -1))
            return fn(flat, axis=-1).reshape(x.shape)
        return fn(x, axis=node.get("axis", -1))

    return run


OPS["Softmax"] = _softmax_like(jax.nn.softmax)
OPS["LogSoftmax"] = _softmax_like(jax.nn.log_softmax)


def _reduce_axes(node: JaxNode, x: Any, axes_input: Any, input_since: int) -> tuple[int, ...] | None:
    """The axes to reduce (None: all), from the attribute before opset ``input_since`` and the input after."""
    axes = node.get("axes") if node.opset < input_since else static_ints(node, axes_input, "axes")
    if not axes:
        return () if node.get("noop_with_empty_axes", 0) else None
    return tuple(int(a) % np.ndim(x) for a in axes)


_REDUCERS: dict[str, tuple[int, Callable[[Any, Any, Any, bool], Any]]] = {
    "ReduceSum": (13, lambda m, x, axes, keep: m.sum(x, axis=axes, keepdims=keep)),
    "ReduceMean": (18, lambda m, x, axes, keep: m.mean(x, axis=axes, keepdims=keep)),
    "ReduceMax": (18, lambda m, x, axes, keep: m.max(x, axis=axes, keepdims=keep)),
    "ReduceMin": (18, lambda m, x, axes, keep: m.min(x, axis=axes, keepdims=keep)),
    "ReduceProd": (18, lambda m, x, axes, keep: m.prod(x, axis=axes, keepdims=keep)),
    "ReduceSumSquare": (18, lambda m, x, axes, keep: m.sum(x * x, axis=axes, keepdims=keep)),
    "ReduceL2": (18, lambda m, x, axes, keep: m.sqrt(m.sum(x * x, axis=axes, keepdims=keep))),
    "ReduceL1": (18, lambda m, x, axes, keep: m.sum(m.abs(x), axis=axes, keepdims=keep)),
    "ReduceLogSumExp": (18, lambda m, x, axes, keep: m.log(m.sum(m.exp(x), axis=axes, keepdims=keep))),
}


def _reducer(name: str) -> OpFn:
    since, reduce = _REDUCERS[name]

    def fn(node: JaxNode, x: Any, axes: Any = None) -> Any:
        wanted = _reduce_axes(node, x, axes, since)
        if wanted == ():
            return x
        return reduce(xp(x), x, wanted, bool(node.get("keepdims", 1)))

    return fn


for _name in _REDUCERS:
    OPS[_name] = _reducer(_name)


@op("ArgMax", "ArgMin")
def _argmax(node: JaxNode, x: Any) -> Any:
    m = xp(x)
    axis, keep = node.get("axis", 0), bool(node.get("keepdims", 1))
    if node.get("select_last_index", 0):
        raise node.fail("select_last_index=1 is not supported")
    found = (m.argmax if node.op_type == "ArgMax" else m.argmin)(x, axis=axis)
    return m.expand_dims(found, axis) if keep else found


def load_ops() -> dict[str, OpFn]:
    """The whole op table: this module's ops plus the shape and neural-network ones."""
    import runtime.jax_nn
    import runtime.jax_shapes  # noqa: F401

    return OPS


def run_op(node: JaxNode, inputs: Sequence[Any]) -> tuple[Any, ...]:
    """Apply ``node``'s op to ``inputs`` (None for an omitted optional input); its outputs as a tuple."""
    fn = OPS.get(node.op_type)
    if fn is None:
        raise node.fail("op not supported by the JAX translator")
    try:
        result = fn(node, *inputs)
    except RuntimeModelError:
        raise
    except (TypeError, ValueError, IndexError) as exc:
        raise UnsupportedJaxOp(
            f"jax: {node.op_type} node {node.name or '?'} cannot be translated: {type(exc).__name__}: {exc}"
        ) from None
    return result if isinstance(result, tuple) else (result,)
