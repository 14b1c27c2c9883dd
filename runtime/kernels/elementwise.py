"""Element-wise math: unary functions, binary arithmetic with NumPy broadcasting, variadic Max/Min/Sum/Mean.

Every kernel returns the ONNX output type exactly: narrow floats (bfloat16, float8) are computed in float32 and
cast back; integer arithmetic wraps as two's complement, as ONNX and C do. Opset 1–6 binary ops had an explicit
``broadcast``/``axis`` form, kept in the ``*Legacy`` classes.
"""

from __future__ import annotations

import functools
from typing import Any, ClassVar

import numpy as np

from runtime.kernels.base import Kernel, define_kernel, define_legacy, register
from runtime.kernels.cast import is_float, is_integer, to_dtype, to_work
from runtime.kernels.special import erf

# --------------------------------------------------------------------------------------------- unary


class _Unary(Kernel):
    """``y = fn(x)`` computed on the work dtype and returned as ``x``'s dtype."""

    fn: ClassVar[Any]

    def compute(self, x: np.ndarray) -> np.ndarray:
        with np.errstate(all="ignore"):
            return to_dtype(type(self).fn(to_work(x)), x.dtype)

    def compute_into(self, out: np.ndarray | None, x: np.ndarray) -> np.ndarray:
        """The result in ``out`` (a buffer of the static plan): the op after it then reads a fixed address and can
        run as a prebound compiled call (a decoder's ConvTranspose after a LeakyRelu)."""
        y = self.compute(x)
        if out is None or out.shape != y.shape or out.dtype != y.dtype:
            return y
        np.copyto(out, y)
        return out


def _reciprocal(x: np.ndarray) -> np.ndarray:
    return np.divide(1, x, dtype=x.dtype if x.dtype.kind == "f" else np.float64)


# One line per op: (class name = op type, function, traits). Opset versions are where the op's current form begins.
Abs = define_kernel(_Unary, "Abs", np.abs, amp_class="either")
Neg = define_kernel(_Unary, "Neg", np.negative, amp_class="either")
Reciprocal = define_kernel(_Unary, "Reciprocal", _reciprocal, amp_class="fp32")
Floor = define_kernel(_Unary, "Floor", np.floor)
Ceil = define_kernel(_Unary, "Ceil", np.ceil)
Round = define_kernel(_Unary, "Round", np.round, "Round half to even, as ONNX specifies (NumPy's rounding).",
                      since_version=11)
Sqrt = define_kernel(_Unary, "Sqrt", np.sqrt, amp_class="fp32")
Exp = define_kernel(_Unary, "Exp", np.exp, amp_class="fp32")
Log = define_kernel(_Unary, "Log", np.log, amp_class="fp32")
Sin = define_kernel(_Unary, "Sin", np.sin, since_version=7)
Cos = define_kernel(_Unary, "Cos", np.cos, since_version=7)
Tan = define_kernel(_Unary, "Tan", np.tan, since_version=7)
Asin = define_kernel(_Unary, "Asin", np.arcsin, since_version=7)
Acos = define_kernel(_Unary, "Acos", np.arccos, since_version=7)
Atan = define_kernel(_Unary, "Atan", np.arctan, since_version=7)
Sinh = define_kernel(_Unary, "Sinh", np.sinh, since_version=9)
Cosh = define_kernel(_Unary, "Cosh", np.cosh, since_version=9)
Asinh = define_kernel(_Unary, "Asinh", np.arcsinh, since_version=9)
Acosh = define_kernel(_Unary, "Acosh", np.arccosh, since_version=9)
Atanh = define_kernel(_Unary, "Atanh", np.arctanh, since_version=9)
Tanh = define_kernel(_Unary, "Tanh", np.tanh, amp_class="either")
Erf = define_kernel(_Unary, "Erf", erf, amp_class="fp32", since_version=9)
Sign = define_kernel(_Unary, "Sign", np.sign, since_version=9)


# --------------------------------------------------------------------------------------------- binary


def legacy_broadcast(a: np.ndarray, b: np.ndarray, attrs: dict[str, Any]) -> np.ndarray:
    """Opset 1–6 broadcasting: with ``broadcast=1``, ``b`` matches ``a``'s dims starting at ``axis``."""
    if not attrs.get("broadcast") or attrs.get("axis") is None or b.ndim == 0:
        return b
    axis = int(attrs["axis"])
    if axis < 0:
        axis += a.ndim
    return b.reshape((1,) * axis + b.shape + (1,) * (a.ndim - axis - b.ndim))


class _Binary(Kernel):
    """``y = fn(a, b)`` with NumPy (multidirectional) broadcasting; the output keeps ``a``'s dtype."""

    fn: ClassVar[Any]

    def compute(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        with np.errstate(all="ignore"):
            return to_dtype(type(self).fn(to_work(a), to_work(b)), a.dtype)

    def compute_into(self, out: np.ndarray | None, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """The result in ``out`` (a buffer of the static plan), so that the op after it can run prebound; float32
        operands of one dtype go straight through the ufunc, anything else is computed, then copied."""
        fn = type(self).fn
        direct = isinstance(fn, np.ufunc) and type(self).compute is _Binary.compute
        same = out is not None and a.dtype == b.dtype == out.dtype == np.float32
        if same and direct and out is not None and np.broadcast_shapes(a.shape, b.shape) == out.shape:
            with np.errstate(all="ignore"):
                fn(a, b, out=out)
            return out
        y = self.compute(a, b)
        if out is None or out.shape != y.shape or out.dtype != y.dtype:
            return y
        np.copyto(out, y)
        return out


class _LegacyBinary(_Binary):
    """The opset 1–6 form: ``broadcast`` and ``axis`` attributes."""

    attr_defaults: ClassVar[dict[str, Any]] = {"broadcast": 0}

    def compute(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return super().compute(a, legacy_broadcast(a, b, self.attrs))


def _divide(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """True division for floats; integer division truncates toward zero (C semantics), not NumPy's floor."""
    if a.dtype.kind in "iu" and b.dtype.kind in "iu":
        quotient = np.floor_divide(a, b)
        remainder = np.remainder(a, b)
        if a.dtype.kind == "i":
            adjust = (remainder != 0) & ((a < 0) != (b < 0))
            quotient = quotient + adjust.astype(quotient.dtype)
        return quotient
    return np.divide(a, b)


def _power(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a ** b`` in ``a``'s type; integer bases with negative integer exponents go through float64."""
    if a.dtype.kind in "iu" and b.dtype.kind in "iu":
        if b.dtype.kind == "i" and np.any(b < 0):
            return np.power(a.astype(np.float64), b.astype(np.float64))
        return np.power(a, b.astype(a.dtype) if b.dtype.kind == a.dtype.kind else b)
    if a.dtype.kind == "f" and b.dtype.kind in "iub":
        return np.power(a, b.astype(a.dtype))
    return np.power(a, b)


# Opset 7 gave these NumPy broadcasting; the ``*Legacy`` forms keep opset 1–6's ``broadcast``/``axis``.
Add = define_kernel(_Binary, "Add", np.add, amp_class="widest", since_version=7)
AddLegacy = define_legacy(_LegacyBinary, Add)
Sub = define_kernel(_Binary, "Sub", np.subtract, amp_class="widest", since_version=7)
SubLegacy = define_legacy(_LegacyBinary, Sub)
Mul = define_kernel(_Binary, "Mul", np.multiply, amp_class="widest", since_version=7)
MulLegacy = define_legacy(_LegacyBinary, Mul)
Div = define_kernel(_Binary, "Div", _divide, amp_class="widest", since_version=7)
DivLegacy = define_legacy(_LegacyBinary, Div)
Pow = define_kernel(
    _Binary, "Pow", _power, "``X ** Y``; Y may have another numeric type (opset 12+), the output has X's type.",
    amp_class="fp32", since_version=7,
)
PowLegacy = define_legacy(_LegacyBinary, Pow)


@register
class Mod(Kernel):
    """``fmod=0``: remainder with the divisor's sign (Python/NumPy ``%``); ``fmod=1``: C ``fmod``."""

    op_type = "Mod"
    since_version = 10
    attr_defaults: ClassVar[dict[str, Any]] = {"fmod": 0}

    def compute(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        fn = np.fmod if self.attrs["fmod"] else np.mod
        with np.errstate(all="ignore"):
            return to_dtype(fn(to_work(a), to_work(b)), a.dtype)


@register
class BitShift(Kernel):
    """Shift unsigned integers ``LEFT`` or ``RIGHT`` by per-element amounts."""

    op_type = "BitShift"
    since_version = 11

    def setup(self) -> None:
        direction = str(self.attrs.get("direction", "")).upper()
        if direction not in ("LEFT", "RIGHT"):
            raise ValueError(f"direction must be 'LEFT' or 'RIGHT', not {direction!r}")
        self.shift = np.left_shift if direction == "LEFT" else np.right_shift

    def compute(self, x: np.ndarray, amount: np.ndarray) -> np.ndarray:
        return to_dtype(self.shift(x, amount.astype(x.dtype, copy=False)), x.dtype)


BitwiseAnd = define_kernel(_Binary, "BitwiseAnd", np.bitwise_and, since_version=18)
BitwiseOr = define_kernel(_Binary, "BitwiseOr", np.bitwise_or, since_version=18)
BitwiseXor = define_kernel(_Binary, "BitwiseXor", np.bitwise_xor, since_version=18)
BitwiseNot = define_kernel(_Unary, "BitwiseNot", np.invert, since_version=18)


# --------------------------------------------------------------------------------------------- variadic


class _Variadic(Kernel):
    """Fold ``fn`` over all inputs with broadcasting (opset 8+; earlier opsets required equal shapes)."""

    since_version = 1
    fn: ClassVar[Any]

    def fold(self, *inputs: np.ndarray) -> np.ndarray:
        if not inputs:
            raise ValueError("needs at least one input")
        with np.errstate(all="ignore"):
            return functools.reduce(type(self).fn, [to_work(x) for x in inputs])

    def compute(self, *inputs: np.ndarray) -> np.ndarray:
        out = self.fold(*inputs)
        return to_dtype(out if len(inputs) > 1 else out.copy(), inputs[0].dtype)


Max = define_kernel(_Variadic, "Max", np.maximum, "Element-wise maximum; NaN propagates.", amp_class="widest")
Min = define_kernel(_Variadic, "Min", np.minimum, "Element-wise minimum; NaN propagates.", amp_class="widest")
Sum = define_kernel(_Variadic, "Sum", np.add, amp_class="widest")


@register
class Mean(_Variadic):
    op_type = "Mean"
    amp_class = "widest"
    fn = staticmethod(np.add)

    def compute(self, *inputs: np.ndarray) -> np.ndarray:
        total = self.fold(*inputs)
        dtype = inputs[0].dtype
        if is_float(dtype):
            return to_dtype(total / total.dtype.type(len(inputs)), dtype)
        if is_integer(dtype):
            return to_dtype(_divide(total, np.asarray(len(inputs), dtype=total.dtype)), dtype)
        raise TypeError(f"Mean of {dtype} is undefined")
