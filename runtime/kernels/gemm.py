"""Dense products: Gemm and MatMul, through NumPy's BLAS-backed ``np.matmul``.

Half-precision inputs are multiplied in float32 (NumPy's float16 GEMM is slow and accumulates in fp16).
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from runtime.kernels.base import Kernel, register


def _wide(x: np.ndarray) -> np.ndarray:
    """Floats narrower than float32 (fp16, bf16, fp8) widened to float32; everything else unchanged."""
    if x.dtype.kind == "f" and x.dtype.itemsize >= 4:
        return x
    if x.dtype.kind in "iub":
        return x
    return x.astype(np.float32)


def matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``np.matmul`` with ONNX semantics and the inputs' dtype on the way out."""
    return np.asarray(np.matmul(_wide(a), _wide(b))).astype(a.dtype, copy=False)


@register
class MatMul(Kernel):
    """NumPy-style matrix product (1-d operands promoted, batch dims broadcast)."""

    op_type = "MatMul"
    uses_blas = True
    amp_class = "low"
    since_version = 1

    def compute(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return matmul(a, b)


@register
class Gemm(Kernel):
    """``alpha * op(A) @ op(B) + beta * C`` with ``C`` broadcast to the result."""

    op_type = "Gemm"
    uses_blas = True
    amp_class = "low"
    since_version = 1
    attr_defaults: ClassVar[dict[str, Any]] = {"alpha": 1.0, "beta": 1.0, "transA": 0, "transB": 0}

    def compute(self, a: np.ndarray, b: np.ndarray, c: np.ndarray | None = None) -> np.ndarray:
        if self.attrs["transA"]:
            a = a.T
        if self.attrs["transB"]:
            b = b.T
        alpha, beta = float(self.attrs["alpha"]), float(self.attrs["beta"])
        y = np.matmul(_wide(a), _wide(b))
        if alpha != 1.0:
            y = y * alpha
        if c is not None and beta != 0.0:
            cw = _wide(c)
            y = y + (cw if beta == 1.0 else cw * beta)
        return np.asarray(y).astype(a.dtype, copy=False)
