"""Boolean logic, comparisons, IsInf/IsNaN and Where; all broadcast like NumPy and return bool tensors.

Opset 1 And/Or/Xor/Equal/Less/Greater had the explicit ``broadcast``/``axis`` form; their ``*Legacy`` classes
keep it.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from runtime.kernels.base import Kernel, define_kernel, define_legacy, register
from runtime.kernels.cast import is_float, to_work
from runtime.kernels.elementwise import legacy_broadcast


class _Predicate(Kernel):
    """``y = fn(a, b)`` as a bool tensor."""

    since_version = 7
    fn: ClassVar[Any]

    def compute(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        if a.dtype != np.dtype(object):
            a, b = to_work(a), to_work(b)
        return np.asarray(type(self).fn(a, b), dtype=bool)


class _LegacyPredicate(_Predicate):
    since_version = 1
    attr_defaults: ClassVar[dict[str, Any]] = {"broadcast": 0}

    def compute(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return super().compute(a, legacy_broadcast(a, b, self.attrs))


def _equal(a: np.ndarray, b: np.ndarray) -> Any:
    """Element-wise ``==``; object (string) tensors compare by value."""
    if a.dtype == np.dtype(object) or b.dtype == np.dtype(object):
        return np.vectorize(lambda u, v: u == v, otypes=[bool])(a, b)
    return np.equal(a, b)


# Opset 7 gave these NumPy broadcasting; the ``*Legacy`` forms keep opset 1's ``broadcast``/``axis``.
And = define_kernel(_Predicate, "And", np.logical_and)
AndLegacy = define_legacy(_LegacyPredicate, And)
Or = define_kernel(_Predicate, "Or", np.logical_or)
OrLegacy = define_legacy(_LegacyPredicate, Or)
Xor = define_kernel(_Predicate, "Xor", np.logical_xor)
XorLegacy = define_legacy(_LegacyPredicate, Xor)
Equal = define_kernel(_Predicate, "Equal", _equal)
EqualLegacy = define_legacy(_LegacyPredicate, Equal)
Less = define_kernel(_Predicate, "Less", np.less)
LessLegacy = define_legacy(_LegacyPredicate, Less)
Greater = define_kernel(_Predicate, "Greater", np.greater)
GreaterLegacy = define_legacy(_LegacyPredicate, Greater)
LessOrEqual = define_kernel(_Predicate, "LessOrEqual", np.less_equal, since_version=12)
GreaterOrEqual = define_kernel(_Predicate, "GreaterOrEqual", np.greater_equal, since_version=12)


@register
class Not(Kernel):
    op_type = "Not"

    def compute(self, x: np.ndarray) -> np.ndarray:
        return np.logical_not(x)


@register
class IsNaN(Kernel):
    op_type = "IsNaN"
    since_version = 9

    def compute(self, x: np.ndarray) -> np.ndarray:
        if not is_float(x.dtype):
            return np.zeros(x.shape, dtype=bool)
        return np.isnan(to_work(x))


@register
class IsInf(Kernel):
    """True at +Inf (``detect_positive``) and/or -Inf (``detect_negative``)."""

    op_type = "IsInf"
    since_version = 10
    attr_defaults: ClassVar[dict[str, Any]] = {"detect_negative": 1, "detect_positive": 1}

    def compute(self, x: np.ndarray) -> np.ndarray:
        if not is_float(x.dtype):
            return np.zeros(x.shape, dtype=bool)
        x = to_work(x)
        positive, negative = bool(self.attrs["detect_positive"]), bool(self.attrs["detect_negative"])
        if positive and negative:
            return np.isinf(x)
        if positive:
            return np.isposinf(x)
        if negative:
            return np.isneginf(x)
        return np.zeros(x.shape, dtype=bool)


@register
class Where(Kernel):
    """``condition ? x : y`` with three-way broadcasting."""

    op_type = "Where"
    amp_class = "widest"
    since_version = 9

    def compute(self, condition: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        return np.asarray(np.where(condition, x, y)).astype(x.dtype, copy=False)
