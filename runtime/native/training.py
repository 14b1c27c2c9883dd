"""Compiled kernels the training graphs need (``training.c``): the tiled max-pool backward, a 2x2/2 NCHW max
pool for narrow planes, BatchNorm's training forward and backward (a pool task per channel), LayerNorm's and
ReLU's gradients, the per-step packing of a convolution's weights into the NHWC kernel's blocks, and the
trainer's one-pass SGD-with-momentum update."""

from __future__ import annotations

import struct

import numpy as np

from runtime.native import Args, NativeLib, addr

#: ``ap_maxpool_grad_tiled``'s argument block (training.c's ``MG_*`` enum).
MG_X, MG_DY, MG_DX, MG_PLANES, MG_H, MG_W, MG_KH, MG_KW, MG_NARGS = range(9)
#: ``ap_maxpool_2x2``'s argument block (training.c's ``MQ_*`` enum).
MQ_X, MQ_Y, MQ_PAIRS, MQ_W, MQ_NARGS = range(5)
#: ``ap_sgd_momentum``'s argument block (training.c's ``SG_*`` enum).
SG_X, SG_G, SG_V, SG_N, SG_SCALE, SG_DECAY, SG_MOMENTUM, SG_LR, SG_NARGS = range(9)
#: ``ap_bn_train``'s argument block (training.c's ``BN_*`` enum).
BN_X, BN_Y, BN_SCALE, BN_BIAS, BN_MEAN, BN_VAR, BN_INVSTD, BN_N, BN_C, BN_P, BN_EPS, BN_NARGS = range(12)
#: ``ap_bn_train_grad``'s argument block (training.c's ``BG_*`` enum).
BG_DY, BG_X, BG_DX, BG_SCALE, BG_MEAN, BG_INVSTD, BG_DSCALE, BG_DBIAS, BG_N, BG_C, BG_P, BG_NARGS = range(12)
#: ``ap_relu_grad``'s argument block (training.c's ``RG_*`` enum).
RG_DY, RG_Y, RG_DX, RG_N, RG_NARGS = range(5)
#: ``ap_pack_conv_weights``'s argument block (training.c's ``PW_*`` enum).
PW_W, PW_OUT, PW_G, PW_MG, PW_CG, PW_KH, PW_KW, PW_BW, PW_SM, PW_SC, PW_SH, PW_SW, PW_NARGS = range(13)
#: ``ap_layer_norm_grad``'s argument block (training.c's ``LG_*`` enum) and rows per pool task.
LG_DY, LG_X, LG_DX, LG_SCALE, LG_PARTIAL, LG_ROWS_N, LG_D, LG_EPS, LG_NARGS = range(9)
LG_ROWS = 64


def maxpool_2x2_args(x: np.ndarray, out: np.ndarray) -> Args | None:
    """The argument block of a 2x2/2 max pool (no pads or dilation) of C-contiguous float32 NCHW ``x`` into ``out``,
    or None where the kernel does not apply (odd height or width, a width not a multiple of 8)."""
    if x.ndim != 4 or x.dtype != np.float32 or out.dtype != np.float32:
        return None
    n, c, h, w = x.shape
    if h % 2 or w % 8 or not x.flags.c_contiguous or not out.flags.c_contiguous or out.shape != (n, c, h // 2, w // 2):
        return None
    args = Args(MQ_NARGS)
    args[MQ_X], args[MQ_Y], args[MQ_PAIRS], args[MQ_W] = addr(x), addr(out), n * c * (h // 2), w
    args.keep.extend([x, out])
    return args


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


def sgd_momentum(
    lib: NativeLib, x: np.ndarray, g: np.ndarray, v: np.ndarray, scale: float, decay: float, momentum: float, lr: float
) -> bool:
    """``v = momentum v + (scale g + decay x); x -= lr v`` in place, one pass; False (nothing written) unless all
    three are C-contiguous float32 of one shape and ``x`` and ``v`` are writeable. Called once per tensor per
    step, so the argument block is filled in one assignment (a few microseconds matter on an MLP's tensors)."""
    arrays = (x, g, v)
    if any(a.dtype != np.float32 or not a.flags.c_contiguous or a.shape != x.shape for a in arrays):
        return False
    if not (x.flags.writeable and v.flags.writeable):
        return False
    args = Args(SG_NARGS)
    floats = struct.unpack("<4i", struct.pack("<4f", scale, decay, momentum, lr))
    args.block[:] = (*(a.__array_interface__["data"][0] for a in arrays), x.size, *floats)
    lib.sgd_momentum(args.ptr)
    return True


def _channel_planes(x: np.ndarray) -> tuple[int, int, int] | None:
    """``(N, C, pixels)`` of a C-contiguous float32 array of rank 2 or more, else None."""
    if x.ndim < 2 or x.dtype != np.float32 or not x.flags.c_contiguous:
        return None
    return x.shape[0], x.shape[1], int(np.prod(x.shape[2:], dtype=np.int64))


def _per_channel(values: np.ndarray, channels: int) -> np.ndarray | None:
    """A C-contiguous float32 copy-or-view of a per-channel vector, or None when it holds another count."""
    if values.size != channels:
        return None
    return np.ascontiguousarray(values, dtype=np.float32).reshape(channels)


def batch_norm_train(
    lib: NativeLib, x: np.ndarray, scale: np.ndarray, bias: np.ndarray, epsilon: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
    """BatchNorm of NCHW-like float32 ``x`` with its batch statistics: ``(y, batch mean, batch population variance,
    inverse std)``; None (nothing computed) for other dtypes or layouts."""
    dims = _channel_planes(x)
    if dims is None or min(dims) <= 0:
        return None
    n, c, pixels = dims
    gain, shift = _per_channel(scale, c), _per_channel(bias, c)
    if gain is None or shift is None:
        return None
    y = np.empty_like(x)
    mean, var, inv_std = (np.empty(c, dtype=np.float32) for _ in range(3))
    args = Args(BN_NARGS)
    args.block[:] = (
        addr(x), addr(y), addr(gain), addr(shift), addr(mean), addr(var), addr(inv_std), n, c, pixels,
        struct.unpack("<i", struct.pack("<f", epsilon))[0],
    )  # fmt: skip
    lib.bn_train(args.ptr)
    return y, mean, var, inv_std


def batch_norm_train_grad(
    lib: NativeLib,
    dy: np.ndarray,
    x: np.ndarray,
    scale: np.ndarray,
    mean: np.ndarray,
    inv_std: np.ndarray,
    want_dx: bool,
) -> tuple[np.ndarray | None, np.ndarray, np.ndarray] | None:
    """BatchNorm's gradients with batch statistics (the saved mean and inverse std): ``(dX or None, dScale,
    dBias)``; None (nothing computed) for other dtypes or layouts."""
    dims = _channel_planes(x)
    if dims is None or min(dims) <= 0 or dy.shape != x.shape:
        return None
    dy = np.ascontiguousarray(dy)
    if dy.dtype != np.float32:
        return None
    n, c, pixels = dims
    gain, centre, spread = _per_channel(scale, c), _per_channel(mean, c), _per_channel(inv_std, c)
    if gain is None or centre is None or spread is None:
        return None
    dx = np.empty_like(x) if want_dx else None
    dscale, dbias = np.empty(c, dtype=np.float32), np.empty(c, dtype=np.float32)
    args = Args(BG_NARGS)
    args.block[:] = (
        addr(dy), addr(x), 0 if dx is None else addr(dx), addr(gain), addr(centre), addr(spread), addr(dscale),
        addr(dbias), n, c, pixels,
    )  # fmt: skip
    lib.bn_train_grad(args.ptr)
    return dx, dscale, dbias


def relu_grad(lib: NativeLib, dy: np.ndarray, y: np.ndarray) -> np.ndarray | None:
    """``dy`` where ``y > 0``, else 0, for C-contiguous float32 arrays of one shape; None otherwise."""
    if dy.dtype != np.float32 or y.dtype != np.float32 or dy.shape != y.shape:
        return None
    if not (dy.flags.c_contiguous and y.flags.c_contiguous):
        return None
    dx = np.empty_like(dy)
    args = Args(RG_NARGS)
    args.block[:] = (addr(dy), addr(y), addr(dx), dy.size)
    lib.relu_grad(args.ptr)
    return dx


def pack_conv_weights(lib: NativeLib, w: np.ndarray, out: np.ndarray, group: int, block: int) -> bool:
    """Pack float32 ``w`` ``(G*Mg, Cg, KH, KW)``, any strides (a flipped or transposed view), into the NHWC
    kernel's ``out`` ``[G][ceil(Mg/block)][KH][KW][Cg][block]`` (a partial block's padding lanes untouched);
    False (nothing written) where the shapes, dtypes or layout do not fit."""
    if w.ndim != 4 or w.dtype != np.float32 or out.dtype != np.float32 or not out.flags.c_contiguous:
        return False
    m, cg, kh, kw = (int(d) for d in w.shape)
    if group <= 0 or block <= 0 or m % group or min(m, cg, kh, kw) <= 0 or not out.flags.writeable:
        return False
    mg = m // group
    if out.size != group * -(-mg // block) * kh * kw * cg * block or any(s % 4 for s in w.strides):
        return False
    args = Args(PW_NARGS)
    args.block[:] = (addr(w), addr(out), group, mg, cg, kh, kw, block, *(s // 4 for s in w.strides))
    lib.pack_conv_weights(args.ptr)
    return True


def layer_norm_grad(
    lib: NativeLib, dy: np.ndarray, x: np.ndarray, scale: np.ndarray, axis: int, epsilon: float, want_dx: bool
) -> tuple[np.ndarray | None, np.ndarray, np.ndarray] | None:
    """LayerNormalization's ``(dX or None, dScale, dBias)`` over the trailing dims from ``axis``, for C-contiguous
    float32 ``x`` and ``dy`` of one shape and a float32 ``scale`` of the normalised shape; None otherwise."""
    if x.dtype != np.float32 or dy.dtype != np.float32 or scale.dtype != np.float32 or dy.shape != x.shape:
        return None
    if not (0 <= axis < x.ndim) or scale.shape != x.shape[axis:] or x.size == 0:
        return None
    if not (x.flags.c_contiguous and dy.flags.c_contiguous):
        return None
    width = int(np.prod(x.shape[axis:], dtype=np.int64))
    rows = x.size // width
    gain = np.ascontiguousarray(scale).reshape(width)
    dx = np.empty_like(x) if want_dx else None
    partial = np.empty((-(-rows // LG_ROWS), 2, width), dtype=np.float32)
    args = Args(LG_NARGS)
    args.block[:] = (
        addr(dy), addr(x), 0 if dx is None else addr(dx), addr(gain), addr(partial), rows, width,
        struct.unpack("<i", struct.pack("<f", epsilon))[0],
    )  # fmt: skip
    lib.layer_norm_grad(args.ptr)
    sums = partial.sum(axis=0)
    return dx, sums[0].reshape(scale.shape), sums[1].reshape(scale.shape)
