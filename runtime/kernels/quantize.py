"""Linear quantization: QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear and the integer/quantized
MatMul and Conv (MatMulInteger, QLinearMatMul, ConvInteger, QLinearConv).

Scales and zero points are per tensor (scalar), per axis (1-D along ``axis``) or blocked (the input's shape
with ``axis`` divided into blocks of ``block_size``). Quantizing rounds half to even and saturates to the
target range; float8 targets saturate to the largest finite value unless ``saturate=0``.
Integer products accumulate in int64 so no intermediate overflows; results are int32 as ONNX requires.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import ml_dtypes
import numpy as np
from numpy.lib.stride_tricks import sliding_window_view
from onnx import TensorProto

from runtime.kernels.base import Kernel, register
from runtime.kernels.cast import FLOAT8_TYPES, ML_FLOAT_DTYPES, cast_array, np_dtype, onnx_type, to_work

#: Saturation range of each integer quantized type.
_INTEGER_RANGES: dict[int, tuple[int, int]] = {
    TensorProto.UINT8: (0, 255),
    TensorProto.INT8: (-128, 127),
    TensorProto.UINT16: (0, 65535),
    TensorProto.INT16: (-32768, 32767),
    TensorProto.UINT4: (0, 15),
    TensorProto.INT4: (-8, 7),
    TensorProto.UINT2: (0, 3),
    TensorProto.INT2: (-2, 1),
}
#: Float targets without Inf/NaN: casting already saturates, and the zero point is added in float.
_SMALL_FLOAT_TYPES = frozenset({TensorProto.FLOAT4E2M1, TensorProto.FLOAT6E2M3, TensorProto.FLOAT6E3M2})


def broadcast_quant_param(value: np.ndarray, shape: tuple[int, ...], axis: int, block_size: int) -> np.ndarray:
    """Shape a scale or zero point so it broadcasts against an input of ``shape``.

    Scalar (or one element): per tensor. 1-D without ``block_size``: per axis. Otherwise blocked: each entry is
    repeated ``block_size`` times along ``axis`` and the last block trimmed to the input's length.
    """
    if value.ndim == 0 or value.size == 1:
        return value.reshape(())
    if axis < 0:
        axis += len(shape)
    if not block_size:
        if value.ndim != 1 or value.size != shape[axis]:
            raise ValueError(f"per-axis scale of shape {value.shape} does not match axis {axis} of {shape}")
        dims = [1] * len(shape)
        dims[axis] = value.size
        return value.reshape(dims)
    if block_size < 0:
        raise ValueError(f"block_size must be positive, not {block_size}")
    expanded = np.repeat(value, block_size, axis=axis)
    expanded = np.take(expanded, range(shape[axis]), axis=axis)
    if expanded.shape != tuple(shape):
        raise ValueError(f"blocked scale of shape {value.shape} does not tile input {shape} along axis {axis}")
    return expanded


@register
class QuantizeLinear(Kernel):
    """``y = saturate(round(x / y_scale) + y_zero_point)``; the output type is the zero point's type, else
    ``output_dtype``, else uint8. One class covers opsets 10–25: later opsets only add attributes
    (``axis``, ``saturate``, ``block_size``, ``output_dtype``, ``precision``) whose defaults give the old behaviour.
    """

    op_type = "QuantizeLinear"
    since_version = 10
    attr_defaults: ClassVar[dict[str, Any]] = {
        "axis": 1,
        "saturate": 1,
        "block_size": 0,
        "output_dtype": 0,
        "precision": 0,
    }

    def compute(self, x: np.ndarray, scale: np.ndarray, zero_point: np.ndarray | None = None) -> np.ndarray:
        axis, block = int(self.attrs["axis"]), int(self.attrs["block_size"])
        target = int(self.attrs["output_dtype"])
        if zero_point is not None:
            zero_type = onnx_type(zero_point.dtype)
            if target and target != zero_type:
                raise ValueError(f"output_dtype {target} differs from the zero point's type {zero_type}")
            target = zero_type
        target = target or TensorProto.UINT8
        scale = broadcast_quant_param(scale, x.shape, axis, block)
        precision = int(self.attrs["precision"])
        # The division runs in ``precision``, else in the scale's type (float32 stands in for bfloat16).
        work = np_dtype(precision) if precision else np.dtype(scale.dtype)
        work = work if work.kind == "f" else np.dtype(np.float32)
        with np.errstate(all="ignore"):
            scaled = np.divide(to_work(x).astype(work), to_work(scale).astype(work))
        zp = None if zero_point is None else broadcast_quant_param(to_work(zero_point), x.shape, axis, block)
        if target in _INTEGER_RANGES:
            low, high = _INTEGER_RANGES[target]
            rounded = np.rint(scaled).astype(np.int64)
            if zp is not None:
                rounded = rounded + zp.astype(np.int64)
            return np.clip(rounded, low, high).astype(np_dtype(target))
        if target in FLOAT8_TYPES:
            return cast_array(np.asarray(scaled), target, saturate=bool(self.attrs["saturate"]))
        if target in _SMALL_FLOAT_TYPES:
            if zp is not None:
                scaled = scaled + zp
            return np.asarray(scaled).astype(np_dtype(target))
        raise ValueError(f"cannot quantize to element type {target}")


@register
class DequantizeLinear(Kernel):
    """``y = (x - x_zero_point) * x_scale``, in the scale's type (or ``output_dtype``). One class covers
    opsets 10–25 (later opsets add ``axis``, ``block_size``, ``output_dtype`` with backward-compatible defaults).
    """

    op_type = "DequantizeLinear"
    since_version = 10
    attr_defaults: ClassVar[dict[str, Any]] = {"axis": 1, "block_size": 0, "output_dtype": 0}

    def compute(self, x: np.ndarray, scale: np.ndarray, zero_point: np.ndarray | None = None) -> np.ndarray:
        axis, block = int(self.attrs["axis"]), int(self.attrs["block_size"])
        values = to_work(x).astype(np.float32)
        if zero_point is not None and x.dtype not in ML_FLOAT_DTYPES:
            values = values - broadcast_quant_param(to_work(zero_point), x.shape, axis, block)
        out = values * broadcast_quant_param(to_work(scale), x.shape, axis, block)
        output_dtype = int(self.attrs["output_dtype"])
        dtype = np_dtype(output_dtype) if output_dtype else scale.dtype
        return np.asarray(out).astype(dtype)


@register
class DynamicQuantizeLinear(Kernel):
    """uint8 quantization with scale and zero point from the data's range (extended to include 0)."""

    op_type = "DynamicQuantizeLinear"
    since_version = 11

    def compute(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        data = x.astype(np.float32, copy=False)
        f32 = np.float32
        high = f32(max(0.0, float(np.max(data)))) if data.size else f32(0)
        low = f32(min(0.0, float(np.min(data)))) if data.size else f32(0)
        scale = f32(1.0) if high == low else f32(high - low) / f32(255)
        zero_point = np.rint(np.clip(f32(0) - low / scale, 0, 255))
        with np.errstate(all="ignore"):
            y = np.clip(np.rint(data / scale) + zero_point, 0, 255)
        return (
            y.astype(np.uint8),
            np.asarray(scale, dtype=x.dtype),
            np.asarray(zero_point).astype(np.uint8),
        )


# --------------------------------------------------------------------------------------------- integer matmul


def _row_param(value: np.ndarray | None, a: np.ndarray) -> np.ndarray | int:
    """A per-row zero point or scale for ``a`` (``[M]`` with ``a`` of shape ``[..., M, K]``) as a column."""
    if value is None:
        return 0
    v = to_work(value)
    if v.ndim == 1 and v.size > 1 and a.ndim >= 2:
        return v.reshape(-1, 1)
    return v


def _centered(x: np.ndarray, zero_point: np.ndarray | int) -> np.ndarray:
    """``x - zero_point`` exactly: int64 for integer types, float64 for float8 inputs."""
    wide = np.float64 if x.dtype in ML_FLOAT_DTYPES else np.int64
    return to_work(x).astype(wide) - to_work(np.asarray(zero_point)).astype(wide)


@register
class MatMulInteger(Kernel):
    """``(A - a_zero_point) @ (B - b_zero_point)`` as int32; A's zero point may be per row, B's per column."""

    op_type = "MatMulInteger"
    uses_blas = True
    since_version = 10

    def compute(
        self, a: np.ndarray, b: np.ndarray, a_zero: np.ndarray | None = None, b_zero: np.ndarray | None = None
    ) -> np.ndarray:
        b_zp = 0 if b_zero is None else to_work(b_zero)
        return np.matmul(_centered(a, _row_param(a_zero, a)), _centered(b, b_zp)).astype(np.int32)


def _requantize(acc: np.ndarray, multiplier: np.ndarray, zero_point: np.ndarray | None, dtype: Any) -> np.ndarray:
    """Accumulator * real multiplier + zero point, saturated to ``dtype``: rounded half to even for integer
    types, cast with saturation (round to nearest even) for float8 types."""
    real = acc.astype(np.float64) * multiplier.astype(np.float64)
    if zero_point is not None:
        real = real + to_work(zero_point).astype(np.float64)
    if np.dtype(dtype) in ML_FLOAT_DTYPES:
        return cast_array(real, onnx_type(np.dtype(dtype)), saturate=True)
    info = ml_dtypes.iinfo(dtype)
    return np.clip(np.rint(real), int(info.min), int(info.max)).astype(dtype)


@register
class QLinearMatMul(Kernel):
    """Quantized MatMul: product of the centred inputs, rescaled by ``a_scale*b_scale/y_scale``.

    Integer inputs multiply exactly in int64; float8 inputs (opset 21) in float64.
    """

    op_type = "QLinearMatMul"
    uses_blas = True
    since_version = 10

    def compute(
        self,
        a: np.ndarray,
        a_scale: np.ndarray,
        a_zero: np.ndarray | None,
        b: np.ndarray,
        b_scale: np.ndarray,
        b_zero: np.ndarray | None,
        y_scale: np.ndarray,
        y_zero: np.ndarray | None = None,
    ) -> np.ndarray:
        b_zp = 0 if b_zero is None else to_work(b_zero)
        acc = np.matmul(_centered(a, _row_param(a_zero, a)), _centered(b, b_zp))
        multiplier = np.asarray(_row_param(a_scale, a) * to_work(b_scale) / to_work(y_scale))
        dtype = y_zero.dtype if y_zero is not None else a.dtype
        return _requantize(acc, multiplier, y_zero, dtype)


# --------------------------------------------------------------------------------------------- integer conv


def conv_pads(
    spatial: Sequence[int], kernel: Sequence[int], attrs: dict[str, Any]
) -> tuple[list[int], list[int], list[int]]:
    """``(strides, dilations, pads)`` of a convolution, resolving ``auto_pad`` (SAME_UPPER pads more at the end)."""
    nd = len(spatial)
    strides = list(attrs.get("strides") or [1] * nd)
    dilations = list(attrs.get("dilations") or [1] * nd)
    auto_pad = str(attrs.get("auto_pad") or "NOTSET")
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        begin, end = [], []
        for size, k, s, d in zip(spatial, kernel, strides, dilations, strict=True):
            out = -(-size // s)
            total = max(0, (out - 1) * s + (k - 1) * d + 1 - size)
            small = total // 2
            begin.append(small if auto_pad == "SAME_UPPER" else total - small)
            end.append(total - begin[-1])
        pads = begin + end
    elif auto_pad == "VALID":
        pads = [0] * (2 * nd)
    else:
        pads = list(attrs.get("pads") or [0] * (2 * nd))
    return strides, dilations, pads


def conv_integer_nd(x: np.ndarray, w: np.ndarray, attrs: dict[str, Any]) -> np.ndarray:
    """N-D grouped convolution of int64 ``x`` [N, C, *S] with ``w`` [M, C/group, *K] by im2col (zero padding)."""
    nd = x.ndim - 2
    kernel = list(attrs.get("kernel_shape") or w.shape[2:])
    strides, dilations, pads = conv_pads(x.shape[2:], kernel, attrs)
    padded = np.pad(x, [(0, 0), (0, 0)] + [(pads[i], pads[i + nd]) for i in range(nd)])
    extent = [(k - 1) * d + 1 for k, d in zip(kernel, dilations, strict=True)]
    windows = sliding_window_view(padded, extent, axis=tuple(range(2, 2 + nd)))
    picks = (slice(None), slice(None))
    picks += tuple(slice(None, None, s) for s in strides) + tuple(slice(None, None, d) for d in dilations)
    windows = windows[picks]  # [N, C, *out, *kernel]
    group = int(attrs.get("group", 1))
    c_per_group, m_per_group = x.shape[1] // group, w.shape[0] // group
    kernel_axes = list(range(2 + nd, 2 + 2 * nd))
    outputs = []
    for g in range(group):
        cols = windows[:, g * c_per_group : (g + 1) * c_per_group]
        weights = w[g * m_per_group : (g + 1) * m_per_group]
        part = np.tensordot(cols, weights, axes=([1, *kernel_axes], [1, *range(2, 2 + nd)]))
        outputs.append(np.moveaxis(part, -1, 1))  # [N, *out, M/g] -> [N, M/g, *out]
    return np.concatenate(outputs, axis=1)


def _channel_param(value: np.ndarray | None, ndim: int) -> np.ndarray | int:
    """A per-output-channel weight zero point or scale (``[M]``) shaped to broadcast over ``[M, ...]``."""
    if value is None:
        return 0
    v = to_work(value)
    if v.ndim == 1 and v.size > 1:
        return v.reshape((-1,) + (1,) * (ndim - 1))
    return v.reshape(()) if v.size == 1 else v


class _IntegerConv(Kernel):
    """Convolution of ``(x - x_zero_point)`` with ``(w - w_zero_point)`` in integers (int64 accumulators)."""

    uses_blas = True
    since_version = 10
    attr_defaults: ClassVar[dict[str, Any]] = {"auto_pad": "NOTSET", "group": 1}

    def accumulate(
        self, x: np.ndarray, w: np.ndarray, x_zero: np.ndarray | None, w_zero: np.ndarray | None
    ) -> np.ndarray:
        x_zp = 0 if x_zero is None else to_work(x_zero)
        return conv_integer_nd(_centered(x, x_zp), _centered(w, _channel_param(w_zero, w.ndim)), self.attrs)


@register
class ConvInteger(_IntegerConv):
    """Integer convolution of ``(x - x_zero_point)`` with ``(w - w_zero_point)``; int32 output."""

    op_type = "ConvInteger"

    def compute(
        self, x: np.ndarray, w: np.ndarray, x_zero: np.ndarray | None = None, w_zero: np.ndarray | None = None
    ) -> np.ndarray:
        return self.accumulate(x, w, x_zero, w_zero).astype(np.int32)


@register
class QLinearConv(_IntegerConv):
    """Quantized Conv: integer convolution (+ int32 bias), rescaled by ``x_scale*w_scale/y_scale``."""

    op_type = "QLinearConv"

    def compute(
        self,
        x: np.ndarray,
        x_scale: np.ndarray,
        x_zero: np.ndarray | None,
        w: np.ndarray,
        w_scale: np.ndarray,
        w_zero: np.ndarray | None,
        y_scale: np.ndarray,
        y_zero: np.ndarray | None = None,
        bias: np.ndarray | None = None,
    ) -> np.ndarray:
        acc = self.accumulate(x, w, x_zero, w_zero)
        if bias is not None:
            acc = acc + bias.astype(np.int64).reshape((-1,) + (1,) * (acc.ndim - 2))
        w_scale_shaped = _channel_param(w_scale, acc.ndim - 1)  # [M, 1, ...] over [N, M, *out]
        multiplier = np.asarray(to_work(x_scale) * w_scale_shaped / to_work(y_scale))
        dtype = y_zero.dtype if y_zero is not None else x.dtype
        return _requantize(acc, multiplier, y_zero, dtype)
