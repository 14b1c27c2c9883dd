"""An ONNX graph as a trainable TensorFlow model: what the ``keras`` and ``keras-xla`` trainers train.

The TensorFlow twin of ``torch_module``: float initializers become ``tf.Variable``s named after them, BatchNorm
running statistics become non-trainable variables updated in training mode (torch's rule: the batch's weight is
``1 - momentum`` of the ONNX node, the running variance takes the unbiased batch variance), and the nodes run in
graph order as TensorFlow functions, one per op type in ``OPS``. An op outside that table fails naming the node
and the ops it knows.

Layout: TensorFlow's CPU convolutions want channels-last, so 4-D activations run NHWC inside. An op registered
``CHANNELS_LAST`` (Conv, pooling, BatchNorm) gets its data input NHWC; an elementwise op keeps NHWC when its other
operands are NHWC too or single numbers; every other op (Flatten, Reshape, MatMul, ...) sees ONNX's NCHW, with one
transpose where a value changes layout (kept, so two readers pay it once). Conv weights are converted on load to
TensorFlow's filter layout (``[kh, kw, in, out]``; depthwise ``[kh, kw, in, multiplier]``) and back to ONNX's in
``values()``; every other variable keeps ONNX's layout.

Only imported when TensorFlow is asked for: the runtime itself needs NumPy and onnx alone.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import onnx
import tensorflow as tf
from onnx import helper, numpy_helper

from runtime.training.config import TrainingError
from runtime.training.graph_nodes import graph_nodes

Op = Callable[..., Any]
OPS: dict[str, Op] = {}
#: How an op treats layout: ``CHANNELS_LAST`` (its data input NHWC), ``ELEMENTWISE`` (keeps its inputs' layout
#: where it can) or ``ONNX_LAYOUT`` (NCHW, ONNX's own order; every op not registered otherwise).
CHANNELS_LAST, ELEMENTWISE, ONNX_LAYOUT = "channels_last", "elementwise", "onnx"
LAYOUT: dict[str, str] = {}
_TO_LAST, _TO_FIRST = (0, 2, 3, 1), (0, 3, 1, 2)


def op(*names: str, layout: str = ONNX_LAYOUT) -> Callable[[Op], Op]:
    """Register ``fn(graph, node_attrs, *inputs) -> output(s)`` for ONNX op types ``names``."""

    def register(fn: Op) -> Op:
        for name in names:
            OPS[name] = fn
            LAYOUT[name] = layout
        return fn

    return register


class OnnxTfGraph:
    """Runs ``proto``'s graph with TensorFlow ops; ``graph(inputs, training)`` returns the outputs by name."""

    def __init__(self, proto: onnx.ModelProto) -> None:
        graph = proto.graph
        checked = graph_nodes(proto, OPS, "tensorflow")
        self.opset, self.nodes, self.attrs = checked.opset, checked.nodes, checked.attrs
        stats = checked.statistics
        self.filters = _conv_weights(self.nodes)
        #: ONNX initializer name -> its variable (trainable weights and running statistics).
        self.variables: dict[str, tf.Variable] = {}
        self.constants: dict[str, tf.Tensor] = {}
        for init in graph.initializer:
            arr = numpy_helper.to_array(init)
            if arr.dtype.kind != "f" or (arr.ndim == 0 and init.name not in stats):
                self.constants[init.name] = tf.constant(arr)
                continue
            if init.name in self.filters:
                arr = _filter_to_tf(init.name, arr)
            self.variables[init.name] = tf.Variable(
                arr.astype(np.float32), trainable=init.name not in stats, name=re.sub(r"[^\w.\-/]", "_", init.name)
            )
        self.input_names, self.output_names = checked.input_names, list(checked.output_names)
        #: Set while a call traces: BatchNorm and Dropout read it.
        self.training = False

    @property
    def trainable_variables(self) -> list[tf.Variable]:
        return [v for v in self.variables.values() if v.trainable]

    def values(self) -> dict[str, np.ndarray]:
        """Every trained weight and running statistic by ONNX initializer name, in ONNX's layout."""
        out = {}
        for name, var in self.variables.items():
            arr = var.numpy()
            out[name] = _filter_to_onnx(arr) if name in self.filters else arr
        return out

    def __call__(self, inputs: Sequence[Any], training: bool = False) -> dict[str, tf.Tensor]:
        self.training = training
        env: dict[str, Any] = {**self.constants, **self.variables}
        env.update(zip(self.input_names, inputs, strict=True))
        static = set(self.constants)  # values known before the run: computed eagerly, once per trace
        last: dict[str, tf.Tensor] = {}  # value name -> that value NHWC
        first: dict[str, tf.Tensor] = {}  # value name held NHWC only -> the same value NCHW
        for node, attrs in zip(self.nodes, self.attrs, strict=True):
            names = list(node.input)
            channels_last = _runs_channels_last(node.op_type, names, env, last)
            args: list[Any] = []
            for i, name in enumerate(names):
                if not name:
                    args.append(None)
                elif channels_last and (name in last or (i == 0 and _rank(env[name]) == 4)):
                    if name not in last:
                        last[name] = tf.transpose(env[name], _TO_LAST)
                    args.append(last[name])
                elif name not in env:  # produced NHWC: NCHW once, shared by every reader
                    if name not in first:
                        first[name] = tf.transpose(last[name], _TO_FIRST)
                    args.append(first[name])
                else:
                    args.append(env[name])
            known = _static_inputs(node, names, args, static)
            outs = _run(self, node, attrs, args, known)
            for name, value in zip(node.output, outs, strict=False):
                if not name:
                    continue
                if channels_last and _rank(value) == 4:
                    last[name] = value
                    env.pop(name, None)
                else:
                    env[name] = value
                    if known:
                        static.add(name)
        return {name: env[name] if name in env else tf.transpose(last[name], _TO_FIRST) for name in self.output_names}


def _static_inputs(node: onnx.NodeProto, names: list[str], args: list[Any], static: set[str]) -> bool:
    """Whether a node's result is known before the run: its inputs are (a shape of known size counts)."""
    if node.op_type == "Shape":
        return args[0].shape.is_fully_defined()
    return LAYOUT[node.op_type] != CHANNELS_LAST and all(n in static for n in names if n)


def _run(
    graph: OnnxTfGraph, node: onnx.NodeProto, attrs: dict[str, Any], args: list[Any], known: bool
) -> tuple[Any, ...]:
    """One node's outputs; a node whose result is known before the run is computed eagerly (shape arithmetic
    then stays NumPy-known for the Reshape that reads it, also inside a ``tf.function``)."""
    try:
        if known:
            with tf.init_scope():
                result = OPS[node.op_type](graph, attrs, *args)
        else:
            result = OPS[node.op_type](graph, attrs, *args)
    except (ValueError, TypeError, tf.errors.InvalidArgumentError) as exc:
        first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise TrainingError(f"node {node.name or node.op_type!r} ({node.op_type}): {first_line}") from None
    return result if isinstance(result, tuple) else (result,)


def _rank(value: Any) -> int | None:
    return value.shape.rank if hasattr(value, "shape") and hasattr(value.shape, "rank") else None


def _runs_channels_last(op_type: str, names: list[str], env: dict[str, Any], last: dict[str, Any]) -> bool:
    """Whether a node runs NHWC: a channels-last op on 4-D data; an elementwise op on NHWC values and numbers."""
    layout = LAYOUT[op_type]
    if layout == CHANNELS_LAST:
        return bool(names) and (names[0] in last or _rank(env.get(names[0])) == 4)
    if layout == ELEMENTWISE:
        given = [n for n in names if n]
        return any(n in last for n in given) and all(
            n in last or (n in env and env[n].shape.num_elements() == 1) for n in given
        )
    return False


# --- Conv filters: ONNX [out, in/group, kh, kw] <-> TensorFlow [kh, kw, in/group, out] -----------------------------


def _conv_weights(nodes: Sequence[onnx.NodeProto]) -> set[str]:
    """The initializers that are Conv weights (held in TensorFlow's filter layout); used elsewhere too: refused."""
    weights = {n.input[1] for n in nodes if n.op_type == "Conv" and len(n.input) > 1}
    for node in nodes:
        reads = node.input[:1] + node.input[2:] if node.op_type == "Conv" else node.input
        shared = weights.intersection(reads)
        if shared:
            raise TrainingError(
                f"node {node.name or node.op_type!r}: reads Conv weight {sorted(shared)[0]!r}, which tensorflow "
                "holds in its own filter layout"
            )
    return weights


def _filter_to_tf(name: str, w: np.ndarray) -> np.ndarray:
    if w.ndim != 4:
        raise TrainingError(f"Conv weight {name!r} has shape {w.shape}: tensorflow trains 2-D convolutions only")
    return np.ascontiguousarray(w.transpose(2, 3, 1, 0))


def _filter_to_onnx(w: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(w.transpose(3, 2, 0, 1))


# --- ops ---------------------------------------------------------------------------------------------------------


def _ints(value: Any) -> list[int]:
    static = tf.get_static_value(value) if isinstance(value, tf.Tensor) else value
    if static is None:
        raise ValueError("needs a shape or index input known before the run")
    return [int(v) for v in np.asarray(static).reshape(-1)]


def _explicit(pads: Sequence[int]) -> list[list[int]]:
    """ONNX 2-D ``[top, left, bottom, right]`` as TensorFlow's NHWC explicit padding."""
    return [[0, 0], [pads[0], pads[2]], [pads[1], pads[3]], [0, 0]]


def _window(attrs: dict[str, Any], kernel: Sequence[int]) -> tuple[list[int], list[int], list[int]]:
    if len(kernel) != 2:
        raise ValueError(f"tensorflow runs 2-D windows only, not {len(kernel)}-D")
    if attrs.get("auto_pad", b"NOTSET") not in (b"NOTSET", "NOTSET", b"VALID", "VALID"):
        raise ValueError(f"auto_pad {attrs['auto_pad']!r} is not supported; give explicit pads")
    return list(attrs.get("strides", [1, 1])), list(attrs.get("dilations", [1, 1])), list(attrs.get("pads", [0] * 4))


@op("Conv", layout=CHANNELS_LAST)
def _conv(g: OnnxTfGraph, attrs: dict[str, Any], x: Any, w: Any, b: Any = None) -> Any:
    if not isinstance(w, tf.Variable):
        raise ValueError("the weight must be a float initializer")
    strides, dilations, pads = _window(attrs, w.shape[:2])
    group, padding = int(attrs.get("group", 1)), _explicit(pads)
    if group == 1:
        y = tf.nn.conv2d(x, w, [1, *strides, 1], padding, dilations=dilations)
    elif group == x.shape[-1] and w.shape[2] == 1:  # depthwise: [kh, kw, 1, C*m] -> [kh, kw, C, m]
        kernel = tf.reshape(w, [w.shape[0], w.shape[1], group, w.shape[3] // group])
        y = tf.nn.depthwise_conv2d(x, kernel, [1, *strides, 1], padding, dilations=dilations)
    else:  # grouped: one conv per group (TensorFlow's CPU kernels have no grouped conv)
        parts = zip(tf.split(x, group, axis=-1), tf.split(w, group, axis=-1), strict=True)
        y = tf.concat([tf.nn.conv2d(p, k, [1, *strides, 1], padding, dilations=dilations) for p, k in parts], -1)
    return y if b is None else tf.nn.bias_add(y, b)


def _padded_window(attrs: dict[str, Any], x: Any, kernel: Sequence[int], fill: float) -> tuple[Any, list[int]]:
    """``x`` padded explicitly (ONNX pads, plus what ``ceil_mode`` adds at the end) for a VALID window."""
    strides, dilations, pads = _window(attrs, kernel)
    if dilations != [1, 1]:
        raise ValueError("dilated pooling is not supported")
    ends = [pads[2], pads[3]]
    if attrs.get("ceil_mode", 0):
        for i, size in enumerate((x.shape[1], x.shape[2])):
            span = size + pads[i] + pads[i + 2] - kernel[i]
            out = -(-span // strides[i]) + 1
            if (out - 1) * strides[i] >= size + pads[i]:  # torch's rule: the last window starts inside
                out -= 1
            ends[i] += max(0, (out - 1) * strides[i] + kernel[i] - (size + pads[i] + pads[i + 2]))
    widths = [[0, 0], [pads[0], ends[0]], [pads[1], ends[1]], [0, 0]]
    return (tf.pad(x, widths, constant_values=fill) if any(p for w in widths for p in w) else x), strides


@op("MaxPool", layout=CHANNELS_LAST)
def _max_pool(g: OnnxTfGraph, attrs: dict[str, Any], x: Any) -> Any:
    kernel = list(attrs["kernel_shape"])
    padded, strides = _padded_window(attrs, x, kernel, -math.inf)
    return tf.nn.max_pool2d(padded, kernel, [1, *strides, 1], "VALID")


@op("AveragePool", layout=CHANNELS_LAST)
def _average_pool(g: OnnxTfGraph, attrs: dict[str, Any], x: Any) -> Any:
    kernel = list(attrs["kernel_shape"])
    padded, strides = _padded_window(attrs, x, kernel, 0.0)
    total = tf.nn.avg_pool2d(padded, kernel, [1, *strides, 1], "VALID")
    if attrs.get("count_include_pad", 0) or padded is x:
        return total
    ones = tf.ones_like(x[:1, :, :, :1])  # a window's share of real (not padded) cells
    share = tf.nn.avg_pool2d(_padded_window(attrs, ones, kernel, 0.0)[0], kernel, [1, *strides, 1], "VALID")
    return total / share


@op("GlobalAveragePool", layout=CHANNELS_LAST)
def _global_avg(g: OnnxTfGraph, attrs: dict[str, Any], x: Any) -> Any:
    axes = [1, 2] if x.shape.rank == 4 else list(range(2, x.shape.rank))
    return tf.reduce_mean(x, axes, keepdims=True)


@op("BatchNormalization", layout=CHANNELS_LAST)
def _batch_norm(g: OnnxTfGraph, attrs: dict[str, Any], x: Any, scale: Any, bias: Any, mean: Any, var: Any) -> Any:
    eps = float(attrs.get("epsilon", 1e-5))
    channel = x.shape.rank - 1 if x.shape.rank == 4 else 1  # NHWC inside; NC / NCL as ONNX has them
    shape = [x.shape[channel] if i == channel else 1 for i in range(x.shape.rank)]
    if g.training:
        axes = [i for i in range(x.shape.rank) if i != channel]
        batch_mean, batch_var = tf.nn.moments(x, axes)
        weight = 1.0 - float(attrs.get("momentum", 0.9))  # ONNX keeps `momentum` of the running value
        count = math.prod(x.shape[i] for i in axes)
        mean.assign(mean * (1.0 - weight) + tf.stop_gradient(batch_mean) * weight)
        unbiased = tf.stop_gradient(batch_var) * (count / max(count - 1, 1))
        var.assign(var * (1.0 - weight) + unbiased * weight)
        use_mean, use_var = batch_mean, batch_var
    else:
        use_mean, use_var = tf.convert_to_tensor(mean), tf.convert_to_tensor(var)
    inv = tf.math.rsqrt(tf.reshape(use_var, shape) + eps) * tf.reshape(scale, shape)
    return (x - tf.reshape(use_mean, shape)) * inv + tf.reshape(bias, shape)


@op("Gemm")
def _gemm(g: OnnxTfGraph, attrs: dict[str, Any], a: Any, b: Any, c: Any = None) -> Any:
    y = tf.linalg.matmul(a, b, transpose_a=bool(attrs.get("transA", 0)), transpose_b=bool(attrs.get("transB", 0)))
    alpha, beta = float(attrs.get("alpha", 1.0)), float(attrs.get("beta", 1.0))
    y = y if alpha == 1.0 else alpha * y
    return y if c is None else y + (c if beta == 1.0 else beta * c)


@op("MatMul")
def _matmul(g: OnnxTfGraph, attrs: dict[str, Any], a: Any, b: Any) -> Any:
    if a.shape.rank > 2 and b.shape.rank == 2:  # [..., k] @ [k, n]: one GEMM over the flattened batch
        return tf.tensordot(a, b, 1)
    return tf.linalg.matmul(a, b)


def _div(a: Any, b: Any) -> Any:
    return tf.truncatediv(a, b) if a.dtype.is_integer else a / b


#: One TensorFlow function each, no attributes; they keep NHWC where their operands allow.
_ELEMENTWISE: dict[str, Callable[..., Any]] = {
    "Add": tf.add,
    "Sub": tf.subtract,
    "Mul": tf.multiply,
    "Div": _div,
    "Pow": tf.pow,
    "Relu": tf.nn.relu,
    "Sigmoid": tf.sigmoid,
    "Tanh": tf.tanh,
    "Erf": tf.math.erf,
    "Sqrt": tf.sqrt,
    "Neg": tf.negative,
    "Reciprocal": tf.math.reciprocal,
    "Exp": tf.exp,
    "Identity": tf.identity,
}
for _name, _fn in _ELEMENTWISE.items():
    op(_name, layout=ELEMENTWISE)(lambda g, attrs, *xs, fn=_fn: fn(*xs))


@op("LeakyRelu", layout=ELEMENTWISE)
def _leaky_relu(g: OnnxTfGraph, attrs: dict[str, Any], x: Any) -> Any:
    return tf.nn.leaky_relu(x, float(attrs.get("alpha", 0.01)))


@op("Dropout", layout=ELEMENTWISE)
def _dropout(g: OnnxTfGraph, attrs: dict[str, Any], x: Any, ratio: Any = None, training: Any = None) -> Any:
    rate = float(tf.get_static_value(ratio)) if ratio is not None else float(attrs.get("ratio", 0.5))
    return tf.nn.dropout(x, rate) if g.training and rate > 0 else x


@op("Cast")
def _cast(g: OnnxTfGraph, attrs: dict[str, Any], x: Any) -> Any:
    return tf.cast(x, tf.as_dtype(helper.tensor_dtype_to_np_dtype(int(attrs["to"]))))


def _softmax_with(fn: Callable[..., Any]) -> Op:
    def run(g: OnnxTfGraph, attrs: dict[str, Any], x: Any) -> Any:
        axis = int(attrs.get("axis", -1 if g.opset >= 13 else 1)) % x.shape.rank
        if g.opset >= 13 or axis == x.shape.rank - 1:
            return fn(x, axis=axis)
        flat = tf.reshape(x, [math.prod(x.shape[:axis]), -1])  # opset < 13: over the flattened trailing dims
        return tf.reshape(fn(flat, axis=1), tf.shape(x))

    return run


op("Softmax")(_softmax_with(tf.nn.softmax))
op("LogSoftmax")(_softmax_with(tf.nn.log_softmax))


@op("Gather")
def _gather(g: OnnxTfGraph, attrs: dict[str, Any], x: Any, indices: Any) -> Any:
    axis = int(attrs.get("axis", 0)) % x.shape.rank
    size = tf.cast(tf.shape(x)[axis], indices.dtype)
    return tf.gather(x, tf.math.floormod(indices, size), axis=axis)  # ONNX allows negative indices


@op("LayerNormalization")
def _layer_norm(g: OnnxTfGraph, attrs: dict[str, Any], x: Any, scale: Any, bias: Any = None) -> Any:
    axes = list(range(int(attrs.get("axis", -1)) % x.shape.rank, x.shape.rank))
    mean, var = tf.nn.moments(x, axes, keepdims=True)
    y = (x - mean) * tf.math.rsqrt(var + float(attrs.get("epsilon", 1e-5))) * scale
    return y if bias is None else y + bias


def _reduce_with(fn: Callable[..., Any]) -> Op:
    def run(g: OnnxTfGraph, attrs: dict[str, Any], x: Any, axes: Any = None) -> Any:
        chosen = _ints(axes) if axes is not None else list(attrs.get("axes", []))
        if not chosen and attrs.get("noop_with_empty_axes", 0):
            return x
        return fn(x, chosen or None, keepdims=bool(attrs.get("keepdims", 1)))

    return run


op("ReduceMean")(_reduce_with(tf.reduce_mean))
op("ReduceSum")(_reduce_with(tf.reduce_sum))


@op("Flatten")
def _flatten(g: OnnxTfGraph, attrs: dict[str, Any], x: Any) -> Any:
    axis = int(attrs.get("axis", 1)) % max(x.shape.rank, 1)
    return tf.reshape(x, [math.prod(x.shape[:axis]) if axis else 1, -1])


@op("Reshape")
def _reshape(g: OnnxTfGraph, attrs: dict[str, Any], x: Any, shape: Any) -> Any:
    target = _ints(shape)
    if not attrs.get("allowzero", 0):
        target = [x.shape[i] if d == 0 else d for i, d in enumerate(target)]
    return tf.reshape(x, target)


@op("Transpose")
def _transpose(g: OnnxTfGraph, attrs: dict[str, Any], x: Any) -> Any:
    return tf.transpose(x, list(attrs.get("perm", reversed(range(x.shape.rank)))))


@op("Concat")
def _concat(g: OnnxTfGraph, attrs: dict[str, Any], *xs: Any) -> Any:
    return tf.concat(xs, int(attrs["axis"]))


@op("Split")
def _split(g: OnnxTfGraph, attrs: dict[str, Any], x: Any, split: Any = None) -> Any:
    axis = int(attrs.get("axis", 0)) % x.shape.rank
    sizes = _ints(split) if split is not None else list(attrs.get("split", []))
    if not sizes:
        parts = int(attrs.get("num_outputs", 0)) or 1
        size = -(-x.shape[axis] // parts)
        sizes = [min(size, x.shape[axis] - i * size) for i in range(parts)]
    return tuple(tf.split(x, sizes, axis=axis))


@op("Slice")
def _slice(
    g: OnnxTfGraph, attrs: dict[str, Any], x: Any, starts: Any, ends: Any, axes: Any = None, steps: Any = None
) -> Any:
    begin, end = _ints(starts), _ints(ends)
    chosen = _ints(axes) if axes is not None else list(range(len(begin)))
    stride = _ints(steps) if steps is not None else [1] * len(begin)
    index = [slice(None)] * x.shape.rank
    for axis, b, e, s in zip(chosen, begin, end, stride, strict=True):
        index[axis % x.shape.rank] = slice(b, e, s)
    return x[tuple(index)]


@op("Shape")
def _shape(g: OnnxTfGraph, attrs: dict[str, Any], x: Any) -> Any:
    whole = tf.constant(x.shape.as_list(), tf.int64) if x.shape.is_fully_defined() else tf.shape(x, out_type=tf.int64)
    return whole[int(attrs.get("start", 0)) : attrs.get("end")]


@op("Unsqueeze")
def _unsqueeze(g: OnnxTfGraph, attrs: dict[str, Any], x: Any, axes: Any = None) -> Any:
    chosen = _ints(axes) if axes is not None else list(attrs["axes"])
    rank = x.shape.rank + len(chosen)
    for axis in sorted(a % rank for a in chosen):
        x = tf.expand_dims(x, axis)
    return x


@op("Squeeze")
def _squeeze(g: OnnxTfGraph, attrs: dict[str, Any], x: Any, axes: Any = None) -> Any:
    chosen = _ints(axes) if axes is not None else list(attrs.get("axes", []))
    return tf.squeeze(x, [a % x.shape.rank for a in chosen] or None)


@op("Constant")
def _constant(g: OnnxTfGraph, attrs: dict[str, Any]) -> Any:
    if "value" not in attrs:
        raise ValueError("a Constant needs its 'value' attribute")
    return tf.constant(numpy_helper.to_array(attrs["value"]))
