"""Python side of the compiled kernels: weight packing, argument blocks, and one callable per operation.

Each class packs what is constant (weights, bias, tap offsets) once, at construction; ``__call__`` only fills in
the addresses of the arrays of this call. Activations are NHWC float32, C-contiguous. The argument block
indices mirror the enums in ``kernels.c``.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from runtime.native import Args, NativeLib, addr

#: Output channels per packed weight block (``NB`` in kernels.c).
NB = 32
#: Lanes of one vector (``VL`` in kernels.c); depthwise weights are padded to it.
VL = 16

ACTIVATIONS = {"": 0, "Relu": 1, "Clip": 2, "LeakyRelu": 3}

# argument block layouts (see kernels.c)
(
    CV_X,
    CV_X_B0,
    CV_X_B1,
    CV_X_ROW,
    CV_X_PX,
    CV_NB0,
    CV_NB1,
    CV_OH,
    CV_OW,
    CV_NTAPS,
    CV_TOFF,
    CV_C,
    CV_W,
    CV_W_B0,
    CV_W_B1,
    CV_G,
    CV_X_GOFF,
    CV_MG,
    CV_NMB,
    CV_Y,
    CV_Y_B0,
    CV_Y_B1,
    CV_Y_ROW,
    CV_Y_PX,
    CV_Y_GOFF,
    CV_BIAS,
    CV_RES,
    CV_R_B0,
    CV_R_B1,
    CV_R_ROW,
    CV_R_PX,
    CV_ACT,
    CV_LO,
    CV_HI,
    CV_ALPHA,
    CV_CHUNK,
    CV_IH,
    CV_IW,
    CV_KH,
    CV_KW,
    CV_SH,
    CV_SW,
    CV_DIL_H,
    CV_DIL_W,
    CV_PT,
    CV_PL,
    CV_ZERO,
    CV_MBT,
    CV_BW,
    CV_NARGS,
) = range(50)
#: Weights up to this many bytes per group are read by every task (all channel blocks in one task).
SMALL_WEIGHTS = 256 << 10
#: Most taps (KH*KW) the compiled direct convolution handles; larger kernels fall back to NumPy.
MAXTAPS = 128
PB_B, PB_B_B0, PB_B_B1, PB_SK, PB_SN, PB_NB0, PB_NB1, PB_K, PB_N, PB_OUT, PB_NARGS = range(11)
(
    DW_X,
    DW_H,
    DW_W,
    DW_N,
    DW_OH,
    DW_OW,
    DW_KH,
    DW_KW,
    DW_SH,
    DW_SW,
    DW_DH,
    DW_DWD,
    DW_PT,
    DW_PL,
    DW_C,
    DW_W_PTR,
    DW_BIAS,
    DW_Y,
    DW_RES,
    DW_ACT,
    DW_LO,
    DW_HI,
    DW_ZERO,
    DW_NARGS,
) = range(24)
#: Most taps the compiled depthwise convolution handles.
DW_MAXTAPS = 256
(
    PL_X,
    PL_N,
    PL_H,
    PL_W,
    PL_C,
    PL_OH,
    PL_OW,
    PL_KH,
    PL_KW,
    PL_SH,
    PL_SW,
    PL_DH,
    PL_DW,
    PL_PT,
    PL_PL,
    PL_PB,
    PL_PR,
    PL_MODE,
    PL_Y,
    PL_NARGS,
) = range(20)
GP_X, GP_N, GP_HW, GP_C, GP_Y, GP_NARGS = range(6)
TR_X, TR_N, TR_ROWS, TR_COLS, TR_Y, TR_NARGS = range(6)
RW_X, RW_Y, RW_ROWS, RW_N, RW_GAMMA, RW_BETA, RW_EPS, RW_NARGS = range(8)
GL_X, GL_Y, GL_N, GL_NARGS = range(4)
EW_X, EW_Y, EW_N, EW_INNER, EW_NSTEPS, EW_STEPS, EW_OPERANDS, EW_SCALARS, EW_NARGS = range(9)
CS_X, CS_Y, CS_PIXELS, CS_G, CS_CG, CS_NARGS = range(6)
LR_X, LR_Y, LR_N, LR_C, LR_HW, LR_SIZE, LR_ALPHA, LR_BETA, LR_BIAS, LR_NARGS = range(10)
(
    DP_X,
    DP_N,
    DP_H,
    DP_W,
    DP_C,
    DP_OH,
    DP_OW,
    DP_KH,
    DP_KW,
    DP_SH,
    DP_SW,
    DP_DH,
    DP_DWD,
    DP_PT,
    DP_PL,
    DP_WDW,
    DP_BDW,
    DP_DACT,
    DP_DLO,
    DP_DHI,
    DP_ZERO,
    DP_WPW,
    DP_BPW,
    DP_M,
    DP_NMB,
    DP_BW,
    DP_Y,
    DP_RES,
    DP_ACT,
    DP_LO,
    DP_HI,
    DP_NARGS,
) = range(32)
#: Widest depthwise layer the fused depthwise -> pointwise kernel takes (``DP_MAXC`` in kernels.c).
DP_MAXC = 2048


@dataclass(frozen=True)
class Epilogue:
    """What runs on each output before it is stored: ``act(alpha * acc + bias + residual)``."""

    activation: str = ""
    lo: float = 0.0
    hi: float = 0.0
    alpha: float = 1.0

    def code(self) -> int:
        return ACTIVATIONS[self.activation]

    def apply_numpy(self, y: np.ndarray) -> np.ndarray:
        """The same activation in NumPy (fallbacks and reference)."""
        if self.activation == "Relu":
            return np.maximum(y, np.float32(0), out=y)
        if self.activation == "Clip":
            return np.minimum(np.maximum(y, np.float32(self.lo), out=y), np.float32(self.hi), out=y)
        if self.activation == "LeakyRelu":
            return np.where(y < 0, y * np.float32(self.lo), y).astype(y.dtype, copy=False)
        return y


def block_width(mg: int) -> int:
    """Output channels per weight block: one vector for layers with at most 16 channels (per group), else two."""
    return VL if mg <= VL else NB


def pack_blocks(w2: np.ndarray, groups: int, bw: int = NB) -> np.ndarray:
    """``[G*Mg, R]`` (R = taps*C in reduction order) -> ``[G][ceil(Mg/bw)][R][bw]``, zero padded."""
    m, r = w2.shape
    mg = m // groups
    nmb = -(-mg // bw)
    wg = w2.reshape(groups, mg, r)
    if nmb * bw != mg:
        wg = np.concatenate([wg, np.zeros((groups, nmb * bw - mg, r), dtype=w2.dtype)], axis=1)
    return np.ascontiguousarray(wg.reshape(groups, nmb, bw, r).transpose(0, 1, 3, 2), dtype=np.float32)


def pack_bias(bias: np.ndarray | None, groups: int, mg: int, bw: int = NB) -> np.ndarray | None:
    if bias is None:
        return None
    nmb = -(-mg // bw)
    out = np.zeros((groups, nmb * bw), dtype=np.float32)
    out[:, :mg] = bias.reshape(groups, mg)
    return out


class _PerThread(threading.local):
    """Argument blocks per key, one set per thread: calls patch addresses into them, so threads must not share."""

    def __init__(self) -> None:
        self.blocks: dict[Any, Any] = {}

    def get(self, key: Any, build: Callable[[Any], Any]) -> Any:
        """This thread's block for ``key``, built by ``build(key)`` the first time."""
        value = self.blocks.get(key)
        if value is None:
            value = self.blocks[key] = build(key)
        return value


def _bind_args(
    geometry: Callable[[tuple[int, ...]], tuple[Args, tuple[int, ...]]],
    x: np.ndarray,
    res: np.ndarray | None,
    out: np.ndarray,
) -> Args | None:
    """A copy of the argument block for ``x``'s shape, or None when the arrays cannot be bound (not contiguous
    float32, or not the output shape the block computes)."""
    if not _c_float(x) or not _c_float(out) or (res is not None and not _c_float(res)):
        return None
    geo, out_shape = geometry(x.shape)
    if out.shape != out_shape or (res is not None and res.shape != out_shape):
        return None
    return _copy_args(geo)


class _Workspace(threading.local):
    """Per-thread scratch buffers (packed operands), reused while their shape stays the same."""

    def __init__(self) -> None:
        self.buffers: dict[Any, np.ndarray] = {}

    def get(self, key: Any, shape: tuple[int, ...]) -> np.ndarray:
        buf = self.buffers.get(key)
        if buf is None or buf.shape != shape:
            buf = np.empty(shape, dtype=np.float32)
            self.buffers[key] = buf
        return buf


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
        if out is None:
            out = np.empty(out_shape, dtype=np.float32)
        if self.depthwise:
            args[DW_X], args[DW_Y] = addr(x), addr(out)
            args[DW_RES] = 0 if res is None else addr(_contiguous(res, out_shape))
            self.native.dwconv(args.ptr)
        else:
            args[CV_X], args[CV_Y] = addr(x), addr(out)
            args[CV_RES] = 0 if res is None else addr(_contiguous(res, out_shape))
            if args.block[CV_IH]:
                self.native.conv2d(args.ptr)
            else:
                self.native.conv(args.ptr)
        return out


Bound = Callable[[], None]


def _bound(fn: Any, args: Args, *keep: Any) -> Bound:
    """A zero-argument call of ``fn`` on ``args`` (kept alive with the arrays it points into)."""
    args.keep.extend(k for k in keep if k is not None)
    ptr = args.ptr

    def call() -> None:
        fn(ptr)

    call.args = args  # type: ignore[attr-defined]
    return call


def _copy_args(src: Args) -> Args:
    a = Args(len(src.block))
    a.block[:] = src.block
    a.keep.extend(src.keep)
    return a


def default_chunk(npix: int, blocks: int, images: int, target: int = 96, min_tasks: int = 16) -> int:
    """Output pixels per task (of one image's OH*OW; strips may span rows): about ``target``, split evenly, and
    smaller only when there would be fewer than ``min_tasks`` tasks to balance the threads (every extra chunk
    reads the channel block's weights again)."""
    if npix <= 0:
        return 1
    chunks = math.ceil(npix / target)
    while blocks * images * chunks < min_tasks and math.ceil(npix / (chunks + 1)) >= 12:
        chunks += 1
    return math.ceil(npix / chunks)


def _c_float(a: np.ndarray) -> bool:
    return isinstance(a, np.ndarray) and a.dtype == np.float32 and a.flags.c_contiguous


def _contiguous(a: np.ndarray, shape: Sequence[int]) -> np.ndarray:
    if tuple(a.shape) != tuple(shape):
        a = np.broadcast_to(a, shape)
    if a.dtype != np.float32 or not a.flags.c_contiguous:
        a = np.ascontiguousarray(a, dtype=np.float32)
    return a


class PackedMatMul:
    """``act(alpha * A @ B + bias + residual)`` with a constant ``B`` ``[K, N]`` packed once; A ``[..., M, K]``."""

    def __init__(self, native: NativeLib, b: np.ndarray, bias: np.ndarray | None, epilogue: Epilogue) -> None:
        self.native = native
        k, n = b.shape
        self.k, self.n = int(k), int(n)
        self.weight = pack_blocks(np.ascontiguousarray(np.asarray(b, np.float32).T), 1)
        self.nmb = -(-self.n // NB)
        self.bias = pack_bias(None if bias is None else np.broadcast_to(bias, (self.n,)), 1, self.n)
        self.epilogue = epilogue
        self.taps = np.zeros(1, dtype=np.int64)
        self._args = _PerThread()

    def _build(self, rows: int) -> Args:
        a = Args(CV_NARGS)
        a[CV_NB0], a[CV_NB1], a[CV_OH], a[CV_OW] = 1, 1, 1, rows
        a[CV_X_PX], a[CV_Y_PX], a[CV_R_PX] = self.k, self.n, self.n
        a[CV_NTAPS], a[CV_TOFF], a[CV_C] = 1, a.pin(self.taps), self.k
        a[CV_W] = a.pin(self.weight)
        a[CV_G], a[CV_MG], a[CV_NMB] = 1, self.n, self.nmb
        if self.bias is not None:
            a[CV_BIAS] = a.pin(self.bias)
        ep = self.epilogue
        a[CV_ACT], a[CV_LO], a[CV_HI], a[CV_ALPHA] = ep.code(), Args.f32(ep.lo), Args.f32(ep.hi), Args.f32(ep.alpha)
        a[CV_MBT], a[CV_BW] = 1, NB
        a[CV_CHUNK] = default_chunk(rows, self.nmb, 1)
        return a

    def _args_for(self, rows: int) -> Args:
        args: Args = self._args.get(rows, self._build)
        return args

    def bind(self, a: np.ndarray, res: np.ndarray | None, out: np.ndarray) -> Bound | None:
        if not _c_float(a) or not _c_float(out) or a.shape[-1] != self.k or (res is not None and not _c_float(res)):
            return None
        out_shape = (*a.shape[:-1], self.n)
        if out.shape != out_shape or (res is not None and res.shape != out_shape):
            return None
        x = _copy_args(self._args_for(a.size // self.k))
        x[CV_X], x[CV_Y], x[CV_RES] = addr(a), addr(out), 0 if res is None else addr(res)
        return _bound(self.native.conv, x, a, out, res)

    def __call__(self, a: np.ndarray, res: np.ndarray | None = None, out: np.ndarray | None = None) -> np.ndarray:
        lead = a.shape[:-1]
        a2 = np.ascontiguousarray(a, dtype=np.float32).reshape(-1, self.k)
        args = self._args_for(a2.shape[0])
        out_shape = (*lead, self.n)
        if out is None:
            out = np.empty(out_shape, dtype=np.float32)
        args[CV_X], args[CV_Y] = addr(a2), addr(out)
        args[CV_RES] = 0 if res is None else addr(_contiguous(res, out_shape))
        self.native.conv(args.ptr)
        return out


def _batch_levels(shape: Sequence[int], strides: Sequence[int]) -> tuple[list[int], list[int]] | None:
    """Merge batch dims into at most two (count, stride) levels; ``None`` when they do not merge that far."""
    dims = [(int(n), int(s)) for n, s in zip(shape, strides, strict=True) if n != 1]
    merged: list[tuple[int, int]] = []
    for n, s in dims:
        if merged and merged[-1][1] == n * s:
            merged[-1] = (merged[-1][0] * n, s)
        else:
            merged.append((n, s))
    if len(merged) > 2:
        return None
    while len(merged) < 2:
        merged.insert(0, (1, 0))
    return [n for n, _ in merged], [s for _, s in merged]


class DynamicMatMul:
    """``act(alpha * A @ B + bias + residual)`` for two run-time operands with ONNX/NumPy batch broadcasting.

    B is packed per call (cheap next to the product when M is not tiny); A needs a unit stride along K.
    Returns ``None`` when the operands' batch layout does not fit two strided levels (the caller falls back).
    """

    def __init__(self, native: NativeLib, bias: np.ndarray | None, epilogue: Epilogue) -> None:
        self.native = native
        self.bias_src = bias
        self.epilogue = epilogue
        self.taps = np.zeros(1, dtype=np.int64)
        self.workspace = _Workspace()

    def _plan(
        self, a: np.ndarray, b: np.ndarray, res: np.ndarray | None, out: np.ndarray | None
    ) -> tuple[Args, Args, np.ndarray, tuple[Any, ...]] | None:
        """Argument blocks (pack, product), the output, and what they point into; None when unsupported."""
        if a.ndim < 2 or b.ndim < 2 or a.dtype != np.float32 or b.dtype != np.float32:
            return None
        m, k = a.shape[-2:]
        k2, n = b.shape[-2:]
        if k != k2 or a.size == 0 or b.size == 0:
            return None
        batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
        a_b = np.broadcast_to(a, (*batch, m, k))
        b_b = np.broadcast_to(b, (*batch, k, n))
        if a_b.strides[-1] != 4 or (m > 1 and a_b.strides[-2] % 4):
            a_b = np.ascontiguousarray(a_b)
        itm = 4
        a_levels = _batch_levels(batch, [s // itm for s in a_b.strides[:-2]])
        b_levels = _batch_levels(batch, [s // itm for s in b_b.strides[:-2]])
        if a_levels is None or b_levels is None or a_levels[0] != b_levels[0]:
            return None
        counts = a_levels[0]
        nnb = -(-n // NB)
        nbatch = counts[0] * counts[1]
        out_shape = (*batch, m, n)
        if out is None:
            out = np.empty(out_shape, dtype=np.float32)
        elif out.shape != out_shape or not _c_float(out):
            return None
        packed = np.empty((nbatch, nnb, k, NB), dtype=np.float32)
        p = Args(PB_NARGS)
        p[PB_B], p[PB_B_B0], p[PB_B_B1] = addr(b_b), b_levels[1][0], b_levels[1][1]
        p[PB_SK], p[PB_SN] = b_b.strides[-2] // itm, b_b.strides[-1] // itm
        p[PB_NB0], p[PB_NB1], p[PB_K], p[PB_N], p[PB_OUT] = counts[0], counts[1], k, n, p.pin(packed)
        x = Args(CV_NARGS)
        x[CV_X], x[CV_X_B0], x[CV_X_B1] = addr(a_b), a_levels[1][0], a_levels[1][1]
        x[CV_X_ROW], x[CV_X_PX] = 0, a_b.strides[-2] // itm
        x[CV_NB0], x[CV_NB1], x[CV_OH], x[CV_OW] = counts[0], counts[1], 1, m
        x[CV_NTAPS], x[CV_TOFF], x[CV_C] = 1, x.pin(self.taps), k
        x[CV_W], x[CV_W_B1], x[CV_W_B0] = x.pin(packed), nnb * k * NB, counts[1] * nnb * k * NB
        x[CV_G], x[CV_MG], x[CV_NMB] = 1, n, nnb
        x[CV_Y] = addr(out)
        x[CV_Y_B1], x[CV_Y_B0], x[CV_Y_PX] = m * n, counts[1] * m * n, n
        if res is not None:
            r = _contiguous(res, out_shape)
            x[CV_RES], x[CV_R_B1], x[CV_R_B0], x[CV_R_PX] = x.pin(r), m * n, counts[1] * m * n, n
        bias = pack_bias(None if self.bias_src is None else np.broadcast_to(self.bias_src, (n,)), 1, n)
        if bias is not None:
            x[CV_BIAS] = x.pin(bias)
        ep = self.epilogue
        x[CV_ACT], x[CV_LO], x[CV_HI], x[CV_ALPHA] = ep.code(), Args.f32(ep.lo), Args.f32(ep.hi), Args.f32(ep.alpha)
        x[CV_MBT], x[CV_BW] = 1, NB
        x[CV_CHUNK] = default_chunk(m, nnb, nbatch)
        return p, x, out, (a_b, b_b, res)

    def bind(self, a: np.ndarray, b: np.ndarray, res: np.ndarray | None, out: np.ndarray) -> Bound | None:
        planned = self._plan(a, b, res, out)
        if planned is None or planned[2] is not out:
            return None
        p, x, _, keep = planned
        if keep[0] is not a and not np.shares_memory(keep[0], a):
            return None  # A had to be copied: its address is not stable
        pack, conv = self.native.pack_b, self.native.conv
        p.keep.extend(keep)
        x.keep.extend([out, p])
        pp, xp = p.ptr, x.ptr

        def call() -> None:
            pack(pp)
            conv(xp)

        call.args = (p, x)  # type: ignore[attr-defined]
        return call

    def __call__(
        self, a: np.ndarray, b: np.ndarray, res: np.ndarray | None = None, out: np.ndarray | None = None
    ) -> np.ndarray | None:
        planned = self._plan(a, b, res, out)
        if planned is None:
            return None
        p, x, y, _ = planned
        self.native.pack_b(p.ptr)
        self.native.conv(x.ptr)
        return y


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
    return _bound(native.pool_nchw if nchw else native.pool, _pool_args(x, sizes, win, out), x, out)


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
        a = Args(RW_NARGS)
        n = x.shape[-1]
        a.block[:RW_NARGS] = (
            addr(x),
            addr(out),
            x.size // n,
            n,
            addr(gamma),
            0 if beta is None else addr(beta),
            Args.f32(eps),
        )
        return _bound(native.layernorm, a, x, out, gamma, beta)
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
    (native.pool_nchw if nchw else native.pool)(_pool_args(x, sizes, win, out).ptr)
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
    n = x.shape[-1]
    a = Args(RW_NARGS)
    a.block[:RW_NARGS] = (
        addr(x),
        addr(out),
        x.size // n,
        n,
        addr(gamma),
        0 if beta is None else addr(beta),
        Args.f32(eps),
    )
    native.layernorm(a.ptr)
    return out


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
    native.lrn(_lrn_args(x, out, size, alpha, beta, bias).ptr)
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
