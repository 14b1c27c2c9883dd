"""Resize of the two spatial axes on the compiled kernel (``ap_resize2d``) in NCHW or NHWC, and the NHWC Resize
that the layout pass creates (``NhwcResize``).

The per-axis tap tables come from the NumPy path's own coordinate and weight functions (``runtime.kernels.resize``),
built once per input shape: nearest is one tap of weight 1 (a copy), linear two taps, cubic four, antialiasing as
many as the widened kernel needs. The kernel interpolates rows, then columns, in float32, as the NumPy path does.
``tf_crop_and_resize``, other resized axes and other dtypes take the NumPy path.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from typing import Any, ClassVar

import numpy as np

from runtime import native
from runtime.kernels.base import register, store_into
from runtime.kernels.fused import DOMAIN
from runtime.kernels.resize import Resize11, ResizePlan, axis_sampling, resize, sparse_taps, tap_count
from runtime.native.upsample import ResizeTaps, bind_resize

#: Tap tables kept per kernel (input shapes x output sizes); more means shapes change every run.
MAX_TABLES = 8


def axis_taps(opts: dict[str, Any], in_len: int, out_len: int, scale: float) -> tuple[np.ndarray, np.ndarray]:
    """Source indices and weights, each ``(out_len, taps)``, of one resized axis (not ``tf_crop_and_resize``)."""
    if out_len == in_len and math.isclose(scale, 1.0):  # resize() leaves such an axis alone
        return np.arange(out_len)[:, None], np.ones((out_len, 1))
    sampling = axis_sampling(opts, in_len, out_len, scale, None)
    if sampling.nearest is not None:
        return sampling.nearest[:, None], np.ones((out_len, 1))
    assert sampling.weights is not None
    return sparse_taps(sampling.weights, max(1, tap_count(sampling.weights)))


def _spatial_sizes(p: ResizePlan, nchw: tuple[int, ...]) -> tuple[list[int], list[float]] | None:
    """Output (H, W) and their scales when only the spatial axes of an NCHW shape change, else None."""
    sizes, scales = [nchw[2], nchw[3]], [1.0, 1.0]
    for axis, size, scale in zip(p.axes, p.sizes, p.scales, strict=True):
        if axis >= 2:
            sizes[axis - 2], scales[axis - 2] = size, scale
        elif size != nchw[axis] or not math.isclose(scale, 1.0):
            return None
    return sizes, scales


_lock = threading.Lock()


def _taps(kernel: Resize11, in_hw: tuple[int, int], out_hw: list[int], scales: list[float]) -> ResizeTaps:
    key = (in_hw, tuple(out_hw), tuple(scales))
    tables: dict[Any, ResizeTaps] = kernel.__dict__.setdefault("_native_taps", {})
    found = tables.get(key)
    if found is None:
        opts = kernel.attrs
        found = ResizeTaps.build(
            axis_taps(opts, in_hw[0], out_hw[0], scales[0]),
            axis_taps(opts, in_hw[1], out_hw[1], scales[1]),
            opts["mode"] == "nearest",
        )
        with _lock:
            if len(tables) >= MAX_TABLES:
                tables.clear()
            tables[key] = found
    return found


def bind_2d(
    kernel: Resize11, out: np.ndarray | None, x: np.ndarray, p: ResizePlan, nhwc: bool
) -> Callable[[], None] | None:
    """The compiled Resize of ``x`` into ``out`` as a prebound call, or None where it does not apply."""
    lib = native.lib()
    attrs = kernel.attrs
    if lib is None or out is None or x.dtype != np.float32 or x.ndim != 4:
        return None
    if attrs["coordinate_transformation_mode"] == "tf_crop_and_resize" or attrs["mode"] not in (
        "nearest",
        "linear",
        "cubic",
    ):
        return None
    nchw = (x.shape[0], x.shape[3], x.shape[1], x.shape[2]) if nhwc else x.shape
    spatial = _spatial_sizes(p, nchw)
    if spatial is None:
        return None
    out_hw, scales = spatial
    if min(out_hw) <= 0 or min(nchw) <= 0:
        return None
    taps = _taps(kernel, (nchw[2], nchw[3]), out_hw, scales)
    return bind_resize(lib, x, out, taps, nhwc)


def check_planned(out: np.ndarray | None, shape: tuple[int, ...]) -> None:
    """A planned buffer of another shape means the scales or sizes changed value since the run the memory plan was
    recorded from: that run of the plan starts again unplanned (``static_plan._Replan``)."""
    if out is not None and out.shape != shape:
        from runtime.static_plan import _Replan

        raise _Replan


def bind_guarded(
    kernel: Resize11, out: np.ndarray, x: np.ndarray, params: tuple[np.ndarray | None, ...], nhwc: bool
) -> Callable[[], None] | None:
    """``bind_2d`` for the static plan, whose fixed ``roi``/``scales``/``sizes`` buffers could still change value
    between runs (computed from a graph input's values): the call compares them with the values it was built for
    and, should they differ, computes the step afresh (into ``out``, which fails loudly if the size changed)."""
    n, h, w, c = x.shape if nhwc else (x.shape[0], x.shape[2], x.shape[3], x.shape[1])
    call = bind_2d(kernel, out, x, kernel.plan((n, c, h, w), *params), nhwc)
    if call is None:
        return None
    present = [a for a in params if a is not None]
    snapshot = [a.tobytes() for a in present]

    def guarded() -> None:
        for a, was in zip(present, snapshot, strict=True):
            if a.tobytes() != was:
                kernel.compute_into(out, x, *params)
                return
        call()

    return guarded


def resize_2d(kernel: Resize11, x: np.ndarray, p: ResizePlan, out: np.ndarray | None, nhwc: bool) -> np.ndarray | None:
    """``x`` resized on the compiled kernel (into ``out`` when given), or None where it does not apply."""
    if native.lib() is None or x.dtype != np.float32 or x.ndim != 4:
        return None
    nchw = (x.shape[0], x.shape[3], x.shape[1], x.shape[2]) if nhwc else x.shape
    spatial = _spatial_sizes(p, nchw)
    if spatial is None:
        return None
    oh, ow = spatial[0]
    shape = (nchw[0], oh, ow, nchw[1]) if nhwc else (nchw[0], nchw[1], oh, ow)
    target = out if out is not None and out.shape == shape else np.empty(shape, dtype=np.float32)
    call = bind_2d(kernel, target, np.ascontiguousarray(x), p, nhwc)
    if call is None:
        return None
    call()
    if out is not None and target is not out:
        np.copyto(out, target)
        return out
    return target


@register
class NhwcResize(Resize11):
    """Resize of an NHWC tensor: the inputs and attributes of ONNX's Resize, whose ``scales``/``sizes``/``roi``/
    ``axes`` keep referring to the NCHW axes (the layout pass moves a Resize into NHWC unchanged)."""

    op_type = "NhwcResize"
    domain = DOMAIN
    since_version = 1
    #: May write its output as a channel slice of a concat's (the static plan's concat by placement).
    channel_slice_output = True
    attr_defaults: ClassVar[dict[str, Any]] = Resize11.attr_defaults
    nhwc = True

    def compute_into(self, out: np.ndarray | None, x: np.ndarray, *scaling: np.ndarray | None) -> np.ndarray:
        """``scaling`` is Resize's ``roi, scales, sizes``, read by :meth:`Resize11.plan` in NCHW terms."""
        if x.ndim != 4:
            raise ValueError(f"NhwcResize takes a 4-d tensor, got shape {x.shape}")
        n, h, w, c = x.shape
        p = self.plan((n, c, h, w), *scaling)
        nchw = p.resized((n, c, h, w))
        check_planned(out, (nchw[0], nchw[2], nchw[3], nchw[1]))
        done = resize_2d(self, x, p, out, nhwc=True)
        if done is not None:
            return done
        y = resize(x.transpose(0, 3, 1, 2), p.axes, p.scales, p.sizes, p.roi, self.attrs)
        return store_into(out, np.ascontiguousarray(y.transpose(0, 2, 3, 1)))
