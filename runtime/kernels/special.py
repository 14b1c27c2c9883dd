"""Special functions the kernels share (NumPy has no ufunc for them): the error function to float32 accuracy.

Kept apart from the op kernels so ``elementwise``, ``activations``, ``fused`` and the gradients reuse one ``erf``;
``runtime.kernels.elementwise.erf`` stays importable.
"""

from __future__ import annotations

import functools
import math

import numpy as np

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
