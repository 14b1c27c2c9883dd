"""Activation functions, Clip, and the axis-wise Softmax / LogSoftmax / Hardmax.

Each kernel computes on the work dtype (float32 for bfloat16) and returns the input's dtype. Softmax-family
ops before opset 13 flatten the input to 2-D at ``axis`` (default 1) and normalise each row; from opset 13 they
normalise along ``axis`` (default -1) only.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import numpy as np

from runtime.kernels.base import Kernel, define_kernel, define_legacy, register, store_into
from runtime.kernels.cast import to_dtype, to_work
from runtime.kernels.elementwise import _Unary, erf


class _Activation(_Unary):
    """``y = self.apply(x)`` on the work dtype, returned as ``x``'s dtype; ``apply`` is ``fn`` for an activation
    without attributes."""

    def apply(self, x: np.ndarray) -> Any:
        return type(self).fn(x)

    def compute(self, x: np.ndarray) -> np.ndarray:
        with np.errstate(all="ignore"):
            return to_dtype(self.apply(to_work(x)), x.dtype)


def sigmoid(x: np.ndarray) -> np.ndarray:
    """Logistic function; ``exp(-x)`` overflowing to Inf for very negative ``x`` correctly gives 0."""
    with np.errstate(over="ignore"):
        e = np.exp(-x)
    e += 1
    return np.reciprocal(e, out=e)


def softplus(x: np.ndarray) -> np.ndarray:
    """``log(1 + exp(x))`` without overflow, as ``max(x, 0) + log1p(exp(-|x|))``: NumPy's ``logaddexp(x, 0)`` took
    28 ns an element here, 40 times its ``exp``."""
    with np.errstate(over="ignore", invalid="ignore"):
        return np.maximum(x, x.dtype.type(0)) + np.log1p(np.exp(-np.abs(x)))


def _relu(x: np.ndarray) -> Any:
    return np.maximum(x, x.dtype.type(0))


def _hard_swish(x: np.ndarray) -> Any:
    return x * np.clip(x / 6 + 0.5, 0, 1)


def _softsign(x: np.ndarray) -> Any:
    return x / (1 + np.abs(x))


def _mish(x: np.ndarray) -> Any:
    return x * np.tanh(softplus(x))


# The activations without attributes, one line each; those with attributes are classes below.
Relu = define_kernel(_Activation, "Relu", _relu, amp_class="either")
Sigmoid = define_kernel(_Activation, "Sigmoid", sigmoid, amp_class="either")
HardSwish = define_kernel(_Activation, "HardSwish", _hard_swish, amp_class="either", since_version=14)
Softplus = define_kernel(_Activation, "Softplus", softplus, amp_class="fp32")
Softsign = define_kernel(_Activation, "Softsign", _softsign)
Mish = define_kernel(_Activation, "Mish", _mish, since_version=18)


@register
class LeakyRelu(_Activation):
    op_type = "LeakyRelu"
    amp_class = "either"
    attr_defaults: ClassVar[dict[str, Any]] = {"alpha": 0.01}

    def apply(self, x: np.ndarray) -> Any:
        alpha = self.attrs["alpha"]
        scaled = x * alpha  # for alpha <= 1 the larger of x and alpha*x is x on x >= 0, alpha*x below
        return np.maximum(x, scaled) if alpha <= 1 else np.minimum(x, scaled)


@register
class Elu(_Activation):
    op_type = "Elu"
    amp_class = "either"
    attr_defaults: ClassVar[dict[str, Any]] = {"alpha": 1.0}

    def apply(self, x: np.ndarray) -> Any:
        return np.where(x > 0, x, self.attrs["alpha"] * np.expm1(x))


@register
class Selu(_Activation):
    op_type = "Selu"
    amp_class = "either"
    attr_defaults: ClassVar[dict[str, Any]] = {"alpha": 1.67326319217681884765625, "gamma": 1.05070102214813232421875}

    def apply(self, x: np.ndarray) -> Any:
        alpha, gamma = self.attrs["alpha"], self.attrs["gamma"]
        return gamma * np.where(x > 0, x, alpha * np.expm1(x))


@register
class Celu(_Activation):
    op_type = "Celu"
    since_version = 12
    attr_defaults: ClassVar[dict[str, Any]] = {"alpha": 1.0}

    def apply(self, x: np.ndarray) -> Any:
        alpha = self.attrs["alpha"]
        return np.maximum(x, 0) + np.minimum(0, alpha * np.expm1(x / alpha))


@register
class PRelu(Kernel):
    """``x`` where ``x >= 0``, else ``slope * x``; ``slope`` broadcasts to ``x`` (opset 7+)."""

    op_type = "PRelu"
    amp_class = "either"
    since_version = 7

    def compute(self, x: np.ndarray, slope: np.ndarray) -> np.ndarray:
        slope = self.align_slope(x, slope)
        with np.errstate(all="ignore"):
            w = to_work(x)
            return to_dtype(np.where(w >= 0, w, w * to_work(slope)), x.dtype)

    def align_slope(self, x: np.ndarray, slope: np.ndarray) -> np.ndarray:
        return slope


@register
class PReluLegacy(PRelu):
    """Opset 1–6: a 1-D slope of length C is per channel (axis 1), not NumPy-aligned to the last axis."""

    since_version = 1

    def align_slope(self, x: np.ndarray, slope: np.ndarray) -> np.ndarray:
        if slope.ndim == 1 and slope.size > 1 and x.ndim > 2 and slope.size == x.shape[1]:
            return slope.reshape((-1,) + (1,) * (x.ndim - 2))
        return slope


@register
class HardSigmoid(_Activation):
    op_type = "HardSigmoid"
    amp_class = "either"
    attr_defaults: ClassVar[dict[str, Any]] = {"alpha": 0.2, "beta": 0.5}

    def apply(self, x: np.ndarray) -> Any:
        return np.clip(x * self.attrs["alpha"] + self.attrs["beta"], 0, 1)


@register
class Shrink(_Activation):
    """``x + bias`` below ``-lambd``, ``x - bias`` above ``lambd``, 0 between."""

    op_type = "Shrink"
    since_version = 9
    attr_defaults: ClassVar[dict[str, Any]] = {"bias": 0.0, "lambd": 0.5}

    def apply(self, x: np.ndarray) -> Any:
        bias, lambd = self.attrs["bias"], self.attrs["lambd"]
        return np.where(x < -lambd, x + bias, np.where(x > lambd, x - bias, 0))


@register
class ThresholdedRelu(_Activation):
    op_type = "ThresholdedRelu"
    since_version = 10
    attr_defaults: ClassVar[dict[str, Any]] = {"alpha": 1.0}

    def apply(self, x: np.ndarray) -> Any:
        return np.where(x > self.attrs["alpha"], x, 0)


@register
class Gelu(_Activation):
    """Exact ``x * Phi(x)`` (``approximate="none"``) or the tanh approximation (``"tanh"``)."""

    op_type = "Gelu"
    amp_class = "fp32"
    since_version = 20
    attr_defaults: ClassVar[dict[str, Any]] = {"approximate": "none"}

    def setup(self) -> None:
        if self.attrs["approximate"] not in ("none", "tanh"):
            raise ValueError(f"approximate must be 'none' or 'tanh', not {self.attrs['approximate']!r}")

    def apply(self, x: np.ndarray) -> Any:
        if self.attrs["approximate"] == "tanh":
            inner = math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)
            return 0.5 * x * (1 + np.tanh(inner))
        return 0.5 * x * (1 + erf(x / math.sqrt(2)))


@register
class Swish(_Activation):
    """``x * sigmoid(alpha * x)``."""

    op_type = "Swish"
    since_version = 24
    attr_defaults: ClassVar[dict[str, Any]] = {"alpha": 1.0}

    def apply(self, x: np.ndarray) -> Any:
        return x * sigmoid(x * self.attrs["alpha"])


# --------------------------------------------------------------------------------------------- Clip


def _clip(x: np.ndarray, low: Any, high: Any) -> np.ndarray:
    """``min(max(x, low), high)``: NaN stays NaN, and ``low > high`` gives ``high`` everywhere (ONNX rule)."""
    out = to_work(x)
    if low is not None:
        out = np.maximum(out, np.asarray(low).astype(out.dtype))
    if high is not None:
        out = np.minimum(out, np.asarray(high).astype(out.dtype))
    return to_dtype(out, x.dtype) if out is not x else x.copy()


@register
class ClipAttributes(Kernel):
    """Opset 1–10: bounds are the ``min``/``max`` attributes (default: the float32 range, as the spec says)."""

    op_type = "Clip"
    since_version = 1
    attr_defaults: ClassVar[dict[str, Any]] = {"min": -3.4028234663852886e38, "max": 3.4028234663852886e38}

    def compute(self, x: np.ndarray) -> np.ndarray:
        return _clip(x, self.attrs.get("min"), self.attrs.get("max"))


@register
class Clip(Kernel):
    """Opset 11+: bounds are optional scalar inputs ``min`` and ``max``."""

    op_type = "Clip"
    since_version = 11

    def compute(self, x: np.ndarray, low: np.ndarray | None = None, high: np.ndarray | None = None) -> np.ndarray:
        return _clip(x, low, high)


# --------------------------------------------------------------------------------------------- softmax family


def _softmax_work(x: np.ndarray) -> np.ndarray:
    """float16 stays float16 here: the ONNX reference (and so the backend suite's expected values, e.g. the
    expanded fp16 Attention cases) normalises in half precision; narrow ml_dtypes floats go to float32."""
    return x if x.dtype == np.float16 else to_work(x)


def _softmax(x: np.ndarray, axis: int) -> np.ndarray:
    shifted = x - np.max(x, axis=axis, keepdims=True)
    e = np.exp(shifted)
    return e / np.sum(e, axis=axis, keepdims=True)


def _log_softmax(x: np.ndarray, axis: int) -> np.ndarray:
    shifted = x - np.max(x, axis=axis, keepdims=True)
    return shifted - np.log(np.sum(np.exp(shifted), axis=axis, keepdims=True))


def _hardmax(x: np.ndarray, axis: int) -> np.ndarray:
    """1 at the first maximum along ``axis``, 0 elsewhere."""
    index = np.expand_dims(np.argmax(x, axis=axis), axis)
    out = np.zeros_like(x)
    np.put_along_axis(out, index, 1, axis=axis)
    return out


class _AxisNormalise(Kernel):
    """Opset 13+: apply ``self.fn`` along ``axis`` (default -1)."""

    since_version = 13
    attr_defaults: ClassVar[dict[str, Any]] = {"axis": -1}

    def fn(self, x: np.ndarray, axis: int) -> np.ndarray:
        raise NotImplementedError

    def compute(self, x: np.ndarray) -> np.ndarray:
        if x.ndim == 0:
            raise ValueError("input must have rank >= 1")
        if x.size == 0:
            return x.copy()
        axis = int(self.attrs["axis"])
        with np.errstate(all="ignore"):
            return to_dtype(self.fn(_softmax_work(x), axis), x.dtype)


class _Coerced2D(_AxisNormalise):
    """Opset 1–12: flatten to ``[prod(shape[:axis]), prod(shape[axis:])]`` and apply along the rows."""

    since_version = 1
    attr_defaults: ClassVar[dict[str, Any]] = {"axis": 1}

    def compute(self, x: np.ndarray) -> np.ndarray:
        axis = int(self.attrs["axis"])
        if axis < 0:
            axis += x.ndim
        if x.size == 0:
            return x.copy()
        rows = int(np.prod(x.shape[:axis], dtype=np.int64))
        flat = _softmax_work(x).reshape(rows, -1)
        with np.errstate(all="ignore"):
            return to_dtype(self.fn(flat, 1).reshape(x.shape), x.dtype)


@register
class Softmax(_AxisNormalise):
    op_type = "Softmax"
    amp_class = "fp32"
    fresh_output = True
    inplace_inputs = (0,)

    def fn(self, x: np.ndarray, axis: int) -> np.ndarray:
        return _softmax(x, axis)

    def _native(self, x: np.ndarray) -> Any:
        """The compiled row kernel when it applies: float32, normalising the last axis."""
        if type(self) is not Softmax or x.dtype != np.float32 or x.ndim == 0 or x.size == 0:
            return None
        if int(self.attrs["axis"]) % x.ndim != x.ndim - 1:
            return None
        from runtime import native

        return native.lib()

    def compute(self, x: np.ndarray) -> np.ndarray:
        if self._native(x) is not None:
            return self.compute_into(None, x)
        return super().compute(x)

    def bind(self, out: np.ndarray, x: np.ndarray) -> Any:
        """A prebound compiled call over fixed buffers (the executor's static plan), or None."""
        lib = self._native(x)
        if lib is None:
            return None
        from runtime.native import ops

        return ops.bind_rows(lib, "softmax", x, out)

    def compute_into(self, out: np.ndarray | None, x: np.ndarray) -> np.ndarray:
        lib = self._native(x)
        if lib is not None:
            from runtime.native import ops

            return ops.softmax_rows(lib, np.ascontiguousarray(x), out)
        y = self.compute(x)
        return store_into(out, y)


@register
class SoftmaxLegacy(_Coerced2D, Softmax):
    """Opset 1-12 Softmax: over the flattened ``shape[axis:]``, which the compiled row kernel runs as rows of a
    C-contiguous float32 array (an image classifier's ``[1, 1000, 1, 1]`` output normalised over axis 1)."""

    def _rows(self, x: np.ndarray) -> tuple[int, int] | None:
        if x.dtype != np.float32 or x.ndim == 0 or x.size == 0 or not x.flags.c_contiguous:
            return None
        axis = int(self.attrs["axis"])
        axis = axis + x.ndim if axis < 0 else axis
        cols = int(np.prod(x.shape[axis:], dtype=np.int64))
        return (x.size // cols, cols) if cols else None

    def _native(self, x: np.ndarray) -> Any:
        if self._rows(x) is None:
            return None
        from runtime import native

        return native.lib()

    def compute(self, x: np.ndarray) -> np.ndarray:
        if self._native(x) is not None:
            return self.compute_into(None, x)
        return _Coerced2D.compute(self, x)

    def compute_into(self, out: np.ndarray | None, x: np.ndarray) -> np.ndarray:
        lib, rows = self._native(x), self._rows(x)
        if lib is None or rows is None or (out is not None and not out.flags.c_contiguous):
            y = _Coerced2D.compute(self, x)
            return store_into(out, y)
        from runtime.native import ops

        y = ops.softmax_rows(lib, x.reshape(rows), None if out is None else out.reshape(rows))
        return y.reshape(x.shape) if out is None else out

    def bind(self, out: np.ndarray, x: np.ndarray) -> Any:
        lib, rows = self._native(x), self._rows(x)
        if lib is None or rows is None or out.shape != x.shape or not out.flags.c_contiguous:
            return None
        from runtime.native import ops

        return ops.bind_rows(lib, "softmax", x.reshape(rows), out.reshape(rows))


LogSoftmax = define_kernel(_AxisNormalise, "LogSoftmax", _log_softmax, amp_class="fp32")
LogSoftmaxLegacy = define_legacy(_Coerced2D, LogSoftmax)
Hardmax = define_kernel(_AxisNormalise, "Hardmax", _hardmax)
HardmaxLegacy = define_legacy(_Coerced2D, Hardmax)
