"""Element-wise math: unary functions, binary arithmetic with NumPy broadcasting, variadic Max/Min/Sum/Mean.

Every kernel returns the ONNX output type exactly: narrow floats (bfloat16, float8) are computed in float32 and
cast back; integer arithmetic wraps as two's complement, as ONNX and C do. Opset 1–6 binary ops had an explicit
``broadcast``/``axis`` form, kept in the ``*Legacy`` classes.
"""

from __future__ import annotations

import functools
import math
from typing import Any, ClassVar

import numpy as np

from runtime.kernels.base import Kernel, register
from runtime.kernels.cast import is_float, is_integer, to_dtype, to_work

# --------------------------------------------------------------------------------------------- unary


class _Unary(Kernel):
    """``y = fn(x)`` computed on the work dtype and returned as ``x``'s dtype."""

    fn: ClassVar[Any]

    def compute(self, x: np.ndarray) -> np.ndarray:
        with np.errstate(all="ignore"):
            return to_dtype(type(self).fn(to_work(x)), x.dtype)


#: Where the two polynomial pieces of :func:`erf` meet, and beyond which erf is +-1 in double precision.
_ERF_SPLIT, _ERF_ONE = 2.0, 6.0


@functools.cache
def _erf_polynomials() -> tuple[np.ndarray, np.ndarray]:
    """Power-series coefficients of the two pieces of :func:`erf`, fitted once to ``math.erf``/``math.erfc``.

    Small piece: ``erf(x) = x * P(s)`` with ``s`` the image of ``x**2`` in [-1, 1]. Tail piece:
    ``erfc(x) = exp(-x**2) * Q(s) / x`` with ``s`` the image of ``1/x``. Degree 14 on Chebyshev nodes gives
    relative errors below 1e-13 on each piece.
    """
    nodes = np.cos(np.pi * (np.arange(256) + 0.5) / 256)  # Chebyshev nodes in [-1, 1]
    squares = (nodes + 1) / 2 * _ERF_SPLIT**2
    small = [math.erf(math.sqrt(t)) / math.sqrt(t) for t in squares]
    inverse = (nodes + 1) / 2 * (1 / _ERF_SPLIT - 1 / _ERF_ONE) + 1 / _ERF_ONE
    tail = [math.erfc(1 / u) * math.exp(1 / u**2) / u for u in inverse]
    fit_small = np.polynomial.Chebyshev.fit(squares, small, 14, domain=[0.0, _ERF_SPLIT**2])
    fit_tail = np.polynomial.Chebyshev.fit(inverse, tail, 14, domain=[1 / _ERF_ONE, 1 / _ERF_SPLIT])
    return np.polynomial.chebyshev.cheb2poly(fit_small.coef), np.polynomial.chebyshev.cheb2poly(fit_tail.coef)


def _horner(coefficients: np.ndarray, s: np.ndarray) -> np.ndarray:
    acc = np.full_like(s, coefficients[-1])
    for c in coefficients[-2::-1]:
        acc *= s
        acc += c
    return acc


def _erf_block(v: np.ndarray, small_coef: np.ndarray, tail_coef: np.ndarray) -> np.ndarray:
    """:func:`erf` of a float64 block: the small piece everywhere (clipped), then the tail where ``|v| > 2``."""
    clipped = np.clip(v, -_ERF_SPLIT, _ERF_SPLIT)
    s = clipped * clipped
    s *= 2 / _ERF_SPLIT**2
    s -= 1
    out = _horner(small_coef, s)
    out *= clipped
    far = np.abs(v) > _ERF_SPLIT  # NaN compares false and stays NaN through clip
    if far.any():
        t = v[far]
        a = np.abs(t)
        lo, hi = 1 / _ERF_ONE, 1 / _ERF_SPLIT
        s_tail = (1 / np.minimum(a, _ERF_ONE) - lo) * (2 / (hi - lo)) - 1
        tail = 1 - np.exp(-a * a) * _horner(tail_coef, s_tail) / a
        out[far] = np.sign(t) * np.where(a < _ERF_ONE, tail, 1.0)
    return out


#: Elements per block in :func:`erf`: small enough that the ~30 passes of the polynomial stay in cache.
_ERF_BLOCK = 32768


def erf(x: np.ndarray) -> np.ndarray:
    """The error function, element-wise (NumPy has no erf ufunc).

    float64 input uses ``math.erf`` per element (exact, ~100 ns each) and returns float64. Other float types
    return float32 from two polynomial pieces evaluated in float64 (relative error < 1e-13, ~1 float32 ulp
    at most after rounding), block by block so the evaluation stays in cache.
    """
    if x.dtype == np.float64:
        values = np.fromiter(map(math.erf, x.ravel().tolist()), dtype=np.float64, count=x.size)
        return values.reshape(x.shape)
    small_coef, tail_coef = _erf_polynomials()
    flat = x.reshape(-1)
    out = np.empty(flat.size, dtype=np.float32)
    for start in range(0, flat.size, _ERF_BLOCK):
        block = flat[start : start + _ERF_BLOCK].astype(np.float64)
        out[start : start + _ERF_BLOCK] = _erf_block(block, small_coef, tail_coef)
    return out.reshape(x.shape)


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
