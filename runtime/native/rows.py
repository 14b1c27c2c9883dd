"""Compiled row and window operations: pooling, softmax/layernorm/GELU rows, LRN, transposes, channel shuffle."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from runtime.native import Args, NativeLib, addr
from runtime.native.abi import (
    CS_NARGS,
    GL_NARGS,
    GP_NARGS,
    LR_NARGS,
    PL_NARGS,
    RW_NARGS,
    TR_NARGS,
    Bound,
    _bound,
    _c_float,
)


@dataclass(frozen=True)
class PoolWindow:
    """A 2-d pooling window: ONNX ``pads`` ``[top, left, bottom, right]``, the output size (ceil mode decided by the
    caller) and the mode: 0 max, 1 average excluding pads, 2 average including them."""

    kernel: Sequence[int]
    strides: Sequence[int]
    dilations: Sequence[int]
    pads: Sequence[int]
    out_hw: Sequence[int]
    mode: int


def _pool_args(x: np.ndarray, nhwc: tuple[int, int, int, int], win: PoolWindow, out: np.ndarray) -> Args:
    """The argument block both pooling layouts take: sizes as (N, H, W, C) whatever the layout."""
    n, h, w, c = nhwc
    a = Args(PL_NARGS)
    a.block[:PL_NARGS] = (
        addr(x),
        n,
        h,
        w,
        c,
        win.out_hw[0],
        win.out_hw[1],
        win.kernel[0],
        win.kernel[1],
        win.strides[0],
        win.strides[1],
        win.dilations[0],
        win.dilations[1],
        win.pads[0],
        win.pads[1],
        win.pads[2],
        win.pads[3],
        win.mode,
        addr(out),
    )
    return a


def _pool_shapes(x: np.ndarray, win: PoolWindow, nchw: bool) -> tuple[tuple[int, int, int, int], tuple[int, ...]]:
    """(N, H, W, C) of ``x`` and the output shape, for either layout."""
    if nchw:
        n, c, h, w = x.shape
        return (n, h, w, c), (n, c, *win.out_hw)
    n, h, w, c = x.shape
    return (n, h, w, c), (n, *win.out_hw, c)


def bind_pool(
    native: NativeLib, x: np.ndarray, win: PoolWindow, out: np.ndarray, *, nchw: bool = False
) -> Bound | None:
    """``pool`` prebound over fixed arrays (None when they are not C-contiguous float32 of the right shapes)."""
    if not _c_float(x) or not _c_float(out) or x.ndim != 4:
        return None
    sizes, out_shape = _pool_shapes(x, win, nchw)
    if out.shape != out_shape:
        return None
    tiled = _tiled_2x2_max(x, win, out) if nchw else None
    if tiled is not None:
        return _bound(native.maxpool_2x2, tiled, x, out)
    return _bound(native.pool_nchw if nchw else native.pool, _pool_args(x, sizes, win, out), x, out)


def _tiled_2x2_max(x: np.ndarray, win: PoolWindow, out: np.ndarray) -> Args | None:
    """The narrow-plane 2x2/2 NCHW max pool's arguments (``runtime.native.training``) when ``win`` is one."""
    if win.mode != 0 or list(win.kernel) != [2, 2] or list(win.strides) != [2, 2] or list(win.dilations) != [1, 1]:
        return None
    if any(win.pads):
        return None
    from runtime.native.training import maxpool_2x2_args

    return maxpool_2x2_args(x, out)


def bind_rows(native: NativeLib, kind: str, x: np.ndarray, out: np.ndarray, *extra: Any) -> Bound | None:
    """Prebound softmax / layernorm(gamma, beta, eps) / gelu / gap / transpose over fixed arrays."""
    if not _c_float(x) or not _c_float(out):
        return None
    if kind == "softmax" and out.shape == x.shape and x.ndim:
        a = Args(RW_NARGS)
        n = x.shape[-1]
        a.block[:RW_NARGS] = (addr(x), addr(out), x.size // max(n, 1), n, 0, 0, 0)
        return _bound(native.softmax, a, x, out)
    if kind == "layernorm" and out.shape == x.shape and x.ndim:
        gamma, beta, eps = extra
        return _bound(native.layernorm, _layernorm_args(x, out, gamma, beta, eps), x, out, gamma, beta)
    if kind == "gelu" and out.shape == x.shape:
        a = Args(GL_NARGS)
        a.block[:GL_NARGS] = (addr(x), addr(out), x.size)
        return _bound(native.gelu, a, x, out)
    if kind == "gap" and x.ndim == 4 and out.shape == (x.shape[0], 1, 1, x.shape[3]):
        a = Args(GP_NARGS)
        n, h, w, c = x.shape
        a.block[:GP_NARGS] = (addr(x), n, h * w, c, addr(out))
        return _bound(native.gap, a, x, out)
    if kind == "transpose":
        ((n, r, c),) = extra
        a = Args(TR_NARGS)
        a.block[:TR_NARGS] = (addr(x), n, r, c, addr(out))
        return _bound(native.transpose, a, x, out)
    return None


def pool(
    native: NativeLib, x: np.ndarray, win: PoolWindow, out: np.ndarray | None = None, *, nchw: bool = False
) -> np.ndarray:
    """Max or average pooling (``win.mode``) over NHWC ``x``, or NCHW ``x`` with ``nchw`` (what a pool outside a
    converted region runs)."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    sizes, out_shape = _pool_shapes(x, win, nchw)
    if out is None:
        out = np.empty(out_shape, dtype=np.float32)
    tiled = _tiled_2x2_max(x, win, out) if nchw else None
    if tiled is not None:
        native.maxpool_2x2(tiled.ptr)
        return out
    (native.pool_nchw if nchw else native.pool)(_pool_args(x, sizes, win, out))
    return out


def global_average_pool_nhwc(native: NativeLib, x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """``[N, H, W, C] -> [N, 1, 1, C]`` mean over H and W."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    n, h, w, c = x.shape
    if out is None:
        out = np.empty((n, 1, 1, c), dtype=np.float32)
    a = Args(GP_NARGS)
    a.block[:GP_NARGS] = (addr(x), n, h * w, c, addr(out))
    native.gap(a.ptr)
    return out


def transpose_last2(native: NativeLib, x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """``[N, R, C] -> [N, C, R]`` (NCHW <-> NHWC with the spatial dims flattened)."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    n, r, c = x.shape
    if out is None:
        out = np.empty((n, c, r), dtype=np.float32)
    a = Args(TR_NARGS)
    a.block[:TR_NARGS] = (addr(x), n, r, c, addr(out))
    native.transpose(a.ptr)
    return out


def softmax_rows(native: NativeLib, x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """Softmax over the last axis of a C-contiguous float32 array."""
    if out is None:
        out = np.empty_like(x)
    a = Args(RW_NARGS)
    n = x.shape[-1] if x.ndim else 1
    a.block[:RW_NARGS] = (addr(x), addr(out), x.size // max(n, 1), n, 0, 0, 0)
    native.softmax(a.ptr)
    return out


def layernorm_rows(
    native: NativeLib,
    x: np.ndarray,
    gamma: np.ndarray,
    beta: np.ndarray | None,
    eps: float,
    out: np.ndarray | None = None,
) -> np.ndarray:
    """Layer normalisation over the last axis; ``gamma``/``beta`` float32 of that length, contiguous."""
    if out is None:
        out = np.empty_like(x)
    native.layernorm(_layernorm_args(x, out, gamma, beta, eps))
    return out


def _layernorm_args(x: np.ndarray, out: np.ndarray, gamma: np.ndarray, beta: np.ndarray | None, eps: float) -> Args:
    """The row kernels' argument block of a layer normalisation of ``x``'s last axis into ``out``."""
    n = x.shape[-1]
    a = Args(RW_NARGS)
    beta_addr = 0 if beta is None else addr(beta)
    a.block[:RW_NARGS] = (addr(x), addr(out), x.size // n, n, addr(gamma), beta_addr, Args.f32(eps))
    return a


def _lrn_args(x: np.ndarray, out: np.ndarray, size: int, alpha: float, beta: float, bias: float) -> Args:
    a = Args(LR_NARGS)
    hw = int(np.prod(x.shape[2:], dtype=np.int64))
    a.block[:LR_NARGS] = (
        addr(x), addr(out), x.shape[0], x.shape[1], hw, size, Args.f32(alpha), Args.f32(beta), Args.f32(bias)
    )
    return a


def lrn(
    native: NativeLib,
    x: np.ndarray,
    size: int,
    alpha: float,
    beta: float,
    bias: float,
    out: np.ndarray | None = None,
) -> np.ndarray:
    """Local response normalisation across the channels (axis 1) of a contiguous float32 ``[N, C, ...]`` array."""
    if out is None:
        out = np.empty_like(x)
    native.lrn(_lrn_args(x, out, size, alpha, beta, bias))
    return out


def bind_lrn(
    native: NativeLib, x: np.ndarray, out: np.ndarray, size: int, alpha: float, beta: float, bias: float
) -> Bound | None:
    """Prebound ``lrn`` over fixed arrays, or None."""
    if not _c_float(x) or not _c_float(out) or out.shape != x.shape or x.ndim < 3:
        return None
    return _bound(native.lrn, _lrn_args(x, out, size, alpha, beta, bias), x, out)


def gelu(native: NativeLib, x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """``0.5 x (1 + erf(x / sqrt 2))`` elementwise on a contiguous float32 array."""
    if out is None:
        out = np.empty_like(x)
    a = Args(GL_NARGS)
    a.block[:GL_NARGS] = (addr(x), addr(out), x.size)
    native.gelu(a.ptr)
    return out


def bind_channel_shuffle(native: NativeLib, x: np.ndarray, groups: int, out: np.ndarray) -> Bound | None:
    """Prebound NHWC channel shuffle (``y[..., j * g + i] = x[..., i * cg + j]``), or None."""
    if not _c_float(x) or not _c_float(out) or out.shape != x.shape or x.shape[-1] % groups:
        return None
    c = x.shape[-1]
    a = Args(CS_NARGS)
    a.block[:CS_NARGS] = (addr(x), addr(out), x.size // c, groups, c // groups)
    return _bound(native.channel_shuffle, a, x, out)


def channel_shuffle(native: NativeLib, x: np.ndarray, groups: int, out: np.ndarray | None = None) -> np.ndarray:
    x = np.ascontiguousarray(x, dtype=np.float32)
    if out is None:
        out = np.empty_like(x)
    bound = bind_channel_shuffle(native, x, groups, out)
    if bound is None:
        raise ValueError(f"cannot shuffle {x.shape} in {groups} groups")
    bound()
    return out
