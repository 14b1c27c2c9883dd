"""Pooling: AveragePool, MaxPool (with Indices), LpPool, the Global* pools and MaxUnpool.

Every windowed pool is a reduction over a strided window view of the padded input (no per-pixel loops).
Average divisors are separable per spatial dim, so they are computed from 1-d masks and multiplied.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any, ClassVar, Literal

import numpy as np

from runtime.geometry import pool_work_problem, window_attr_problem, window_output_problem
from runtime.kernels.base import IntoKernel, Kernel, define_kernel, register
from runtime.kernels.conv import compute_dtype, pad_spatial, resolve_pads, window_view


class PoolGeometry:
    """Output shape and padding of a windowed pool, including ``ceil_mode`` overhang."""

    #: Windows per spatial axis.
    out: list[int]
    #: Overhang past the end pad (ceil mode), never counted as padding.
    extra: list[int]

    def __init__(self, attrs: dict[str, Any], in_shape: Sequence[int], batch_channels: int = 1) -> None:
        problem = window_attr_problem("MaxPool", attrs, len(in_shape))
        if problem:
            raise ValueError(problem)
        self.kernel = list(attrs["kernel_shape"])
        nd = len(self.kernel)
        self.strides = list(attrs.get("strides") or [1] * nd)
        self.dilations = list(attrs.get("dilations") or [1] * nd)
        auto_pad = attrs.get("auto_pad", "NOTSET")
        ceil_mode = bool(attrs.get("ceil_mode", 0))
        self.in_shape = list(in_shape)
        if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
            # Output is ceil(in / stride); the dilated window decides the padding.
            pads = resolve_pads(auto_pad, None, in_shape, self.kernel, self.strides, self.dilations)
        else:
            pads = resolve_pads(auto_pad, attrs.get("pads"), in_shape, self.kernel, self.strides, self.dilations)
        self.pads = pads
        self.fit_windows(ceil_mode and auto_pad not in ("SAME_UPPER", "SAME_LOWER"))
        problem = window_output_problem(in_shape, self.kernel, self.strides, self.dilations, pads) or (
            pool_work_problem(batch_channels, self.out, self.kernel)
        )
        if problem:
            raise ValueError(problem)

    def fit_windows(self, ceil_mode: bool) -> None:
        """Set ``out`` and ``extra`` from the kernel, strides, dilations, pads and input shape."""
        nd = self.nd
        self.out, self.extra = [], []
        for i in range(nd):
            span = (self.kernel[i] - 1) * self.dilations[i] + 1
            padded = self.in_shape[i] + self.pads[i] + self.pads[i + nd]
            if ceil_mode:
                out = -(-(padded - span) // self.strides[i]) + 1
                if (out - 1) * self.strides[i] >= self.in_shape[i] + self.pads[i]:
                    out -= 1  # the last window must start inside the image or its begin pad
            else:
                out = (padded - span) // self.strides[i] + 1
            self.out.append(out)
            self.extra.append(max(0, (out - 1) * self.strides[i] + span - padded))

    @property
    def nd(self) -> int:
        return len(self.kernel)

    def window(self, mode: int) -> Any:
        """The compiled kernels' ``runtime.native.ops.PoolWindow`` of a 2-d pool (mode 0 max, 1/2 average)."""
        from runtime.native.ops import PoolWindow

        return PoolWindow(self.kernel, self.strides, self.dilations, self.pads[:4], self.out, mode)

    def full_pads(self) -> list[int]:
        """Pads to apply to the input so every window lies inside the array."""
        nd = self.nd
        return self.pads[:nd] + [self.pads[nd + i] + self.extra[i] for i in range(nd)]

    def windows(self, x: np.ndarray, fill: float | int) -> np.ndarray:
        """``(N, C, *out, *kernel)`` view of ``x`` padded with ``fill``."""
        xp = pad_spatial(x, self.full_pads(), fill)
        return window_view(xp, self.kernel, self.strides, self.dilations, self.out)

    def counts(self, include_pad: bool) -> np.ndarray:
        """Number of elements each window averages over, shaped ``(*out)`` (separable per dim)."""
        total: np.ndarray = np.ones((), dtype=np.int64)
        nd = self.nd
        for i in range(nd):
            size = self.in_shape[i] + self.pads[i] + self.pads[nd + i] + self.extra[i]
            mask = np.zeros(size, dtype=np.int64)
            if include_pad:
                mask[: self.in_shape[i] + self.pads[i] + self.pads[nd + i]] = 1
            else:
                mask[self.pads[i] : self.pads[i] + self.in_shape[i]] = 1
            starts = np.arange(self.out[i]) * self.strides[i]
            taps = np.arange(self.kernel[i]) * self.dilations[i]
            per_dim = mask[starts[:, None] + taps[None, :]].sum(axis=1)
            total = np.multiply.outer(total, per_dim)
        return total


def _native_pool(x: np.ndarray, geo: PoolGeometry) -> Any:
    """The compiled NCHW pooling library when it applies (float32, 2-D windows, a C-contiguous input), else None."""
    if x.dtype != np.float32 or geo.nd != 2 or x.ndim != 4 or not x.flags.c_contiguous:
        return None
    from runtime import native

    return native.lib()


def _pool_nchw(lib: Any, x: np.ndarray, geo: PoolGeometry, mode: int, out: np.ndarray | None) -> np.ndarray:
    from runtime.native import ops

    return ops.pool(lib, x, geo.window(mode), out, nchw=True)


def _bind_pool_nchw(out: np.ndarray, x: np.ndarray, attrs: dict[str, Any], mode: int) -> Any:
    geo = PoolGeometry(attrs, x.shape[2:], x.shape[0] * x.shape[1])
    lib = _native_pool(x, geo)
    if lib is None:
        return None
    from runtime.native import ops

    return ops.bind_pool(lib, x, geo.window(mode), out, nchw=True)


def _kernel_axes(nd: int) -> tuple[int, ...]:
    return tuple(range(2 + nd, 2 + 2 * nd))


def _tap_reduce(win: np.ndarray, nd: int, fn: Any, dtype: np.dtype[Any] | None = None) -> np.ndarray:
    """Reduce the kernel axes of a window view ``(N, C, *out, *kernel)`` one tap at a time: one vectorised pass
    over the output per tap, much faster than NumPy's reduction over small strided trailing axes."""
    kernel = win.shape[2 + nd :]
    taps = itertools.product(*(range(k) for k in kernel))
    first: tuple[Any, ...] = (Ellipsis, *next(taps))
    acc = np.array(win[first], dtype=dtype or win.dtype, copy=True)
    for tap in taps:
        index: tuple[Any, ...] = (Ellipsis, *tap)
        fn(acc, win[index], out=acc)
    return acc


@register
class AveragePool(IntoKernel):
    """Mean over each window; ``count_include_pad`` decides whether begin/end padding counts."""

    op_type = "AveragePool"
    amp_class = "fp32"
    since_version = 1
    attr_defaults: ClassVar[dict[str, Any]] = {"auto_pad": "NOTSET", "ceil_mode": 0, "count_include_pad": 0}

    def mode(self) -> int:
        """The compiled kernel's averaging mode: 1 excludes padding from the divisor, 2 counts it."""
        return 2 if self.attrs["count_include_pad"] else 1

    def compute_into(self, out: np.ndarray | None, x: np.ndarray) -> np.ndarray:
        geo = PoolGeometry(self.attrs, x.shape[2:], x.shape[0] * x.shape[1])
        lib = _native_pool(x, geo)
        if lib is not None:
            return _pool_nchw(lib, x, geo, self.mode(), out)
        ct = compute_dtype(x.dtype)
        sums = _tap_reduce(geo.windows(x.astype(ct, copy=False), 0), geo.nd, np.add)
        counts = geo.counts(bool(self.attrs["count_include_pad"]))
        return (sums / np.maximum(counts, 1).astype(ct)).astype(x.dtype, copy=False)

    def bind(self, out: np.ndarray, x: np.ndarray) -> Any:
        """A prebound compiled call over fixed buffers (the executor's static plan), or None."""
        return _bind_pool_nchw(out, x, self.attrs, self.mode())


def _lowest(dtype: np.dtype[Any]) -> float | int:
    if dtype.kind in "iu":
        return int(np.iinfo(dtype).min)
    return -np.inf


@register
class MaxPool(Kernel):
    """Max over each window; the optional ``Indices`` output holds flat positions in the unpadded input."""

    op_type = "MaxPool"
    amp_class = "either"
    since_version = 1
    attr_defaults: ClassVar[dict[str, Any]] = {"auto_pad": "NOTSET", "ceil_mode": 0, "storage_order": 0}

    def compute(self, x: np.ndarray) -> np.ndarray | tuple[np.ndarray, np.ndarray]:
        geo = PoolGeometry(self.attrs, x.shape[2:], x.shape[0] * x.shape[1])
        want_indices = self.node.n_outputs > 1 and (
            not self.node.output_present or len(self.node.output_present) < 2 or self.node.output_present[1]
        )
        lib = None if want_indices else _native_pool(x, geo)
        if lib is not None:
            return _pool_nchw(lib, x, geo, 0, None)
        win = geo.windows(x, _lowest(x.dtype))
        if not want_indices:
            if x.dtype.kind == "f":
                return _tap_reduce(win, geo.nd, np.maximum)
            return win.max(axis=_kernel_axes(geo.nd))
        return self._with_indices(x, geo, win)

    def compute_into(self, out: np.ndarray, x: np.ndarray) -> np.ndarray:
        """The single-output MaxPool into a planned buffer (the executor calls this only with one output)."""
        geo = PoolGeometry(self.attrs, x.shape[2:], x.shape[0] * x.shape[1])
        lib = _native_pool(x, geo)
        if lib is not None:
            return _pool_nchw(lib, x, geo, 0, out)
        result = self.compute(x)
        return result[0] if isinstance(result, tuple) else result

    def bind(self, out: np.ndarray, x: np.ndarray) -> Any:
        """A prebound compiled call over fixed buffers (the executor's static plan), or None."""
        return _bind_pool_nchw(out, x, self.attrs, 0)

    def _with_indices(self, x: np.ndarray, geo: PoolGeometry, win: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        nd = geo.nd
        n, c = x.shape[:2]
        flat = win.reshape(n, c, *geo.out, -1)
        arg = flat.argmax(axis=-1)
        y = np.take_along_axis(flat, arg[..., None], axis=-1)[..., 0]
        taps = np.unravel_index(arg, geo.kernel)
        positions = []
        for i in range(nd):
            shape = [1] * (2 + nd)
            shape[2 + i] = geo.out[i]
            start = (np.arange(geo.out[i]) * geo.strides[i] - geo.pads[i]).reshape(shape)
            positions.append(start + taps[i] * geo.dilations[i])
        order: Literal["C", "F"] = "F" if self.attrs["storage_order"] == 1 else "C"
        spatial = np.ravel_multi_index(tuple(positions), geo.in_shape, order=order, mode="clip")
        plane = int(np.prod(geo.in_shape))
        base = (np.arange(n)[:, None] * c + np.arange(c)[None, :]) * plane
        indices = spatial + base.reshape(n, c, *([1] * nd))
        return y, indices.astype(np.int64)


@register
class LpPool(Kernel):
    """``(sum |x|^p)^(1/p)`` over each window (zero padding)."""

    op_type = "LpPool"
    amp_class = "fp32"
    since_version = 1
    attr_defaults: ClassVar[dict[str, Any]] = {"auto_pad": "NOTSET", "ceil_mode": 0, "p": 2}

    def compute(self, x: np.ndarray) -> np.ndarray:
        geo = PoolGeometry(self.attrs, x.shape[2:], x.shape[0] * x.shape[1])
        p = float(self.attrs["p"])
        ct = compute_dtype(x.dtype)
        powered = np.abs(x.astype(ct, copy=False)) ** p
        sums = geo.windows(powered, 0).sum(axis=_kernel_axes(geo.nd))
        return (sums ** (1.0 / p)).astype(x.dtype, copy=False)


class _GlobalPool(Kernel):
    """Pool each ``(N, C, *spatial)`` plane to one value: ``fn(x, spatial_axes)`` with the dims kept."""

    def fn(self, x: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
        raise NotImplementedError

    def compute(self, x: np.ndarray) -> np.ndarray:
        return self.fn(x, tuple(range(2, x.ndim)))


def _global_mean(x: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
    return x.astype(compute_dtype(x.dtype), copy=False).mean(axis=axes, keepdims=True).astype(x.dtype, copy=False)


def _global_max(x: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
    return x.max(axis=axes, keepdims=True)


GlobalAveragePool = define_kernel(_GlobalPool, "GlobalAveragePool", _global_mean, amp_class="fp32")
GlobalMaxPool = define_kernel(_GlobalPool, "GlobalMaxPool", _global_max, amp_class="either")


@register
class GlobalLpPool(_GlobalPool):
    """``(sum |x|^p) ^ (1/p)`` over each plane."""

    op_type = "GlobalLpPool"
    amp_class = "fp32"
    attr_defaults: ClassVar[dict[str, Any]] = {"p": 2}

    def fn(self, x: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
        p = float(self.attrs["p"])
        sums = (np.abs(x.astype(compute_dtype(x.dtype), copy=False)) ** p).sum(axis=axes, keepdims=True)
        return (sums ** (1.0 / p)).astype(x.dtype, copy=False)


@register
class MaxUnpool(Kernel):
    """Scatter pooled values back to the flat positions recorded by MaxPool's ``Indices``; zeros elsewhere."""

    op_type = "MaxUnpool"
    since_version = 9

    def compute(self, x: np.ndarray, indices: np.ndarray, output_shape: np.ndarray | None = None) -> np.ndarray:
        kernel = list(self.attrs["kernel_shape"])
        nd = len(kernel)
        strides = list(self.attrs.get("strides") or [1] * nd)
        pads = list(self.attrs.get("pads") or [0] * (2 * nd))
        spatial = [(x.shape[2 + i] - 1) * strides[i] + kernel[i] - pads[i] - pads[i + nd] for i in range(nd)]
        inferred = [*x.shape[:2], *spatial]
        y = np.zeros(int(np.prod(inferred)), dtype=x.dtype)
        y[indices.reshape(-1)] = x.reshape(-1)
        y = y.reshape(inferred)
        if output_shape is None:
            return y
        # Indices address the inferred shape; a larger requested shape keeps that block at its origin.
        shape = [int(v) for v in output_shape]
        out = np.zeros(shape, dtype=x.dtype)
        block = tuple(slice(0, min(a, b)) for a, b in zip(inferred, shape, strict=True))
        out[block] = y[block]
        return out
