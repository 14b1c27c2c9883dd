"""Resize and Upsample: separable interpolation, one axis at a time.

Each resized axis maps output positions to source coordinates (``coordinate_transformation_mode``), then either
picks the nearest source index (``nearest``) or builds an ``out x in`` weight matrix (``linear``/``cubic``, with
optional antialias and ``exclude_outside``) and contracts it with the data along that axis. The semantics follow
the ONNX spec and its reference evaluator (notably: the continuous output width ``scale * in`` is used for
``align_corners``/``tf_crop_and_resize``/``half_pixel_symmetric``, as the reference does).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from runtime.kernels.base import IntoKernel, Kernel, define_kernel, register, store_into
from runtime.kernels.tensor_shape import norm_axis


def source_coords(mode: str, out_len: int, in_len: int, scale: float, roi: tuple[float, float] | None) -> np.ndarray:
    """Source coordinate of each output index along one axis."""
    y = np.arange(out_len, dtype=np.float64)
    out_width = scale * in_len  # the continuous output width, as the spec's formulas use it
    if mode == "half_pixel":
        return (y + 0.5) / scale - 0.5
    if mode == "asymmetric":
        return y / scale
    if mode == "pytorch_half_pixel":
        return np.full(out_len, -0.5) if out_width == 1 else (y + 0.5) / scale - 0.5
    if mode == "align_corners":
        return np.zeros(out_len) if out_width == 1 else y * (in_len - 1) / (out_width - 1)
    if mode == "half_pixel_symmetric":
        offset = (in_len / 2) * (1 - out_len / out_width)
        return offset + (y + 0.5) / scale - 0.5
    if mode == "tf_crop_and_resize":
        if roi is None:
            raise ValueError("coordinate_transformation_mode tf_crop_and_resize needs the roi input")
        start, end = roi
        if out_width == 1:
            x = np.full(out_len, (end - start) * (in_len - 1) / 2)
        else:
            x = y * (end - start) * (in_len - 1) / (out_width - 1)
        return x + start * (in_len - 1)
    raise ValueError(f"unknown coordinate_transformation_mode {mode!r}")


def nearest_indices(x: np.ndarray, nearest_mode: str, in_len: int, scale: float) -> np.ndarray:
    """Nearest source index for each coordinate, clamped into the axis."""
    if nearest_mode == "round_prefer_floor":
        idx = np.ceil(x - 0.5)
    elif nearest_mode == "round_prefer_ceil":
        idx = np.floor(x + 0.5)
    elif nearest_mode == "floor":
        idx = np.floor(x)
    elif nearest_mode == "ceil":
        idx = np.ceil(x)
    elif nearest_mode == "simple":  # opset < 11 (Resize-10, Upsample): ceil when shrinking, else floor
        idx = np.ceil(x) if scale < 1 else np.floor(x)
    else:
        raise ValueError(f"unknown nearest_mode {nearest_mode!r}")
    return np.clip(idx, 0, in_len - 1).astype(np.intp)


def cubic_kernel(t: np.ndarray, a: float) -> np.ndarray:
    """Keys' cubic convolution kernel with parameter ``a``."""
    t = np.abs(t)
    near = ((a + 2) * t - (a + 3)) * t * t + 1
    far = ((a * t - 5 * a) * t + 8 * a) * t - 4 * a
    return np.where(t <= 1, near, np.where(t < 2, far, 0.0))


def interpolation_weights(
    x: np.ndarray, in_len: int, scale: float, mode: str, cubic_a: float, antialias: bool, exclude_outside: bool
) -> np.ndarray:
    """``out x in`` weights for linear/cubic interpolation at coordinates ``x`` (edge pixels repeat)."""
    base = np.floor(x)
    ratio = x - base
    exact = ratio == 0  # an exact hit takes the pixel on its left as base, with ratio 1 (as the spec does)
    base = np.where(exact, base - 1, base).astype(np.int64)
    ratio = np.where(exact, 1.0, ratio)
    support = 1.0 if mode == "linear" else 2.0
    s = min(scale, 1.0) if antialias else 1.0
    first = int(math.floor(-support / s) + 1)
    offsets = np.arange(first, 2 - first)  # symmetric window around base + 0.5
    t = (offsets[None, :] - ratio[:, None]) * s
    w = np.clip(1 - np.abs(t), 0, 1) if mode == "linear" else cubic_kernel(t, cubic_a)
    if antialias:
        w = w / w.sum(axis=1, keepdims=True)
    taps = base[:, None] + offsets[None, :]
    if exclude_outside:
        w = np.where((taps < 0) | (taps >= in_len), 0.0, w)
        total = w.sum(axis=1, keepdims=True)
        w = w / np.where(total == 0, 1.0, total)
    weights = np.zeros((x.size, in_len), dtype=np.float64)
    rows = np.broadcast_to(np.arange(x.size)[:, None], taps.shape)
    np.add.at(weights, (rows, np.clip(taps, 0, in_len - 1)), w)
    return weights


def saturate_to(values: np.ndarray, dtype: np.dtype[Any]) -> np.ndarray:
    """Cast interpolated float64 values back to the input dtype (integers round and clamp)."""
    if np.issubdtype(dtype, np.integer):
        info = np.iinfo(dtype)
        return np.clip(np.round(values), info.min, info.max).astype(dtype)
    return values.astype(dtype)


@dataclass(frozen=True)
class AxisSampling:
    """Where the outputs of one resized axis read: source coordinates, then the nearest source index of each
    (``nearest``) or an ``out x in`` weight matrix (``linear``, ``cubic``)."""

    coords: np.ndarray
    nearest: np.ndarray | None = None
    weights: np.ndarray | None = None


def axis_sampling(
    opts: dict[str, Any], in_len: int, out_len: int, scale: float, roi: tuple[float, float] | None
) -> AxisSampling:
    """The sampling of one axis for a Resize node's attributes ``opts`` (shared by the NumPy and compiled paths)."""
    x = source_coords(opts["coordinate_transformation_mode"], out_len, in_len, scale, roi)
    if opts["mode"] == "nearest":
        return AxisSampling(x, nearest=nearest_indices(x, opts["nearest_mode"], in_len, scale))
    if opts["mode"] in ("linear", "cubic"):
        weights = interpolation_weights(
            x,
            in_len,
            scale,
            opts["mode"],
            float(opts["cubic_coeff_a"]),
            bool(opts["antialias"]),
            bool(opts["exclude_outside"]),
        )
        return AxisSampling(x, weights=weights)
    raise ValueError(f"unknown resize mode {opts['mode']!r}")


def tap_count(w: np.ndarray) -> int:
    """The most nonzero weights any output position of ``w`` (out_len, in_len) has."""
    return int((w != 0).sum(axis=1).max()) if w.size else 0


def sparse_taps(w: np.ndarray, taps: int) -> tuple[np.ndarray, np.ndarray]:
    """Per output position, the input indices of its nonzero weights first (padded with zero weights) and those
    weights, each ``(out_len, taps)``."""
    order = np.argsort(w == 0, axis=1, kind="stable")[:, :taps]
    return order, np.take_along_axis(w, order, axis=1)


def _apply_taps(data: np.ndarray, axis: int, w: np.ndarray) -> np.ndarray:
    """``w`` (out_len, in_len) applied along ``axis``: a weighted sum of a few gathered slabs where each output
    reads few inputs (linear: 2, cubic: 4), else one dense product. float32 data is computed in float32 (as
    onnxruntime does), any other dtype in float64."""
    ct = np.float32 if data.dtype == np.float32 else np.float64
    taps = tap_count(w)
    if taps == 0 or 2 * taps >= w.shape[1]:
        moved = np.moveaxis(data, axis, 0).astype(ct)
        return np.moveaxis(np.tensordot(w.astype(ct), moved, axes=1), 0, axis)
    order, weights = sparse_taps(w, taps)
    weights = weights.astype(ct)
    shape = [1] * data.ndim
    shape[axis] = w.shape[0]
    src = data if data.dtype == ct else data.astype(ct)
    out = np.take(src, order[:, 0], axis=axis) * weights[:, 0].reshape(shape)
    for j in range(1, taps):
        out += np.take(src, order[:, j], axis=axis) * weights[:, j].reshape(shape)
    return out


def resize_axis(
    data: np.ndarray, axis: int, out_len: int, scale: float, roi: tuple[float, float] | None, opts: dict[str, Any]
) -> np.ndarray:
    """Resize ``data`` along one axis; linear/cubic results of non-float32 data stay float64 until the final cast."""
    in_len = data.shape[axis]
    sampling = axis_sampling(opts, in_len, out_len, scale, roi)
    if sampling.nearest is not None:
        out = np.take(data, sampling.nearest, axis=axis)
    else:
        assert sampling.weights is not None
        out = _apply_taps(data, axis, sampling.weights)
    if opts["coordinate_transformation_mode"] == "tf_crop_and_resize":
        x = sampling.coords
        outside = (x < 0) | (x > in_len - 1)
        if outside.any():
            mask = outside.reshape((out_len,) + (1,) * (data.ndim - axis - 1))
            out = np.where(mask, np.asarray(opts["extrapolation_value"], dtype=out.dtype), out)
    return out


def resize(
    x: np.ndarray, axes: list[int], scales: list[float], sizes: list[int], roi: list[float] | None, opts: dict[str, Any]
) -> np.ndarray:
    """Resize each of ``axes`` to ``sizes`` using ``scales`` for the coordinate mapping."""
    out: np.ndarray = x
    n = len(axes)
    for i, axis in enumerate(axes):
        axis_roi = None if roi is None else (float(roi[i]), float(roi[n + i]))
        trivial_roi = axis_roi is None or (math.isclose(axis_roi[0], 0.0) and math.isclose(axis_roi[1], 1.0))
        if math.isclose(scales[i], 1.0) and sizes[i] == x.shape[axis] and trivial_roi:
            continue  # nothing to do on this axis
        out = resize_axis(out, axis, sizes[i], scales[i], axis_roi, opts)
    return out if out.dtype == x.dtype else saturate_to(out, x.dtype)


def _float_list(x: Any) -> list[float]:
    return [float(v) for v in np.asarray(x).reshape(-1)]


_RESIZE_DEFAULTS: dict[str, Any] = {
    "mode": "nearest",
    "coordinate_transformation_mode": "half_pixel",
    "nearest_mode": "round_prefer_floor",
    "cubic_coeff_a": -0.75,
    "exclude_outside": 0,
    "extrapolation_value": 0.0,
    "antialias": 0,
    "keep_aspect_ratio_policy": "stretch",
}


@dataclass(frozen=True)
class ResizePlan:
    """What one Resize call does: the resized axes, their scales (for the coordinate mapping) and output sizes."""

    axes: list[int]
    scales: list[float]
    sizes: list[int]
    roi: list[float] | None

    def resized(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        """The output shape for input ``shape``."""
        out = list(shape)
        for axis, size in zip(self.axes, self.sizes, strict=True):
            out[axis] = size
        return tuple(out)


@register
class Resize11(IntoKernel):
    """Resize from opset 11: ``X, roi, scales, sizes`` inputs; opset 18 adds ``axes``, antialias and the
    keep-aspect-ratio policy, opset 19 ``half_pixel_symmetric``. 4-d float32 data resized on its last two axes
    runs on the compiled kernel (``runtime.kernels.resize_native``)."""

    op_type = "Resize"
    creates_size = True
    since_version = 11
    attr_defaults: ClassVar[dict[str, Any]] = _RESIZE_DEFAULTS
    #: The data is NHWC (``NhwcResize``); ``roi``/``scales``/``sizes``/``axes`` still name NCHW axes.
    nhwc: ClassVar[bool] = False

    def plan(
        self,
        shape: tuple[int, ...],
        roi: np.ndarray | None = None,
        scales: np.ndarray | None = None,
        sizes: np.ndarray | None = None,
    ) -> ResizePlan:
        """The axes, scales and output sizes for input ``shape``; raises on inconsistent inputs."""
        rank = len(shape)
        axes_attr = self.attrs.get("axes")
        axes = list(range(rank)) if axes_attr is None else [norm_axis(a, rank) for a in axes_attr]
        in_dims = [shape[a] for a in axes]
        roi_list = None if roi is None or np.size(roi) == 0 else _float_list(roi)
        if sizes is not None and np.size(sizes) > 0:
            out_dims = [int(v) for v in np.asarray(sizes).reshape(-1)]
            ratios = [o / i for o, i in zip(out_dims, in_dims, strict=True)]
            policy = self.attrs["keep_aspect_ratio_policy"]
            if policy != "stretch":
                if policy not in ("not_larger", "not_smaller"):
                    raise ValueError(f"unknown keep_aspect_ratio_policy {policy!r}")
                common = min(ratios) if policy == "not_larger" else max(ratios)
                ratios = [common] * len(axes)
                out_dims = [int(common * i + 0.5) for i in in_dims]  # round half up
            scale_list = ratios
        elif scales is not None and np.size(scales) > 0:
            scale_list = _float_list(scales)
            out_dims = [math.floor(s * i) for s, i in zip(scale_list, in_dims, strict=True)]
        else:
            raise ValueError("Resize needs one of the scales or sizes inputs")
        if len(scale_list) != len(axes):
            raise ValueError(f"Resize got {len(scale_list)} scales/sizes for {len(axes)} axes")
        if self.attrs["antialias"] and self.attrs["mode"] == "nearest":
            raise ValueError("antialias is not supported with mode nearest")
        return ResizePlan(axes, scale_list, out_dims, roi_list)

    def compute_into(self, out: np.ndarray | None, x: np.ndarray, *scaling: np.ndarray | None) -> np.ndarray:
        """``scaling`` is the optional ``roi, scales, sizes`` inputs, which :meth:`plan` reads."""
        from runtime.kernels import resize_native

        p = self.plan(x.shape, *scaling)
        resize_native.check_planned(out, p.resized(x.shape))
        done = resize_native.resize_2d(self, x, p, out, nhwc=False)
        if done is not None:
            return done
        y = resize(x, p.axes, p.scales, p.sizes, p.roi, self.attrs)
        return store_into(out, y)

    def bind(self, out: np.ndarray, x: np.ndarray, *scaling: np.ndarray | None) -> Callable[[], None] | None:
        """A prebound compiled call for fixed buffers (the static plan), or None."""
        from runtime.kernels import resize_native

        if x.ndim != 4:
            return None
        return resize_native.bind_guarded(self, out, x, scaling, nhwc=self.nhwc)


def _resize_legacy(x: np.ndarray, scales: list[float], mode: str) -> np.ndarray:
    """Resize-10 / Upsample: asymmetric coordinates, nearest picks the truncated source index."""
    if mode == "bilinear":
        mode = "linear"
    opts = {**_RESIZE_DEFAULTS, "mode": mode, "coordinate_transformation_mode": "asymmetric", "nearest_mode": "simple"}
    sizes = [math.floor(s * d) for s, d in zip(scales, x.shape, strict=True)]
    return resize(x, list(range(x.ndim)), scales, sizes, None, opts)


class _ScalesInput(Kernel):
    """Resize-10 / Upsample-9: a ``scales`` input, nearest or (bi)linear, asymmetric coordinates."""

    creates_size = True
    attr_defaults: ClassVar[dict[str, Any]] = {"mode": "nearest"}

    def compute(self, x: np.ndarray, scales: np.ndarray) -> np.ndarray:
        return _resize_legacy(x, _float_list(scales), self.attrs["mode"])


Resize10 = define_kernel(_ScalesInput, "Resize", name="Resize10", since_version=10)
Upsample9 = define_kernel(
    _ScalesInput,
    "Upsample",
    doc="Upsample (opset 9; deprecated at 10 in favour of Resize).",
    name="Upsample9",
    since_version=9,
)


@register
class Upsample7(Kernel):
    """Upsample with a ``scales`` attribute (opsets 7-8)."""

    op_type = "Upsample"
    creates_size = True
    since_version = 7
    attr_defaults: ClassVar[dict[str, Any]] = {"mode": "nearest"}

    def compute(self, x: np.ndarray) -> np.ndarray:
        return _resize_legacy(x, [float(s) for s in self.attrs["scales"]], self.attrs["mode"])
