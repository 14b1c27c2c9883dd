"""ConvGrad: the gradients of an N-d grouped ``Conv`` with respect to its input, weight and bias.

``dW`` is one GEMM per group between the output gradient and the im2col columns, with batch and pixels folded
into the inner dimension; ``dX`` is the adjoint GEMM to columns followed by a col2im scatter-add that loops over
kernel offsets (never pixels). Large batches run in chunks so the columns stay under ``_COLS_BYTES``.

A 2-D ungrouped convolution (most of a CNN's) takes ``_flat_conv_grad`` instead: each padded plane is flattened
with its row width, so a kernel offset is one shift of the flat plane and every copy and scatter-add moves whole runs
of ``out_h x padded_w`` values instead of rows of ``out_w`` (on the digits CNN's 8x8 planes the col2im was a third
of the kernel). The output gradient is laid out at the padded width too (zeros in the extra columns, so they add
nothing): the GEMMs grow by ``padded_w / out_w``, the copies shrink far more. A strided convolution is split into
phase planes first (``PhaseGeometry``: the padded pixels one stride phase apart), in each of which every tap is
again one shift. A stride-1 float32 ``dX`` is a convolution of ``dY`` with the flipped weights on the compiled NHWC
kernel (``runtime.kernels.step_conv``) when the native library is there; the NumPy path stays its yardstick.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
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
from runtime.kernels.step_conv import StepConv, conv_input_grad, input_grad_geometry


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
        depthwise = group > 1 and w.shape[0] == group and w.shape[1] == 1
        flat = nd == 2 and (group == 1 or depthwise) and (strides == [1, 1] or math.prod(kernel) > 1)  # 1x1: one phase
        compiled_dx = want_dx and flat and strides == [1, 1]
        dx = _compiled_input_grad(self._step, dyc, wc, pads, dilations, group) if compiled_dx else None
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


def _compiled_input_grad(
    step: StepConv, dy: np.ndarray, w: np.ndarray, pads: list[int], dilations: list[int], group: int
) -> np.ndarray | None:
    """dX of a stride-1 2-D convolution, one group or depthwise, on the compiled kernel (None where it cannot): a
    depthwise convolution's is the depthwise convolution of dY with each channel's kernel flipped."""
    if group == 1:
        return conv_input_grad(step, dy, w, pads, dilations)
    grad_pads = input_grad_geometry(w.shape, pads, dilations)
    return None if grad_pads is None else step(dy, w[:, :, ::-1, ::-1], None, group, [1, 1], dilations, grad_pads)


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
    """``_conv_grad_chunk`` for 2-D, one group or depthwise, on flattened padded phase planes (module docstring)."""
    n, c, height, width = x.shape
    m, k_h, k_w = w.shape[0], w.shape[2], w.shape[3]
    out_h, out_w = dy.shape[2:]
    geo = phase_geometry((height, width), win.pads, win.strides, win.dilations, (k_h, k_w), (out_h, out_w))
    span, row = geo.span, geo.width
    k_size = k_h * k_w
    depthwise = win.group > 1
    dy_wide = None
    if want_dx or depthwise:  # dY at the phase planes' width: (N, M, out_h * width), zero in the extra columns
        dy_wide = np.zeros((n, m, out_h, row), dtype=dy.dtype)
        dy_wide[..., :out_w] = dy
        dy_wide = dy_wide.reshape(n, m, span)
    dw = None
    if want_dw:
        xf = np.zeros((n, c, len(geo.phases), geo.plane), dtype=x.dtype)
        for index, plane_part, x_part in geo.parts(win.pads, (height, width)):
            _phase_plane(xf, index, geo)[(slice(None), slice(None), *plane_part)] = x[
                (slice(None), slice(None), *x_part)
            ]
        dw = _depthwise_dw(xf, dy_wide, geo) if dy_wide is not None and depthwise else _dense_dw(xf, dy, geo)
    dx = None
    if want_dx:
        assert dy_wide is not None
        dxf = np.zeros((n, c, len(geo.phases), geo.plane), dtype=dy_wide.dtype)
        if depthwise:  # each channel's taps scale its own dY
            w_taps = w.reshape(c, k_size, 1)
            scaled = np.empty_like(dy_wide)
            for tap, (index, shift) in enumerate(geo.taps):
                run = dxf[:, :, index, shift : shift + span]
                np.add(run, np.multiply(dy_wide, w_taps[:, tap], out=scaled), out=run)
        else:
            w_t = w.reshape(m, c * k_size).T  # (C*K, M), a view: BLAS reads it transposed
            dcols = np.matmul(w_t, dy_wide).reshape(n, c, k_size, span)
            for tap, (index, shift) in enumerate(geo.taps):
                dxf[:, :, index, shift : shift + span] += dcols[:, :, tap]
        dx = _from_phases(dxf, geo, win.pads, x.shape)
    return dx, dw


def _dense_dw(xf: np.ndarray, dy: np.ndarray, geo: PhaseGeometry) -> np.ndarray:
    """One group's dW ``(1, M, C*K)``: one GEMM of the taps' runs (copied into columns) by dY's rows."""
    n, c = xf.shape[:2]
    m, (out_h, out_w) = dy.shape[1], dy.shape[2:]
    span, k_size = geo.span, len(geo.taps)
    cols = np.empty((c, k_size, n, span), dtype=xf.dtype)  # (C*K, N*span): one copy of long runs per offset
    for tap, (index, shift) in enumerate(geo.taps):
        cols[:, tap] = xf[:, :, index, shift : shift + span].transpose(1, 0, 2)
    # dY as rows of pixels at the phase planes' width, (N*span, M), zero in the extra columns
    dy_rows = np.zeros((n, out_h, geo.width, m), dtype=dy.dtype)
    dy_rows[:, :, :out_w] = dy.transpose(0, 2, 3, 1)
    cols2, rows2 = cols.reshape(c * k_size, n * span), dy_rows.reshape(n * span, m)
    if n * span < _SHORT_REDUCTION * m:  # few pixels per channel: BLAS writes dW in place, nothing to transpose
        return np.matmul(rows2.T, cols2.T).reshape(1, m, c * k_size)
    # a long reduction runs fastest as dW^T = cols @ rows, then one strip-wise transpose
    return swap_leading(np.matmul(cols2, rows2)).reshape(1, m, c * k_size)


def _depthwise_dw(xf: np.ndarray, dy_wide: np.ndarray, geo: PhaseGeometry) -> np.ndarray:
    """A depthwise convolution's dW ``(C, 1, K)``: per tap, its run times dY summed per channel (one einsum, no
    columns; a multiply then sums over the short pixel axis took 3-5x as long)."""
    c = xf.shape[1]
    dw = np.empty((c, 1, len(geo.taps)), dtype=xf.dtype)
    for tap, (index, shift) in enumerate(geo.taps):
        dw[:, 0, tap] = np.einsum("ncp,ncp->c", xf[:, :, index, shift : shift + geo.span], dy_wide)
    return dw


def _from_phases(dxf: np.ndarray, geo: PhaseGeometry, pads: list[int], shape: tuple[int, ...]) -> np.ndarray:
    """The input gradient from its phase planes: a view where one plane holds every input pixel (stride 1), else
    assembled, zero where no output reads the pixel (a stride's leftover rows)."""
    height, width = shape[2:]
    parts = list(geo.parts(pads, (height, width)))
    held = sum(len(range(*xs[0].indices(height))) * len(range(*xs[1].indices(width))) for _, _, xs in parts)
    if len(parts) == 1 and held == height * width:
        index, plane_part, _ = parts[0]
        return _phase_plane(dxf, index, geo)[(slice(None), slice(None), *plane_part)]
    dx = np.zeros(shape, dtype=dxf.dtype)
    for index, plane_part, x_part in parts:
        dx[(slice(None), slice(None), *x_part)] = _phase_plane(dxf, index, geo)[(slice(None), slice(None), *plane_part)]
    return dx


@dataclass(frozen=True)
class PhaseGeometry:
    """A 2-D convolution, strided or not, as shifts of flat *phase planes*.

    Padded input pixel ``(h, w)`` belongs to phase ``(h % s_h, w % s_w)``, at row ``h // s_h`` and column
    ``w // s_w`` of that phase's plane, stored flat at ``width`` columns a row. Output pixel ``(i, j)`` reads kernel
    tap ``(a, b)`` at padded ``(i s_h + a d_h, j s_w + b d_w)``: in the tap's phase at ``(i + q_a, j + q_b)``, so one
    tap's reads for every output pixel are the run of ``span = out_h * width`` values from ``shift = q_a * width +
    q_b`` (the last ``width - out_w`` of each row are read for nothing: they meet zeros in dY). At stride 1 there is
    one phase, the whole padded plane.
    """

    #: Columns of a phase plane's row (the padded width over the stride, rounded up).
    width: int
    #: Rows of a phase plane that some output reads.
    rows: int
    #: One tap's run: ``out_h * width``.
    span: int
    #: Flat length of a phase plane: every tap's run fits.
    plane: int
    #: The phases some tap reads, as (row phase, column phase).
    phases: tuple[tuple[int, int], ...]
    #: Per kernel tap in C order: (index into ``phases``, shift of its run).
    taps: tuple[tuple[int, int], ...]
    strides: tuple[int, int]

    def parts(
        self, pads: Sequence[int], size: Sequence[int]
    ) -> Iterator[tuple[int, tuple[slice, slice], tuple[slice, slice]]]:
        """Per phase holding input pixels that some output reads: its index, their region of its plane (rows,
        columns) and where they sit in the unpadded input (strided slices)."""
        for index, (p_h, p_w) in enumerate(self.phases):
            rows = _phase_axis(p_h, pads[0], self.strides[0], size[0], self.rows)
            cols = _phase_axis(p_w, pads[1], self.strides[1], size[1], self.width)
            if rows is not None and cols is not None:
                yield index, (rows[0], cols[0]), (rows[1], cols[1])


def phase_geometry(
    size: Sequence[int],
    pads: Sequence[int],
    strides: Sequence[int],
    dilations: Sequence[int],
    kernel: Sequence[int],
    out: Sequence[int],
) -> PhaseGeometry:
    """The phase planes of a 2-D convolution of an input of ``size`` (see ``PhaseGeometry``)."""
    s_h, s_w = int(strides[0]), int(strides[1])
    width = -(-(int(size[1]) + int(pads[1]) + int(pads[3])) // s_w)
    reach = [(a * dilations[0], b * dilations[1]) for a, b in kernel_offsets(kernel)]
    phases = tuple(sorted({(r_h % s_h, r_w % s_w) for r_h, r_w in reach}))
    taps = tuple((phases.index((r_h % s_h, r_w % s_w)), (r_h // s_h) * width + r_w // s_w) for r_h, r_w in reach)
    rows = int(out[0]) + max(r_h // s_h for r_h, _ in reach)
    span = int(out[0]) * width
    plane = max(rows * width, max(shift for _, shift in taps) + span)
    return PhaseGeometry(width, rows, span, plane, phases, taps, (s_h, s_w))


def _phase_axis(phase: int, pad: int, stride: int, extent: int, limit: int) -> tuple[slice, slice] | None:
    """Along one axis: the phase plane's slice holding the input positions of ``phase`` that lie below ``limit``
    plane rows, and those positions' slice of the unpadded input; None when there are none."""
    first = (phase - pad) % stride  # the first input position of this phase
    start = (first + pad) // stride
    count = min(len(range(first, extent, stride)), limit - start)
    if count <= 0:
        return None
    return slice(start, start + count), slice(first, first + (count - 1) * stride + 1, stride)


def _phase_plane(flat: np.ndarray, index: int, geo: PhaseGeometry) -> np.ndarray:
    """Phase ``index``'s plane ``(N, C, rows, width)`` as a view of the flat phase planes ``(N, C, phases, plane)``."""
    return flat[:, :, index, : geo.rows * geo.width].reshape(*flat.shape[:2], geo.rows, geo.width)
