"""Reductions (Reduce*), ArgMax/ArgMin, and the cumulative CumSum/CumProd.

Reduce* take ``axes`` as an attribute up to opset 17 (ReduceSum: 12) and as an optional input afterwards, where
``noop_with_empty_axes=1`` turns "no axes" into the identity reduction instead of "all axes". Reducing over an
empty set of elements gives the op's identity: 0 for sums, 1 for products, -inf / the lowest value for max.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from runtime.kernels.base import Kernel, define_kernel, register
from runtime.kernels.cast import to_dtype, to_work

Axes = tuple[int, ...] | None  # None: every axis


def _lowest(dtype: np.dtype[Any]) -> Any:
    if dtype == np.dtype(bool):
        return False
    return -np.inf if dtype.kind == "f" else np.iinfo(dtype).min


def _highest(dtype: np.dtype[Any]) -> Any:
    if dtype == np.dtype(bool):
        return True
    return np.inf if dtype.kind == "f" else np.iinfo(dtype).max


def reduce_max(x: np.ndarray, axes: Axes, keepdims: bool) -> np.ndarray:
    if x.size == 0:
        return np.max(x, axis=axes, keepdims=keepdims, initial=_lowest(x.dtype))
    return np.max(x, axis=axes, keepdims=keepdims)


def reduce_min(x: np.ndarray, axes: Axes, keepdims: bool) -> np.ndarray:
    if x.size == 0:
        return np.min(x, axis=axes, keepdims=keepdims, initial=_highest(x.dtype))
    return np.min(x, axis=axes, keepdims=keepdims)


def reduce_log_sum_exp(x: np.ndarray, axes: Axes, keepdims: bool) -> np.ndarray:
    """``log(sum(exp(x)))`` shifted by the maximum so large inputs do not overflow."""
    peak = reduce_max(x, axes, True)
    peak = np.where(np.isfinite(peak), peak, 0).astype(x.dtype)
    total = np.sum(np.exp(x - peak), axis=axes, keepdims=True)
    out = np.log(total) + peak
    if not keepdims:
        out = np.squeeze(out, axis=axes) if axes is not None else out.reshape(())
    return out


def _sum(x: np.ndarray, axes: Axes, keepdims: bool) -> Any:
    return np.sum(x, axis=axes, keepdims=keepdims, dtype=x.dtype)


def _mean(x: np.ndarray, axes: Axes, keepdims: bool) -> Any:
    return np.mean(x, axis=axes, keepdims=keepdims)


def _prod(x: np.ndarray, axes: Axes, keepdims: bool) -> Any:
    return np.prod(x, axis=axes, keepdims=keepdims, dtype=x.dtype)


def _l1(x: np.ndarray, axes: Axes, keepdims: bool) -> Any:
    return _sum(np.abs(x), axes, keepdims)


def _l2(x: np.ndarray, axes: Axes, keepdims: bool) -> Any:
    return np.sqrt(_sum(np.square(x), axes, keepdims))


def _log_sum(x: np.ndarray, axes: Axes, keepdims: bool) -> Any:
    return np.log(_sum(x, axes, keepdims))


def _sum_square(x: np.ndarray, axes: Axes, keepdims: bool) -> Any:
    return _sum(np.square(x), axes, keepdims)


class _Reduce(Kernel):
    """Attribute form (opset 1 up to the input form): ``axes`` and ``keepdims`` attributes; ``fn(x, axes,
    keepdims)`` reduces in the work dtype."""

    since_version = 1
    attr_defaults: ClassVar[dict[str, Any]] = {"keepdims": 1}
    fn: ClassVar[Any]

    def run_reduce(self, x: np.ndarray, axes: Axes) -> np.ndarray:
        with np.errstate(all="ignore"):
            out = type(self).fn(to_work(x), axes, bool(self.attrs["keepdims"]))
        return to_dtype(out, x.dtype)

    def compute(self, x: np.ndarray) -> np.ndarray:
        axes = self.attrs.get("axes")
        return self.run_reduce(x, tuple(int(a) for a in axes) if axes else None)


class _ReduceInputAxes(_Reduce):
    """Input form: optional ``axes`` input; empty means all axes, or none with ``noop_with_empty_axes``."""

    since_version = 18
    attr_defaults: ClassVar[dict[str, Any]] = {"keepdims": 1, "noop_with_empty_axes": 0}

    def compute(self, x: np.ndarray, axes: np.ndarray | None = None) -> np.ndarray:
        if axes is None or axes.size == 0:
            return self.run_reduce(x, () if self.attrs["noop_with_empty_axes"] else None)
        return self.run_reduce(x, tuple(int(a) for a in np.asarray(axes).ravel()))


def _reduction(
    op_type: str, fn: Any, amp_class: Any = None, axes_input_since: int = 18
) -> tuple[type[_Reduce], type[_ReduceInputAxes]]:
    """Register both forms of a Reduce op: ``<op>Attributes`` (opset 1) and ``<op>`` (axes as an input)."""
    return (
        define_kernel(_Reduce, op_type, fn, name=f"{op_type}Attributes", amp_class=amp_class),
        define_kernel(_ReduceInputAxes, op_type, fn, amp_class=amp_class, since_version=axes_input_since),
    )


ReduceSumAttributes, ReduceSum = _reduction("ReduceSum", _sum, "fp32", axes_input_since=13)
ReduceMeanAttributes, ReduceMean = _reduction("ReduceMean", _mean, "fp32")
ReduceMaxAttributes, ReduceMax = _reduction("ReduceMax", reduce_max)
ReduceMinAttributes, ReduceMin = _reduction("ReduceMin", reduce_min)
ReduceProdAttributes, ReduceProd = _reduction("ReduceProd", _prod, "fp32")
ReduceL1Attributes, ReduceL1 = _reduction("ReduceL1", _l1, "fp32")
ReduceL2Attributes, ReduceL2 = _reduction("ReduceL2", _l2, "fp32")
ReduceLogSumAttributes, ReduceLogSum = _reduction("ReduceLogSum", _log_sum, "fp32")
ReduceLogSumExpAttributes, ReduceLogSumExp = _reduction("ReduceLogSumExp", reduce_log_sum_exp, "fp32")
ReduceSumSquareAttributes, ReduceSumSquare = _reduction("ReduceSumSquare", _sum_square, "fp32")


# --------------------------------------------------------------------------------------------- ArgMax/ArgMin


class _ArgReduce(Kernel):
    """Index (int64) of the first extreme along ``axis``, or the last with ``select_last_index=1``."""

    since_version = 1
    attr_defaults: ClassVar[dict[str, Any]] = {"axis": 0, "keepdims": 1, "select_last_index": 0}
    pick: ClassVar[Any]

    def compute(self, x: np.ndarray) -> np.ndarray:
        axis = int(self.attrs["axis"])
        data = to_work(x)
        if self.attrs["select_last_index"]:
            flipped = np.flip(data, axis=axis)
            index = data.shape[axis] - 1 - type(self).pick(flipped, axis=axis)
        else:
            index = type(self).pick(data, axis=axis)
        if self.attrs["keepdims"]:
            index = np.expand_dims(index, axis)
        return np.asarray(index, dtype=np.int64)


@register
class ArgMax(_ArgReduce):
    op_type = "ArgMax"
    pick = staticmethod(np.argmax)


@register
class ArgMin(_ArgReduce):
    op_type = "ArgMin"
    pick = staticmethod(np.argmin)


# --------------------------------------------------------------------------------------------- cumulative


def _cumulative(x: np.ndarray, axis_input: np.ndarray, attrs: dict[str, Any], ufunc: np.ufunc) -> np.ndarray:
    """Inclusive or ``exclusive`` scan of ``ufunc`` along ``axis``, optionally in ``reverse``."""
    axis = int(np.asarray(axis_input).ravel()[0])
    if axis < 0:
        axis += x.ndim
    data = to_work(x)
    if attrs["reverse"]:
        data = np.flip(data, axis=axis)
    with np.errstate(all="ignore"):
        out = ufunc.accumulate(data, axis=axis, dtype=data.dtype)
    if attrs["exclusive"] and data.shape[axis] > 0:
        identity = np.full_like(np.take(out, [0], axis=axis), ufunc.identity)
        out = np.concatenate([identity, np.take(out, range(data.shape[axis] - 1), axis=axis)], axis=axis)
    if attrs["reverse"]:
        out = np.flip(out, axis=axis)
    return to_dtype(out, x.dtype)


@register
class CumSum(Kernel):
    op_type = "CumSum"
    amp_class = "fp32"
    since_version = 11
    attr_defaults: ClassVar[dict[str, Any]] = {"exclusive": 0, "reverse": 0}

    def compute(self, x: np.ndarray, axis: np.ndarray) -> np.ndarray:
        return _cumulative(x, axis, self.attrs, np.add)


@register
class CumProd(Kernel):
    op_type = "CumProd"
    since_version = 26
    attr_defaults: ClassVar[dict[str, Any]] = {"exclusive": 0, "reverse": 0}

    def compute(self, x: np.ndarray, axis: np.ndarray) -> np.ndarray:
        return _cumulative(x, axis, self.attrs, np.multiply)
