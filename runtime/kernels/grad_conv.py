"""ConvGrad: the gradients of an N-d grouped ``Conv`` with respect to its input, weight and bias.

``dW`` is one GEMM per group between the output gradient and the im2col columns, with batch and pixels folded
into the inner dimension; ``dX`` is the adjoint GEMM to columns followed by a col2im scatter-add that loops over
kernel offsets (never pixels). Large batches run in chunks so the columns stay under ``_COLS_BYTES``.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import numpy as np

from runtime.kernels.base import register
from runtime.kernels.grad_base import (
    GradKernel,
    crop_spatial,
    kernel_offsets,
    offset_slab,
    pad_spatial,
    resolve_pads,
    wide,
    window_view,
)

#: Upper bound of one chunk's im2col columns.
_COLS_BYTES = 128 << 20


@register
class ConvGrad(GradKernel):
    """``ConvGrad(dY, X, W) -> dX, dW, dB`` with the forward node's attributes; unnamed outputs are skipped."""

    op_type = "ConvGrad"
    attr_defaults: ClassVar[dict[str, Any]] = {"auto_pad": "NOTSET", "group": 1}

    def compute(self, dy: np.ndarray, x: np.ndarray, w: np.ndarray) -> tuple[np.ndarray | None, ...]:
        out_dtype = x.dtype
        dyc, xc, wc = wide(dy), wide(x), wide(w)
        kernel = list(w.shape[2:])
        nd = len(kernel)
        strides = list(self.attrs.get("strides") or [1] * nd)
        dilations = list(self.attrs.get("dilations") or [1] * nd)
        pads = resolve_pads(self.attrs["auto_pad"], self.attrs.get("pads"), x.shape[2:], kernel, strides, dilations)
        group = int(self.attrs["group"])
        n = x.shape[0]
        out = list(dy.shape[2:])
        per_sample = x.shape[1] * math.prod(kernel) * math.prod(out) * xc.itemsize
        chunk = max(1, min(n, _COLS_BYTES // max(per_sample, 1)))
        want_dx, want_dw = self.wants(0), self.wants(1)
        dx = np.empty(x.shape, dtype=xc.dtype) if want_dx else None
        dw = np.zeros((group, w.shape[0] // group, w.shape[1] * math.prod(kernel)), dtype=xc.dtype)
        for start in range(0, n, chunk):
            part = slice(start, min(n, start + chunk))
            dx_part, dw_part = _conv_grad_chunk(
                dyc[part], xc[part], wc, pads, strides, dilations, group, want_dx, want_dw
            )
            if dx is not None and dx_part is not None:
                dx[part] = dx_part
            if dw_part is not None:
                dw += dw_part
        db = dyc.sum(axis=(0, *range(2, dy.ndim))) if self.wants(2) else None
        return (
            None if dx is None else dx.astype(out_dtype, copy=False),
            dw.reshape(w.shape).astype(w.dtype, copy=False) if want_dw else None,
            None if db is None else db.astype(w.dtype, copy=False),
        )


def _conv_grad_chunk(
    dy: np.ndarray,
    x: np.ndarray,
    w: np.ndarray,
    pads: list[int],
    strides: list[int],
    dilations: list[int],
    group: int,
    want_dx: bool,
    want_dw: bool,
) -> tuple[np.ndarray | None, np.ndarray | None]:
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
