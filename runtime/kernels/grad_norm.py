"""Normalisation in training: BatchNormTraining (forward with batch statistics) and the BatchNorm/LayerNorm grads.

``BatchNormTraining`` replaces ``BatchNormalization`` in a training graph at any opset: it normalises with the
batch statistics, returns the updated running statistics (ONNX's convention: ``running * momentum + batch * (1 -
momentum)``, population variance) and saves the batch mean and inverse standard deviation for the backward pass.
Its float32 forward and batch-statistics gradient run compiled (``runtime.native.training``: two or three passes
per channel, a pool task each, so a second thread takes half the channels); the NumPy code stays their yardstick.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from runtime import native
from runtime.kernels.base import register
from runtime.kernels.grad_base import GradKernel, sum_to_shape, wide
from runtime.native.training import batch_norm_train, batch_norm_train_grad, layer_norm_grad


def _channel_shape(x: np.ndarray) -> tuple[int, ...]:
    return (1, x.shape[1], *([1] * (x.ndim - 2)))


def _channel_sum(a3: np.ndarray) -> np.ndarray:
    """Per-channel sums of ``(N, C, pixels)``: along the contiguous pixels first, then over the batch."""
    return a3.sum(axis=2).sum(axis=0)


@register
class BatchNormTraining(GradKernel):
    """``(X, scale, B, running_mean, running_var) -> Y, new_mean, new_var, saved_mean, saved_inv_std``."""

    op_type = "BatchNormTraining"
    attr_defaults: ClassVar[dict[str, Any]] = {"epsilon": 1e-5, "momentum": 0.9}

    def compute(
        self, x: np.ndarray, scale: np.ndarray, bias: np.ndarray, mean: np.ndarray, var: np.ndarray
    ) -> tuple[np.ndarray, ...]:
        lib = native.lib()
        found = batch_norm_train(lib, x, scale, bias, float(self.attrs["epsilon"])) if lib is not None else None
        if found is not None:  # float32: compiled, a pool task per channel
            y, batch_mean, batch_var, inv_std = found
            return (y, *self._running(mean, var, batch_mean, batch_var), batch_mean, inv_std)
        xc = wide(x)
        ct = xc.dtype.type
        x3 = xc.reshape(x.shape[0], x.shape[1], -1)  # sums along contiguous pixels (see BatchNormGrad)
        count = ct(x3.shape[0] * x3.shape[2])
        batch_mean = _channel_sum(x3) / count
        centred = x3 - batch_mean[:, None]
        batch_var = _channel_sum(centred * centred) / count
        inv_std = 1 / np.sqrt(batch_var + ct(self.attrs["epsilon"]))
        np.multiply(centred, (wide(scale) * inv_std)[:, None], out=centred)
        centred += wide(bias)[:, None]
        y = centred.reshape(x.shape)
        return (y.astype(x.dtype, copy=False), *self._running(mean, var, batch_mean, batch_var), batch_mean, inv_std)

    def _running(
        self, mean: np.ndarray, var: np.ndarray, batch_mean: np.ndarray, batch_var: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """The updated running mean and variance."""
        momentum = batch_mean.dtype.type(self.attrs["momentum"])
        new_mean = wide(mean) * momentum + batch_mean * (1 - momentum)
        new_var = wide(var) * momentum + batch_var * (1 - momentum)
        return new_mean.astype(mean.dtype, copy=False), new_var.astype(var.dtype, copy=False)


@register
class BatchNormGrad(GradKernel):
    """``(dY, X, scale, mean, inv_std_or_var) -> dX, dScale, dBias``.

    ``mode="batch"`` (training): statistics are the batch's (given as saved mean and inverse std, or recomputed
    when those inputs are absent) and depend on X. ``mode="running"`` (inference BatchNormalization): inputs 3
    and 4 are the running mean and variance, constants for the gradient.
    """

    op_type = "BatchNormGrad"
    attr_defaults: ClassVar[dict[str, Any]] = {"epsilon": 1e-5, "mode": "batch"}

    def compute(
        self,
        dy: np.ndarray,
        x: np.ndarray,
        scale: np.ndarray,
        mean: np.ndarray | None = None,
        spread: np.ndarray | None = None,
    ) -> tuple[np.ndarray | None, ...]:
        running = self.attrs["mode"] == "running"
        lib = native.lib()
        if lib is not None and not running and mean is not None and spread is not None:
            found = batch_norm_train_grad(lib, dy, x, scale, mean, spread, self.wants(0))
            if found is not None:  # float32: compiled, a pool task per channel
                dx, dscale, dbias = found
                return (
                    dx,
                    dscale.astype(scale.dtype, copy=False) if self.wants(1) else None,
                    dbias.astype(scale.dtype, copy=False) if self.wants(2) else None,
                )
        dyc, xc, sc = wide(dy), wide(x), wide(scale)
        ct = xc.dtype.type
        eps = ct(self.attrs["epsilon"])
        # (N, C, pixels): every per-channel sum runs along contiguous pixels, then over the batch, where NumPy's
        # sums over axes (0, 2, 3) walked strided; and dX is three in-place passes instead of seven temporaries
        n, c = x.shape[:2]
        x3, dy3 = xc.reshape(n, c, -1), dyc.reshape(n, c, -1)
        count = ct(n * x3.shape[2])
        if mean is None or spread is None:
            mean = _channel_sum(x3) / count
            centred = x3 - mean[:, None]
            inv_std = 1 / np.sqrt(_channel_sum(centred * centred) / count + eps)
        else:
            mean = wide(mean)
            inv_std = 1 / np.sqrt(wide(spread) + eps) if running else wide(spread)
            centred = x3 - mean[:, None]
        prod = dy3 * centred
        dscale = _channel_sum(prod) * inv_std  # sum(dY * xhat)
        dbias = _channel_sum(dy3)
        dx = None
        if self.wants(0):
            gain = sc * inv_std
            if running:
                dx = dyc * gain.reshape(_channel_shape(x))
            else:  # gain * (dY - dbias / count - xhat * dscale / count), xhat = centred * inv_std
                np.multiply(centred, (-gain * inv_std * dscale / count)[:, None], out=centred)
                np.multiply(dy3, gain[:, None], out=prod)
                centred += prod
                centred += (-gain * dbias / count)[:, None]
                dx = centred.reshape(x.shape)
        return (
            None if dx is None else dx.astype(x.dtype, copy=False),
            dscale.astype(scale.dtype, copy=False) if self.wants(1) else None,
            dbias.astype(scale.dtype, copy=False) if self.wants(2) else None,
        )


@register
class LayerNormGrad(GradKernel):
    """``(dY, X, scale) -> dX, dScale, dBias`` for LayerNormalization over dims ``axis..rank-1``."""

    op_type = "LayerNormGrad"
    attr_defaults: ClassVar[dict[str, Any]] = {"axis": -1, "epsilon": 1e-5}

    def compute(self, dy: np.ndarray, x: np.ndarray, scale: np.ndarray) -> tuple[np.ndarray | None, ...]:
        axis = int(self.attrs["axis"]) % x.ndim
        lib = native.lib()
        if lib is not None:  # float32 rows: compiled, four passes per row in L1, a pool task per 64 rows
            found = layer_norm_grad(lib, dy, x, scale, axis, float(self.attrs["epsilon"]), self.wants(0))
            if found is not None:
                return (found[0], found[1] if self.wants(1) else None, found[2] if self.wants(2) else None)
        dyc, xc, sc = wide(dy), wide(x), wide(scale)
        norm_axes = tuple(range(axis, x.ndim))
        lead_axes = tuple(range(axis))
        mean = xc.mean(axis=norm_axes, keepdims=True)
        centred = xc - mean
        inv_std = 1 / np.sqrt(
            (centred * centred).mean(axis=norm_axes, keepdims=True) + xc.dtype.type(self.attrs["epsilon"])
        )
        xhat = centred * inv_std
        dx = None
        if self.wants(0):
            dxhat = dyc * sc
            dx = inv_std * (
                dxhat
                - dxhat.mean(axis=norm_axes, keepdims=True)
                - xhat * (dxhat * xhat).mean(axis=norm_axes, keepdims=True)
            )
        dscale = _sum_to(dyc * xhat, lead_axes, scale.shape) if self.wants(1) else None
        dbias = _sum_to(dyc, lead_axes, scale.shape) if self.wants(2) else None
        return (
            None if dx is None else dx.astype(x.dtype, copy=False),
            None if dscale is None else dscale.astype(scale.dtype, copy=False),
            None if dbias is None else dbias.astype(scale.dtype, copy=False),
        )


def _sum_to(a: np.ndarray, lead_axes: tuple[int, ...], shape: tuple[int, ...]) -> np.ndarray:
    """Sum the leading (batch) axes away, then anything ``scale`` broadcasts over."""
    return sum_to_shape(a.sum(axis=lead_axes) if lead_axes else a, shape)
