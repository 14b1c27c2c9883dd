"""Compiled upsampling kernels (runtime/native/upsample.c): ConvTranspose over NHWC (a 1x1 convolution to per-tap
columns, then ``ap_col2im_nhwc``), 2-D Resize from per-axis tap tables in either layout (``ap_resize2d``), and
Concat along the last axis (``ap_concat_last``).

Each ``bind_*`` returns a zero-argument call over fixed arrays (the static plan's prebound step), or ``None`` where
the arrays are not C-contiguous float32 of the expected shapes; the argument-block indices mirror the C enums.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from runtime.native import Args, NativeLib, addr
from runtime.native.abi import Bound, Epilogue, _bound, _c_float, in_sequence
from runtime.native.conv import NhwcConv2d

(
    CN_COLS,
    CN_OUT,
    CN_BIAS,
    CN_N,
    CN_M,
    CN_KH,
    CN_KW,
    CN_H,
    CN_W,
    CN_OH,
    CN_OW,
    CN_SH,
    CN_SW,
    CN_DH,
    CN_DW,
    CN_HEADH,
    CN_HEADW,
    CN_OPX,
    CN_HOFF,
    CN_HCNT,
    CN_WOFF,
    CN_WCNT,
    CN_NARGS,
) = range(23)
(
    RS_X,
    RS_Y,
    RS_N,
    RS_C,
    RS_H,
    RS_W,
    RS_OH,
    RS_OW,
    RS_NHWC,
    RS_TH,
    RS_HIDX,
    RS_HWT,
    RS_TW,
    RS_WIDX,
    RS_WWT,
    RS_NEAREST,
    RS_OPX,
    RS_NARGS,
) = range(18)
CC_OUT, CC_ROWS, CC_NPARTS, CC_PTRS, CC_WIDTHS, CC_TOTAL, CC_NARGS = range(7)


def pixel_stride(a: np.ndarray) -> int | None:
    """Floats from one pixel to the next of a 4-d NHWC float32 array that is C-contiguous, or a slice of the last
    axis of one (a concat's output its producer writes into); None for any other layout."""
    if not isinstance(a, np.ndarray) or a.dtype != np.float32 or a.ndim != 4:
        return None
    n, h, w, c = a.shape
    if a.flags.c_contiguous:
        return c
    if a.strides[3] != 4:
        return None
    step, rest = divmod(a.strides[2], 4)
    if rest or step < c or (h > 1 and a.strides[1] != w * step * 4) or (n > 1 and a.strides[0] != h * w * step * 4):
        return None
    return step


@dataclass(frozen=True)
class ConvTransposeGeometry:
    """Where the taps land: strides, dilations, and the offset of output (0, 0) in the uncropped result."""

    strides: tuple[int, int]
    dilations: tuple[int, int]
    head: tuple[int, int]
    out_hw: tuple[int, int]


class NhwcConvTranspose2d:
    """2-d ConvTranspose of NHWC float32 (group 1): ``x @ W`` as one 1x1 convolution whose output channels are the
    (kh, kw, m) taps, then the gather. ``weight`` is ONNX's ``[C, M, KH, KW]``."""

    def __init__(self, native: NativeLib, weight: np.ndarray, bias: np.ndarray | None) -> None:
        c, m, kh, kw = (int(d) for d in weight.shape)
        self.native, self.c, self.m, self.kh, self.kw = native, c, m, kh, kw
        taps = np.ascontiguousarray(np.asarray(weight, np.float32).transpose(2, 3, 1, 0)).reshape(kh * kw * m, c, 1, 1)
        self.gemm = NhwcConv2d(native, taps, None, 1, (1, 1), (1, 1), (0, 0, 0, 0), Epilogue())
        self.bias = None if bias is None else np.ascontiguousarray(bias, dtype=np.float32).reshape(m)

    def bind(self, x: np.ndarray, out: np.ndarray, geo: ConvTransposeGeometry) -> Bound | None:
        """``out`` (N, OH, OW, M) from ``x`` (N, H, W, C) at their current addresses (a scratch for the columns is
        kept with the call); ``out`` may be a channel slice of a wider NHWC array."""
        opx = pixel_stride(out)
        if not _c_float(x) or opx is None or x.ndim != 4 or x.shape[3] != self.c:
            return None
        n, h, w, _ = x.shape
        if out.shape != (n, *geo.out_hw, self.m):
            return None
        cols = np.empty((n, h, w, self.kh * self.kw * self.m), dtype=np.float32)
        gemm = self.gemm.bind(x, None, cols)
        if gemm is None:
            return None
        a = Args(CN_NARGS)
        a.block[:CN_HOFF] = (
            a.pin(cols),
            addr(out),
            0 if self.bias is None else a.pin(self.bias),
            n,
            self.m,
            self.kh,
            self.kw,
            h,
            w,
            geo.out_hw[0],
            geo.out_hw[1],
            *geo.strides,
            *geo.dilations,
            *geo.head,
            opx,
        )
        return in_sequence(gemm, _bound(self.native.col2im_nhwc, a, out))


@dataclass(frozen=True)
class ResizeTaps:
    """Per spatial axis, the source indices (out, taps) and their weights; ``nearest``: one tap of weight 1."""

    h_idx: np.ndarray
    h_wt: np.ndarray
    w_idx: np.ndarray
    w_wt: np.ndarray
    nearest: bool

    @staticmethod
    def build(h: tuple[np.ndarray, np.ndarray], w: tuple[np.ndarray, np.ndarray], nearest: bool) -> ResizeTaps:
        def idx(a: np.ndarray) -> np.ndarray:
            return np.ascontiguousarray(a, dtype=np.int64)

        def wt(a: np.ndarray) -> np.ndarray:
            return np.ascontiguousarray(a, dtype=np.float32)

        return ResizeTaps(idx(h[0]), wt(h[1]), idx(w[0]), wt(w[1]), nearest)


def bind_resize(native: NativeLib, x: np.ndarray, out: np.ndarray, taps: ResizeTaps, nhwc: bool) -> Bound | None:
    """Resize of the spatial axes of ``x`` into ``out`` (NHWC or NCHW, same N and C; an NHWC ``out`` may be a
    channel slice of a wider array)."""
    opx = pixel_stride(out) if nhwc else (1 if _c_float(out) else None)
    if not _c_float(x) or opx is None or x.ndim != 4 or out.ndim != 4:
        return None
    if nhwc:
        (n, h, w, c), (on, oh, ow, oc) = x.shape, out.shape
    else:
        (n, c, h, w), (on, oc, oh, ow) = x.shape, out.shape
    if (on, oc) != (n, c) or taps.h_idx.shape[0] != oh or taps.w_idx.shape[0] != ow:
        return None
    if taps.h_idx.size and (taps.h_idx.max() >= h or taps.h_idx.min() < 0):
        return None
    if taps.w_idx.size and (taps.w_idx.max() >= w or taps.w_idx.min() < 0):
        return None
    a = Args(RS_NARGS)
    a.block[:] = (
        addr(x),
        addr(out),
        n,
        c,
        h,
        w,
        oh,
        ow,
        int(nhwc),
        taps.h_idx.shape[1],
        a.pin(taps.h_idx),
        a.pin(taps.h_wt),
        taps.w_idx.shape[1],
        a.pin(taps.w_idx),
        a.pin(taps.w_wt),
        int(taps.nearest),
        opx,
    )
    return _bound(native.resize2d, a, x, out)


def bind_concat_last(native: NativeLib, parts: Sequence[np.ndarray], out: np.ndarray) -> Bound | None:
    """``np.concatenate(parts, axis=-1, out=out)`` for C-contiguous float32 arrays. A part that already is its
    slice of ``out`` (its producer wrote it there: concat by placement) is not copied."""
    if not parts or not _c_float(out):
        return None
    lead = out.shape[:-1]
    if any(p.shape[:-1] != lead for p in parts) or sum(p.shape[-1] for p in parts) != out.shape[-1]:
        return None
    ptrs = np.zeros(len(parts), dtype=np.int64)
    offset = 0
    for i, p in enumerate(parts):
        in_place = p.dtype == np.float32 and p.strides == out.strides and addr(p) == addr(out) + 4 * offset
        if not in_place and not _c_float(p):
            return None
        ptrs[i] = 0 if in_place else addr(p)
        offset += p.shape[-1]
    a = Args(CC_NARGS)
    widths = np.array([p.shape[-1] for p in parts], dtype=np.int64)
    rows = int(np.prod(lead, dtype=np.int64))
    a.block[:] = (addr(out), rows, len(parts), a.pin(ptrs), a.pin(widths), out.shape[-1])
    return _bound(native.concat_last, a, out, *parts)
