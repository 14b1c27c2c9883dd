"""Squeeze-excite as one op (domain ``com.appopt``), created by ``runtime.passes.squeeze_excite``:

    SqueezeExcite(x, W1, B1, W2, B2) = x * gate(Conv1x1(act1(Conv1x1(mean_hw(x), W1, B1)), W2, B2))

``W1`` is ``[Cr, C, 1, 1]`` and ``W2`` ``[C, Cr, 1, 1]`` (ONNX Conv weights); the activations are the fused
epilogue's (``act1``/``act1_lo``/``act1_hi`` inside, ``activation``/``act_lo``/``act_hi`` for the gate). With
``channels_last`` x and the result are NHWC (the layout pass sinks the op), else NCHW.

The compiled kernel (``ap_se``) pools, runs both tiny layers and scales in one call. The NumPy path repeats the
unfused ops (mean, two FusedConv steps, Mul) so that, with the compiled kernels off, the NCHW op gives the bits of
the graph it replaced.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from runtime import native
from runtime.kernels.base import IntoKernel, register, store_into
from runtime.kernels.conv import conv_nd
from runtime.kernels.fused import DOMAIN, _finish
from runtime.native import ops
from runtime.native.abi import Epilogue
from runtime.native.convnets import squeeze_excite_call


@register
class SqueezeExcite(IntoKernel):
    op_type = "SqueezeExcite"
    domain = DOMAIN
    since_version = 1
    uses_blas = True
    attr_defaults: ClassVar[dict[str, Any]] = {"act1": "", "activation": "", "channels_last": 0}
    fresh_output = True

    def setup(self) -> None:
        a = self.attrs
        self.inner = Epilogue(str(a["act1"]), float(a.get("act1_lo", 0.0)), float(a.get("act1_hi", 0.0)))
        self.gate = Epilogue(str(a["activation"]), float(a.get("act_lo", 0.0)), float(a.get("act_hi", 0.0)))
        self.channels_last = bool(a["channels_last"])

    def bind(
        self,
        out: np.ndarray,
        x: np.ndarray,
        w1: np.ndarray,
        b1: np.ndarray | None,
        w2: np.ndarray,
        b2: np.ndarray | None = None,
    ) -> ops.Bound | None:
        """The compiled call writing into ``out`` (prebound for the static plan), or None where it does not apply."""
        lib = native.lib()
        if lib is None or x.dtype != np.float32:
            return None
        inner, gate = self.inner, self.gate
        acts = ((inner.activation, inner.lo, inner.hi), (gate.activation, gate.lo, gate.hi))
        return squeeze_excite_call(lib, x, out, w1, b1, w2, b2, acts, self.channels_last)

    def compute_into(
        self,
        out: np.ndarray | None,
        x: np.ndarray,
        w1: np.ndarray,
        b1: np.ndarray | None,
        w2: np.ndarray,
        b2: np.ndarray | None = None,
    ) -> np.ndarray:
        target = np.empty(x.shape, dtype=np.float32) if out is None else out
        call = self.bind(target, np.ascontiguousarray(x), w1, b1, w2, b2) if x.dtype == np.float32 else None
        if call is not None:
            call()
            return target
        return store_into(out, self.compute_numpy(x, w1, b1, w2, b2))

    def compute_numpy(
        self, x: np.ndarray, w1: np.ndarray, b1: np.ndarray | None, w2: np.ndarray, b2: np.ndarray | None = None
    ) -> np.ndarray:
        xc = x.transpose(0, 3, 1, 2) if self.channels_last else x
        pooled = np.mean(xc, axis=(2, 3), keepdims=True).astype(x.dtype, copy=False)
        unit = [1, 1]
        h = _finish(conv_nd(pooled, w1, b1, [0, 0, 0, 0], unit, unit, 1), None, self.inner)
        g = _finish(conv_nd(h, w2, b2, [0, 0, 0, 0], unit, unit, 1), None, self.gate)
        y = xc * g
        return np.ascontiguousarray(y.transpose(0, 2, 3, 1)) if self.channels_last else y
