"""Gradients of tensor and linear-algebra ops, plus the small helpers training graphs need.

* ``SumToShape``: undo broadcasting (gradients of Add/Sub/Mul/Div/Where/Expand).
* ``MatMulGrad``: both MatMul gradients under NumPy's batching, broadcasting and 1-D rules.
* ``ConcatGrad``, ``GatherGrad``, ``SliceGrad``, ``ReduceGrad``: shape-op gradients, given the forward input's shape.
* ``TrainingDropout`` / ``DropoutGrad``: dropout whose mask comes from a fed seed (reproducible, resumable).
* ``IsAllFinite``: one flag over many tensors, for dynamic loss scaling.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from runtime.kernels.base import register
from runtime.kernels.grad_base import GradKernel, shape_tuple, sum_to_shape, wide


@register
class SumToShape(GradKernel):
    """``SumToShape(G, shape)``: sum the axes of ``G`` that broadcasting added or stretched."""

    op_type = "SumToShape"

    def compute(self, g: np.ndarray, shape: np.ndarray) -> np.ndarray:
        return sum_to_shape(g, shape_tuple(shape))


@register
class MatMulGrad(GradKernel):
    """``MatMulGrad(dY, A, B) -> dA, dB`` for ``Y = A @ B`` (NumPy semantics)."""

    op_type = "MatMulGrad"

    def compute(self, dy: np.ndarray, a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray | None, ...]:
        a2 = a[None, :] if a.ndim == 1 else a
        b2 = b[:, None] if b.ndim == 1 else b
        g = wide(dy)
        if b.ndim == 1:
            g = g[..., None]
        if a.ndim == 1:
            g = g[..., None, :]
        da = db = None
        if g.ndim > 2 and b2.ndim == 2 and a2.shape[:-2] == g.shape[:-2]:
            # a stack of rows times one matrix (a transformer's activations by a weight): flatten the stack, so
            # dB is one GEMM over every row, not one per sample summed afterwards
            a2, g = a2.reshape(-1, a2.shape[-1]), g.reshape(-1, g.shape[-1])
        if self.wants(0):
            da = sum_to_shape(np.matmul(g, np.swapaxes(wide(b2), -1, -2)), a2.shape).reshape(a.shape)
        if self.wants(1):
            db = sum_to_shape(np.matmul(np.swapaxes(wide(a2), -1, -2), g), b2.shape).reshape(b.shape)
        return (
            None if da is None else da.astype(a.dtype, copy=False),
            None if db is None else db.astype(b.dtype, copy=False),
        )


@register
class ConcatGrad(GradKernel):
    """``ConcatGrad(dY, shape_1, ..., shape_n) -> dX_1, ..., dX_n``: split ``dY`` along ``axis``."""

    op_type = "ConcatGrad"
    attr_defaults: ClassVar[dict[str, Any]] = {"axis": 0}

    def compute(self, dy: np.ndarray, *shapes: np.ndarray) -> tuple[np.ndarray, ...]:
        axis = int(self.attrs["axis"]) % dy.ndim
        sizes = [shape_tuple(s)[axis] for s in shapes]
        bounds = np.cumsum(sizes)[:-1]
        return tuple(np.split(dy, bounds, axis=axis))


@register
class GatherGrad(GradKernel):
    """``GatherGrad(dY, indices, data_shape) -> dData``: scatter-add rows back (repeated indices accumulate)."""

    op_type = "GatherGrad"
    attr_defaults: ClassVar[dict[str, Any]] = {"axis": 0}

    def compute(self, dy: np.ndarray, indices: np.ndarray, data_shape: np.ndarray) -> np.ndarray:
        shape = shape_tuple(data_shape)
        axis = int(self.attrs["axis"]) % len(shape)
        idx = indices.astype(np.int64, copy=False)
        idx = np.where(idx < 0, idx + shape[axis], idx)
        out = np.zeros((shape[axis], *shape[:axis], *shape[axis + 1 :]), dtype=wide(dy).dtype)
        # dY is (*pre, *idx_shape, *post): bring the index dims to the front to match out[idx]
        q = idx.ndim
        perm = (*range(axis, axis + q), *range(axis), *range(axis + q, dy.ndim))
        np.add.at(out, idx, wide(dy).transpose(perm))
        return np.moveaxis(out, 0, axis).astype(dy.dtype, copy=False)


@register
class SliceGrad(GradKernel):
    """``SliceGrad(dY, data_shape, starts?, ends?, axes?, steps?) -> dData``: zeros with ``dY`` in the slice.

    Opset 10+ Slice passes starts/ends/axes/steps as inputs; older ones as attributes (taken from here).
    """

    op_type = "SliceGrad"

    def compute(
        self,
        dy: np.ndarray,
        data_shape: np.ndarray,
        starts: np.ndarray | None = None,
        ends: np.ndarray | None = None,
        axes: np.ndarray | None = None,
        steps: np.ndarray | None = None,
    ) -> np.ndarray:
        shape = shape_tuple(data_shape)
        start_list = _ints(starts, self.attrs.get("starts"))
        end_list = _ints(ends, self.attrs.get("ends"))
        axis_list = _ints(axes, self.attrs.get("axes")) or list(range(len(start_list)))
        step_list = _ints(steps, None) or [1] * len(start_list)
        index = [slice(None)] * len(shape)
        for start, end, axis, step in zip(start_list, end_list, axis_list, step_list, strict=True):
            index[axis % len(shape)] = slice(start, end, step)
        dx = np.zeros(shape, dtype=dy.dtype)
        dx[tuple(index)] = dy
        return dx


def _ints(value: np.ndarray | None, fallback: Any) -> list[int]:
    if value is not None:
        return [int(v) for v in np.asarray(value).reshape(-1)]
    return [int(v) for v in fallback] if fallback is not None else []


@register
class ReduceGrad(GradKernel):
    """``ReduceGrad(dY, data_shape, axes?) -> dData`` for ReduceSum (``mean=0``) and ReduceMean (``mean=1``).

    ``axes`` comes from input 2 (ReduceSum 13+, ReduceMean 18+) or the ``axes`` attribute; ``keepdims`` and
    ``noop_with_empty_axes`` are the forward node's.
    """

    op_type = "ReduceGrad"
    attr_defaults: ClassVar[dict[str, Any]] = {"keepdims": 1, "noop_with_empty_axes": 0, "mean": 0}

    def compute(self, dy: np.ndarray, data_shape: np.ndarray, axes: np.ndarray | None = None) -> np.ndarray:
        shape = shape_tuple(data_shape)
        axis_list = _ints(axes, self.attrs.get("axes"))
        if not axis_list:
            if self.attrs["noop_with_empty_axes"]:
                return dy.reshape(shape)
            axis_list = list(range(len(shape)))
        norm = sorted({a % len(shape) for a in axis_list}) if shape else []
        g = wide(dy)
        if not self.attrs["keepdims"]:
            g = g.reshape([1 if i in norm else d for i, d in enumerate(shape)])
        if self.attrs["mean"]:
            count = int(np.prod([shape[a] for a in norm])) if norm else 1
            g = g / g.dtype.type(max(count, 1))
        return np.broadcast_to(g, shape).astype(dy.dtype)


@register
class TrainingDropout(GradKernel):
    """``TrainingDropout(X, seed) -> Y, mask``: Bernoulli mask from ``(seed, salt)``, kept values scaled by
    ``1 / (1 - ratio)``. The trainer feeds a new seed each step, so masks are reproducible from a checkpoint."""

    op_type = "TrainingDropout"
    attr_defaults: ClassVar[dict[str, Any]] = {"ratio": 0.5, "salt": 0}

    def compute(self, x: np.ndarray, seed: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        ratio = float(self.attrs["ratio"])
        if ratio <= 0.0:
            return x, np.ones(x.shape, dtype=bool)
        rng = np.random.default_rng([int(np.asarray(seed).reshape(-1)[0]) & 0x7FFFFFFF, int(self.attrs["salt"])])
        mask = rng.random(x.shape, dtype=np.float32) >= ratio
        xc = wide(x)
        y = np.where(mask, xc * xc.dtype.type(1.0 / (1.0 - ratio)), xc.dtype.type(0))
        return y.astype(x.dtype, copy=False), mask


@register
class DropoutGrad(GradKernel):
    """``DropoutGrad(dY, mask) -> dX = dY * mask / (1 - ratio)``."""

    op_type = "DropoutGrad"
    attr_defaults: ClassVar[dict[str, Any]] = {"ratio": 0.5}

    def compute(self, dy: np.ndarray, mask: np.ndarray) -> np.ndarray:
        ratio = float(self.attrs["ratio"])
        if ratio <= 0.0:
            return dy
        g = wide(dy)
        return np.where(mask, g * g.dtype.type(1.0 / (1.0 - ratio)), g.dtype.type(0)).astype(dy.dtype, copy=False)


@register
class IsAllFinite(GradKernel):
    """``IsAllFinite(X_1, ..., X_n) -> bool scalar``: no NaN or infinity anywhere (loss-scale overflow check)."""

    op_type = "IsAllFinite"

    def compute(self, *tensors: np.ndarray) -> np.ndarray:
        return np.asarray(all(bool(np.isfinite(t).all()) for t in tensors if t is not None))
