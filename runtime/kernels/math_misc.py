"""Einsum, Det and Trilu: small linear-algebra ops NumPy implements directly."""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from runtime.kernels.base import Kernel, register
from runtime.kernels.cast import to_dtype, to_work


@register
class Einsum(Kernel):
    """Einstein summation; the equation follows NumPy's grammar (``...`` broadcasting, implicit output)."""

    op_type = "Einsum"
    uses_blas = True
    amp_class = "fp32"
    since_version = 12

    def setup(self) -> None:
        self.equation = str(self.attrs["equation"]).replace(" ", "")

    def compute(self, *inputs: np.ndarray) -> np.ndarray:
        out = np.einsum(self.equation, *[to_work(x) for x in inputs])
        return to_dtype(out, inputs[0].dtype)


@register
class Det(Kernel):
    """Determinant of each square matrix in the last two dims (float16 via float32: LAPACK has no half)."""

    op_type = "Det"
    uses_blas = True
    since_version = 11

    def compute(self, x: np.ndarray) -> np.ndarray:
        work = to_work(x)
        if work.dtype.itemsize < 4:
            work = work.astype(np.float32)
        return to_dtype(np.linalg.det(work), x.dtype)


@register
class Trilu(Kernel):
    """Upper (``upper=1``) or lower triangle of the last two dims, shifted by the optional diagonal ``k``."""

    op_type = "Trilu"
    since_version = 14
    attr_defaults: ClassVar[dict[str, Any]] = {"upper": 1}

    def compute(self, x: np.ndarray, k: np.ndarray | None = None) -> np.ndarray:
        diagonal = int(np.asarray(k).ravel()[0]) if k is not None else 0
        return np.triu(x, diagonal) if self.attrs["upper"] else np.tril(x, diagonal)
