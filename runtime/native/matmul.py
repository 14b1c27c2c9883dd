"""Compiled matrix products: packed constant weights (``PackedMatMul``) and two runtime operands."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from runtime.native import Args, NativeLib, addr
from runtime.native.abi import (
    CV_ACT,
    CV_ALPHA,
    CV_BIAS,
    CV_BW,
    CV_C,
    CV_CHUNK,
    CV_G,
    CV_HI,
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
    CV_R_B0,
    CV_R_B1,
    CV_R_PX,
    CV_RES,
    CV_TOFF,
    CV_W,
    CV_W_B0,
    CV_W_B1,
    CV_X,
    CV_X_B0,
    CV_X_B1,
    CV_X_PX,
    CV_X_ROW,
    CV_Y,
    CV_Y_B0,
    CV_Y_B1,
    CV_Y_PX,
    NB,
    PB_B,
    PB_B_B0,
    PB_B_B1,
    PB_K,
    PB_N,
    PB_NARGS,
    PB_NB0,
    PB_NB1,
    PB_OUT,
    PB_SK,
    PB_SN,
    Bound,
    Epilogue,
    _bound,
    _c_float,
    _contiguous,
    _copy_args,
    _delivered,
    _output,
    _PerThread,
    _Workspace,
    default_chunk,
    entry_address,
    pack_bias,
    pack_blocks,
)


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
        if a.ndim < 1 or a.shape[-1] != self.k:
            raise ValueError(f"A has shape {a.shape}: its last axis must be {self.k}, B's rows")
        lead = a.shape[:-1]
        a2 = np.ascontiguousarray(a, dtype=np.float32).reshape(-1, self.k)
        args = self._args_for(a2.shape[0])
        out_shape = (*lead, self.n)
        target = _output(out, out_shape)
        # a residual that needs a copy is held here until the kernel has read it
        residual = None if res is None else _contiguous(res, out_shape)
        args[CV_X], args[CV_Y] = addr(a2), addr(target)
        args[CV_RES] = 0 if residual is None else addr(residual)
        self.native.conv(args.ptr)
        return _delivered(target, out)


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
        if res is not None and (not _c_float(res) or res.shape != planned[2].shape):
            return None  # the residual had to be copied: a prebound call would read that copy on every run
        pack, conv = self.native.pack_b, self.native.conv
        p.keep.extend(keep)
        x.keep.extend([out, p])
        pp, xp = p.ptr, x.ptr

        def call() -> None:
            pack(pp)
            conv(xp)

        call.args = (p, x)  # type: ignore[attr-defined]
        call.native = ((entry_address(pack), pp), (entry_address(conv), xp))  # type: ignore[attr-defined]
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
