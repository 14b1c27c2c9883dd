"""The argument blocks shared with the compiled kernels: the enums mirrored from ``kernels.c``, the epilogue,
weight packing and the helpers that bind arrays into blocks. The operation families live in ``native/conv.py``,
``native/matmul.py`` and ``native/rows.py``; ``native/ops.py`` re-exports what callers use."""

from __future__ import annotations

import ctypes
import math
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from runtime.native import Args

#: Output channels per packed weight block (``NB`` in kernels.c).
NB = 32
#: Lanes of one vector (``VL`` in kernels.c); depthwise weights are padded to it.
VL = 16

#: Epilogue activations (``ACT_*`` in kernels.c). ``lo``/``hi`` carry Clip's bounds, LeakyRelu's slope (lo),
#: HardSigmoid's alpha (lo) and beta (hi), and for Gelu the divisor (lo, ~sqrt 2) and half (hi) of the pattern.
ACTIVATIONS = {
    "": 0,
    "Relu": 1,
    "Clip": 2,
    "LeakyRelu": 3,
    "Silu": 4,
    "Sigmoid": 5,
    "HardSigmoid": 6,
    "HardSwish": 7,
    "Gelu": 8,
    "Tanh": 9,
}

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
        if self.activation:
            return apply_activation(y, self.activation, self.lo, self.hi)
        return y


def apply_activation(y: np.ndarray, activation: str, lo: float, hi: float) -> np.ndarray:
    """Silu, Sigmoid, HardSigmoid, HardSwish, Gelu and Tanh in NumPy, with the arithmetic of the unfused ops'
    kernels (so a fused graph on the NumPy path gives the bits of the unfused one); others: ``y`` unchanged."""
    t = y.dtype.type
    if activation in ("Silu", "Sigmoid"):
        with np.errstate(over="ignore"):
            e = np.exp(-y)
        e += t(1)
        s = np.reciprocal(e, out=e)
        return s if activation == "Sigmoid" else y * s
    if activation == "HardSigmoid":
        return np.clip(y * lo + hi, 0, 1).astype(y.dtype, copy=False)
    if activation == "HardSwish":
        return y * np.clip(y / 6 + 0.5, 0, 1)
    if activation == "Tanh":
        return np.tanh(y)
    if activation == "Gelu":  # the Gelu kernel's form 1, (x * (erf(x / div) + 1)) * half: PyTorch's export
        from runtime.kernels.special import erf

        inner = erf(y / t(lo)).astype(y.dtype, copy=False) + t(1.0)
        return (y * inner) * t(hi)
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


Bound = Callable[[], None]


def _bound(fn: Any, args: Args, *keep: Any) -> Bound:
    """A zero-argument call of ``fn`` on ``args`` (kept alive with the arrays it points into). Its ``native``
    attribute lists the (entry point, argument block) addresses it calls, so the static plan may run a stretch of
    such calls in one ``ap_run_program`` (``native_calls``)."""
    args.keep.extend(k for k in keep if k is not None)
    ptr = args.ptr

    def call() -> None:
        fn(ptr)

    call.args = args  # type: ignore[attr-defined]
    call.native = ((entry_address(fn), ptr),)  # type: ignore[attr-defined]
    return call


def in_sequence(*calls: Bound) -> Bound:
    """One bound call making ``calls`` in order (each kept alive with it). Its ``native`` lists theirs where each
    only calls compiled kernels, so the static plan's merged program takes it in as it would take them."""

    def call() -> None:
        for each in calls:
            each()

    made = [native_calls(each) for each in calls]
    if all(m is not None for m in made):
        call.native = tuple(entry for m in made for entry in m or ())  # type: ignore[attr-defined]
    call.args = calls  # type: ignore[attr-defined]
    return call


def entry_address(fn: Any) -> int:
    """The address of a compiled entry point (a ``NativeLib`` function)."""
    address = ctypes.cast(fn, ctypes.c_void_p).value
    if address is None:
        raise ValueError("entry point without an address")
    return int(address)


def native_calls(call: Any) -> tuple[tuple[int, int], ...] | None:
    """The (entry point, argument block) addresses a bound call makes, in order, when that is all it does."""
    found = getattr(call, "native", None)
    return found if isinstance(found, tuple) and found else None


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


def _output(out: np.ndarray | None, shape: Sequence[int]) -> np.ndarray:
    """Where a kernel writes ``shape``: ``out`` when it is C-contiguous float32 of that shape (what the kernels
    assume), else a new array (``_delivered`` copies it into ``out``)."""
    if out is not None and _c_float(out) and out.shape == tuple(shape):
        return out
    return np.empty(tuple(shape), dtype=np.float32)


def _delivered(result: np.ndarray, out: np.ndarray | None) -> np.ndarray:
    """``result`` in ``out`` when one was given (a copy when the kernel could not write there directly)."""
    if out is None or result is out:
        return result
    np.copyto(out, result)
    return out


def _contiguous(a: np.ndarray, shape: Sequence[int]) -> np.ndarray:
    if tuple(a.shape) != tuple(shape):
        a = np.broadcast_to(a, shape)
    if a.dtype != np.float32 or not a.flags.c_contiguous:
        a = np.ascontiguousarray(a, dtype=np.float32)
    return a
