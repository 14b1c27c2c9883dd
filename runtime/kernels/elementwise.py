"""Element-wise math: unary functions, binary arithmetic with NumPy broadcasting, variadic Max/Min/Sum/Mean.

Every kernel returns the ONNX output type exactly: narrow floats (bfloat16, float8) are computed in float32 and
cast back; integer arithmetic wraps as two's complement, as ONNX and C do. Opset 1–6 binary ops had an explicit
``broadcast``/``axis`` form, kept in the ``*Legacy`` classes.
"""

from __future__ import annotations

import functools
from typing import Any, ClassVar

import numpy as np

from runtime.kernels.base import Kernel, register
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


@register
class Abs(_Unary):
    op_type = "Abs"
    amp_class = "either"
    fn = staticmethod(np.abs)


@register
class Neg(_Unary):
    op_type = "Neg"
    amp_class = "either"
    fn = staticmethod(np.negative)


@register
class Reciprocal(_Unary):
    op_type = "Reciprocal"
    amp_class = "fp32"
    fn = staticmethod(_reciprocal)


@register
class Floor(_Unary):
    op_type = "Floor"
    fn = staticmethod(np.floor)


@register
class Ceil(_Unary):
    op_type = "Ceil"
    fn = staticmethod(np.ceil)


@register
class Round(_Unary):
    """Round half to even, as ONNX specifies (NumPy's rounding)."""

    op_type = "Round"
    since_version = 11
    fn = staticmethod(np.round)


@register
class Sqrt(_Unary):
    op_type = "Sqrt"
    amp_class = "fp32"
    fn = staticmethod(np.sqrt)


@register
class Exp(_Unary):
    op_type = "Exp"
    amp_class = "fp32"
    fn = staticmethod(np.exp)


@register
class Log(_Unary):
    op_type = "Log"
    amp_class = "fp32"
    fn = staticmethod(np.log)


@register
class Sin(_Unary):
    op_type = "Sin"
    since_version = 7
    fn = staticmethod(np.sin)


@register
class Cos(_Unary):
    op_type = "Cos"
    since_version = 7
    fn = staticmethod(np.cos)


@register
class Tan(_Unary):
    op_type = "Tan"
    since_version = 7
    fn = staticmethod(np.tan)


@register
class Asin(_Unary):
    op_type = "Asin"
    since_version = 7
    fn = staticmethod(np.arcsin)


@register
class Acos(_Unary):
    op_type = "Acos"
    since_version = 7
    fn = staticmethod(np.arccos)


@register
class Atan(_Unary):
    op_type = "Atan"
    since_version = 7
    fn = staticmethod(np.arctan)


@register
class Sinh(_Unary):
    op_type = "Sinh"
    since_version = 9
    fn = staticmethod(np.sinh)


@register
class Cosh(_Unary):
    op_type = "Cosh"
    since_version = 9
    fn = staticmethod(np.cosh)


@register
class Asinh(_Unary):
    op_type = "Asinh"
    since_version = 9
    fn = staticmethod(np.arcsinh)


@register
class Acosh(_Unary):
    op_type = "Acosh"
    since_version = 9
    fn = staticmethod(np.arccosh)


@register
class Atanh(_Unary):
    op_type = "Atanh"
    since_version = 9
    fn = staticmethod(np.arctanh)


@register
class Tanh(_Unary):
    op_type = "Tanh"
    amp_class = "either"
    fn = staticmethod(np.tanh)


@register
class Erf(_Unary):
    op_type = "Erf"
    amp_class = "fp32"
    since_version = 9
    fn = staticmethod(erf)


@register
class Sign(_Unary):
    op_type = "Sign"
    since_version = 9
    fn = staticmethod(np.sign)


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


@register
class Add(_Binary):
    op_type = "Add"
    amp_class = "widest"
    since_version = 7
    fn = staticmethod(np.add)


@register
class AddLegacy(_LegacyBinary, Add):
    since_version = 1


@register
class Sub(_Binary):
    op_type = "Sub"
    amp_class = "widest"
    since_version = 7
    fn = staticmethod(np.subtract)


@register
class SubLegacy(_LegacyBinary, Sub):
    since_version = 1


@register
class Mul(_Binary):
    op_type = "Mul"
    amp_class = "widest"
    since_version = 7
    fn = staticmethod(np.multiply)


@register
class MulLegacy(_LegacyBinary, Mul):
    since_version = 1


@register
class Div(_Binary):
    op_type = "Div"
    amp_class = "widest"
    since_version = 7
    fn = staticmethod(_divide)


@register
class DivLegacy(_LegacyBinary, Div):
    since_version = 1


@register
class Pow(_Binary):
    """``X ** Y``; Y may have another numeric type (opset 12+), the output has X's type."""

    op_type = "Pow"
    amp_class = "fp32"
    since_version = 7
    fn = staticmethod(_power)


@register
class PowLegacy(_LegacyBinary, Pow):
    since_version = 1


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


class _Bitwise(_Binary):
    since_version = 18


@register
class BitwiseAnd(_Bitwise):
    op_type = "BitwiseAnd"
    fn = staticmethod(np.bitwise_and)


@register
class BitwiseOr(_Bitwise):
    op_type = "BitwiseOr"
    fn = staticmethod(np.bitwise_or)


@register
class BitwiseXor(_Bitwise):
    op_type = "BitwiseXor"
    fn = staticmethod(np.bitwise_xor)


@register
class BitwiseNot(_Unary):
    op_type = "BitwiseNot"
    since_version = 18
    fn = staticmethod(np.invert)


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


@register
class Max(_Variadic):
    """Element-wise maximum; NaN propagates."""

    op_type = "Max"
    amp_class = "widest"
    fn = staticmethod(np.maximum)


@register
class Min(_Variadic):
    """Element-wise minimum; NaN propagates."""

    op_type = "Min"
    amp_class = "widest"
    fn = staticmethod(np.minimum)


@register
class Sum(_Variadic):
    op_type = "Sum"
    amp_class = "widest"
    fn = staticmethod(np.add)


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
