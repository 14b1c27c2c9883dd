"""Argument blocks of ``convnets.c``: squeeze-excite (``ap_se``) and the embedding bag (``ap_embag``).

Each call is built once per set of arrays (``SqueezeExciteCall``, ``EmbeddingBagCall``) and run as often as the
arrays stay the same, so the executor's static plan runs them as prebound compiled calls.
"""

from __future__ import annotations

import numpy as np

from runtime.native import Args, NativeLib, addr
from runtime.native.abi import ACTIVATIONS, Bound, _bound

(
    SE_X,
    SE_Y,
    SE_N,
    SE_HW,
    SE_C,
    SE_CR,
    SE_W1,
    SE_B1,
    SE_W2,
    SE_B2,
    SE_ACT1,
    SE_LO1,
    SE_HI1,
    SE_ACT2,
    SE_LO2,
    SE_HI2,
    SE_NHWC,
    SE_GATES,
    SE_NARGS,
) = range(19)
(EB_TABLE, EB_V, EB_D, EB_IDS, EB_I32, EB_N, EB_L, EB_ROW, EB_OFF, EB_Y, EB_MEAN, EB_STATUS, EB_NARGS) = range(13)
(GA_X, GA_OUTER, GA_DIM, GA_INNER, GA_IDX, GA_I32, GA_NIDX, GA_Y, GA_STATUS, GA_NARGS) = range(10)
(
    ER_TABLE,
    ER_V,
    ER_D,
    ER_IDX,
    ER_I32,
    ER_NIDX,
    ER_STARTS,
    ER_NSTARTS,
    ER_ENDS,
    ER_NENDS,
    ER_M,
    ER_Y,
    ER_MEAN,
    ER_STATUS,
    ER_NARGS,
) = range(15)


def _c_float(a: np.ndarray | None) -> bool:
    return a is None or (a.dtype == np.float32 and a.flags.c_contiguous)


def squeeze_excite_call(
    native: NativeLib,
    x: np.ndarray,
    out: np.ndarray,
    w1: np.ndarray,
    b1: np.ndarray | None,
    w2: np.ndarray,
    b2: np.ndarray | None,
    activations: tuple[tuple[str, float, float], tuple[str, float, float]],
    channels_last: bool,
) -> Bound | None:
    """``out = x * gate(W2 act1(W1 mean(x) + b1) + b2)`` over fixed arrays; None when they do not fit the kernel
    (not contiguous float32, shapes that disagree, an activation the kernel lacks)."""
    if x.ndim != 4 or out.shape != x.shape or not all(_c_float(t) for t in (x, out, w1, b1, w2, b2)):
        return None
    n, c = x.shape[0], x.shape[3] if channels_last else x.shape[1]
    hw = x.shape[1] * x.shape[2] if channels_last else x.shape[2] * x.shape[3]
    cr = w1.shape[0]
    if w1.size != cr * c or w2.size != c * cr or hw == 0:
        return None
    if (b1 is not None and b1.size != cr) or (b2 is not None and b2.size != c):
        return None
    (act1, lo1, hi1), (act2, lo2, hi2) = activations
    if act1 not in ACTIVATIONS or act2 not in ACTIVATIONS:
        return None
    gates = np.empty(n * (c + cr), dtype=np.float32)
    a = Args(SE_NARGS)
    a.block[:] = (
        addr(x),
        addr(out),
        n,
        hw,
        c,
        cr,
        addr(w1),
        0 if b1 is None else addr(b1),
        addr(w2),
        0 if b2 is None else addr(b2),
        ACTIVATIONS[act1],
        Args.f32(lo1),
        Args.f32(hi1),
        ACTIVATIONS[act2],
        Args.f32(lo2),
        Args.f32(hi2),
        int(channels_last),
        addr(gates),
    )
    return _bound(native.se, a, x, out, w1, b1, w2, b2, gates)


def embedding_bag_call(
    native: NativeLib,
    table: np.ndarray,
    ids: np.ndarray,
    column: int,
    out: np.ndarray,
    mean: bool,
    on_bad_id: type[Exception],
    where: str,
) -> Bound | None:
    """``out[n] = sum_l table[ids[n, column, l]]`` (``column`` -1: ids is ``[N, L]``) over fixed arrays, raising
    ``on_bad_id`` (naming ``where``) for an id outside ``[-V, V)``; None when the arrays do not fit the kernel."""
    if table.ndim != 2 or not _c_float(table) or not _c_float(out) or ids.dtype not in (np.int64, np.int32):
        return None
    if not ids.flags.c_contiguous or ids.ndim != (2 if column < 0 else 3):
        return None
    n, length = ids.shape[0], ids.shape[-1]
    if column >= (ids.shape[1] if column >= 0 else 1) or out.size != n * table.shape[1]:
        return None
    row = length if column < 0 else ids.shape[1] * length
    a = Args(EB_NARGS)
    a.block[:] = (
        addr(table),
        table.shape[0],
        table.shape[1],
        addr(ids),
        int(ids.dtype == np.int32),
        n,
        length,
        row,
        max(column, 0) * length,
        addr(out),
        int(mean),
        0,
    )
    a.keep.extend((table, ids, out))
    fn, ptr, block = native.embag, a.ptr, a.block

    def call() -> None:
        fn(ptr)
        if block[EB_STATUS]:
            bag = (ids[int(block[EB_STATUS]) - 1, column] if column >= 0 else ids[int(block[EB_STATUS]) - 1]).tolist()
            rows = table.shape[0]
            bad = next((i for i in bag if not -rows <= i < rows), bag)
            raise on_bad_id(f"{where}: index {bad} is out of range for a table of {rows} rows")

    call.args = a  # type: ignore[attr-defined]
    return call


def gather_call(
    native: NativeLib,
    x: np.ndarray,
    indices: np.ndarray,
    axis: int,
    out: np.ndarray,
    on_bad_index: type[Exception],
    where: str,
) -> Bound | None:
    """``out = take(x, indices, axis)`` over fixed arrays (rows copied as bytes, any element type but objects),
    raising ``on_bad_index`` (naming ``where``) for an index outside ``[-dim, dim)``; None when the arrays do not fit
    the kernel (not contiguous, another output shape or type)."""
    if x.dtype.hasobject or out.dtype != x.dtype or indices.dtype not in (np.int64, np.int32):
        return None
    if not (x.flags.c_contiguous and out.flags.c_contiguous and indices.flags.c_contiguous) or not 0 <= axis < x.ndim:
        return None
    if out.shape != (*x.shape[:axis], *indices.shape, *x.shape[axis + 1 :]):
        return None
    dim = x.shape[axis]
    a = Args(GA_NARGS)
    a.block[:] = (
        addr(x),
        int(np.prod(x.shape[:axis], dtype=np.int64)),
        dim,
        int(np.prod(x.shape[axis + 1 :], dtype=np.int64)) * x.itemsize,
        addr(indices),
        int(indices.dtype == np.int32),
        indices.size,
        addr(out),
        0,
    )
    a.keep.extend((x, indices, out))
    fn, ptr, block = native.gather, a.ptr, a.block

    def call() -> None:
        fn(ptr)
        if block[GA_STATUS]:
            bad = int(indices.reshape(-1)[int(block[GA_STATUS]) - 1])
            raise on_bad_index(f"{where}: index {bad} is out of range for a dimension of size {dim}")

    call.args = a  # type: ignore[attr-defined]
    return call


def embedding_bag_ranges_call(
    native: NativeLib,
    table: np.ndarray,
    idx: np.ndarray,
    starts: np.ndarray,
    ends: np.ndarray,
    bags: np.ndarray,
    out: np.ndarray,
    mean: bool,
    on_error: type[Exception],
    where: str,
) -> Bound | None:
    """``out[i] = sum_{j in [starts[i], ends[i])} table[idx[j]]`` for ``i < bags`` (a 0-d int64 array read at each
    call), over fixed arrays; raises ``on_error`` (naming ``where``) for a bad id or too few starts/ends."""
    if table.ndim != 2 or not _c_float(table) or not _c_float(out) or idx.dtype not in (np.int64, np.int32):
        return None
    arrays = (idx, starts, ends, bags)
    if any(not a.flags.c_contiguous for a in arrays) or idx.ndim != 1 or starts.ndim != 1 or ends.ndim != 1:
        return None
    if starts.dtype != np.int64 or ends.dtype != np.int64 or bags.dtype != np.int64 or bags.size != 1:
        return None
    if out.ndim != 2 or out.shape[1] != table.shape[1] or out.shape[0] != int(bags.reshape(-1)[0]):
        return None
    a = Args(ER_NARGS)
    a.block[:] = (
        addr(table),
        table.shape[0],
        table.shape[1],
        addr(idx),
        int(idx.dtype == np.int32),
        idx.size,
        addr(starts),
        starts.size,
        addr(ends),
        ends.size,
        addr(bags),
        addr(out),
        int(mean),
        0,
    )
    a.keep.extend((table, *arrays, out))
    fn, ptr, block = native.embag_ranges, a.ptr, a.block

    def call() -> None:
        if int(bags.reshape(-1)[0]) != out.shape[0]:
            raise on_error(f"{where}: {int(bags.reshape(-1)[0])} bags, the planned output holds {out.shape[0]}")
        fn(ptr)
        status = int(block[ER_STATUS])
        if status < 0:
            raise on_error(f"{where}: fewer bag starts ({starts.size}) or ends ({ends.size}) than bags")
        if status:
            raise on_error(f"{where}: bag {status - 1} holds an index out of range for {table.shape[0]} rows")

    call.args = a  # type: ignore[attr-defined]
    return call


#: ``ap_strided_copy``'s argument block: the source, the output, the outer rank, the row's bytes, the row count,
#: then ``SC_MAX_RANK`` dims and as many byte strides.
SC_MAX_RANK = 8
(SC_X, SC_Y, SC_RANK, SC_ROW, SC_ROWS, SC_DIMS) = range(6)
SC_STRIDES = SC_DIMS + SC_MAX_RANK
SC_NARGS = SC_STRIDES + SC_MAX_RANK


def strided_rows(x: np.ndarray) -> tuple[list[tuple[int, int]], int] | None:
    """``x``'s elements in C order as rows of contiguous bytes: the outer (dim, byte stride) pairs, merged where
    they are contiguous to each other, and the row's bytes; None beyond ``SC_MAX_RANK`` outer dims."""
    pairs = [(int(d), int(s)) for d, s in zip(x.shape, x.strides, strict=True) if d != 1]
    merged: list[tuple[int, int]] = []
    for dim, stride in pairs:
        if merged and merged[-1][1] == dim * stride:
            merged[-1] = (merged[-1][0] * dim, stride)
        else:
            merged.append((dim, stride))
    row = x.itemsize
    if merged and merged[-1][1] == x.itemsize:
        row *= merged.pop()[0]
    return (merged, row) if len(merged) <= SC_MAX_RANK else None


def strided_copy_call(native: NativeLib, x: np.ndarray, out: np.ndarray) -> Bound | None:
    """``out[...] = x`` in C order (``out`` contiguous, of ``x``'s size and type, any shape) as one compiled call
    over fixed arrays; None when they do not fit the kernel (objects, another size, too many strided dims)."""
    if x.dtype.hasobject or out.dtype != x.dtype or out.size != x.size or not out.flags.c_contiguous or x.size == 0:
        return None
    rows = strided_rows(x)
    if rows is None:
        return None
    outer, row = rows
    a = Args(SC_NARGS)
    a.block[:SC_DIMS] = (addr(x), addr(out), len(outer), row, int(np.prod([d for d, _ in outer], dtype=np.int64)))
    for i, (dim, stride) in enumerate(outer):
        a.block[SC_DIMS + i] = dim
        a.block[SC_STRIDES + i] = stride
    return _bound(native.strided_copy, a, x, out)
