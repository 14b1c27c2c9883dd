"""Normalisation ops: BatchNormalization, InstanceNormalization, LayerNormalization, GroupNormalization,
RMSNormalization, LpNormalization, MeanVarianceNormalization, LRN.

Statistics are computed in float32 (or float64 for float64 inputs, or the ``stash_type`` where the op has one) and
the result is cast back to the input dtype.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
from onnx import helper

from runtime.kernels.base import IntoKernel, Kernel, register, store_into
from runtime.kernels.conv import compute_dtype


def _channel_shape(x: np.ndarray) -> tuple[int, ...]:
    """Broadcast shape of a per-channel vector against ``(N, C, *spatial)``."""
    return (1, -1, *([1] * (x.ndim - 2)))


def _stash_dtype(stash_type: int, x: np.ndarray) -> np.dtype[Any]:
    if x.dtype == np.float64:
        return np.dtype(np.float64)
    return np.dtype(helper.tensor_dtype_to_np_dtype(int(stash_type)))


@register
class BatchNormalization(Kernel):
    """Per-channel affine normalisation with running statistics (inference) or batch statistics (training).

    Training is ``training_mode=1`` from opset 14 (outputs Y, running_mean, running_var); before opset 14 it is
    signalled by asking for the optional statistics outputs (or ``is_test=0`` in opsets 1-6).
    """

    op_type = "BatchNormalization"
    amp_class = "fp32"
    since_version = 1
    attr_defaults: ClassVar[dict[str, Any]] = {"epsilon": 1e-5, "momentum": 0.9, "training_mode": 0, "is_test": 0}

    def _training(self) -> bool:
        if self.node.opset >= 14:
            return bool(self.attrs["training_mode"])
        if self.node.opset < 7 and "is_test" in self.attrs and not self.attrs["is_test"]:
            return True
        return self.node.n_outputs > 1

    def compute(self, x: np.ndarray, scale: np.ndarray, bias: np.ndarray, mean: np.ndarray, var: np.ndarray) -> Any:
        ct = compute_dtype(x.dtype)
        eps = float(self.attrs["epsilon"])
        xc = x.astype(ct, copy=False)
        cs = _channel_shape(x)
        if not self._training():
            inv = scale.astype(ct) / np.sqrt(var.astype(ct) + ct.type(eps))
            shift = bias.astype(ct) - mean.astype(ct) * inv
            # spatial=0 (opsets 1-8) gives per-element statistics of shape (C, *spatial)
            ps = cs if inv.ndim == 1 else (1, *inv.shape)
            return (xc * inv.reshape(ps) + shift.reshape(ps)).astype(x.dtype, copy=False)
        axes = tuple(i for i in range(x.ndim) if i != 1)
        batch_mean = xc.mean(axis=axes)
        batch_var = xc.var(axis=axes)
        inv = scale.astype(ct) / np.sqrt(batch_var + ct.type(eps))
        y = (xc - batch_mean.reshape(cs)) * inv.reshape(cs) + bias.astype(ct).reshape(cs)
        momentum = float(self.attrs["momentum"])
        run_mean = mean.astype(ct) * momentum + batch_mean * (1 - momentum)
        run_var = var.astype(ct) * momentum + batch_var * (1 - momentum)
        outs = [y.astype(x.dtype), run_mean.astype(mean.dtype), run_var.astype(var.dtype)]
        if self.node.opset < 14:
            outs += [batch_mean.astype(mean.dtype), batch_var.astype(var.dtype)]
        return tuple(outs[: max(1, self.node.n_outputs)])


@register
class InstanceNormalization(Kernel):
    """Normalise each (sample, channel) plane over its spatial dims, then a per-channel affine."""

    op_type = "InstanceNormalization"
    amp_class = "fp32"
    since_version = 1
    attr_defaults: ClassVar[dict[str, Any]] = {"epsilon": 1e-5}

    def compute(self, x: np.ndarray, scale: np.ndarray, bias: np.ndarray) -> np.ndarray:
        ct = compute_dtype(x.dtype)
        xc = x.astype(ct, copy=False)
        axes = tuple(range(2, x.ndim))
        mean = xc.mean(axis=axes, keepdims=True)
        var = xc.var(axis=axes, keepdims=True)
        cs = _channel_shape(x)
        y = (xc - mean) / np.sqrt(var + ct.type(self.attrs["epsilon"]))
        y = y * scale.astype(ct).reshape(cs) + bias.astype(ct).reshape(cs)
        return y.astype(x.dtype, copy=False)


@register
class LayerNormalization(Kernel):
    """Normalise over dims ``axis..rank-1``; optional Mean and InvStdDev outputs in the ``stash_type`` dtype."""

    op_type = "LayerNormalization"
    amp_class = "fp32"
    since_version = 17
    attr_defaults: ClassVar[dict[str, Any]] = {"axis": -1, "epsilon": 1e-5, "stash_type": 1}
    fresh_output = True
    inplace_inputs = (0,)

    def _native_ok(self, x: np.ndarray, scale: np.ndarray, bias: np.ndarray | None) -> bool:
        """float32, normalising the last axis only, Y the only output: the compiled row kernel applies."""
        if self.node.n_outputs > 1 and any(self.node.output_present[1:]):
            return False
        if x.dtype != np.float32 or x.ndim == 0 or int(self.attrs["axis"]) % x.ndim != x.ndim - 1:
            return False
        n = x.shape[-1]
        return (
            scale.dtype == np.float32
            and scale.size == n
            and (bias is None or (bias.dtype == np.float32 and bias.size == n))
        )

    def compute_into(
        self, out: np.ndarray | None, x: np.ndarray, scale: np.ndarray, bias: np.ndarray | None = None
    ) -> Any:
        from runtime import native
        from runtime.native import ops

        lib = native.lib()
        if lib is not None and x.size and self._native_ok(x, scale, bias):
            return ops.layernorm_rows(
                lib,
                np.ascontiguousarray(x),
                np.ascontiguousarray(scale.reshape(-1)),
                None if bias is None else np.ascontiguousarray(bias.reshape(-1)),
                float(self.attrs["epsilon"]),
                out,
            )
        y = self.compute_numpy(x, scale, bias)
        if out is None:
            return y
        np.copyto(out, y[0] if isinstance(y, tuple) else y)
        return out

    def bind(self, out: np.ndarray, x: np.ndarray, scale: np.ndarray, bias: np.ndarray | None = None) -> Any:
        """A prebound compiled call over fixed buffers (the executor's static plan), or None."""
        from runtime import native
        from runtime.native import ops

        lib = native.lib()
        if lib is None or not x.size or not self._native_ok(x, scale, bias):
            return None
        if not scale.flags.c_contiguous or (bias is not None and not bias.flags.c_contiguous):
            return None
        return ops.bind_rows(lib, "layernorm", x, out, scale, bias, float(self.attrs["epsilon"]))

    def compute(self, x: np.ndarray, scale: np.ndarray, bias: np.ndarray | None = None) -> Any:
        from runtime import native

        if native.lib() is not None and x.size and self._native_ok(x, scale, bias):
            return self.compute_into(None, x, scale, bias)
        return self.compute_numpy(x, scale, bias)

    def compute_numpy(self, x: np.ndarray, scale: np.ndarray, bias: np.ndarray | None = None) -> Any:
        st = _stash_dtype(self.attrs["stash_type"], x)
        axis = int(self.attrs["axis"]) % x.ndim
        axes = tuple(range(axis, x.ndim))
        xc = x.astype(st, copy=False)
        mean = xc.mean(axis=axes, keepdims=True)
        diff = xc - mean
        var = (diff * diff).mean(axis=axes, keepdims=True)
        inv_std = 1.0 / np.sqrt(var + st.type(self.attrs["epsilon"]))
        y = diff * inv_std * scale.astype(st, copy=False)
        if bias is not None:
            y = y + bias.astype(st, copy=False)
        outs = (y.astype(x.dtype, copy=False), mean, inv_std)
        return outs[: max(1, self.node.n_outputs)]


@register
class RMSNormalization(Kernel):
    """``x / sqrt(mean(x^2) + eps) * scale`` over dims ``axis..rank-1``."""

    op_type = "RMSNormalization"
    amp_class = "fp32"
    since_version = 23
    attr_defaults: ClassVar[dict[str, Any]] = {"axis": -1, "epsilon": 1e-5, "stash_type": 1}

    def compute(self, x: np.ndarray, scale: np.ndarray) -> np.ndarray:
        st = _stash_dtype(self.attrs["stash_type"], x)
        axis = int(self.attrs["axis"]) % x.ndim
        xc = x.astype(st, copy=False)
        mean_sq = (xc * xc).mean(axis=tuple(range(axis, x.ndim)), keepdims=True)
        y = xc / np.sqrt(mean_sq + st.type(self.attrs["epsilon"])) * scale.astype(st, copy=False)
        return y.astype(x.dtype, copy=False)


def _group_stats(x: np.ndarray, groups: int, eps: float, ct: np.dtype[Any]) -> np.ndarray:
    """``x`` normalised within each of ``groups`` channel groups, shaped ``(N, C, *spatial)`` in ``ct``."""
    n = x.shape[0]
    xg = x.astype(ct, copy=False).reshape(n, groups, -1)
    mean = xg.mean(axis=2, keepdims=True)
    var = xg.var(axis=2, keepdims=True)
    return ((xg - mean) / np.sqrt(var + ct.type(eps))).reshape(x.shape)


@register
class GroupNormalization18(Kernel):
    """Opset 18: ``scale`` and ``bias`` have one value per group."""

    op_type = "GroupNormalization"
    amp_class = "fp32"
    since_version = 18
    attr_defaults: ClassVar[dict[str, Any]] = {"epsilon": 1e-5}

    def compute(self, x: np.ndarray, scale: np.ndarray, bias: np.ndarray) -> np.ndarray:
        groups = int(self.attrs["num_groups"])
        ct = compute_dtype(x.dtype)
        y = _group_stats(x, groups, self.attrs["epsilon"], ct)
        per_group = x.shape[1] // groups
        s = np.repeat(scale.astype(ct), per_group).reshape(_channel_shape(x))
        b = np.repeat(bias.astype(ct), per_group).reshape(_channel_shape(x))
        return (y * s + b).astype(x.dtype, copy=False)


@register
class GroupNormalization21(Kernel):
    """Opset 21: ``scale`` and ``bias`` have one value per channel; statistics in ``stash_type``."""

    op_type = "GroupNormalization"
    amp_class = "fp32"
    since_version = 21
    attr_defaults: ClassVar[dict[str, Any]] = {"epsilon": 1e-5, "stash_type": 1}

    def compute(self, x: np.ndarray, scale: np.ndarray, bias: np.ndarray) -> np.ndarray:
        st = _stash_dtype(self.attrs["stash_type"], x)
        y = _group_stats(x, int(self.attrs["num_groups"]), self.attrs["epsilon"], st)
        cs = _channel_shape(x)
        return (y * scale.astype(st).reshape(cs) + bias.astype(st).reshape(cs)).astype(x.dtype, copy=False)


@register
class LpNormalization(Kernel):
    """Divide by the L1 or L2 norm along ``axis`` (zero norms give zero)."""

    op_type = "LpNormalization"
    amp_class = "fp32"
    since_version = 1
    attr_defaults: ClassVar[dict[str, Any]] = {"axis": -1, "p": 2}

    def compute(self, x: np.ndarray) -> np.ndarray:
        p = int(self.attrs["p"])
        axis = int(self.attrs["axis"])
        if p == 1:
            norm = np.abs(x).sum(axis=axis, keepdims=True)
        elif p == 2:
            norm = np.sqrt((x * x).sum(axis=axis, keepdims=True))
        else:
            raise ValueError(f"p must be 1 or 2, got {p}")
        with np.errstate(divide="ignore", invalid="ignore"):
            y = np.where(norm == 0, 0, x / norm)
        return y.astype(x.dtype, copy=False)


@register
class MeanVarianceNormalization(Kernel):
    """``(x - mean) / sqrt(var)`` over ``axes`` (default: all but channels)."""

    op_type = "MeanVarianceNormalization"
    amp_class = "fp32"
    since_version = 9
    attr_defaults: ClassVar[dict[str, Any]] = {"axes": [0, 2, 3]}

    def compute(self, x: np.ndarray) -> np.ndarray:
        ct = compute_dtype(x.dtype)
        xc = x.astype(ct, copy=False)
        axes = tuple(int(a) for a in self.attrs["axes"])
        mean = xc.mean(axis=axes, keepdims=True)
        centred = xc - mean
        std = np.sqrt((centred * centred).mean(axis=axes, keepdims=True))
        return (centred / (std + ct.type(1e-9))).astype(x.dtype, copy=False)


@register
class LRN(IntoKernel):
    """Local response normalisation across channels: the compiled kernel (float32), else a running sum over the
    channel window via cumsum."""

    op_type = "LRN"
    amp_class = "fp32"
    since_version = 1
    attr_defaults: ClassVar[dict[str, Any]] = {"alpha": 1e-4, "beta": 0.75, "bias": 1.0}

    #: Exponents the compiled kernel raises to with square roots (AlexNet's and GoogLeNet's 0.75): for any other,
    #: NumPy's vectorised power beats its powf per element.
    NATIVE_BETAS = (0.5, 0.75, 1.0)

    def _native(self, x: np.ndarray) -> Any:
        """The compiled kernels when they apply (float32, contiguous, channels on axis 1 of 3+, a beta in
        ``NATIVE_BETAS``), else None."""
        if x.dtype != np.float32 or x.ndim < 3 or not x.flags.c_contiguous:
            return None
        if float(np.float32(self.attrs["beta"])) not in self.NATIVE_BETAS:
            return None
        from runtime import native

        return native.lib()

    def _params(self) -> tuple[int, float, float, float]:
        size = int(self.attrs["size"])
        if not 1 <= size <= 2**31 - 1:  # the compiled loop divides by it and offsets channels by it
            raise ValueError(f"size {size} must be from 1 to {2**31 - 1}")
        return size, *(float(self.attrs[k]) for k in ("alpha", "beta", "bias"))  # type: ignore[return-value]

    def compute_into(self, out: np.ndarray | None, x: np.ndarray) -> np.ndarray:
        lib = self._native(x)
        if lib is not None and (out is None or out.flags.c_contiguous):
            from runtime.native import ops

            return ops.lrn(lib, x, *self._params(), out=out)
        y = self.compute_numpy(x)
        return store_into(out, y)

    def bind(self, out: np.ndarray, x: np.ndarray) -> Any:
        """A prebound compiled call over fixed buffers (the executor's static plan), or None."""
        lib = self._native(x)
        if lib is None:
            return None
        from runtime.native import ops

        return ops.bind_lrn(lib, x, out, *self._params())

    def compute_numpy(self, x: np.ndarray) -> np.ndarray:
        return lrn_reference(x, *self._params())


def lrn_reference(x: np.ndarray, size: int, alpha: float, beta: float, bias: float) -> np.ndarray:
    """LRN across axis 1 in NumPy: window sums of squares from a running sum (cumsum), then the power."""
    ct = compute_dtype(x.dtype)
    xc = x.astype(ct, copy=False)
    c = x.shape[1]
    before, after = (size - 1) // 2, size - 1 - (size - 1) // 2
    sq = xc * xc
    csum = np.concatenate([np.zeros_like(sq[:, :1]), np.cumsum(sq, axis=1)], axis=1)
    hi = np.minimum(np.arange(c) + after + 1, c)
    lo = np.maximum(np.arange(c) - before, 0)
    window = csum[:, hi] - csum[:, lo]
    y = xc / (bias + (alpha / size) * window) ** beta
    return y.astype(x.dtype, copy=False)
