"""2-D ConvTranspose on the compiled kernels: one matmul to per-tap columns, then ``ap_col2im_gather``
(runtime/native/upsample.c), which writes each output pixel once with its bias, already cropped or output-padded.

``conv_transpose_2d`` returns ``None`` where it does not apply (no compiled kernels, not float32, weights or bias
of another shape); the caller then takes the NumPy path (``runtime.kernels.conv.ConvTranspose``).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from runtime import native

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
