"""ONNX's neural-network ops as JAX code: convolutions, pooling, normalisation, LRN, Pad, Resize and the
recurrences (LSTM, GRU), registered into ``runtime.jax_ops.OPS``.

Convolutions and pooling map to ``jax.lax.conv_general_dilated`` and ``jax.lax.reduce_window`` over NCHW (any
spatial rank); their padding is computed from static shapes (``auto_pad``, ``ceil_mode``), so XLA gets explicit
per-axis pads. Resize computes its source indices and weights with NumPy at trace time and gathers along each axis
(nearest and linear are separable). A recurrence is a ``jax.lax.scan`` over time.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from runtime.jax_ops import PACKERS, JaxNode, op, static_ints, static_value

# --- padding -------------------------------------------------------------------------------------------------------


def _auto_pads(node: JaxNode, spatial: tuple[int, ...], kernel: list[int], strides: list[int],
               dilations: list[int]) -> list[tuple[int, int]]:
    """(begin, end) pads per spatial axis from ``pads`` or ``auto_pad`` (SAME_UPPER/SAME_LOWER/VALID)."""
    rank = len(spatial)
    auto = node.get("auto_pad", "NOTSET")
    if auto in ("NOTSET", ""):
        pads = list(node.get("pads", [0] * 2 * rank))
        return [(int(pads[i]), int(pads[i + rank])) for i in range(rank)]
    if auto == "VALID":
        return [(0, 0)] * rank
    out: list[tuple[int, int]] = []
    for size, k, s, d in zip(spatial, kernel, strides, dilations, strict=True):
        total = max((-(-size // s) - 1) * s + (k - 1) * d + 1 - size, 0)
        small, large = total // 2, total - total // 2
        out.append((small, large) if auto == "SAME_UPPER" else (large, small))
    return out


def _geometry(node: JaxNode, x: Any, kernel: list[int]) -> tuple[list[int], list[int], list[tuple[int, int]]]:
    rank = len(kernel)
    strides = list(node.get("strides", [1] * rank))
    dilations = list(node.get("dilations", [1] * rank))
    return strides, dilations, _auto_pads(node, tuple(np.shape(x)[2:]), kernel, strides, dilations)


# --- convolution ---------------------------------------------------------------------------------------------------


def _bias(y: Any, b: Any) -> Any:
    return y if b is None else y + jnp.reshape(b, (1, -1) + (1,) * (y.ndim - 2))


#: Spatial axis letters for lax's dimension-number strings, by spatial rank.
_SPATIAL = {1: "W", 2: "HW", 3: "DHW"}


def _to_hwio(w: np.ndarray) -> np.ndarray:
    """(O, I, k...) -> (k..., I, O), contiguous: the kernel layout XLA's CPU convolution reads."""
    return np.ascontiguousarray(np.moveaxis(w, (0, 1), (-1, -2)))


def _conv_dims(rank: int, packed: bool) -> tuple[str, str, str] | None:
    if not packed:
        return None  # lax's default: NC..., OI..., NC...
    letters = _SPATIAL[rank]
    return f"NC{letters}", f"{letters}IO", f"NC{letters}"


def _pack_conv(node: JaxNode, w: np.ndarray) -> tuple[str, np.ndarray] | None:
    # Conv(x, W[O, I, kh, kw]) -> Conv(x, W[kh, kw, I, O])
    return ("HWIO", _to_hwio(w)) if w.ndim - 2 in _SPATIAL else None


@op("Conv")
def _conv(node: JaxNode, x: Any, w: Any, b: Any = None) -> Any:
    packed = bool(node.get("_packed"))
    kernel = list(node.get("kernel_shape") or (np.shape(w)[:-2] if packed else np.shape(w)[2:]))
    strides, dilations, pads = _geometry(node, x, kernel)
    y = lax.conv_general_dilated(
        x, w, window_strides=strides, padding=pads, rhs_dilation=dilations,
        dimension_numbers=_conv_dims(len(kernel), packed), feature_group_count=int(node.get("group", 1)),
        precision=lax.Precision.HIGHEST,
    )
    return _bias(y, b)


def _transposed_kernel(m: Any, w: Any, group: int) -> Any:
    """ConvTranspose's weight (C_in, C_out/group, k...) as the forward convolution's (C_out, C_in/group, k...),
    window flipped."""
    c_in, c_out_g, kernel = np.shape(w)[0], np.shape(w)[1], tuple(np.shape(w)[2:])
    w = m.reshape(w, (group, c_in // group, c_out_g, *kernel))
    w = m.swapaxes(w, 1, 2).reshape((group * c_out_g, c_in // group, *kernel))
    return m.flip(w, axis=tuple(range(2, 2 + len(kernel))))


def _pack_conv_transpose(node: JaxNode, w: np.ndarray) -> tuple[str, np.ndarray] | None:
    # ConvTranspose(x, W[I, O/g, k...]) -> the flipped forward kernel, as (k..., I/g, O)
    if w.ndim - 2 not in _SPATIAL:
        return None
    return "HWIO", _to_hwio(_transposed_kernel(np, w, int(node.get("group", 1))))


PACKERS["Conv"] = _pack_conv
PACKERS["ConvTranspose"] = _pack_conv_transpose


@op("ConvTranspose")
def _conv_transpose(node: JaxNode, x: Any, w: Any, b: Any = None) -> Any:
    """The gradient of a convolution: the input dilated by the strides, convolved with the flipped kernel."""
    group = int(node.get("group", 1))
    packed = bool(node.get("_packed"))
    kernel = list(node.get("kernel_shape") or (np.shape(w)[:-2] if packed else np.shape(w)[2:]))
    rank = len(kernel)
    strides = list(node.get("strides", [1] * rank))
    dilations = list(node.get("dilations", [1] * rank))
    extra = list(node.get("output_padding", [0] * rank))
    spatial = np.shape(x)[2:]
    if node.get("output_shape") is not None:
        wanted = list(node.get("output_shape"))[-rank:]
        pads = []
        for i in range(rank):
            total = strides[i] * (spatial[i] - 1) + extra[i] + (kernel[i] - 1) * dilations[i] + 1 - wanted[i]
            half = total // 2
            pads.append((half, total - half) if node.get("auto_pad", "NOTSET") == "SAME_UPPER"
                        else (total - half, half))
    elif node.get("auto_pad", "NOTSET") in ("SAME_UPPER", "SAME_LOWER"):
        pads = []
        for i in range(rank):
            total = max(strides[i] * (spatial[i] - 1) + extra[i] + (kernel[i] - 1) * dilations[i] + 1
                        - spatial[i] * strides[i], 0)
            half = total // 2
            pads.append((total - half, half) if node.get("auto_pad") == "SAME_UPPER" else (half, total - half))
    else:
        flat = list(node.get("pads", [0] * 2 * rank))
        pads = [(int(flat[i]), int(flat[i + rank])) for i in range(rank)]
    if not packed:
        w = _transposed_kernel(jnp, w, group)
    padding = [((kernel[i] - 1) * dilations[i] - pads[i][0], (kernel[i] - 1) * dilations[i] - pads[i][1] + extra[i])
               for i in range(rank)]
    y = lax.conv_general_dilated(
        x, w, window_strides=[1] * rank, padding=padding, lhs_dilation=strides, rhs_dilation=dilations,
        dimension_numbers=_conv_dims(rank, packed), feature_group_count=group, precision=lax.Precision.HIGHEST,
    )
    return _bias(y, b)


# --- pooling -------------------------------------------------------------------------------------------------------


def _pool_pads(node: JaxNode, x: Any, kernel: list[int]) -> tuple[list[int], list[int], list[tuple[int, int]],
                                                                   list[int]]:
    """(strides, dilations, explicit pads, extra end pads for ceil_mode) per spatial axis."""
    strides, dilations, pads = _geometry(node, x, kernel)
    extra = []
    for size, k, s, d, (lo, hi) in zip(np.shape(x)[2:], kernel, strides, dilations, pads, strict=True):
        span = size + lo + hi - ((k - 1) * d + 1)
        out = (-(-span // s) if node.get("ceil_mode", 0) else span // s) + 1
        if node.get("ceil_mode", 0) and (out - 1) * s >= size + lo:  # the last window must start inside
            out -= 1
        extra.append(max((out - 1) * s + (k - 1) * d + 1 - (size + lo + hi), 0))
    return strides, dilations, pads, extra


@op("MaxPool")
def _max_pool(node: JaxNode, x: Any) -> Any:
    if node.outputs > 1:
        raise node.fail("the Indices output is not supported")
    kernel = list(node.get("kernel_shape"))
    strides, dilations, pads, extra = _pool_pads(node, x, kernel)
    padding = [(0, 0), (0, 0)] + [(lo, hi + e) for (lo, hi), e in zip(pads, extra, strict=True)]
    return lax.reduce_window(x, jnp.array(-jnp.inf, x.dtype), lax.max, (1, 1, *kernel), (1, 1, *strides), padding,
                             window_dilation=(1, 1, *dilations))


def _window_counts(size: int, out: int, k: int, s: int, d: int, pads: tuple[int, int], include_pad: bool) -> Any:
    """Per output position on one axis, how many window taps fall inside the input (or its explicit pads)."""
    taps = (np.arange(out) * s - pads[0])[:, None] + np.arange(k)[None, :] * d
    low, high = (-pads[0], size + pads[1]) if include_pad else (0, size)
    return ((taps >= low) & (taps < high)).sum(axis=1)


@op("AveragePool")
def _average_pool(node: JaxNode, x: Any) -> Any:
    kernel = list(node.get("kernel_shape"))
    strides, dilations, pads, extra = _pool_pads(node, x, kernel)
    window, step = (1, 1, *kernel), (1, 1, *strides)
    padding = [(0, 0), (0, 0)] + [(lo, hi + e) for (lo, hi), e in zip(pads, extra, strict=True)]
    total = lax.reduce_window(x, jnp.array(0, x.dtype), lax.add, window, step, padding,
                              window_dilation=(1, 1, *dilations))
    # the divisor, computed now in NumPy: taps inside the input, plus the explicit pads when count_include_pad (never
    # ceil_mode's overhang); a box, so the product of per-axis counts
    counts = np.ones((), np.float32)
    include = bool(node.get("count_include_pad", 0))
    for axis, (size, k, s, d, p) in enumerate(zip(np.shape(x)[2:], kernel, strides, dilations, pads, strict=True)):
        per_axis = _window_counts(size, total.shape[2 + axis], k, s, d, p, include).astype(np.float32)
        counts = counts[..., None] * per_axis
    return total / counts.astype(np.dtype(x.dtype))


@op("GlobalAveragePool")
def _global_average_pool(node: JaxNode, x: Any) -> Any:
    return jnp.mean(x, axis=tuple(range(2, x.ndim)), keepdims=True)


@op("GlobalMaxPool")
def _global_max_pool(node: JaxNode, x: Any) -> Any:
    return jnp.max(x, axis=tuple(range(2, x.ndim)), keepdims=True)


@op("LRN")
def _lrn(node: JaxNode, x: Any) -> Any:
    """x / (bias + alpha/size * sum of x^2 over the ``size`` channels around each) ** beta."""
    size = int(node.get("size"))
    alpha, beta, bias = node.get("alpha", 1e-4), node.get("beta", 0.75), node.get("bias", 1.0)
    window = (1, size) + (1,) * (x.ndim - 2)
    padding = [(0, 0), ((size - 1) // 2, size - 1 - (size - 1) // 2)] + [(0, 0)] * (x.ndim - 2)
    summed = lax.reduce_window(x * x, jnp.array(0, x.dtype), lax.add, window, (1,) * x.ndim, padding)
    return x / (bias + (alpha / size) * summed) ** beta


# --- normalisation -------------------------------------------------------------------------------------------------


def _channel(v: Any, ndim: int) -> Any:
    return jnp.reshape(v, (1, -1) + (1,) * (ndim - 2))


@op("BatchNormalization")
def _batch_norm(node: JaxNode, x: Any, scale: Any, bias: Any, mean: Any, var: Any) -> Any:
    if node.get("training_mode", 0):
        raise node.fail("training_mode=1 is not supported (inference only)")
    factor = jnp.asarray(scale) / jnp.sqrt(jnp.asarray(var) + node.get("epsilon", 1e-5))
    return x * _channel(factor, x.ndim) + _channel(jnp.asarray(bias) - jnp.asarray(mean) * factor, x.ndim)


@op("InstanceNormalization")
def _instance_norm(node: JaxNode, x: Any, scale: Any, bias: Any) -> Any:
    axes = tuple(range(2, x.ndim))
    mean = jnp.mean(x, axis=axes, keepdims=True)
    var = jnp.mean(jnp.square(x - mean), axis=axes, keepdims=True)
    normed = (x - mean) * lax.rsqrt(var + node.get("epsilon", 1e-5))
    return normed * _channel(scale, x.ndim) + _channel(bias, x.ndim)


@op("LayerNormalization")
def _layer_norm(node: JaxNode, x: Any, scale: Any, bias: Any = None) -> Any:
    axis = node.get("axis", -1) % x.ndim
    axes = tuple(range(axis, x.ndim))
    mean = jnp.mean(x, axis=axes, keepdims=True)
    var = jnp.mean(jnp.square(x - mean), axis=axes, keepdims=True)
    inv = lax.rsqrt(var + node.get("epsilon", 1e-5))
    y = (x - mean) * inv * scale
    y = y if bias is None else y + bias
    return (y, mean, inv)[: node.outputs] if node.outputs > 1 else y


# --- Pad and Resize ------------------------------------------------------------------------------------------------


@op("Pad")
def _pad(node: JaxNode, x: Any, pads: Any = None, value: Any = None, axes: Any = None) -> Any:
    rank = np.ndim(x)
    flat = list(node.get("pads")) if node.opset < 11 else static_ints(node, pads, "pads")
    which = static_ints(node, axes, "axes") if axes is not None else list(range(rank))
    width = [(0, 0)] * rank
    for i, axis in enumerate(which):
        width[int(axis) % rank] = (flat[i], flat[i + len(which)])
    if any(lo < 0 or hi < 0 for lo, hi in width):
        raise node.fail("negative pads are not supported")
    mode = node.get("mode", "constant")
    if mode == "constant":
        fill = node.get("value", 0.0) if node.opset < 11 else (0 if value is None else value)
        fill_value = static_value(node, fill, "the constant value").reshape(-1)
        return jnp.pad(x, width, mode="constant", constant_values=fill_value[0] if fill_value.size else 0)
    if mode in ("reflect", "edge"):
        return jnp.pad(x, width, mode=mode)
    raise node.fail(f"mode {mode!r} is not supported")


def _source_coords(node: JaxNode, out_size: int, in_size: int, scale: float) -> np.ndarray:
    """Where each output index falls in the input, by ``coordinate_transformation_mode``."""
    mode = node.get("coordinate_transformation_mode", "half_pixel")
    i = np.arange(out_size, dtype=np.float64)
    if mode == "asymmetric":
        return i / scale
    if mode == "align_corners":
        return i * (in_size - 1) / (out_size - 1) if out_size > 1 else np.zeros_like(i)
    if mode == "pytorch_half_pixel":
        return (i + 0.5) / scale - 0.5 if out_size > 1 else np.zeros_like(i)
    if mode in ("half_pixel", "half_pixel_symmetric"):
        if mode == "half_pixel_symmetric":
            offset = in_size / 2 * (1 - out_size / (in_size * scale))
            return (i + 0.5) / scale - 0.5 + offset
        return (i + 0.5) / scale - 0.5
    raise node.fail(f"coordinate_transformation_mode {mode!r} is not supported")


def _nearest(node: JaxNode, coords: np.ndarray) -> np.ndarray:
    rounding: dict[str, Callable[[np.ndarray], np.ndarray]] = {
        "round_prefer_floor": lambda c: np.ceil(c - 0.5),
        "round_prefer_ceil": lambda c: np.floor(c + 0.5),
        "floor": np.floor,
        "ceil": np.ceil,
    }
    mode = node.get("nearest_mode", "round_prefer_floor")
    if mode not in rounding:
        raise node.fail(f"nearest_mode {mode!r} is not supported")
    return rounding[mode](coords).astype(np.int64)


@op("Resize", "Upsample")
def _resize(node: JaxNode, x: Any, *rest: Any) -> Any:
    shape = np.shape(x)
    if node.op_type == "Upsample" or node.opset < 11:  # before opset 11: asymmetric coordinates, floor rounding
        scales_in = node.get("scales") if node.opset < 9 else rest[0]
        sizes_in = None
        legacy = {"coordinate_transformation_mode": "asymmetric", "nearest_mode": "floor"}
        node = dataclasses.replace(node, attrs={**node.attrs, **legacy})
    else:
        scales_in = rest[1] if len(rest) > 1 else None
        sizes_in = rest[2] if len(rest) > 2 else None
    if node.get("antialias", 0) or node.get("axes") is not None:
        raise node.fail("antialias and axes are not supported")
    if sizes_in is not None and np.size(static_value(node, sizes_in, "sizes")):
        sizes = static_ints(node, sizes_in, "sizes")
        scales = [o / i for o, i in zip(sizes, shape, strict=True)]
    else:
        scales = [float(s) for s in static_value(node, scales_in, "scales").reshape(-1)]
        sizes = [math.floor(i * s) for i, s in zip(shape, scales, strict=True)]
    mode = node.get("mode", "nearest")
    if mode not in ("nearest", "linear"):
        raise node.fail(f"mode {mode!r} is not supported (nearest and linear are)")
    for axis, (n_in, n_out, scale) in enumerate(zip(shape, sizes, scales, strict=True)):
        if n_in == n_out and scale == 1.0:
            continue
        coords = _source_coords(node, n_out, n_in, scale)
        if mode == "nearest":
            x = jnp.take(x, np.clip(_nearest(node, coords), 0, n_in - 1), axis=axis)
            continue
        coords = np.clip(coords, 0, n_in - 1)
        lo = np.floor(coords).astype(np.int64)
        hi = np.minimum(lo + 1, n_in - 1)
        frac = (coords - lo).astype(np.float32).reshape([-1 if a == axis else 1 for a in range(len(shape))])
        x = jnp.take(x, lo, axis=axis) * (1 - frac) + jnp.take(x, hi, axis=axis) * frac
    return x


# --- recurrences ---------------------------------------------------------------------------------------------------


def _activation(name: str) -> Callable[[Any], Any]:
    table: dict[str, Callable[[Any], Any]] = {"Sigmoid": jax.nn.sigmoid, "Tanh": jnp.tanh, "Relu": jax.nn.relu}
    return table[name]


def _recurrence(node: JaxNode, x: Any, gates: int, step: Callable[..., tuple[Any, ...]], weights: tuple[Any, ...],
                initial: tuple[Any, ...]) -> tuple[Any, ...]:
    """Run ``step`` over time for each direction; (Y, Y_h[, Y_c]) in ONNX's layouts (layout=0: time first)."""
    if node.get("layout", 0):
        raise node.fail("layout=1 is not supported")
    direction = node.get("direction", "forward")
    directions = 2 if direction == "bidirectional" else 1
    w, r, b = weights
    hidden = int(node.get("hidden_size"))
    ys, finals = [], []
    for d in range(directions):
        bias = b[d] if b is not None else jnp.zeros(2 * gates * hidden, x.dtype)
        state0 = tuple(s[d] if s is not None else jnp.zeros((np.shape(x)[1], hidden), x.dtype) for s in initial)
        reverse = direction == "reverse" or d == 1
        xw = jnp.einsum("tbi,gi->tbg", x, w[d]) + bias[: gates * hidden]

        def body(state: tuple[Any, ...], xt: Any, d: int = d, bias: Any = bias) -> tuple[tuple[Any, ...], Any]:
            new = step(xt, state, r[d], bias[gates * hidden:])
            return new, new[0]

        final, y = lax.scan(body, state0, xw, reverse=reverse)
        ys.append(y)
        finals.append(final)
    y_all = jnp.stack(ys, axis=1)  # (T, directions, B, H)
    outs = [y_all, jnp.stack([f[0] for f in finals])]
    if len(initial) > 1:
        outs.append(jnp.stack([f[1] for f in finals]))
    return tuple(outs)


@op("LSTM")
def _lstm(node: JaxNode, x: Any, w: Any, r: Any, b: Any = None, lengths: Any = None, h0: Any = None,
          c0: Any = None, p: Any = None) -> Any:
    if lengths is not None or p is not None or node.get("input_forget", 0) or node.get("clip") is not None:
        raise node.fail("sequence_lens, peepholes, input_forget and clip are not supported")
    names = list(node.get("activations") or ["Sigmoid", "Tanh", "Tanh"])
    f, g, h = (_activation(a.decode() if isinstance(a, bytes) else a) for a in names[:3])

    def step(xt: Any, state: tuple[Any, Any], rd: Any, rb: Any) -> tuple[Any, Any]:
        ht, ct = state
        z = xt + ht @ rd.T + rb
        i, o, fg, c = jnp.split(z, 4, axis=-1)  # ONNX's gate order: i, o, f, c
        c_new = f(fg) * ct + f(i) * g(c)
        return f(o) * h(c_new), c_new

    return _recurrence(node, x, 4, step, (w, r, b), (h0, c0))[: node.outputs]


@op("GRU")
def _gru(node: JaxNode, x: Any, w: Any, r: Any, b: Any = None, lengths: Any = None, h0: Any = None) -> Any:
    if lengths is not None or node.get("clip") is not None:
        raise node.fail("sequence_lens and clip are not supported")
    names = list(node.get("activations") or ["Sigmoid", "Tanh"])
    f, g = (_activation(a.decode() if isinstance(a, bytes) else a) for a in names[:2])
    before = bool(node.get("linear_before_reset", 0))
    hidden = int(node.get("hidden_size"))

    def step(xt: Any, state: tuple[Any], rd: Any, rb: Any) -> tuple[Any]:
        (ht,) = state
        xz, xr, xh = jnp.split(xt, 3, axis=-1)  # ONNX's gate order: z, r, h
        rz, rr, rh = rd[:hidden], rd[hidden: 2 * hidden], rd[2 * hidden:]
        bz, br, bh = rb[:hidden], rb[hidden: 2 * hidden], rb[2 * hidden:]
        z = f(xz + ht @ rz.T + bz)
        reset = f(xr + ht @ rr.T + br)
        candidate = g(xh + reset * (ht @ rh.T + bh)) if before else g(xh + (reset * ht) @ rh.T + bh)
        return ((1 - z) * candidate + z * ht,)

    return _recurrence(node, x, 3, step, (w, r, b), (h0,))[: node.outputs]
