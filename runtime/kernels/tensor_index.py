"""Kernels that select or place elements by index: Slice, Gather*, Scatter*, Compress, NonZero, TopK, Unique,
OneHot, ReverseSequence.

Index inputs may be negative (counted from the end of the axis); results that are indices are int64.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from runtime import native
from runtime.errors import KernelError
from runtime.kernels.base import IntoKernel, Kernel, define_kernel, register
from runtime.kernels.tensor_shape import int_list, norm_axis
from runtime.native.abi import Bound
from runtime.native.convnets import gather_call


def onnx_slice(start: int, end: int, step: int, dim: int) -> slice:
    """The Python slice for ONNX's clamping rules.

    Negative starts/ends count from the end; then, for a positive step, both clamp to ``[0, dim]``; for a
    negative step the start clamps to ``[0, dim - 1]`` and the end to ``[-1, dim - 1]`` (-1: run past index 0).
    Python's own slice clamping differs for negative steps (it clamps a start below ``-dim`` to "nothing").
    """
    if step == 0:
        raise ValueError("slice step cannot be 0")
    start = start + dim if start < 0 else start
    end = end + dim if end < 0 else end
    if step > 0:
        return slice(min(max(start, 0), dim), min(max(end, 0), dim), step)
    start, end = min(max(start, 0), dim - 1), min(max(end, -1), dim - 1)
    if start < 0:  # empty axis
        return slice(0, 0)
    return slice(start, None if end < 0 else end, step)


def slice_array(
    x: np.ndarray, starts: list[int], ends: list[int], axes: list[int] | None, steps: list[int] | None
) -> np.ndarray:
    """ONNX Slice over ``axes`` (default: the first ``len(starts)`` dims)."""
    axes = list(range(len(starts))) if axes is None else [norm_axis(a, x.ndim) for a in axes]
    steps = [1] * len(starts) if steps is None else steps
    index: list[slice] = [slice(None)] * x.ndim
    for axis, start, end, step in zip(axes, starts, ends, steps, strict=True):
        index[axis] = onnx_slice(start, end, step, x.shape[axis])
    return x[tuple(index)]


@register
class Slice1(Kernel):
    """Slice with ``starts``/``ends``/``axes`` attributes (opsets 1-9)."""

    op_type = "Slice"
    amp_class = "either"
    since_version = 1

    def compute(self, x: np.ndarray) -> np.ndarray:
        axes = self.attrs.get("axes")
        return slice_array(
            x, list(self.attrs["starts"]), list(self.attrs["ends"]), None if axes is None else list(axes), None
        )


@register
class Slice10(Kernel):
    """Slice with ``starts, ends[, axes[, steps]]`` inputs (opset 10+); steps may be negative."""

    op_type = "Slice"
    amp_class = "either"
    since_version = 10

    def compute(
        self,
        x: np.ndarray,
        starts: np.ndarray,
        ends: np.ndarray,
        axes: np.ndarray | None = None,
        steps: np.ndarray | None = None,
    ) -> np.ndarray:
        return slice_array(
            x,
            int_list(starts),
            int_list(ends),
            None if axes is None else int_list(axes),
            None if steps is None else int_list(steps),
        )


def positive_indices(indices: np.ndarray, dim: int) -> np.ndarray:
    """Indices with negatives wrapped to ``[0, dim)``; out-of-range raises (as ONNX requires)."""
    idx = np.asarray(indices).astype(np.int64)
    if idx.size and (idx.min() < -dim or idx.max() >= dim):
        raise IndexError(f"index out of range for a dimension of size {dim}")
    return np.where(idx < 0, idx + dim, idx)


@register
class Gather(IntoKernel):
    """Pick slices along ``axis`` by an index tensor (``out.shape = x.shape[:axis] + idx.shape + ...``)."""

    op_type = "Gather"
    amp_class = "either"
    since_version = 1
    attr_defaults: ClassVar[dict[str, Any]] = {"axis": 0}

    def compute_into(self, out: np.ndarray | None, x: np.ndarray, indices: np.ndarray) -> np.ndarray:
        """Also writes into a planned buffer (the output's shape follows the input shapes alone)."""
        axis = norm_axis(int(self.attrs["axis"]), x.ndim)
        idx = np.asarray(indices)
        if idx.dtype.kind == "i":  # np.take wraps negatives and raises out of range, as ONNX asks: one pass
            try:
                return np.take(x, idx, axis=axis, out=out)
            except IndexError:
                pass  # the message below names the dimension
        return np.take(x, positive_indices(idx, x.shape[axis]), axis=axis, out=out)

    def bind(self, out: np.ndarray, x: np.ndarray, indices: np.ndarray) -> Bound | None:
        """The static plan's call over fixed arrays: the compiled row copy (``ap_gather``), an index outside the
        axis a one-line error naming the node; None where it does not apply (NumPy's ``take`` then runs)."""
        lib = native.lib()
        if lib is None or not isinstance(x, np.ndarray) or not isinstance(indices, np.ndarray):
            return None
        axis = norm_axis(int(self.attrs["axis"]), x.ndim)
        return gather_call(lib, x, indices, axis, out, KernelError, f"node {self.node.name!r} (Gather)")


@register
class GatherElements(Kernel):
    """``out[i][j] = x[idx[i][j]][j]`` for axis 0 (and likewise for other axes)."""

    op_type = "GatherElements"
    since_version = 11
    attr_defaults: ClassVar[dict[str, Any]] = {"axis": 0}

    def compute(self, x: np.ndarray, indices: np.ndarray) -> np.ndarray:
        axis = norm_axis(int(self.attrs["axis"]), x.ndim)
        return x[element_index(positive_indices(indices, x.shape[axis]), axis)]


@register
class GatherND(Kernel):
    """Gather slices addressed by the last dim of ``indices``, after ``batch_dims`` shared leading dims."""

    op_type = "GatherND"
    since_version = 11
    attr_defaults: ClassVar[dict[str, Any]] = {"batch_dims": 0}

    def compute(self, x: np.ndarray, indices: np.ndarray) -> np.ndarray:
        b = int(self.attrs["batch_dims"])
        idx = np.asarray(indices).astype(np.int64)
        k = idx.shape[-1]
        batch_shape = x.shape[:b]
        n_batch = int(np.prod(batch_shape, dtype=np.int64))
        xb = x.reshape((n_batch, *x.shape[b:]))
        ib = idx.reshape((n_batch, -1, k))
        for j in range(k):  # wrap negative indices per addressed dim
            ib[..., j] = positive_indices(ib[..., j], x.shape[b + j])
        batch_ix = np.repeat(np.arange(n_batch), ib.shape[1])
        flat_ix = ib.reshape(-1, k)
        picked = xb[(batch_ix, *(flat_ix[:, j] for j in range(k)))]
        return picked.reshape((*idx.shape[:-1], *x.shape[b + k :]))


_REDUCERS: dict[str, np.ufunc] = {
    "add": np.add,
    "mul": np.multiply,
    "max": np.maximum,
    "min": np.minimum,
}


def element_index(idx: np.ndarray, axis: int) -> tuple[np.ndarray, ...]:
    """Fancy index addressing ``[i0, ..., idx[i], ..., ik]`` for every position ``i`` of ``idx``.

    Unlike ``np.take_along_axis``, other dims follow ``idx``'s extent (they may be shorter than the data's),
    never broadcast.
    """
    grids: list[np.ndarray] = list(np.indices(idx.shape, sparse=True))
    grids[axis] = idx
    return tuple(grids)


def scatter_elements(
    data: np.ndarray, indices: np.ndarray, updates: np.ndarray, axis: int, reduction: str
) -> np.ndarray:
    axis = norm_axis(axis, data.ndim)
    target = element_index(positive_indices(indices, data.shape[axis]), axis)
    return _scattered(data, target, updates, reduction)


def _scattered(data: np.ndarray, target: Any, updates: np.ndarray, reduction: str) -> np.ndarray:
    """A copy of ``data`` with ``updates`` written at ``target`` (duplicates: the last wins), or reduced into it."""
    out = data.copy()
    if reduction == "none":
        out[target] = updates
    else:
        _REDUCERS[reduction].at(out, target, updates)
    return out


@register
class ScatterElements(Kernel):
    """Copy of ``data`` with ``updates`` written (or reduced: add/mul/max/min) at ``indices`` along ``axis``."""

    op_type = "ScatterElements"
    since_version = 11
    attr_defaults: ClassVar[dict[str, Any]] = {"axis": 0, "reduction": "none"}

    def compute(self, data: np.ndarray, indices: np.ndarray, updates: np.ndarray) -> np.ndarray:
        return scatter_elements(data, indices, updates, int(self.attrs["axis"]), self.attrs["reduction"])


#: Opsets 9-10: ScatterElements under its deprecated name (which has no ``reduction`` attribute).
Scatter = define_kernel(ScatterElements, "Scatter", doc="Deprecated alias of ScatterElements.", since_version=9)


@register
class ScatterND(Kernel):
    """Copy of ``data`` with slices addressed by the last dim of ``indices`` replaced or reduced."""

    op_type = "ScatterND"
    since_version = 11
    attr_defaults: ClassVar[dict[str, Any]] = {"reduction": "none"}

    def compute(self, data: np.ndarray, indices: np.ndarray, updates: np.ndarray) -> np.ndarray:
        idx = np.asarray(indices).astype(np.int64)
        k = idx.shape[-1]
        flat = idx.reshape(-1, k)
        target = tuple(positive_indices(flat[:, j], data.shape[j]) for j in range(k))
        upd = updates.reshape((flat.shape[0], *data.shape[k:]))
        return _scattered(data, target, upd, self.attrs["reduction"])


@register
class Compress(Kernel):
    """Keep the slices along ``axis`` (or elements of the flattened input) where ``condition`` is true."""

    op_type = "Compress"
    since_version = 9

    def compute(self, x: np.ndarray, condition: np.ndarray) -> np.ndarray:
        axis = self.attrs.get("axis")
        cond = np.asarray(condition).astype(bool).reshape(-1)
        if axis is None:
            return np.compress(cond, x.reshape(-1))
        return np.compress(cond, x, axis=norm_axis(int(axis), x.ndim))


@register
class NonZero(Kernel):
    """Indices of the non-zero elements, shaped ``[rank, count]`` (int64)."""

    op_type = "NonZero"
    since_version = 9

    def compute(self, x: np.ndarray) -> np.ndarray:
        return np.array(np.nonzero(np.atleast_1d(x)), dtype=np.int64)


def top_k(x: np.ndarray, k: int, axis: int, largest: bool) -> tuple[np.ndarray, np.ndarray]:
    """The k largest (or smallest) along ``axis``, sorted; ties keep the lower index first."""
    axis = norm_axis(axis, x.ndim)
    n = x.shape[axis]
    if not 0 <= k <= n:
        raise ValueError(f"k={k} is out of range for an axis of size {n}")
    if largest:
        # stable ascending sort of the reversed axis, then reversed: descending, ties by ascending index
        order = np.argsort(np.flip(x, axis=axis), axis=axis, kind="stable")
        order = (n - 1) - np.flip(order, axis=axis)
    else:
        order = np.argsort(x, axis=axis, kind="stable")
    idx = np.take(order, np.arange(k), axis=axis).astype(np.int64)
    return np.take_along_axis(x, idx, axis=axis), idx


@register
class TopK1(Kernel):
    """TopK with a ``k`` attribute (opsets 1-9)."""

    op_type = "TopK"
    since_version = 1
    attr_defaults: ClassVar[dict[str, Any]] = {"axis": -1}

    def compute(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return top_k(x, int(self.attrs["k"]), int(self.attrs["axis"]), True)


@register
class TopK10(Kernel):
    """TopK with a ``K`` input; opset 11 adds ``largest`` and ``sorted`` (results are always sorted)."""

    op_type = "TopK"
    since_version = 10
    attr_defaults: ClassVar[dict[str, Any]] = {"axis": -1, "largest": 1, "sorted": 1}

    def compute(self, x: np.ndarray, k: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return top_k(x, int_list(k)[0], int(self.attrs["axis"]), bool(self.attrs["largest"]))


@register
class Unique(Kernel):
    """Unique elements (or slices along ``axis``), first-occurrence indices, inverse indices and counts."""

    op_type = "Unique"
    since_version = 11
    attr_defaults: ClassVar[dict[str, Any]] = {"sorted": 1}

    def compute(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        axis_attr = self.attrs.get("axis")
        axis = None if axis_attr is None else norm_axis(int(axis_attr), x.ndim)
        data = x.reshape(-1) if axis is None else x
        values, first, inverse, counts = np.unique(
            data, return_index=True, return_inverse=True, return_counts=True, axis=axis
        )
        inverse = inverse.reshape(-1)
        if not self.attrs["sorted"]:  # order by first occurrence instead of by value
            order = np.argsort(first, kind="stable")
            rank = np.empty_like(order)
            rank[order] = np.arange(order.size)
            values = np.take(values, order, axis=0 if axis is None else axis)
            first, counts, inverse = first[order], counts[order], rank[inverse]
        return (values, first.astype(np.int64), inverse.astype(np.int64), counts.astype(np.int64))


@register
class OneHot(Kernel):
    """One-hot encode ``indices`` with ``depth`` classes along ``axis``; values are ``[off, on]``."""

    op_type = "OneHot"
    creates_size = True
    since_version = 9
    attr_defaults: ClassVar[dict[str, Any]] = {"axis": -1}

    def compute(self, indices: np.ndarray, depth: np.ndarray, values: np.ndarray) -> np.ndarray:
        n_classes = int(np.asarray(depth).reshape(-1)[0])
        off, on = np.asarray(values).reshape(-1)[:2]
        idx = np.asarray(indices).astype(np.int64)
        idx = np.where(idx < 0, idx + n_classes, idx)
        rank = idx.ndim + 1
        axis = norm_axis(int(self.attrs["axis"]), rank)
        classes = np.arange(n_classes).reshape((n_classes,) + (1,) * (rank - axis - 1))
        hot = np.expand_dims(idx, axis) == classes
        return np.where(hot, on, off).astype(np.asarray(values).dtype)


@register
class ReverseSequence(Kernel):
    """Reverse the first ``sequence_lens[b]`` steps along ``time_axis`` for each batch entry ``b``."""

    op_type = "ReverseSequence"
    since_version = 10
    attr_defaults: ClassVar[dict[str, Any]] = {"batch_axis": 1, "time_axis": 0}

    def compute(self, x: np.ndarray, sequence_lens: np.ndarray) -> np.ndarray:
        batch_axis, time_axis = int(self.attrs["batch_axis"]), int(self.attrs["time_axis"])
        out = x.copy()
        for b, length in enumerate(int_list(sequence_lens)):
            src: list[Any] = [slice(None)] * x.ndim
            src[batch_axis] = b
            src[time_axis] = slice(0, length)
            dst = list(src)
            dst[time_axis] = slice(length - 1, None, -1) if length > 0 else slice(0, 0)
            out[tuple(src)] = x[tuple(dst)]
        return out
