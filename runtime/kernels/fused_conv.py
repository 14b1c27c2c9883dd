"""Kernels of the convolution and NHWC layout ops the graph passes create (domain ``com.appopt``): fused and NHWC
convolutions, the depthwise + pointwise pair, layout conversions, NHWC pools, concat and channel shuffle.

They share the native/NumPy switch and helpers of ``runtime.kernels.fused`` (see its docstring).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np

from runtime import native
from runtime.kernels.base import IntoKernel, Kernel, register, store_into
from runtime.kernels.conv import check_conv_geometry, conv_nd, resolve_pads, spatial_attrs
from runtime.kernels.fused import DOMAIN, _Cache, _finish, epilogue_of
from runtime.kernels.pool import PoolGeometry
from runtime.native import ops


# -- convolutions ------------------------------------------------------------------------------------------------
@register
class FusedConv(Kernel):
    """``act(Conv(X, W, B) + Res)`` in NCHW: the Conv attributes plus ``activation``/``act_lo``/``act_hi``."""

    op_type = "FusedConv"
    uses_blas = True
    domain = DOMAIN
    since_version = 1
    attr_defaults: ClassVar[dict[str, Any]] = {"auto_pad": "NOTSET", "group": 1, "activation": ""}

    def setup(self) -> None:
        self.epilogue = epilogue_of(self.attrs)

    def compute(
        self, x: np.ndarray, w: np.ndarray, b: np.ndarray | None = None, res: np.ndarray | None = None
    ) -> np.ndarray:
        kernel = w.shape[2:]
        strides, dilations = spatial_attrs(self.attrs, kernel)
        pads = resolve_pads(self.attrs["auto_pad"], self.attrs.get("pads"), x.shape[2:], kernel, strides, dilations)
        check_conv_geometry("Conv", self.attrs, x.shape[2:], w.shape, pads, x.shape[0])
        y = conv_nd(x, w, b, pads, strides, dilations, int(self.attrs["group"]))
        return _finish(y, res, self.epilogue)


@register
class NhwcConv(IntoKernel):
    """``act(Conv(X, W, B) + Res)`` with X, Res and the result in NHWC; W stays ONNX ``[M, C/group, KH, KW]``.

    Attributes: explicit ``pads`` ``[top, left, bottom, right]``, ``strides``, ``dilations``, ``group``,
    ``activation``, ``act_lo``, ``act_hi``. Depthwise convolutions (group == channels) get their own kernel.
    """

    op_type = "NhwcConv"
    uses_blas = True
    domain = DOMAIN
    since_version = 1
    attr_defaults: ClassVar[dict[str, Any]] = {"group": 1, "activation": ""}
    #: Tuning decisions (``runtime.tuning``) may set the task size of the compiled kernel.
    chunk: int | None = None

    def setup(self) -> None:
        self.epilogue = epilogue_of(self.attrs)
        self.pads = [int(p) for p in self.attrs.get("pads") or [0, 0, 0, 0]]
        self.strides = [int(s) for s in self.attrs.get("strides") or [1, 1]]
        self.dilations = [int(d) for d in self.attrs.get("dilations") or [1, 1]]
        self.group = int(self.attrs["group"])
        self._packed = _Cache()

    def prepare(self, constants: Sequence[Any], shapes: Sequence[Any]) -> None:
        w = constants[1] if len(constants) > 1 else None
        b = constants[2] if len(constants) > 2 else None
        if w is None or (len(constants) > 2 and b is None and self.node.input_present[2:3] == (True,)):
            return
        lib = native.lib()
        if lib is None or w.dtype != np.float32:
            return
        from runtime import tuning

        self.chunk = tuning.conv_chunk(self, lib, w, b, shapes[0] if shapes else None)
        self._native_conv(lib, w, b)

    def _native_conv(self, lib: native.NativeLib, w: np.ndarray, b: np.ndarray | None) -> ops.NhwcConv2d:
        return self._packed.get(
            (w, b),
            lambda: ops.NhwcConv2d(
                lib, w, b, self.group, self.strides, self.dilations, self.pads, self.epilogue, self.chunk
            ),
        )

    #: Writes a new array (or into ``out``); the residual may share the output's buffer (read before written).
    fresh_output = True
    inplace_inputs = (3,)

    def compute_into(
        self,
        out: np.ndarray | None,
        x: np.ndarray,
        w: np.ndarray,
        b: np.ndarray | None = None,
        res: np.ndarray | None = None,
    ) -> np.ndarray:
        if x.ndim == 4 and w.ndim == 4:
            check_conv_geometry("Conv", self.attrs, x.shape[1:3], w.shape, self.pads, x.shape[0])
        lib = native.lib()
        if lib is not None and x.dtype == np.float32 and w.dtype == np.float32 and x.ndim == 4:
            conv = self._native_conv(lib, w, b)
            if conv.supported:
                return conv(x, res, out=out)
        return store_into(out, self.compute_numpy(x, w, b, res))

    def bind(
        self,
        out: np.ndarray,
        x: np.ndarray,
        w: np.ndarray,
        b: np.ndarray | None = None,
        res: np.ndarray | None = None,
    ) -> ops.Bound | None:
        """A prebound call for fixed input/output buffers (the executor's static plan), or None."""
        lib = native.lib()
        if lib is None or x.dtype != np.float32 or w.dtype != np.float32 or x.ndim != 4:
            return None
        conv = self._native_conv(lib, w, b)
        return conv.bind(x, res, out) if conv.supported else None

    def compute_numpy(
        self, x: np.ndarray, w: np.ndarray, b: np.ndarray | None = None, res: np.ndarray | None = None
    ) -> np.ndarray:
        pt, pl, pb, pr = self.pads
        y = conv_nd(x.transpose(0, 3, 1, 2), w, b, [pt, pl, pb, pr], self.strides, self.dilations, self.group)
        y = _finish(y, None if res is None else res.transpose(0, 3, 1, 2), self.epilogue)
        return np.ascontiguousarray(y.transpose(0, 2, 3, 1))


@register
class NhwcDwPwConv(IntoKernel):
    """A depthwise NhwcConv feeding a 1x1 NhwcConv, in one pass: inputs ``x, W_dw, B_dw, W_pw, B_pw, Res``.

    Attributes ``dw_pads``, ``dw_strides``, ``dw_dilations``, ``dw_activation`` (``dw_act_lo``/``dw_act_hi``) for the
    depthwise part; ``activation`` (``act_lo``/``act_hi``) for the pointwise part.
    """

    op_type = "NhwcDwPwConv"
    domain = DOMAIN
    since_version = 1
    attr_defaults: ClassVar[dict[str, Any]] = {"dw_activation": "", "activation": ""}
    fresh_output = True
    inplace_inputs = (5,)

    def setup(self) -> None:
        a = self.attrs
        self.dw_epilogue = ops.Epilogue(
            str(a["dw_activation"]), float(a.get("dw_act_lo", 0.0)), float(a.get("dw_act_hi", 0.0))
        )
        self.pw_epilogue = epilogue_of(a)
        self.pads = [int(p) for p in a.get("dw_pads") or [0, 0, 0, 0]]
        self.strides = [int(s) for s in a.get("dw_strides") or [1, 1]]
        self.dilations = [int(d) for d in a.get("dw_dilations") or [1, 1]]
        self._fused = _Cache()

    def _native(
        self, lib: native.NativeLib, wd: np.ndarray, bd: np.ndarray | None, wp: np.ndarray, bp: np.ndarray | None
    ) -> ops.NhwcDwPw:
        def build() -> ops.NhwcDwPw:
            dw = ops.NhwcConv2d(lib, wd, bd, wd.shape[0], self.strides, self.dilations, self.pads, self.dw_epilogue)
            pw = ops.NhwcConv2d(lib, wp, bp, 1, (1, 1), (1, 1), (0, 0, 0, 0), self.pw_epilogue)
            return ops.NhwcDwPw(lib, dw, pw)

        fused: ops.NhwcDwPw = self._fused.get((wd, bd, wp, bp), build)
        return fused

    def prepare(self, constants: Sequence[Any], shapes: Sequence[Any]) -> None:
        lib = native.lib()
        wd = constants[1] if len(constants) > 1 else None
        wp = constants[3] if len(constants) > 3 else None
        if lib is None or wd is None or wp is None:
            return
        bd = constants[2] if len(constants) > 2 else None
        bp = constants[4] if len(constants) > 4 else None
        self._native(lib, wd, bd, wp, bp)

    def _usable(self, x: np.ndarray, wd: np.ndarray, wp: np.ndarray) -> native.NativeLib | None:
        lib = native.lib()
        if lib is None or x.dtype != np.float32 or x.ndim != 4 or wd.dtype != np.float32 or wp.dtype != np.float32:
            return None
        return lib

    def compute_into(
        self,
        out: np.ndarray | None,
        x: np.ndarray,
        wd: np.ndarray,
        bd: np.ndarray | None,
        wp: np.ndarray,
        bp: np.ndarray | None = None,
        res: np.ndarray | None = None,
    ) -> np.ndarray:
        lib = self._usable(x, wd, wp)
        if lib is not None:
            fused = self._native(lib, wd, bd, wp, bp)
            if fused.supported:
                return fused(x, res, out)
        return store_into(out, self.compute_numpy(x, wd, bd, wp, bp, res))

    def bind(
        self,
        out: np.ndarray,
        x: np.ndarray,
        wd: np.ndarray,
        bd: np.ndarray | None,
        wp: np.ndarray,
        bp: np.ndarray | None = None,
        res: np.ndarray | None = None,
    ) -> ops.Bound | None:
        lib = self._usable(x, wd, wp)
        if lib is None:
            return None
        fused = self._native(lib, wd, bd, wp, bp)
        return fused.bind(x, res, out) if fused.supported else None

    def compute_numpy(
        self,
        x: np.ndarray,
        wd: np.ndarray,
        bd: np.ndarray | None,
        wp: np.ndarray,
        bp: np.ndarray | None = None,
        res: np.ndarray | None = None,
    ) -> np.ndarray:
        pt, pl, pb, pr = self.pads
        xn = x.transpose(0, 3, 1, 2)
        mid = _finish(
            conv_nd(xn, wd, bd, [pt, pl, pb, pr], self.strides, self.dilations, wd.shape[0]), None, self.dw_epilogue
        )
        y = conv_nd(mid, wp, bp, [0, 0, 0, 0], [1, 1], [1, 1], 1)
        y = _finish(y, None if res is None else res.transpose(0, 3, 1, 2), self.pw_epilogue)
        return np.ascontiguousarray(y.transpose(0, 2, 3, 1))


class _LayoutCopy(Kernel):
    """A contiguous copy between NCHW and NHWC: the transpose of the last two axes of a 3-D view ``(N, rows, cols)``,
    which the compiled kernel does for float32; a reshape when ``rows`` or ``cols`` is 1."""

    domain = DOMAIN
    since_version = 1
    #: The NumPy transpose from input to output.
    axes: ClassVar[tuple[int, int, int, int]]
    #: The input's channels come first (NCHW): the view is ``(N, C, H*W)``, else ``(N, H*W, C)``.
    channels_first: ClassVar[bool]

    def _view(self, x: np.ndarray) -> tuple[int, int, int]:
        n, a, b, d = x.shape
        return (n, a, b * d) if self.channels_first else (n, a * b, d)

    def compute(self, x: np.ndarray) -> np.ndarray:
        n, rows, cols = self._view(x)
        out_shape = tuple(x.shape[i] for i in self.axes)
        if rows == 1 or cols == 1:
            return np.ascontiguousarray(x).reshape(out_shape)
        lib = native.lib()
        if lib is not None and x.dtype == np.float32:
            return ops.transpose_last2(lib, x.reshape(n, rows, cols)).reshape(out_shape)
        return np.ascontiguousarray(x.transpose(self.axes))

    def compute_into(self, out: np.ndarray, x: np.ndarray) -> np.ndarray:
        n, rows, cols = self._view(x)
        lib = native.lib()
        if lib is not None and x.dtype == np.float32 and rows > 1 and cols > 1:
            view = np.ascontiguousarray(x).reshape(n, rows, cols)
            ops.transpose_last2(lib, view, out=out.reshape(n, cols, rows))
        else:
            np.copyto(out, x.transpose(self.axes))
        return out

    def bind(self, out: np.ndarray, x: np.ndarray) -> ops.Bound | None:
        lib = native.lib()
        n, rows, cols = self._view(x)
        if lib is None or rows == 1 or cols == 1 or out.shape != tuple(x.shape[i] for i in self.axes):
            return None
        return ops.bind_rows(lib, "transpose", x, out, (n, rows, cols))


@register
class ToNhwc(_LayoutCopy):
    """``[N, C, H, W] -> [N, H, W, C]`` (a contiguous copy; a reshape when C or H*W is 1)."""

    op_type = "ToNhwc"
    axes = (0, 2, 3, 1)
    channels_first = True


@register
class ToNchw(_LayoutCopy):
    """``[N, H, W, C] -> [N, C, H, W]`` (a contiguous copy; a reshape when C or H*W is 1)."""

    op_type = "ToNchw"
    axes = (0, 3, 1, 2)
    channels_first = False


class _NhwcPool(IntoKernel):
    """Windowed pooling over NHWC; the attributes are ONNX's (explicit pads, no auto_pad)."""

    domain = DOMAIN
    since_version = 1
    attr_defaults: ClassVar[dict[str, Any]] = {"ceil_mode": 0, "count_include_pad": 0}
    mode = 0
    fresh_output = True

    def compute_into(self, out: np.ndarray | None, x: np.ndarray) -> np.ndarray:
        geo = PoolGeometry(self.attrs, x.shape[1:3], x.shape[0] * x.shape[3])
        lib = native.lib()
        if lib is not None and x.dtype == np.float32 and geo.nd == 2:
            return ops.pool(lib, x, geo.window(self.pool_mode()), out)
        y = np.ascontiguousarray(self.compute_numpy(x.transpose(0, 3, 1, 2)).transpose(0, 2, 3, 1))
        return store_into(out, y)

    def bind(self, out: np.ndarray, x: np.ndarray) -> ops.Bound | None:
        lib = native.lib()
        if lib is None or x.ndim != 4:
            return None
        geo = PoolGeometry(self.attrs, x.shape[1:3], x.shape[0] * x.shape[3])
        if geo.nd != 2:
            return None
        return ops.bind_pool(lib, x, geo.window(self.pool_mode()), out)

    def pool_mode(self) -> int:
        return self.mode

    def compute_numpy(self, x_nchw: np.ndarray) -> np.ndarray:
        raise NotImplementedError


@register
class NhwcMaxPool(_NhwcPool):
    op_type = "NhwcMaxPool"

    def compute_numpy(self, x_nchw: np.ndarray) -> np.ndarray:
        geo = PoolGeometry(self.attrs, x_nchw.shape[2:], x_nchw.shape[0] * x_nchw.shape[1])
        return geo.windows(x_nchw, -np.inf).max(axis=(4, 5))


@register
class NhwcAveragePool(_NhwcPool):
    op_type = "NhwcAveragePool"

    def pool_mode(self) -> int:
        return 2 if self.attrs["count_include_pad"] else 1

    def compute_numpy(self, x_nchw: np.ndarray) -> np.ndarray:
        geo = PoolGeometry(self.attrs, x_nchw.shape[2:], x_nchw.shape[0] * x_nchw.shape[1])
        sums = geo.windows(x_nchw, 0).sum(axis=(4, 5))
        counts = geo.counts(bool(self.attrs["count_include_pad"]))
        return (sums / np.maximum(counts, 1).astype(x_nchw.dtype)).astype(x_nchw.dtype, copy=False)


@register
class NhwcGlobalAveragePool(IntoKernel):
    """``[N, H, W, C] -> [N, 1, 1, C]``."""

    op_type = "NhwcGlobalAveragePool"
    domain = DOMAIN
    since_version = 1
    fresh_output = True

    def compute_into(self, out: np.ndarray | None, x: np.ndarray) -> np.ndarray:
        lib = native.lib()
        if lib is not None and x.dtype == np.float32:
            return ops.global_average_pool_nhwc(lib, x, out)
        return store_into(out, x.mean(axis=(1, 2), keepdims=True).astype(x.dtype, copy=False))

    def bind(self, out: np.ndarray, x: np.ndarray) -> ops.Bound | None:
        lib = native.lib()
        return None if lib is None else ops.bind_rows(lib, "gap", x, out)


@register
class NhwcGlobalMaxPool(IntoKernel):
    """``[N, H, W, C] -> [N, 1, 1, C]``: the NHWC max pool whose window is the whole plane (its size read off the
    input, so a length known only at run time binds too)."""

    op_type = "NhwcGlobalMaxPool"
    domain = DOMAIN
    since_version = 1
    fresh_output = True

    @staticmethod
    def _window(x: np.ndarray) -> ops.PoolWindow | None:
        if x.ndim != 4 or x.shape[1] * x.shape[2] == 0:
            return None
        return ops.PoolWindow((x.shape[1], x.shape[2]), (1, 1), (1, 1), (0, 0, 0, 0), (1, 1), 0)

    def compute_into(self, out: np.ndarray | None, x: np.ndarray) -> np.ndarray:
        lib, window = native.lib(), self._window(x)
        if lib is not None and window is not None and x.dtype == np.float32:
            return ops.pool(lib, x, window, out)
        return store_into(out, x.max(axis=(1, 2), keepdims=True))

    def bind(self, out: np.ndarray, x: np.ndarray) -> ops.Bound | None:
        lib, window = native.lib(), self._window(x)
        return None if lib is None or window is None else ops.bind_pool(lib, x, window, out)


@register
class NhwcConcat(Kernel):
    """Concat along the channel (last) axis of NHWC tensors, written into its planned buffer when it has one."""

    op_type = "NhwcConcat"
    domain = DOMAIN
    since_version = 1
    fresh_output = True
    #: Its inputs lie side by side along the last axis: the static plan may let their producers write there.
    concat_last_axis = True

    def compute(self, *xs: np.ndarray) -> np.ndarray:
        return np.concatenate(xs, axis=-1)

    def compute_into(self, out: np.ndarray, *xs: np.ndarray) -> np.ndarray:
        return np.concatenate(xs, axis=-1, out=out)

    def bind(self, out: np.ndarray, *xs: np.ndarray) -> ops.Bound | None:
        if any(x.dtype != out.dtype for x in xs):
            return None
        lib = native.lib()
        if lib is not None:  # rows of every part side by side, on the pool (runtime/native/upsample.c)
            from runtime.native.upsample import bind_concat_last

            compiled = bind_concat_last(lib, xs, out)
            if compiled is not None:
                return compiled
        parts = tuple(xs)

        def call() -> None:
            np.concatenate(parts, axis=-1, out=out)

        return call


@register
class ChannelShuffle(IntoKernel):
    """ShuffleNet's channel shuffle along the last axis: ``y[..., j * g + i] = x[..., i * cg + j]``."""

    op_type = "ChannelShuffle"
    domain = DOMAIN
    since_version = 1
    attr_defaults: ClassVar[dict[str, Any]] = {"groups": 1}
    fresh_output = True

    def setup(self) -> None:
        self.groups = int(self.attrs["groups"])

    def compute_into(self, out: np.ndarray | None, x: np.ndarray) -> np.ndarray:
        lib = native.lib()
        if lib is not None and x.dtype == np.float32 and x.shape[-1] % self.groups == 0:
            return ops.channel_shuffle(lib, x, self.groups, out)
        c = x.shape[-1]
        y = x.reshape(*x.shape[:-1], self.groups, c // self.groups).swapaxes(-1, -2).reshape(x.shape)
        return store_into(out, np.ascontiguousarray(y))

    def bind(self, out: np.ndarray, x: np.ndarray) -> ops.Bound | None:
        lib = native.lib()
        return None if lib is None else ops.bind_channel_shuffle(lib, x, self.groups, out)
