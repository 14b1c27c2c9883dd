"""Compiled NHWC convolutions: the direct convolution (``NhwcConv2d``) and the fused depthwise + pointwise pair."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from runtime.native import Args, NativeLib, addr
from runtime.native.abi import (
    CV_ACT,
    CV_ALPHA,
    CV_BIAS,
    CV_BW,
    CV_C,
    CV_CHUNK,
    CV_DIL_H,
    CV_DIL_W,
    CV_G,
    CV_HI,
    CV_IH,
    CV_IW,
    CV_KH,
    CV_KW,
    CV_LO,
    CV_MBT,
    CV_MG,
    CV_NARGS,
    CV_NB0,
    CV_NB1,
    CV_NMB,
    CV_NTAPS,
    CV_OH,
    CV_OW,
    CV_PL,
    CV_PT,
    CV_R_B0,
    CV_R_PX,
    CV_R_ROW,
    CV_RES,
    CV_SH,
    CV_SW,
    CV_TOFF,
    CV_W,
    CV_X,
    CV_X_B0,
    CV_X_GOFF,
    CV_X_PX,
    CV_X_ROW,
    CV_Y,
    CV_Y_B0,
    CV_Y_GOFF,
    CV_Y_PX,
    CV_Y_ROW,
    CV_ZERO,
    DP_ACT,
    DP_BDW,
    DP_BPW,
    DP_BW,
    DP_C,
    DP_DACT,
    DP_DH,
    DP_DHI,
    DP_DLO,
    DP_DWD,
    DP_H,
    DP_HI,
    DP_KH,
    DP_KW,
    DP_LO,
    DP_M,
    DP_MAXC,
    DP_N,
    DP_NARGS,
    DP_NMB,
    DP_OH,
    DP_OW,
    DP_PL,
    DP_PT,
    DP_RES,
    DP_SH,
    DP_SW,
    DP_W,
    DP_WDW,
    DP_WPW,
    DP_X,
    DP_Y,
    DP_ZERO,
    DW_ACT,
    DW_BIAS,
    DW_C,
    DW_DH,
    DW_DWD,
    DW_H,
    DW_HI,
    DW_KH,
    DW_KW,
    DW_LO,
    DW_MAXTAPS,
    DW_N,
    DW_NARGS,
    DW_OH,
    DW_OW,
    DW_PL,
    DW_PT,
    DW_RES,
    DW_SH,
    DW_SW,
    DW_W,
    DW_W_PTR,
    DW_X,
    DW_Y,
    DW_ZERO,
    MAXTAPS,
    SMALL_WEIGHTS,
    VL,
    Bound,
    Epilogue,
    _bind_args,
    _bound,
    _contiguous,
    _delivered,
    _output,
    _PerThread,
    block_width,
    default_chunk,
    pack_bias,
    pack_blocks,
)


class NhwcConv2d:
    """2-d convolution over NHWC float32: dense/grouped (direct kernel) or depthwise, with a fused epilogue.

    ``weight`` is ONNX's ``[M, C/group, KH, KW]``; ``pads`` ONNX's ``[top, left, bottom, right]``. Padding is
    never materialised: taps outside the image read a zero row (indirect convolution).
    """

    def __init__(
        self,
        native: NativeLib,
        weight: np.ndarray,
        bias: np.ndarray | None,
        group: int,
        strides: Sequence[int],
        dilations: Sequence[int],
        pads: Sequence[int],
        epilogue: Epilogue,
        chunk: int | None = None,
    ) -> None:
        self.native = native
        m, cg, kh, kw = (int(d) for d in weight.shape)
        self.m, self.cg, self.kh, self.kw, self.group = m, cg, kh, kw, int(group)
        self.c_in = cg * self.group
        self.strides = (int(strides[0]), int(strides[1]))
        self.dilations = (int(dilations[0]), int(dilations[1]))
        self.pads = tuple(int(p) for p in pads)
        self.epilogue = epilogue
        self.depthwise = cg == 1 and self.group == m and self.group > 1
        self.chunk = chunk
        self.zero = np.zeros(max(self.c_in, kw * cg) + VL, dtype=np.float32)
        w = np.asarray(weight, dtype=np.float32)
        if self.depthwise:
            cp = -(-m // VL) * VL
            packed = np.zeros((kh * kw, cp), dtype=np.float32)
            packed[:, :m] = w.reshape(m, kh * kw).T
            self.weight = packed
            dw_bias = np.zeros(cp, dtype=np.float32)
            if bias is not None:
                dw_bias[:m] = bias
            self.bias: np.ndarray | None = dw_bias
        else:
            mg = m // self.group
            self.bw = block_width(mg)
            # reduction order: tap (i, j) outer, input channel inner
            w2 = w.transpose(0, 2, 3, 1).reshape(m, kh * kw * cg)
            self.weight = pack_blocks(w2, self.group, self.bw)
            self.bias = pack_bias(None if bias is None else np.asarray(bias, np.float32), self.group, mg, self.bw)
            self.mg, self.nmb = mg, -(-mg // self.bw)
        self._geometry = _PerThread()

    @property
    def supported(self) -> bool:
        """Whether the compiled kernels take this kernel size (else the caller uses NumPy)."""
        return self.kh * self.kw <= (DW_MAXTAPS if self.depthwise else MAXTAPS) and self.kh <= 64

    def output_shape(self, in_shape: Sequence[int]) -> tuple[int, int, int, int]:
        n, h, w, _ = in_shape
        (sh, sw), (dh, dw) = self.strides, self.dilations
        pt, pl, pb, pr = self.pads
        oh = (h + pt + pb - ((self.kh - 1) * dh + 1)) // sh + 1
        ow = (w + pl + pr - ((self.kw - 1) * dw + 1)) // sw + 1
        return n, oh, ow, self.m

    def _build(self, in_shape: tuple[int, ...]) -> tuple[Args, tuple[int, ...]]:
        n, h, w, c = in_shape
        if c != self.c_in:
            raise ValueError(f"input has {c} channels, the weights expect {self.c_in}")
        pt, pl, _, _ = self.pads
        out_shape = self.output_shape(in_shape)
        _, oh, ow, m = out_shape
        if oh <= 0 or ow <= 0:
            raise ValueError(f"kernel {(self.kh, self.kw)} larger than the padded input")
        (sh, sw), (dh, dw) = self.strides, self.dilations
        ep = self.epilogue
        if self.depthwise:
            a = Args(DW_NARGS)
            for idx, val in (
                (DW_H, h),
                (DW_W, w),
                (DW_N, n),
                (DW_OH, oh),
                (DW_OW, ow),
                (DW_KH, self.kh),
                (DW_KW, self.kw),
                (DW_SH, sh),
                (DW_SW, sw),
                (DW_DH, dh),
                (DW_DWD, dw),
                (DW_PT, pt),
                (DW_PL, pl),
                (DW_C, c),
            ):
                a[idx] = val
            a[DW_W_PTR], a[DW_ZERO] = a.pin(self.weight), a.pin(self.zero)
            a[DW_BIAS] = 0 if self.bias is None else a.pin(self.bias)
            a[DW_ACT], a[DW_LO], a[DW_HI] = ep.code(), Args.f32(ep.lo), Args.f32(ep.hi)
            return a, out_shape
        a = Args(CV_NARGS)
        flat = self.kh == self.kw == 1 and sh == sw == 1 and not any(self.pads)
        if flat:  # a 1x1 stride-1 convolution is one GEMM over every pixel of the batch
            a[CV_NB0], a[CV_NB1], a[CV_OH], a[CV_OW] = 1, 1, 1, n * h * w
            a[CV_X_B0], a[CV_X_ROW], a[CV_X_PX] = 0, 0, c
            a[CV_Y_B0], a[CV_Y_ROW], a[CV_Y_PX] = 0, 0, m
            taps = np.zeros(1, dtype=np.int64)
        else:
            a[CV_NB0], a[CV_NB1], a[CV_OH], a[CV_OW] = n, 1, oh, ow
            a[CV_X_B0], a[CV_X_PX] = h * w * c, c
            a[CV_Y_B0], a[CV_Y_ROW], a[CV_Y_PX] = oh * ow * m, ow * m, m
            for idx, val in (
                (CV_IH, h),
                (CV_IW, w),
                (CV_KH, self.kh),
                (CV_KW, self.kw),
                (CV_SH, sh),
                (CV_SW, sw),
                (CV_DIL_H, dh),
                (CV_DIL_W, dw),
                (CV_PT, pt),
                (CV_PL, pl),
            ):
                a[idx] = val
            a[CV_ZERO] = a.pin(self.zero)
            taps = np.zeros(self.kh * self.kw, dtype=np.int64)
        a[CV_R_B0], a[CV_R_ROW], a[CV_R_PX] = a.block[CV_Y_B0], a.block[CV_Y_ROW], a.block[CV_Y_PX]
        a[CV_NTAPS], a[CV_TOFF], a[CV_C] = len(taps), a.pin(taps), self.cg
        a[CV_W] = a.pin(self.weight)
        a[CV_G], a[CV_X_GOFF], a[CV_MG], a[CV_NMB], a[CV_Y_GOFF] = self.group, self.cg, self.mg, self.nmb, self.mg
        if self.bias is not None:
            a[CV_BIAS] = a.pin(self.bias)
        a[CV_ACT], a[CV_LO], a[CV_HI], a[CV_ALPHA] = ep.code(), Args.f32(ep.lo), Args.f32(ep.hi), Args.f32(ep.alpha)
        npix = int(a.block[CV_OH]) * int(a.block[CV_OW])
        small = self.weight[0].nbytes <= SMALL_WEIGHTS
        a[CV_MBT] = self.nmb if small else 1
        a[CV_BW] = self.bw
        a[CV_CHUNK] = self.chunk or default_chunk(npix, 1 if small else self.nmb * self.group, int(a.block[CV_NB0]))
        return a, out_shape

    def geometry(self, in_shape: tuple[int, ...]) -> tuple[Args, tuple[int, ...]]:
        """This thread's argument block for an input shape, and the output shape."""
        geo: tuple[Args, tuple[int, ...]] = self._geometry.get(in_shape, self._build)
        return geo

    def bind(self, x: np.ndarray, res: np.ndarray | None, out: np.ndarray) -> Bound | None:
        """A prebound call computing ``out`` from ``x`` (and ``res``) at their current addresses."""
        a = _bind_args(self.geometry, x, res, out)
        if a is None:
            return None
        if self.depthwise:
            a[DW_X], a[DW_Y], a[DW_RES] = addr(x), addr(out), 0 if res is None else addr(res)
            return _bound(self.native.dwconv, a, x, out, res)
        a[CV_X], a[CV_Y], a[CV_RES] = addr(x), addr(out), 0 if res is None else addr(res)
        return _bound(self.native.conv2d if a.block[CV_IH] else self.native.conv, a, x, out, res)

    def __call__(self, x: np.ndarray, res: np.ndarray | None = None, out: np.ndarray | None = None) -> np.ndarray:
        x = np.ascontiguousarray(x, dtype=np.float32)
        args, out_shape = self.geometry(x.shape)
        target = _output(out, out_shape)
        # a residual that needs a copy is held here until the kernel has read it
        residual = None if res is None else _contiguous(res, out_shape)
        if self.depthwise:
            args[DW_X], args[DW_Y] = addr(x), addr(target)
            args[DW_RES] = 0 if residual is None else addr(residual)
            self.native.dwconv(args.ptr)
        else:
            args[CV_X], args[CV_Y] = addr(x), addr(target)
            args[CV_RES] = 0 if residual is None else addr(residual)
            if args.block[CV_IH]:
                self.native.conv2d(args.ptr)
            else:
                self.native.conv(args.ptr)
        return _delivered(target, out)


class NhwcDwPw:
    """A depthwise convolution feeding a 1x1 convolution, fused (the depthwise result never goes to memory)."""

    def __init__(self, native: NativeLib, dw: NhwcConv2d, pw: NhwcConv2d) -> None:
        if not dw.depthwise or pw.depthwise or pw.group != 1 or (pw.kh, pw.kw) != (1, 1) or pw.c_in != dw.m:
            raise ValueError("not a depthwise convolution feeding a 1x1 convolution")
        self.native, self.dw, self.pw = native, dw, pw
        self._args = _PerThread()

    @property
    def supported(self) -> bool:
        return self.dw.m <= DP_MAXC and self.dw.supported

    def _build(self, in_shape: tuple[int, ...]) -> tuple[Args, tuple[int, ...]]:
        n, h, w, c = in_shape
        dw, pw = self.dw, self.pw
        _, oh, ow, _ = dw.output_shape(in_shape)
        a = Args(DP_NARGS)
        (sh, sw), (dh, dwd) = dw.strides, dw.dilations
        for idx, val in (
            (DP_N, n),
            (DP_H, h),
            (DP_W, w),
            (DP_C, c),
            (DP_OH, oh),
            (DP_OW, ow),
            (DP_KH, dw.kh),
            (DP_KW, dw.kw),
            (DP_SH, sh),
            (DP_SW, sw),
            (DP_DH, dh),
            (DP_DWD, dwd),
            (DP_PT, dw.pads[0]),
            (DP_PL, dw.pads[1]),
            (DP_M, pw.m),
            (DP_NMB, pw.nmb),
            (DP_BW, pw.bw),
        ):
            a[idx] = val
        a[DP_WDW], a[DP_ZERO], a[DP_WPW] = a.pin(dw.weight), a.pin(dw.zero), a.pin(pw.weight)
        a[DP_BDW] = 0 if dw.bias is None else a.pin(dw.bias)
        a[DP_BPW] = 0 if pw.bias is None else a.pin(pw.bias)
        e1, e2 = dw.epilogue, pw.epilogue
        a[DP_DACT], a[DP_DLO], a[DP_DHI] = e1.code(), Args.f32(e1.lo), Args.f32(e1.hi)
        a[DP_ACT], a[DP_LO], a[DP_HI] = e2.code(), Args.f32(e2.lo), Args.f32(e2.hi)
        return a, (n, oh, ow, pw.m)

    def geometry(self, in_shape: tuple[int, ...]) -> tuple[Args, tuple[int, ...]]:
        geo: tuple[Args, tuple[int, ...]] = self._args.get(in_shape, self._build)
        return geo

    def bind(self, x: np.ndarray, res: np.ndarray | None, out: np.ndarray) -> Bound | None:
        a = _bind_args(self.geometry, x, res, out)
        if a is None:
            return None
        a[DP_X], a[DP_Y], a[DP_RES] = addr(x), addr(out), 0 if res is None else addr(res)
        return _bound(self.native.dwpw, a, x, out, res)

    def __call__(self, x: np.ndarray, res: np.ndarray | None = None, out: np.ndarray | None = None) -> np.ndarray:
        x = np.ascontiguousarray(x, dtype=np.float32)
        _, out_shape = self.geometry(x.shape)
        if out is None:
            out = np.empty(out_shape, dtype=np.float32)
        if res is not None:
            res = _contiguous(res, out_shape)
        bound = self.bind(x, res, out)
        if bound is None:
            raise ValueError(f"fused depthwise/pointwise convolution cannot take {x.shape}")
        bound()
        return out
