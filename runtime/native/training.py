"""Compiled kernels of training graphs (``training.c``): the tiled max-pool backward."""

from __future__ import annotations

import numpy as np

from runtime.native import Args, NativeLib, addr

#: ``ap_maxpool_grad_tiled``'s argument block (training.c's ``MG_*`` enum).
MG_X, MG_DY, MG_DX, MG_PLANES, MG_H, MG_W, MG_KH, MG_KW, MG_NARGS = range(9)


def maxpool_grad_tiled(lib: NativeLib, dy: np.ndarray, x: np.ndarray, kernel: tuple[int, int]) -> np.ndarray | None:
    """dL/dX of a float32 NCHW max pool whose windows tile the plane (kernel == strides, no pads or dilation):
    each window's dY goes to its first maximum (NaN counting as one); None for other dtypes."""
    if x.dtype != np.float32 or dy.dtype != np.float32 or x.ndim != 4:
        return None
    x = np.ascontiguousarray(x)
    dy = np.ascontiguousarray(dy)
    dx = np.empty_like(x)
    args = Args(MG_NARGS)
    args[MG_X], args[MG_DY], args[MG_DX] = addr(x), addr(dy), addr(dx)
    args[MG_PLANES], args[MG_H], args[MG_W] = x.shape[0] * x.shape[1], x.shape[2], x.shape[3]
    args[MG_KH], args[MG_KW] = kernel
    lib.maxpool_grad_tiled(args.ptr)
    return dx
