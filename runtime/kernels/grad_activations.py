"""Gradients of activations and normalised exponentials.

Each takes the output gradient first, then whichever forward value makes the formula cheapest (the output ``Y``
for Relu/Sigmoid/Tanh/Softmax, the input ``X`` for LeakyRelu/Gelu/Erf), as onnxruntime's training kernels do.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import numpy as np

from runtime import native
from runtime.kernels.base import register
from runtime.kernels.grad_base import GradKernel, wide
from runtime.native.training import relu_grad

try:  # the runtime's vectorised erf; the fallback is exact but slower
    from runtime.kernels.elementwise import erf as _erf
except ImportError:  # pragma: no cover - only if the elementwise module is reorganised

    def _erf(x: np.ndarray) -> np.ndarray:
        return np.vectorize(math.erf, otypes=[np.float64])(x)


@register
class ReluGrad(GradKernel):
    """``dY * (Y > 0)``."""

    op_type = "ReluGrad"

    def compute(self, dy: np.ndarray, y: np.ndarray) -> np.ndarray:
        lib = native.lib()
        fast = relu_grad(lib, dy, y) if lib is not None else None
        if fast is not None:  # float32: one compiled pass, in pool tasks (the NumPy code below is its yardstick)
            return fast
        keep = y > 0
        if dy.dtype.kind != "f" or not np.isfinite(dy).all():  # inf * 0 would be NaN where dY must read 0
            return np.where(keep, dy, np.zeros((), dtype=dy.dtype))
        # a multiply by the mask: a tenth of np.where's time on a random mask (0.02 against 0.25 ms for the digits
        # CNN's 65,536 values); equal values (a masked negative dY reads -0.0)
        return np.multiply(dy, keep, dtype=dy.dtype)


@register
class LeakyReluGrad(GradKernel):
    """``dY`` where ``X > 0``, else ``alpha * dY``."""

    op_type = "LeakyReluGrad"
    attr_defaults: ClassVar[dict[str, Any]] = {"alpha": 0.01}

    def compute(self, dy: np.ndarray, x: np.ndarray) -> np.ndarray:
        dyc = wide(dy)
        return np.where(x > 0, dyc, dyc * dyc.dtype.type(self.attrs["alpha"])).astype(dy.dtype, copy=False)


@register
class SigmoidGrad(GradKernel):
    """``dY * Y * (1 - Y)``."""

    op_type = "SigmoidGrad"

    def compute(self, dy: np.ndarray, y: np.ndarray) -> np.ndarray:
        yc = wide(y)
        return (wide(dy) * yc * (1 - yc)).astype(dy.dtype, copy=False)


@register
class TanhGrad(GradKernel):
    """``dY * (1 - Y^2)``."""

    op_type = "TanhGrad"

    def compute(self, dy: np.ndarray, y: np.ndarray) -> np.ndarray:
        yc = wide(y)
        return (wide(dy) * (1 - yc * yc)).astype(dy.dtype, copy=False)


@register
class GeluGrad(GradKernel):
    """Derivative of ``x * Phi(x)`` (exact) or of its tanh approximation."""

    op_type = "GeluGrad"
    attr_defaults: ClassVar[dict[str, Any]] = {"approximate": "none"}

    def compute(self, dy: np.ndarray, x: np.ndarray) -> np.ndarray:
        xc = wide(x)
        if self.attrs["approximate"] == "tanh":
            c = math.sqrt(2 / math.pi)
            inner = c * (xc + 0.044715 * xc**3)
            t = np.tanh(inner)
            d = 0.5 * (1 + t) + 0.5 * xc * (1 - t * t) * c * (1 + 3 * 0.044715 * xc * xc)
        else:
            cdf = 0.5 * (1 + _erf(xc / math.sqrt(2)).astype(xc.dtype, copy=False))
            pdf = np.exp(-0.5 * xc * xc) / math.sqrt(2 * math.pi)
            d = cdf + xc * pdf
        return (wide(dy) * d).astype(dy.dtype, copy=False)


@register
class ErfGrad(GradKernel):
    """``dY * 2/sqrt(pi) * exp(-X^2)``."""

    op_type = "ErfGrad"

    def compute(self, dy: np.ndarray, x: np.ndarray) -> np.ndarray:
        xc = wide(x)
        return (wide(dy) * (2 / math.sqrt(math.pi)) * np.exp(-xc * xc)).astype(dy.dtype, copy=False)


def _as_2d(a: np.ndarray, axis: int) -> np.ndarray:
    """Opset < 13 Softmax semantics: the dims from ``axis`` on form one row."""
    return a.reshape(math.prod(a.shape[:axis]), -1)


class _SoftmaxFamilyGrad(GradKernel):
    """Shared attribute handling: ``axis`` (already normalised by the rule) and ``legacy`` (2-D coercion)."""

    attr_defaults: ClassVar[dict[str, Any]] = {"axis": -1, "legacy": 0}

    def grad(self, dy: np.ndarray, y: np.ndarray, axis: int) -> np.ndarray:
        raise NotImplementedError

    def compute(self, dy: np.ndarray, y: np.ndarray) -> np.ndarray:
        axis = int(self.attrs["axis"]) % max(y.ndim, 1)
        dyc, yc = wide(dy), wide(y)
        if self.attrs["legacy"]:
            dx = self.grad(_as_2d(dyc, axis), _as_2d(yc, axis), 1).reshape(y.shape)
        else:
            dx = self.grad(dyc, yc, axis)
        return dx.astype(dy.dtype, copy=False)


@register
class SoftmaxGrad(_SoftmaxFamilyGrad):
    """``Y * (dY - sum(dY * Y, axis))``."""

    op_type = "SoftmaxGrad"

    def grad(self, dy: np.ndarray, y: np.ndarray, axis: int) -> np.ndarray:
        return y * (dy - (dy * y).sum(axis=axis, keepdims=True))


@register
class LogSoftmaxGrad(_SoftmaxFamilyGrad):
    """``dY - exp(Y) * sum(dY, axis)``."""

    op_type = "LogSoftmaxGrad"

    def grad(self, dy: np.ndarray, y: np.ndarray, axis: int) -> np.ndarray:
        return dy - np.exp(y) * dy.sum(axis=axis, keepdims=True)
