"""Cast, CastLike and BitCast, plus the dtype helpers the other numeric kernels share.

ONNX element types map to NumPy dtypes as ``onnx.helper.tensor_dtype_to_np_dtype`` says: the narrow float and
integer types (bfloat16, float8*, float4, int4/uint4, int2/uint2, float6*) are ``ml_dtypes`` dtypes.
NumPy's ufuncs and Python-scalar promotion do not treat those like native floats (``bfloat16 * 2.0`` is float32),
so kernels compute on a native "work" dtype and cast back with :func:`to_dtype`; float16 also computes in float32.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import ml_dtypes
import numpy as np
from onnx import TensorProto, helper

from runtime.kernels.base import Kernel, register

#: Narrow float types from ml_dtypes, keyed by ONNX element type.
_ML_FLOATS = {
    TensorProto.BFLOAT16: ml_dtypes.bfloat16,
    TensorProto.FLOAT8E4M3FN: ml_dtypes.float8_e4m3fn,
    TensorProto.FLOAT8E4M3FNUZ: ml_dtypes.float8_e4m3fnuz,
    TensorProto.FLOAT8E5M2: ml_dtypes.float8_e5m2,
    TensorProto.FLOAT8E5M2FNUZ: ml_dtypes.float8_e5m2fnuz,
    TensorProto.FLOAT4E2M1: ml_dtypes.float4_e2m1fn,
    TensorProto.FLOAT8E8M0: ml_dtypes.float8_e8m0fnu,
    TensorProto.FLOAT6E2M3: ml_dtypes.float6_e2m3fn,
    TensorProto.FLOAT6E3M2: ml_dtypes.float6_e3m2fn,
}
#: Narrow integer types from ml_dtypes (one element per byte in memory, low bits significant).
_ML_INTS = {
    TensorProto.INT4: ml_dtypes.int4,
    TensorProto.UINT4: ml_dtypes.uint4,
    TensorProto.INT2: ml_dtypes.int2,
    TensorProto.UINT2: ml_dtypes.uint2,
}
ML_FLOAT_DTYPES = frozenset(np.dtype(t) for t in _ML_FLOATS.values())
ML_INT_DTYPES = frozenset(np.dtype(t) for t in _ML_INTS.values())
#: The float8 types whose conversion honours ``saturate``.
FLOAT8_TYPES = frozenset(
    {TensorProto.FLOAT8E4M3FN, TensorProto.FLOAT8E4M3FNUZ, TensorProto.FLOAT8E5M2, TensorProto.FLOAT8E5M2FNUZ}
)


def np_dtype(elem_type: int | str) -> np.dtype[Any]:
    """NumPy dtype for an ONNX element type (an int, or a name such as ``"FLOAT"`` as Cast-1 used)."""
    code = TensorProto.DataType.Value(elem_type.upper()) if isinstance(elem_type, str) else int(elem_type)
    return np.dtype(helper.tensor_dtype_to_np_dtype(code))


def onnx_type(dtype: np.dtype[Any]) -> int:
    """ONNX element type of a NumPy dtype (strings are object arrays)."""
    return int(helper.np_dtype_to_tensor_dtype(np.dtype(dtype)))


def is_float(dtype: np.dtype[Any]) -> bool:
    """True for native and ml_dtypes floating types."""
    return dtype.kind == "f" or dtype in ML_FLOAT_DTYPES


def is_integer(dtype: np.dtype[Any]) -> bool:
    """True for native and ml_dtypes integer types (not bool)."""
    return dtype.kind in "iu" or dtype in ML_INT_DTYPES


def work_dtype(dtype: np.dtype[Any]) -> np.dtype[Any]:
    """The native dtype to compute in for values of ``dtype``.

    float32 for float16 and the narrow floats (one rounding at the end, as onnxruntime does), int32 for int4/int2.
    """
    if dtype in ML_FLOAT_DTYPES or dtype == np.float16:
        return np.dtype(np.float32)
    if dtype in ML_INT_DTYPES:
        return np.dtype(np.int32)
    return dtype


def to_work(x: np.ndarray) -> np.ndarray:
    """``x`` on its work dtype (no copy when it already is native)."""
    return x.astype(work_dtype(x.dtype), copy=False)


def to_dtype(x: Any, dtype: np.dtype[Any]) -> np.ndarray:
    """``x`` as an ndarray of exactly ``dtype`` (keeps 0-d results as arrays)."""
    return np.asarray(x).astype(dtype, copy=False)


def float_finite_max(dtype: np.dtype[Any]) -> float:
    """Largest finite value of a float dtype."""
    return float(ml_dtypes.finfo(dtype).max)


def _parse_number(text: Any) -> float:
    """A string element as a float: plain or scientific, and the INF/NaN literals in any case."""
    return float(str(text).strip())


def _from_strings(x: np.ndarray, dtype: np.dtype[Any]) -> np.ndarray:
    if dtype == np.dtype(object):
        return x.copy()
    if dtype == np.dtype(bool):
        flat = [s.strip().lower() in ("1", "true") or _truthy_number(s) for s in x.ravel()]
        return np.array(flat, dtype=bool).reshape(x.shape)
    if is_integer(dtype):
        ints = [_parse_int(s) for s in x.ravel()]
        return np.array(ints, dtype=np.int64).reshape(x.shape).astype(dtype)
    floats = np.array([_parse_number(s) for s in x.ravel()], dtype=np.float64).reshape(x.shape)
    return cast_array(floats, onnx_type(dtype), saturate=True)


def _truthy_number(text: str) -> bool:
    try:
        return _parse_number(text) != 0.0
    except ValueError:
        return False


def _parse_int(text: Any) -> int:
    try:
        return int(str(text).strip())
    except ValueError:
        value = _parse_number(text)
        return int(value) if math.isfinite(value) else 0


def _format_float(value: float) -> str:
    """A float as text the way onnxruntime writes it: 8 significant digits, ``NaN``/``INF``/``-INF``."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "INF" if value > 0 else "-INF"
    return f"{value:.8g}"


def _to_strings(x: np.ndarray) -> np.ndarray:
    """Numbers as text in an object array: integers in full, bools as 1/0, floats as :func:`_format_float`."""
    if x.dtype == np.dtype(bool):
        texts = ["1" if v else "0" for v in x.ravel().tolist()]
    elif is_float(x.dtype):
        texts = [_format_float(v) for v in to_work(x).astype(np.float64).ravel().tolist()]
    else:
        texts = [str(v) for v in to_work(x).ravel().tolist()]
    out = np.empty(len(texts), dtype=object)
    out[:] = texts
    return out.reshape(x.shape)


def to_float8e8m0(x: np.ndarray, saturate: bool, round_mode: str) -> np.ndarray:
    """Float to E8M0 (a bare power-of-two exponent, bias 127) with the rounding mode ONNX names.

    E8M0 shares float32's exponent field, so the result is that field, rounded by the dropped mantissa:
    ``up`` (any fraction rounds up), ``down`` (truncate) or ``nearest`` (half rounds up). NaN gives 0xFF (NaN);
    with ``saturate`` Inf and values rounding past the largest exponent give 0xFE, without it NaN.
    """
    bits = np.asarray(x, dtype=np.float32).view(np.uint32)
    exponent = ((bits >> 23) & 0xFF).astype(np.uint16)
    mantissa = bits & 0x7FFFFF
    special = exponent == 0xFF
    if round_mode == "up":
        round_up = mantissa > 0
    elif round_mode == "down":
        round_up = np.zeros(bits.shape, dtype=bool)
    elif round_mode == "nearest":
        guard = (mantissa & 0x400000) > 0
        rest = (mantissa & 0x3FFFFF) > 0
        round_up = guard & (rest | (exponent > 0))
    else:
        raise ValueError(f"round_mode must be 'up', 'down' or 'nearest', not {round_mode!r}")
    round_up &= ~special
    if saturate:
        round_up &= exponent != 0xFE
    exponent = exponent + round_up.astype(np.uint16)
    out = np.where(special, 0xFF, np.minimum(exponent, 0xFF)).astype(np.uint8)
    if saturate:
        out[special & (mantissa == 0)] = 0xFE  # +-Inf saturates to the largest power of two
    return out.view(ml_dtypes.float8_e8m0fnu)


def cast_array(x: np.ndarray, to: int, saturate: bool = True, round_mode: str = "up") -> np.ndarray:
    """ONNX Cast semantics for one array (the numeric rules, float8 saturation, strings both ways)."""
    dtype = np_dtype(to)
    if x.dtype == np.dtype(object):
        return _from_strings(x, dtype)
    if to == TensorProto.STRING:
        return _to_strings(x)
    if x.dtype == dtype:
        return x.copy()
    with np.errstate(all="ignore"):
        if to == TensorProto.FLOAT8E8M0:
            return to_float8e8m0(to_work(x), saturate, round_mode)
        src = x
        if x.dtype in ML_FLOAT_DTYPES and dtype in ML_FLOAT_DTYPES | ML_INT_DTYPES:
            src = to_work(x)  # narrow -> narrow goes through float32, which holds every narrow value exactly
        if to in FLOAT8_TYPES and saturate and is_float(src.dtype):
            src = src if src.dtype.kind == "f" else to_work(src)
            if src.dtype.itemsize < 4:
                src = src.astype(np.float32)
            limit = float_finite_max(dtype)
            src = np.clip(src, -limit, limit)  # NaN stays NaN; +-Inf and overflow saturate
        try:
            return src.astype(dtype)
        except TypeError:  # ml_dtypes lacks some narrow -> narrow casts (int4 -> uint2, ...): go via int32/float32
            return to_work(src).astype(dtype)


@register
class Cast(Kernel):
    """Cast-1: ``to`` names the type as a string (``"FLOAT"``) or, from opset 6, its enum value."""

    op_type = "Cast"
    since_version = 1

    def setup(self) -> None:
        to = self.attrs["to"]
        self.to = TensorProto.DataType.Value(to.upper()) if isinstance(to, str) else int(to)
        self.saturate = bool(self.attrs.get("saturate", 1))
        self.round_mode = str(self.attrs.get("round_mode", "up"))

    def compute(self, x: np.ndarray) -> np.ndarray:
        return cast_array(x, self.to, self.saturate, self.round_mode)


@register
class Cast19(Cast):
    """Cast-19 adds ``saturate`` for float8 targets (and Cast-24 ``round_mode`` for E8M0)."""

    since_version = 19
    attr_defaults: ClassVar[dict[str, Any]] = {"saturate": 1, "round_mode": "up"}


@register
class CastLike(Kernel):
    """Cast ``x`` to the element type of ``target_type``."""

    op_type = "CastLike"
    since_version = 15
    attr_defaults: ClassVar[dict[str, Any]] = {"saturate": 1, "round_mode": "up"}

    def compute(self, x: np.ndarray, target_type: np.ndarray) -> np.ndarray:
        return cast_array(x, onnx_type(target_type.dtype), bool(self.attrs["saturate"]), self.attrs["round_mode"])


@register
class BitCast(Kernel):
    """Reinterpret the bits as another type of the same width (little endian, as the spec requires)."""

    op_type = "BitCast"
    since_version = 26

    def setup(self) -> None:
        self.dtype = np_dtype(int(self.attrs["to"]))

    def compute(self, x: np.ndarray) -> np.ndarray:
        src_bits = _bit_width(x.dtype)
        dst_bits = _bit_width(self.dtype)
        if src_bits != dst_bits:
            raise ValueError(f"BitCast from {x.dtype} ({src_bits} bits) to {self.dtype} ({dst_bits} bits)")
        # Sub-byte types occupy one byte each with the value in the low bits, so a byte view is exact.
        out = np.array(x, order="C").view(self.dtype)
        if self.dtype == np.dtype(bool):
            out = out.view(np.uint8) != 0
        return out


def _bit_width(dtype: np.dtype[Any]) -> int:
    """Bits per element as ONNX counts them (4 or 2 for the packed types, 8 per byte otherwise)."""
    if dtype in ML_INT_DTYPES or dtype in ML_FLOAT_DTYPES:
        info = ml_dtypes.iinfo(dtype) if dtype in ML_INT_DTYPES else ml_dtypes.finfo(dtype)
        return int(info.bits)
    return dtype.itemsize * 8
