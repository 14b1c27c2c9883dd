"""Kernels of the ops the graph passes create (domain ``com.appopt``): fused convolutions and products, NHWC
layout ops, GELU and elementwise chains.

Each op runs on the compiled kernels (``runtime.native``) when they are available and the tensors are float32,
and on NumPy otherwise, so a compiled model stays runnable on a machine without a C compiler. The NumPy paths
repeat the unfused ops' arithmetic step by step, so with the compiled kernels off a fused graph gives the same
bits as the original one.

Kernels that can use constant inputs (weights) define ``prepare(constants, shapes)``; the executor calls it once
at compile time with the initializers, so packing and algorithm choice happen before the first run. Without it
the first call packs (and later calls reuse the packing while the weight array is the same object).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import numpy as np

from runtime import native
from runtime.kernels.activations import sigmoid
from runtime.kernels.base import Kernel, register
from runtime.kernels.conv import check_conv_geometry, conv_nd, resolve_pads, spatial_attrs
from runtime.kernels.elementwise import erf
from runtime.kernels.pool import PoolGeometry
from runtime.native import ops

DOMAIN = "com.appopt"


class _Cache:
    """One object derived from constant inputs, rebuilt only when those inputs are other array objects."""

    def __init__(self) -> None:
        self.key: tuple[int, ...] | None = None
        self.sources: tuple[Any, ...] = ()
        self.value: Any = None
        self.lock = threading.Lock()

    def get(self, sources: tuple[Any, ...], build: Callable[[], Any]) -> Any:
        key = tuple(id(s) for s in sources)
        if key == self.key and all(a is b for a, b in zip(sources, self.sources, strict=True)):
            return self.value
        with self.lock:
            value = build()
            self.key, self.sources, self.value = key, sources, value
        return value


def epilogue_of(attrs: dict[str, Any]) -> ops.Epilogue:
    """The fused activation and scale of a fused node."""
    return ops.Epilogue(
        str(attrs.get("activation", "")),
        float(attrs.get("act_lo", 0.0)),
        float(attrs.get("act_hi", 0.0)),
        float(attrs.get("alpha", 1.0)),
    )


def _store(out: np.ndarray | None, y: np.ndarray) -> np.ndarray:
    """``y`` itself, or copied into the planned buffer ``out``."""
    if out is None:
        return y
    np.copyto(out, y)
    return out


def _finish(y: np.ndarray, res: np.ndarray | None, epilogue: ops.Epilogue) -> np.ndarray:
    """Residual then activation on a freshly computed ``y`` (NumPy path), in the unfused order."""
    if res is not None:
        y = y + res.astype(y.dtype, copy=False)
    if epilogue.activation == "Relu":
        return np.maximum(y, y.dtype.type(0))
    if epilogue.activation == "Clip":
        return np.minimum(np.maximum(y, y.dtype.type(epilogue.lo)), y.dtype.type(epilogue.hi))
    if epilogue.activation == "LeakyRelu":
        return np.where(y < 0, y * y.dtype.type(epilogue.lo), y)
    return y


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
class NhwcConv(Kernel):
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

    def compute(
        self, x: np.ndarray, w: np.ndarray, b: np.ndarray | None = None, res: np.ndarray | None = None
    ) -> np.ndarray:
        return self.compute_into(None, x, w, b, res)

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
        return _store(out, self.compute_numpy(x, w, b, res))

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
class NhwcDwPwConv(Kernel):
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

    def compute(
        self,
        x: np.ndarray,
        wd: np.ndarray,
        bd: np.ndarray | None,
        wp: np.ndarray,
        bp: np.ndarray | None = None,
        res: np.ndarray | None = None,
    ) -> np.ndarray:
        return self.compute_into(None, x, wd, bd, wp, bp, res)

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
        return _store(out, self.compute_numpy(x, wd, bd, wp, bp, res))

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


@register
class ToNhwc(Kernel):
    """``[N, C, H, W] -> [N, H, W, C]`` (a contiguous copy)."""

    op_type = "ToNhwc"
    domain = DOMAIN
    since_version = 1

    def compute(self, x: np.ndarray) -> np.ndarray:
        n, c, h, w = x.shape
        lib = native.lib()
        if c == 1 or h * w == 1:
            return np.ascontiguousarray(x).reshape(n, h, w, c)
        if lib is not None and x.dtype == np.float32:
            return ops.transpose_last2(lib, x.reshape(n, c, h * w)).reshape(n, h, w, c)
        return np.ascontiguousarray(x.transpose(0, 2, 3, 1))

    def compute_into(self, out: np.ndarray, x: np.ndarray) -> np.ndarray:
        n, c, h, w = x.shape
        lib = native.lib()
        if lib is not None and x.dtype == np.float32 and c > 1 and h * w > 1:
            ops.transpose_last2(lib, np.ascontiguousarray(x).reshape(n, c, h * w), out=out.reshape(n, h * w, c))
        else:
            np.copyto(out, x.transpose(0, 2, 3, 1))
        return out

    def bind(self, out: np.ndarray, x: np.ndarray) -> ops.Bound | None:
        lib = native.lib()
        n, c, h, w = x.shape
        if lib is None or c == 1 or h * w == 1 or out.shape != (n, h, w, c):
            return None
        return ops.bind_rows(lib, "transpose", x, out, (n, c, h * w))


@register
class ToNchw(Kernel):
    """``[N, H, W, C] -> [N, C, H, W]`` (a contiguous copy; a reshape when H*W == 1)."""

    op_type = "ToNchw"
    domain = DOMAIN
    since_version = 1

    def compute(self, x: np.ndarray) -> np.ndarray:
        n, h, w, c = x.shape
        if c == 1 or h * w == 1:
            return np.ascontiguousarray(x).reshape(n, c, h, w)
        lib = native.lib()
        if lib is not None and x.dtype == np.float32:
            return ops.transpose_last2(lib, x.reshape(n, h * w, c)).reshape(n, c, h, w)
        return np.ascontiguousarray(x.transpose(0, 3, 1, 2))

    def compute_into(self, out: np.ndarray, x: np.ndarray) -> np.ndarray:
        n, h, w, c = x.shape
        lib = native.lib()
        if lib is not None and x.dtype == np.float32 and c > 1 and h * w > 1:
            ops.transpose_last2(lib, np.ascontiguousarray(x).reshape(n, h * w, c), out=out.reshape(n, c, h * w))
        else:
            np.copyto(out, x.transpose(0, 3, 1, 2))
        return out

    def bind(self, out: np.ndarray, x: np.ndarray) -> ops.Bound | None:
        lib = native.lib()
        n, h, w, c = x.shape
        if lib is None or c == 1 or h * w == 1 or out.shape != (n, c, h, w):
            return None
        return ops.bind_rows(lib, "transpose", x, out, (n, h * w, c))


class _NhwcPool(Kernel):
    """Windowed pooling over NHWC; the attributes are ONNX's (explicit pads, no auto_pad)."""

    domain = DOMAIN
    since_version = 1
    attr_defaults: ClassVar[dict[str, Any]] = {"ceil_mode": 0, "count_include_pad": 0}
    mode = 0
    fresh_output = True

    def compute(self, x: np.ndarray) -> np.ndarray:
        return self.compute_into(None, x)

    def compute_into(self, out: np.ndarray | None, x: np.ndarray) -> np.ndarray:
        geo = PoolGeometry(self.attrs, x.shape[1:3], x.shape[0] * x.shape[3])
        lib = native.lib()
        if lib is not None and x.dtype == np.float32 and geo.nd == 2:
            return ops.pool(lib, x, geo.window(self.pool_mode()), out)
        y = np.ascontiguousarray(self.compute_numpy(x.transpose(0, 3, 1, 2)).transpose(0, 2, 3, 1))
        return _store(out, y)

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
class NhwcGlobalAveragePool(Kernel):
    """``[N, H, W, C] -> [N, 1, 1, C]``."""

    op_type = "NhwcGlobalAveragePool"
    domain = DOMAIN
    since_version = 1
    fresh_output = True

    def compute(self, x: np.ndarray) -> np.ndarray:
        return self.compute_into(None, x)

    def compute_into(self, out: np.ndarray | None, x: np.ndarray) -> np.ndarray:
        lib = native.lib()
        if lib is not None and x.dtype == np.float32:
            return ops.global_average_pool_nhwc(lib, x, out)
        return _store(out, x.mean(axis=(1, 2), keepdims=True).astype(x.dtype, copy=False))

    def bind(self, out: np.ndarray, x: np.ndarray) -> ops.Bound | None:
        lib = native.lib()
        return None if lib is None else ops.bind_rows(lib, "gap", x, out)


@register
class NhwcConcat(Kernel):
    """Concat along the channel (last) axis of NHWC tensors, written into its planned buffer when it has one."""

    op_type = "NhwcConcat"
    domain = DOMAIN
    since_version = 1
    fresh_output = True

    def compute(self, *xs: np.ndarray) -> np.ndarray:
        return np.concatenate(xs, axis=-1)

    def compute_into(self, out: np.ndarray, *xs: np.ndarray) -> np.ndarray:
        return np.concatenate(xs, axis=-1, out=out)

    def bind(self, out: np.ndarray, *xs: np.ndarray) -> ops.Bound | None:
        if any(x.dtype != out.dtype for x in xs):
            return None
        parts = tuple(xs)

        def call() -> None:
            np.concatenate(parts, axis=-1, out=out)

        return call


@register
class ChannelShuffle(Kernel):
    """ShuffleNet's channel shuffle along the last axis: ``y[..., j * g + i] = x[..., i * cg + j]``."""

    op_type = "ChannelShuffle"
    domain = DOMAIN
    since_version = 1
    attr_defaults: ClassVar[dict[str, Any]] = {"groups": 1}
    fresh_output = True

    def setup(self) -> None:
        self.groups = int(self.attrs["groups"])

    def compute(self, x: np.ndarray) -> np.ndarray:
        return self.compute_into(None, x)

    def compute_into(self, out: np.ndarray | None, x: np.ndarray) -> np.ndarray:
        lib = native.lib()
        if lib is not None and x.dtype == np.float32 and x.shape[-1] % self.groups == 0:
            return ops.channel_shuffle(lib, x, self.groups, out)
        c = x.shape[-1]
        y = x.reshape(*x.shape[:-1], self.groups, c // self.groups).swapaxes(-1, -2).reshape(x.shape)
        return _store(out, np.ascontiguousarray(y))

    def bind(self, out: np.ndarray, x: np.ndarray) -> ops.Bound | None:
        lib = native.lib()
        return None if lib is None else ops.bind_channel_shuffle(lib, x, self.groups, out)


# -- products ----------------------------------------------------------------------------------------------------
@register
class FusedMatMul(Kernel):
    """``act(alpha * op(A) @ op(B) + Bias + Res)``: MatMul (NumPy broadcasting) with ``transA``/``transB``
    (swap the last two axes), ``alpha``, an optional bias along the last axis and an optional residual.

    A ``div`` attribute means the scale came from a division: the NumPy path divides by it (as the unfused graph
    did), the compiled kernel multiplies by ``alpha = 1 / div``."""

    op_type = "FusedMatMul"
    uses_blas = True
    domain = DOMAIN
    since_version = 1
    attr_defaults: ClassVar[dict[str, Any]] = {"transA": 0, "transB": 0, "alpha": 1.0, "activation": ""}
    #: "packed" (compiled kernel, constant B), "dynamic" (compiled, B packed per call) or "blas" (NumPy).
    algorithm: str | None = None

    def setup(self) -> None:
        self.epilogue = epilogue_of(self.attrs)
        self.trans_a = bool(self.attrs["transA"])
        self.trans_b = bool(self.attrs["transB"])
        self.alpha = float(self.attrs["alpha"])
        self._packed = _Cache()

    def prepare(self, constants: Sequence[Any], shapes: Sequence[Any]) -> None:
        lib = native.lib()
        b = constants[1] if len(constants) > 1 else None
        bias = constants[2] if len(constants) > 2 else None
        if lib is None:
            return
        if b is not None and b.ndim == 2 and b.dtype == np.float32 and (bias is not None or not self._has(2)):
            from runtime import tuning

            self.algorithm = tuning.matmul_algorithm(self, lib, b, bias, shapes[0] if shapes else None)

    def _has(self, index: int) -> bool:
        present = self.node.input_present
        return len(present) > index and present[index]

    def _packed_matmul(self, lib: native.NativeLib, b: np.ndarray, bias: np.ndarray | None) -> ops.PackedMatMul:
        def build() -> ops.PackedMatMul:
            bm = b.T if self.trans_b else b
            return ops.PackedMatMul(lib, bm, bias, self.epilogue)

        return self._packed.get((b, bias), build)

    fresh_output = True
    inplace_inputs = (3,)

    def compute(
        self, a: np.ndarray, b: np.ndarray, bias: np.ndarray | None = None, res: np.ndarray | None = None
    ) -> np.ndarray:
        return self.compute_into(None, a, b, bias, res)

    def compute_into(
        self,
        out: np.ndarray | None,
        a: np.ndarray,
        b: np.ndarray,
        bias: np.ndarray | None = None,
        res: np.ndarray | None = None,
    ) -> np.ndarray:
        lib = native.lib()
        if (
            lib is not None
            and self.algorithm != "blas"
            and a.dtype == np.float32
            and b.dtype == np.float32
            and a.ndim >= 2
            and b.ndim >= 2
            and (bias is None or (bias.dtype == np.float32 and bias.size == b.shape[-2 if self.trans_b else -1]))
        ):
            y = self._compute_native(lib, a, b, bias, res, out)
            if y is not None:
                return y
        return _store(out, self.compute_numpy(a, b, bias, res))

    def _compute_native(
        self,
        lib: native.NativeLib,
        a: np.ndarray,
        b: np.ndarray,
        bias: np.ndarray | None,
        res: np.ndarray | None,
        out: np.ndarray | None,
    ) -> np.ndarray | None:
        if self.trans_a:
            a = np.swapaxes(a, -1, -2)
        if self.algorithm == "packed" and b.ndim == 2:
            return self._packed_matmul(lib, b, bias)(a, res, out)
        bm = np.swapaxes(b, -1, -2) if self.trans_b else b
        return ops.DynamicMatMul(lib, bias, self.epilogue)(a, bm, res, out)

    def bind(
        self,
        out: np.ndarray,
        a: np.ndarray,
        b: np.ndarray,
        bias: np.ndarray | None = None,
        res: np.ndarray | None = None,
    ) -> ops.Bound | None:
        lib = native.lib()
        if lib is None or self.algorithm == "blas" or self.trans_a or a.dtype != np.float32 or b.dtype != np.float32:
            return None
        if a.ndim < 2 or b.ndim < 2 or (bias is not None and bias.dtype != np.float32):
            return None
        if self.algorithm == "packed" and b.ndim == 2:
            return self._packed_matmul(lib, b, bias).bind(a, res, out)
        bm = np.swapaxes(b, -1, -2) if self.trans_b else b
        return ops.DynamicMatMul(lib, bias, self.epilogue).bind(a, bm, res, out)

    def compute_numpy(
        self, a: np.ndarray, b: np.ndarray, bias: np.ndarray | None = None, res: np.ndarray | None = None
    ) -> np.ndarray:
        if self.trans_a:
            a = np.swapaxes(a, -1, -2)
        if self.trans_b:
            b = np.swapaxes(b, -1, -2)
        wide = a.dtype.kind == "f" and a.dtype.itemsize < 4
        y = np.asarray(np.matmul(a.astype(np.float32) if wide else a, b.astype(np.float32) if wide else b))
        if "div" in self.attrs:
            y = y / y.dtype.type(self.attrs["div"])
        elif self.alpha != 1.0:
            y = y * y.dtype.type(self.alpha)
        if bias is not None:
            y = y + bias.astype(y.dtype, copy=False)
        return _finish(y, res, self.epilogue).astype(a.dtype, copy=False)


# -- elementwise -------------------------------------------------------------------------------------------------
@register
class Gelu(Kernel):
    """GELU with erf, recognised from ``x * 0.5 * (1 + erf(x / sqrt 2))``. The NumPy path repeats the pattern's
    own steps (``form`` 0: ``(x*half) * (erf(x/div) + 1)``, 1: ``(x * (erf(x/div) + 1)) * half``)."""

    op_type = "Gelu"
    amp_class = "fp32"
    domain = DOMAIN
    since_version = 1
    attr_defaults: ClassVar[dict[str, Any]] = {"form": 0, "half": 0.5, "div": 1.4142135381698608, "div_op": "Div"}
    fresh_output = True
    inplace_inputs = (0,)

    def compute_into(self, out: np.ndarray, x: np.ndarray) -> np.ndarray:
        lib = native.lib()
        if lib is not None and x.dtype == np.float32 and x.flags.c_contiguous:
            return ops.gelu(lib, x, out)
        return _store(out, self.compute(x))

    def bind(self, out: np.ndarray, x: np.ndarray) -> ops.Bound | None:
        lib = native.lib()
        return None if lib is None else ops.bind_rows(lib, "gelu", x, out)

    def compute(self, x: np.ndarray) -> np.ndarray:
        lib = native.lib()
        if lib is not None and x.dtype == np.float32 and x.flags.c_contiguous:
            return ops.gelu(lib, x)
        t = x.dtype.type
        scaled = x / t(self.attrs["div"]) if self.attrs["div_op"] == "Div" else x * t(self.attrs["div"])
        inner = erf(scaled).astype(x.dtype, copy=False) + t(1.0)
        if int(self.attrs["form"]) == 0:
            return (x * t(self.attrs["half"])) * inner
        return (x * inner) * t(self.attrs["half"])


#: Step opcodes of an ElementwiseChain (the ``EO_*`` enum in kernels.c).
CHAIN_BINARY = {"Add": 0, "Sub": 1, "Mul": 2, "Div": 3, "Max": 4, "Min": 5}
CHAIN_UNARY = {
    "Relu": 6,
    "Neg": 7,
    "Abs": 8,
    "Exp": 9,
    "Erf": 10,
    "Sigmoid": 11,
    "Tanh": 12,
    "Sqrt": 13,
    "Reciprocal": 14,
    "Clip": 15,
}
#: Operand kinds: none (unary), a scalar, a tensor of the output's shape, a vector along the last axis.
KIND_NONE, KIND_SCALAR, KIND_FULL, KIND_INNER = 0, 1, 2, 3
_NP_BINARY: dict[int, Any] = {0: np.add, 1: np.subtract, 2: np.multiply, 3: np.divide, 4: np.maximum, 5: np.minimum}


@register
class ElementwiseChain(Kernel):
    """A straight line of float32 elementwise ops applied to input 0, evaluated in one pass.

    ``steps`` holds 4 ints per step: opcode (``CHAIN_BINARY``/``CHAIN_UNARY``), operand kind, operand index
    (into ``scalars`` for scalars and Clip bounds, else input ``index + 1``) and ``swapped`` (operand on the
    left). Operands broadcast to input 0's shape.
    """

    op_type = "ElementwiseChain"
    domain = DOMAIN
    since_version = 1
    attr_defaults: ClassVar[dict[str, Any]] = {"steps": [], "scalars": []}

    def setup(self) -> None:
        flat = [int(v) for v in self.attrs["steps"]]
        self.steps = [tuple(flat[i : i + 4]) for i in range(0, len(flat), 4)]
        self.scalars = np.asarray(self.attrs["scalars"] or [0.0], dtype=np.float32)
        self.step_block = np.asarray(flat or [0], dtype=np.int64)

    fresh_output = True
    inplace_inputs = (0,)

    def compute(self, x: np.ndarray, *operands: np.ndarray) -> np.ndarray:
        return self.compute_into(None, x, *operands)

    def compute_into(self, out: np.ndarray | None, x: np.ndarray, *operands: np.ndarray) -> np.ndarray:
        lib = native.lib()
        if lib is not None and x.dtype == np.float32 and x.ndim >= 1 and self._native_ok(x, operands):
            return self._compute_native(lib, x, operands, out)
        return _store(out, self.compute_numpy(x, *operands))

    def _native_ok(self, x: np.ndarray, operands: Sequence[np.ndarray]) -> bool:
        if not x.flags.c_contiguous:
            return False
        for _, kind, idx, _ in self.steps:
            if kind == KIND_FULL and (operands[idx].shape != x.shape or operands[idx].dtype != np.float32):
                return False
            if kind == KIND_INNER and (operands[idx].size != x.shape[-1] or operands[idx].dtype != np.float32):
                return False
        return True

    def _args(self, x: np.ndarray, operands: Sequence[np.ndarray], out: np.ndarray) -> native.Args:
        kept = [np.ascontiguousarray(o, dtype=np.float32) for o in operands]
        table = np.asarray([native.addr(o) for o in kept] or [0], dtype=np.int64)
        a = native.Args(ops.EW_NARGS)
        a.block[: ops.EW_NARGS] = (
            native.addr(x),
            native.addr(out),
            x.size,
            x.shape[-1],
            len(self.steps),
            native.addr(self.step_block),
            a.pin(table),
            native.addr(self.scalars),
        )
        a.keep.extend([*kept, x, out, self.step_block, self.scalars])
        return a

    def _compute_native(
        self, lib: native.NativeLib, x: np.ndarray, operands: Sequence[np.ndarray], out: np.ndarray | None
    ) -> np.ndarray:
        if out is None:
            out = np.empty_like(x)
        lib.ew(self._args(x, operands, out).ptr)
        return out

    def bind(self, out: np.ndarray, x: np.ndarray, *operands: np.ndarray) -> ops.Bound | None:
        lib = native.lib()
        if lib is None or x.dtype != np.float32 or x.ndim < 1 or not self._native_ok(x, operands):
            return None
        if out.shape != x.shape or not out.flags.c_contiguous:
            return None
        if any(not (o.dtype == np.float32 and o.flags.c_contiguous) for o in operands):
            return None  # a copy would not keep a stable address
        return ops._bound(lib.ew, self._args(x, operands, out))

    def compute_numpy(self, x: np.ndarray, *operands: np.ndarray) -> np.ndarray:
        y = np.array(x, copy=True)
        t = y.dtype.type
        with np.errstate(all="ignore"):
            for op, kind, idx, swapped in self.steps:
                if op in _NP_BINARY:
                    other: Any = t(self.scalars[idx]) if kind == KIND_SCALAR else operands[idx]
                    if kind == KIND_INNER:
                        other = np.asarray(other).reshape(-1)
                    fn = _NP_BINARY[op]
                    if swapped:
                        fn(other, y, out=y)
                    else:
                        fn(y, other, out=y)
                elif op == 6:
                    np.maximum(y, t(0), out=y)
                elif op == 7:
                    np.negative(y, out=y)
                elif op == 8:
                    np.abs(y, out=y)
                elif op == 9:
                    np.exp(y, out=y)
                elif op == 10:
                    y[...] = erf(y)
                elif op == 11:
                    y[...] = sigmoid(y)
                elif op == 12:
                    np.tanh(y, out=y)
                elif op == 13:
                    np.sqrt(y, out=y)
                elif op == 14:
                    np.divide(t(1), y, out=y)
                elif op == 15:
                    np.minimum(np.maximum(y, t(self.scalars[idx]), out=y), t(self.scalars[idx + 1]), out=y)
        return y
