"""Pool gradients: MaxPoolGrad, AveragePoolGrad, GlobalAveragePoolGrad, GlobalMaxPoolGrad.

The windowed ones rebuild the forward geometry (pads, ``auto_pad``, strides, dilations, ``ceil_mode``) from the
forward node's attributes, then scatter the output gradient back with one strided add per kernel offset. MaxPool
sends each window's gradient to its first maximum, as PyTorch and onnxruntime do.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np

from runtime import native
from runtime.kernels.base import register
from runtime.kernels.conv import pad_spatial, resolve_pads, spatial_attrs, window_view
from runtime.kernels.grad_base import (
    GradKernel,
    crop_spatial,
    kernel_offsets,
    offset_slab,
    refuse_cropping,
    shape_tuple,
    wide,
)
from runtime.kernels.pool import PoolGeometry


class _Geometry(PoolGeometry):
    """Padding and output size of a forward pool, ``ceil_mode`` overhang included (kept out of the counts). Built
    without the forward op's checks; the gradient's pads refuse cropping (``grad_base.refuse_cropping``)."""

    def __init__(self, attrs: dict[str, Any], in_shape: Sequence[int]) -> None:
        self.kernel = [int(k) for k in attrs["kernel_shape"]]
        self.in_shape = [int(d) for d in in_shape]
        self.strides, self.dilations = spatial_attrs(attrs, self.kernel)
        auto_pad = attrs.get("auto_pad", "NOTSET")
        pads = resolve_pads(auto_pad, attrs.get("pads"), self.in_shape, self.kernel, self.strides, self.dilations)
        self.pads = refuse_cropping(pads)
        self.fit_windows(bool(attrs.get("ceil_mode", 0)) and auto_pad not in ("SAME_UPPER", "SAME_LOWER"))

    def padded_shape(self) -> list[int]:
        pads = self.full_pads()
        return [self.in_shape[i] + pads[i] + pads[i + self.nd] for i in range(self.nd)]

    def scatter(self, per_offset: Any, batch: Sequence[int], dtype: np.dtype[Any]) -> np.ndarray:
        """Sum ``per_offset(offset)`` (an ``(N, C, *out)`` array) into the padded input, then crop the pads."""
        dxp = np.zeros((*batch, *self.padded_shape()), dtype=dtype)
        for k_index, offset in enumerate(kernel_offsets(self.kernel)):
            dxp[offset_slab(offset, self.strides, self.dilations, self.out)] += per_offset(k_index, offset)
        return crop_spatial(dxp, self.full_pads(), self.in_shape)


@register
class MaxPoolGrad(GradKernel):
    """``MaxPoolGrad(dY, X) -> dX`` with the forward MaxPool's attributes."""

    op_type = "MaxPoolGrad"
    attr_defaults: ClassVar[dict[str, Any]] = {"auto_pad": "NOTSET", "ceil_mode": 0}

    def compute(self, dy: np.ndarray, x: np.ndarray) -> np.ndarray:
        geo = _Geometry(self.attrs, x.shape[2:])
        if _tiles(geo):
            fast = _native_tiled_max_pool_grad(dy, x, geo.kernel)
            if fast is not None:
                return fast
            return _tiled_max_pool_grad(wide(dy), x, geo.kernel).astype(x.dtype, copy=False)
        lowest = np.iinfo(x.dtype).min if x.dtype.kind in "iu" else -np.inf
        xp = pad_spatial(x, geo.full_pads(), lowest)
        windows = window_view(xp, geo.kernel, geo.strides, geo.dilations, geo.out)
        arg = windows.reshape(*x.shape[:2], *geo.out, -1).argmax(axis=-1)
        dyc = wide(dy)
        zero = np.zeros((), dtype=dyc.dtype)
        dx = geo.scatter(lambda k, _: np.where(arg == k, dyc, zero), x.shape[:2], dyc.dtype)
        return dx.astype(x.dtype, copy=False)


def _tiles(geo: _Geometry) -> bool:
    """2-D windows that tile the plane exactly: kernel == strides, no dilation or padding, sizes divisible."""
    return (
        geo.nd == 2
        and geo.strides == geo.kernel
        and geo.dilations == [1, 1]
        and not any(geo.full_pads())
        and geo.out == [geo.in_shape[0] // geo.kernel[0], geo.in_shape[1] // geo.kernel[1]]
        and all(size % k == 0 for size, k in zip(geo.in_shape, geo.kernel, strict=True))
    )


def _native_tiled_max_pool_grad(dy: np.ndarray, x: np.ndarray, kernel: list[int]) -> np.ndarray | None:
    """``_tiled_max_pool_grad`` compiled (float32), or None without the native library: the NumPy path below is
    its yardstick."""
    lib = native.lib()
    if lib is None:
        return None
    from runtime.native.training import maxpool_grad_tiled

    return maxpool_grad_tiled(lib, dy, x, (kernel[0], kernel[1]))


def _tiled_max_pool_grad(dy: np.ndarray, x: np.ndarray, kernel: list[int]) -> np.ndarray:
    """MaxPoolGrad for windows that tile the plane (a 2x2/2 pool), on a strided view of X with no copy: the window
    maximum by one ``maximum`` per kernel offset, then, offset by offset in C order, dY goes where X equals it and
    no earlier offset took it (the same first maximum as ``argmax``, NaN included, without its gather and scatter)."""
    n, c, height, width = x.shape
    k_h, k_w = kernel
    out_h, out_w = height // k_h, width // k_w
    tiles = x.reshape(n, c, out_h, k_h, out_w, k_w)
    best = tiles[:, :, :, 0, :, 0].copy()
    for a, b in np.ndindex(k_h, k_w):
        np.maximum(best, tiles[:, :, :, a, :, b], out=best)
    dx = np.zeros((n, c, out_h, k_h, out_w, k_w), dtype=dy.dtype)
    free = np.ones(best.shape, dtype=bool)
    hit = np.empty(best.shape, dtype=bool)
    for a, b in np.ndindex(k_h, k_w):
        tap = tiles[:, :, :, a, :, b]
        np.equal(tap, best, out=hit)
        if tap.dtype.kind == "f":
            hit |= np.isnan(tap)  # a NaN is the maximum (np.maximum propagated it to best), as argmax has it
        hit &= free
        np.copyto(dx[:, :, :, a, :, b], dy, where=hit)
        free &= ~hit
    return dx.reshape(n, c, height, width)


@register
class AveragePoolGrad(GradKernel):
    """``AveragePoolGrad(dY, X_shape) -> dX`` with the forward AveragePool's attributes."""

    op_type = "AveragePoolGrad"
    attr_defaults: ClassVar[dict[str, Any]] = {"auto_pad": "NOTSET", "ceil_mode": 0, "count_include_pad": 0}

    def compute(self, dy: np.ndarray, x_shape: np.ndarray) -> np.ndarray:
        shape = shape_tuple(x_shape)
        geo = _Geometry(self.attrs, shape[2:])
        dyc = wide(dy)
        share = dyc / np.maximum(geo.counts(bool(self.attrs["count_include_pad"])), 1).astype(dyc.dtype)
        return geo.scatter(lambda k, _: share, shape[:2], dyc.dtype).astype(dy.dtype, copy=False)


@register
class GlobalAveragePoolGrad(GradKernel):
    """``GlobalAveragePoolGrad(dY, X_shape) -> dX``: every pixel gets ``dY / pixels``."""

    op_type = "GlobalAveragePoolGrad"

    def compute(self, dy: np.ndarray, x_shape: np.ndarray) -> np.ndarray:
        shape = shape_tuple(x_shape)
        pixels = math.prod(shape[2:])
        dyc = wide(dy)
        return np.broadcast_to(dyc / dyc.dtype.type(pixels), shape).astype(dy.dtype)


@register
class GlobalMaxPoolGrad(GradKernel):
    """``GlobalMaxPoolGrad(dY, X) -> dX``: each channel's gradient goes to its first maximum."""

    op_type = "GlobalMaxPoolGrad"

    def compute(self, dy: np.ndarray, x: np.ndarray) -> np.ndarray:
        flat = x.reshape(*x.shape[:2], -1)
        arg = flat.argmax(axis=-1)
        dx = np.zeros(flat.shape, dtype=dy.dtype)
        np.put_along_axis(dx, arg[..., None], dy.reshape(*x.shape[:2], 1), axis=-1)
        return dx.reshape(x.shape)
