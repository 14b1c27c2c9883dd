"""2-D ConvTranspose on the compiled kernels: one matmul to per-tap columns, then ``ap_col2im_gather``
(runtime/native/upsample.c), which writes each output pixel once with its bias, already cropped or output-padded;
and ``NhwcConvTranspose``, the same over NHWC tensors, which the layout pass puts between NHWC convolutions.

``conv_transpose_2d`` returns ``None`` where it does not apply (no compiled kernels, not float32, weights or bias
of another shape); the caller then takes the NumPy path (``runtime.kernels.conv.ConvTranspose``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from runtime import native
from runtime.geometry import window_attr_problem
from runtime.kernels.base import IntoKernel, register, store_into
from runtime.kernels.conv import ConvTranspose, spatial_attrs
from runtime.kernels.fused import DOMAIN, _Cache
from runtime.native.upsample import ConvTransposeGeometry, NhwcConvTranspose2d

(
    CG_COLS,
    CG_OUT,
    CG_BIAS,
    CG_N,
    CG_M,
    CG_KH,
    CG_KW,
    CG_H,
    CG_W,
    CG_OH,
    CG_OW,
    CG_SH,
    CG_SW,
    CG_DH,
    CG_DW,
    CG_HEADH,
    CG_HEADW,
    CG_NARGS,
) = range(18)


def conv_transpose_2d(
    x: np.ndarray,
    w: np.ndarray,
    b: np.ndarray | None,
    group: int,
    strides: Sequence[int],
    dilations: Sequence[int],
    head: Sequence[int],
    out_hw: Sequence[int],
) -> np.ndarray | None:
    """``ConvTranspose`` of NCHW ``x`` with ``w`` (C, M/group, KH, KW): the output (N, M, *out_hw), or None."""
    lib = native.lib()
    if lib is None or x.dtype != np.float32 or x.ndim != 4 or w.ndim != 4:
        return None
    n, c, h, wd = x.shape
    kh, kw = int(w.shape[2]), int(w.shape[3])
    if c % group or w.shape[0] != c or min(out_hw) < 0:
        return None
    cg, mg = c // group, int(w.shape[1])
    m = mg * group
    w_mat = w.astype(np.float32, copy=False).reshape(group, cg, mg * kh * kw).transpose(0, 2, 1)
    x_mat = x.reshape(n, group, cg, h * wd)
    cols = np.ascontiguousarray(np.matmul(w_mat, x_mat), dtype=np.float32)  # (N, G, Mg*K, P) = (N, M, KH, KW, H, W)
    bias = None if b is None else np.ascontiguousarray(b, dtype=np.float32)
    if bias is not None and bias.shape != (m,):
        return None
    out = np.empty((n, m, int(out_hw[0]), int(out_hw[1])), dtype=np.float32)
    a = native.Args(CG_NARGS)
    a.block[:] = (
        native.addr(cols),
        native.addr(out),
        0 if bias is None else native.addr(bias),
        n,
        m,
        kh,
        kw,
        h,
        wd,
        out.shape[2],
        out.shape[3],
        int(strides[0]),
        int(strides[1]),
        int(dilations[0]),
        int(dilations[1]),
        int(head[0]),
        int(head[1]),
    )
    lib.col2im_gather(a.ptr)
    return out


@register
class NhwcConvTranspose(IntoKernel, ConvTranspose):
    """ConvTranspose of an NHWC tensor into NHWC, with ONNX's attributes and weights (``[C, M/group, KH, KW]``).

    2-d float32 with group 1 runs compiled: the taps as output channels of one 1x1 convolution
    (``runtime.native.upsample.NhwcConvTranspose2d``), then a gather that writes each output pixel once, bias
    included. Anything else transposes to NCHW around ``ConvTranspose``.
    """

    op_type = "NhwcConvTranspose"
    domain = DOMAIN
    since_version = 1
    fresh_output = True
    #: May write its output as a channel slice of a concat's (the static plan's concat by placement).
    channel_slice_output = True
    #: Unknown to AMP, as NhwcConv is: the layout pass's ops stay float32.
    amp_class = None  # type: ignore[assignment]  # ConvTranspose's "low" is inferred as its only value

    def setup(self) -> None:
        self._compiled = _Cache()

    def _native(self, x: np.ndarray, w: np.ndarray, b: np.ndarray | None) -> tuple[Any, Any] | None:
        """The compiled transposed convolution and this input's geometry, or None where it does not apply."""
        lib = native.lib()
        if lib is None or x.dtype != np.float32 or x.ndim != 4 or w.ndim != 4 or w.dtype != np.float32:
            return None
        if int(self.attrs["group"]) != 1 or w.shape[0] != x.shape[3] or (b is not None and b.shape != (w.shape[1],)):
            return None
        if b is not None and b.dtype != np.float32:
            return None
        kernel = w.shape[2:]
        if window_attr_problem("ConvTranspose", self.attrs, 2, kernel):
            return None
        strides, dilations = spatial_attrs(self.attrs, kernel)
        in_hw = x.shape[1:3]
        out_pad = list(self.attrs.get("output_padding") or [0, 0])[:2]
        full = [strides[i] * (in_hw[i] - 1) + (kernel[i] - 1) * dilations[i] + 1 for i in range(2)]
        head, out = self._geometry(in_hw, full, strides, out_pad)
        if min(out) <= 0:
            return None
        geo = ConvTransposeGeometry(
            (int(strides[0]), int(strides[1])),
            (int(dilations[0]), int(dilations[1])),
            (int(head[0]), int(head[1])),
            (int(out[0]), int(out[1])),
        )
        return self._compiled.get((w, b), lambda: NhwcConvTranspose2d(lib, w, b)), geo

    def compute_into(
        self, out: np.ndarray | None, x: np.ndarray, w: np.ndarray, b: np.ndarray | None = None
    ) -> np.ndarray:
        found = self._native(np.ascontiguousarray(x), w, b)
        if found is not None:
            op, geo = found
            shape = (x.shape[0], *geo.out_hw, op.m)
            target = out if out is not None and out.shape == shape else np.empty(shape, dtype=np.float32)
            call = op.bind(np.ascontiguousarray(x), target, geo)
            if call is not None:
                call()
                return store_into(out, target) if target is not out else target
        y = ConvTranspose.compute(self, x.transpose(0, 3, 1, 2), w, b)
        return store_into(out, np.ascontiguousarray(y.transpose(0, 2, 3, 1)))

    def bind(self, out: np.ndarray, x: np.ndarray, w: np.ndarray, b: np.ndarray | None = None) -> Any:
        """A prebound compiled call for fixed buffers (the static plan), or None."""
        found = self._native(x, w, b)
        if found is None:
            return None
        op, geo = found
        return op.bind(x, out, geo)
