"""Fused attention on the compiled kernels (``attention.c``): ``softmax(scale * Q @ K^T + M) @ V`` over strided
4-D views, so head splits, packed-QKV slices and broadcast masks are read in place."""

from __future__ import annotations

import numpy as np

from runtime.native import Args, NativeLib
from runtime.native.abi import Bound, _bound

# The argument block of ``ap_attention``: the enum in ``attention.c`` (tests/runtime/test_native_mirrors.py
# compares the two).
(
    AT_Q, AT_K, AT_V, AT_M, AT_Y,
    AT_B, AT_H, AT_SQ, AT_SK, AT_D, AT_DV,
    AT_QS0, AT_QS1, AT_QS2, AT_QS3,
    AT_KS0, AT_KS1, AT_KS2, AT_KS3,
    AT_VS0, AT_VS1, AT_VS2, AT_VS3,
    AT_MS0, AT_MS1, AT_MS2, AT_MS3,
    AT_YS0, AT_YS1, AT_YS2, AT_YS3,
    AT_SCALE, AT_CHUNK,
    AT_MKIND, AT_MKEEP, AT_MFILL,
    AT_NARGS,
) = range(37)  # fmt: skip
MASK_ADD, MASK_SELECT = range(2)
#: Per operand: its pointer slot and the slot of its first stride (four follow).
_OPERAND_SLOTS = {"q": (AT_Q, AT_QS0), "k": (AT_K, AT_KS0), "v": (AT_V, AT_VS0), "m": (AT_M, AT_MS0),
                  "y": (AT_Y, AT_YS0)}  # fmt: skip
#: Query rows per register block in the C kernel (``AROWS``); task chunks are multiples of it.
ROWS = 4
#: Fewest query rows a task takes (every task packs its head's K and V once).
MIN_CHUNK = 16


def _element_strides(a: np.ndarray) -> list[int] | None:
    """Strides in elements, or None when one is not a whole number of elements."""
    size = a.dtype.itemsize
    if any(s % size for s in a.strides):
        return None
    return [s // size for s in a.strides]


def task_chunk(batch_heads: int, q_len: int, threads: int) -> int:
    """Query rows per task: whole heads when there are enough of them, else heads split so that every thread
    gets about two tasks (at least ``MIN_CHUNK`` rows each, a multiple of ``ROWS``)."""
    per_head = max(1, -(-2 * max(1, threads) // max(1, batch_heads)))
    chunk = max(MIN_CHUNK, -(-q_len // per_head))
    return -(-chunk // ROWS) * ROWS


def attention_args(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    mask: np.ndarray | None,
    y: np.ndarray,
    scale: float,
    threads: int,
    select: tuple[bool, float] | None = None,
) -> Args | None:
    """The argument block for 4-D float32 views ``q`` (B,H,Sq,D), ``k`` (B,H,Sk,D), ``v`` (B,H,Sk,Dv), ``mask``
    (B,H,Sq,Sk, zero strides where broadcast) and the writable output ``y`` (B,H,Sq,Dv); None when they do not fit.
    The mask is added (float32) or, with ``select = (keep, fill)``, a boolean choosing the score where it equals
    ``keep`` and ``fill`` elsewhere."""
    if any(a.ndim != 4 or a.dtype != np.float32 for a in (q, k, v, y)):
        return None
    if mask is not None and (mask.ndim != 4 or mask.dtype != (np.bool_ if select else np.float32)):
        return None
    b, h, sq, d = q.shape
    sk, dv = k.shape[2], v.shape[3]
    if k.shape != (b, h, sk, d) or v.shape != (b, h, sk, dv) or y.shape != (b, h, sq, dv):
        return None
    if mask is not None and mask.shape != (b, h, sq, sk):
        return None
    if min(b, h, sq, sk, d, dv) <= 0 or not y.flags.writeable:
        return None
    a = Args(AT_NARGS)
    for key, arr in (("q", q), ("k", k), ("v", v), ("m", mask), ("y", y)):
        if arr is None:
            continue
        strides = _element_strides(arr)
        if strides is None:
            return None
        pointer, first_stride = _OPERAND_SLOTS[key]
        a[pointer] = a.pin(arr)
        for i, stride in enumerate(strides):
            a[first_stride + i] = stride
    a[AT_B], a[AT_H], a[AT_SQ], a[AT_SK], a[AT_D], a[AT_DV] = b, h, sq, sk, d, dv
    a[AT_SCALE] = Args.f32(scale)
    a[AT_CHUNK] = task_chunk(b * h, sq, threads)
    if select is not None:
        a[AT_MKIND], a[AT_MKEEP], a[AT_MFILL] = MASK_SELECT, int(select[0]), Args.f32(select[1])
    return a


def attention(native: NativeLib, args: Args) -> None:
    """Run one fused attention call on a block from ``attention_args``."""
    native.attention(args.ptr)


def bind_attention(native: NativeLib, args: Args, *keep: np.ndarray) -> Bound:
    """A prebound call (the executor's static plan): the arrays stay at the addresses in ``args``."""
    return _bound(native.attention, args, *keep)
