"""ConvGrad: the gradients of an N-d grouped ``Conv`` with respect to its input, weight and bias.

``dW`` is one GEMM per group between the output gradient and the im2col columns, with batch and pixels folded
into the inner dimension; ``dX`` is the adjoint GEMM to columns followed by a col2im scatter-add that loops over
kernel offsets (never pixels). Large batches run in chunks so the columns stay under ``_COLS_BYTES``.

A 2-D ungrouped convolution of stride 1 (most of a CNN's) takes ``_flat_conv_grad`` instead: each padded plane is
flattened with its row width, so a kernel offset is one shift of the flat plane and every copy and scatter-add moves
whole runs of ``out_h x padded_w`` values instead of rows of ``out_w`` (on the digits CNN's 8x8 planes the col2im
was a third of the kernel). The output gradient is laid out at the padded width too (zeros in the extra
columns, so they add nothing): the GEMMs grow by ``padded_w / out_w``, the copies shrink far more. Its float32 ``dX``
is a convolution of ``dY`` with the flipped weights on the compiled NHWC kernel (``runtime.kernels.step_conv``)
when the native library is there; the NumPy path stays its yardstick.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from runtime.kernels.base import register
from runtime.kernels.conv import pad_spatial, resolve_pads, spatial_attrs, window_view
from runtime.kernels.grad_base import (
    GradKernel,
    crop_spatial,
    kernel_offsets,
    offset_slab,
    refuse_cropping,
    swap_leading,
    wide,
)
from runtime.kernels.step_conv import StepConv, conv_input_grad


@dataclass(frozen=True)
class Window:
    """The forward convolution's resolved window: explicit pads, strides, dilations and groups."""

    pads: list[int]
    strides: list[int]
    dilations: list[int]
    group: int


#: Upper bound of one chunk's im2col columns.
_COLS_BYTES = 128 << 20

#: ``_flat_conv_grad`` forms dW directly (no transpose) while its reduction (batch x pixels) is shorter than this
#: many times the output channels; past it, the transposed GEMM and a copy win (docs/decisions.md, 2026-11-26).
_SHORT_REDUCTION = 4


@register
class ConvGrad(GradKernel):
    """``ConvGrad(dY, X, W) -> dX, dW, dB`` with the forward node's attributes; unnamed outputs are skipped."""

    op_type = "ConvGrad"
    attr_defaults: ClassVar[dict[str, Any]] = {"auto_pad": "NOTSET", "group": 1}

    def setup(self) -> None:
        self._step = StepConv()

    def compute(self, dy: np.ndarray, x: np.ndarray, w: np.ndarray) -> tuple[np.ndarray | None, ...]:
        out_dtype = x.dtype
        dyc, xc, wc = wide(dy), wide(x), wide(w)
        kernel = list(w.shape[2:])
        nd = len(kernel)
        strides, dilations = spatial_attrs(self.attrs, kernel)
        pads = resolve_pads(self.attrs["auto_pad"], self.attrs.get("pads"), x.shape[2:], kernel, strides, dilations)
        pads = refuse_cropping(pads)
        group = int(self.attrs["group"])
        n = x.shape[0]
        out = list(dy.shape[2:])
        per_sample = x.shape[1] * math.prod(kernel) * math.prod(out) * xc.itemsize
        chunk = max(1, min(n, _COLS_BYTES // max(per_sample, 1)))
        want_dx, want_dw = self.wants(0), self.wants(1)
        flat = nd == 2 and group == 1 and strides == [1, 1]
        dx = conv_input_grad(self._step, dyc, wc, pads, dilations) if want_dx and flat else None
        if dx is not None:  # the compiled kernel gave dX: the chunks compute dW only
            want_dx = False
        elif want_dx:
            dx = np.empty(x.shape, dtype=xc.dtype)
        dw: np.ndarray | None = None
        grad_chunk = _flat_conv_grad if flat else _conv_grad_chunk
        win = Window(pads, strides, dilations, group)
        for start in range(0, n, chunk) if want_dx or want_dw else ():
            part = slice(start, min(n, start + chunk))
            dx_part, dw_part = grad_chunk(dyc[part], xc[part], wc, win, want_dx, want_dw)
            if dx is not None and dx_part is not None:
                dx[part] = dx_part
            if dw_part is not None:
                dw = dw_part if dw is None else np.add(dw, dw_part, out=dw)
        if want_dw and dw is None:  # an empty batch
            dw = np.zeros((group, w.shape[0] // group, w.shape[1] * math.prod(kernel)), dtype=xc.dtype)
        db = dyc.sum(axis=(0, *range(2, dy.ndim))) if self.wants(2) else None
        return (
            None if dx is None else dx.astype(out_dtype, copy=False),
            None if dw is None else dw.reshape(w.shape).astype(w.dtype, copy=False),
            None if db is None else db.astype(w.dtype, copy=False),
        )


def _conv_grad_chunk(
    dy: np.ndarray, x: np.ndarray, w: np.ndarray, win: Window, want_dx: bool, want_dw: bool
) -> tuple[np.ndarray | None, np.ndarray | None]:
    pads, strides, dilations, group = win.pads, win.strides, win.dilations, win.group
    n, c = x.shape[:2]
    m = w.shape[0]
    kernel = list(w.shape[2:])
    nd = len(kernel)
    cg, mg = c // group, m // group
    out = list(dy.shape[2:])
    n_out = math.prod(out)
    k_size = math.prod(kernel)
    # (N, M, *out) -> (G, Mg, N*P)
    dy_mat = dy.reshape(n, group, mg, n_out).transpose(1, 2, 0, 3).reshape(group, mg, n * n_out)
    dw = None
    if want_dw:
        xp = pad_spatial(x, pads)
        view = window_view(xp, kernel, strides, dilations, out).reshape(n, group, cg, *out, *kernel)
        # (N, G, Cg, *out, *k) -> (G, Cg, *k, N, *out): one copy, then a GEMM per group
        perm = (1, 2, *range(3 + nd, 3 + 2 * nd), 0, *range(3, 3 + nd))
        cols = view.transpose(perm).reshape(group, cg * k_size, n * n_out)
        dw = np.matmul(dy_mat, cols.transpose(0, 2, 1))  # (G, Mg, Cg*K)
    dx = None
    if want_dx:
        w_mat = w.reshape(group, mg, cg * k_size).transpose(0, 2, 1)  # (G, Cg*K, Mg)
        dcols = np.matmul(w_mat, dy_mat)  # (G, Cg*K, N*P)
        dcols = dcols.reshape(group, cg, *kernel, n, *out)
        perm = (2 + nd, 0, 1, *range(2, 2 + nd), *range(3 + nd, 3 + 2 * nd))
        dcols = dcols.transpose(perm).reshape(n, c, *kernel, *out)
        padded = [x.shape[2 + i] + pads[i] + pads[i + nd] for i in range(nd)]
        dxp = np.zeros((n, c, *padded), dtype=dcols.dtype)
        for offset in kernel_offsets(kernel):
            dxp[offset_slab(offset, strides, dilations, out)] += dcols[(slice(None), slice(None), *offset)]
        dx = crop_spatial(dxp, pads, x.shape[2:])
    return dx, dw


def _flat_conv_grad(
    dy: np.ndarray, x: np.ndarray, w: np.ndarray, win: Window, want_dx: bool, want_dw: bool
) -> tuple[np.ndarray | None, np.ndarray | None]:
    """``_conv_grad_chunk`` for 2-D, stride 1, one group, on flattened padded planes (see the module docstring)."""
    pads, dilations = win.pads, win.dilations
    n, c, height, width = x.shape
    m, k_h, k_w = w.shape[0], w.shape[2], w.shape[3]
    out_h, out_w = dy.shape[2:]
    pad_h, pad_w = height + pads[0] + pads[2], width + pads[1] + pads[3]
    span = out_h * pad_w  # one kernel offset's run in a flat padded plane (rows at the padded width)
    shifts = [a * dilations[0] * pad_w + b * dilations[1] for a in range(k_h) for b in range(k_w)]
    plane = pad_h * pad_w + (k_w - 1) * dilations[1]  # the last shift's run ends past the plane by this much
    k_size = k_h * k_w
    dw = None
    if want_dw:
        xf = np.zeros((n, c, plane), dtype=x.dtype)
        _interior(xf, pads, pad_h, pad_w, height, width)[...] = x
        cols = np.empty((c, k_size, n, span), dtype=x.dtype)  # (C*K, N*span): one copy of long runs per offset
        for index, shift in enumerate(shifts):
            cols[:, index] = xf[:, :, shift : shift + span].transpose(1, 0, 2)
        # dY as rows of pixels at the padded width, (N*span, M), zero in the extra columns
        dy_rows = np.zeros((n, out_h, pad_w, m), dtype=dy.dtype)
        dy_rows[:, :, :out_w] = dy.transpose(0, 2, 3, 1)
        cols2, rows2 = cols.reshape(c * k_size, n * span), dy_rows.reshape(n * span, m)
        if n * span < _SHORT_REDUCTION * m:  # few pixels per channel: BLAS writes dW in place, nothing to transpose
            dw = np.matmul(rows2.T, cols2.T).reshape(1, m, c * k_size)
        else:  # a long reduction runs fastest as dW^T = cols @ rows, then one strip-wise transpose
            dw = swap_leading(np.matmul(cols2, rows2)).reshape(1, m, c * k_size)
    dx = None
    if want_dx:
        # dY at the padded width: (N, M, out_h * pad_w), zero in the extra columns
        dy_wide = np.zeros((n, m, out_h, pad_w), dtype=dy.dtype)
        dy_wide[..., :out_w] = dy
        dy_wide = dy_wide.reshape(n, m, span)
        w_t = swap_leading(w.reshape(m, c * k_size))  # (C*K, M)
        dcols = np.matmul(w_t, dy_wide).reshape(n, c, k_size, span)
        dxf = np.zeros((n, c, plane), dtype=dcols.dtype)
        for index, shift in enumerate(shifts):
            dxf[:, :, shift : shift + span] += dcols[:, :, index]
        dx = _interior(dxf, pads, pad_h, pad_w, height, width)
    return dx, dw


def _interior(flat: np.ndarray, pads: list[int], pad_h: int, pad_w: int, height: int, width: int) -> np.ndarray:
    """The unpadded ``(N, C, height, width)`` view of flat padded planes ``(N, C, >= pad_h * pad_w)``."""
    planes = flat[:, :, : pad_h * pad_w].reshape(*flat.shape[:2], pad_h, pad_w)
    return planes[:, :, pads[0] : pads[0] + height, pads[1] : pads[1] + width]
