"""Convolutions: Conv, ConvTranspose, DeformConv, Col2Im, CausalConvWithState.

Conv is im2col (a strided window view, copied once) followed by one batched ``np.matmul`` over (batch, group);
ConvTranspose is the adjoint: one ``np.matmul`` to columns, then a col2im scatter-add that loops over kernel
offsets (never pixels). The window and padding helpers here are shared with the pooling kernels.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np
from numpy.lib.stride_tricks import as_strided

from runtime.geometry import conv_work_problem, window_attr_problem, window_output_problem
from runtime.kernels.base import Kernel, register

#: Compute dtype for low-precision floats (NumPy has no fast half-precision GEMM).
_WIDE = np.float32
#: Above this many bytes of im2col columns, Conv runs the batch one sample at a time.
_IM2COL_BYTES = 256 << 20


def compute_dtype(dtype: np.dtype[Any]) -> np.dtype[Any]:
    """float64 stays float64; every other float (fp16, bf16, float32) computes in float32."""
    return np.dtype(np.float64) if dtype == np.float64 else np.dtype(_WIDE)


def spatial_attrs(attrs: dict[str, Any], kernel: Sequence[int]) -> tuple[list[int], list[int]]:
    """``strides`` and ``dilations`` for ``len(kernel)`` spatial dims, defaulting to ones."""
    nd = len(kernel)
    strides = list(attrs.get("strides") or [1] * nd)
    dilations = list(attrs.get("dilations") or [1] * nd)
    return strides, dilations


def resolve_pads(
    auto_pad: str,
    pads: Sequence[int] | None,
    in_shape: Sequence[int],
    kernel: Sequence[int],
    strides: Sequence[int],
    dilations: Sequence[int],
) -> list[int]:
    """Explicit ``[begin..., end...]`` pads for a forward window op (Conv, pools) given ``auto_pad``."""
    nd = len(in_shape)
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        begin, end = [], []
        for size, k, s, d in zip(in_shape, kernel, strides, dilations, strict=True):
            out = -(-size // s)
            total = max(0, (out - 1) * s + (k - 1) * d + 1 - size)
            small, big = total // 2, total - total // 2
            begin.append(small if auto_pad == "SAME_UPPER" else big)
            end.append(big if auto_pad == "SAME_UPPER" else small)
        return begin + end
    if auto_pad == "VALID":
        return [0] * (2 * nd)
    return list(pads) if pads else [0] * (2 * nd)


def check_conv_geometry(
    op_type: str,
    attrs: dict[str, Any],
    in_spatial: Sequence[int],
    w_shape: Sequence[int],
    pads: Sequence[int],
    batch: int | None = None,
) -> None:
    """Refuse (ValueError; the kernel wrapper names the node) window attributes that do not fit the weight or the
    input, before any loop runs over them: ``kernel_shape`` must equal the weight's spatial shape; with ``batch``
    also an output or a number of multiply-adds beyond the caps of ``runtime.geometry``."""
    kernel = list(w_shape[2:])
    problem = window_attr_problem(op_type, attrs, len(in_spatial), kernel)
    if problem is None and len(kernel) != len(in_spatial):
        problem = f"the weight has {len(kernel)} spatial dims, the input {len(in_spatial)}"
    if problem is None:
        strides, dilations = spatial_attrs(attrs, kernel)
        problem = window_output_problem(in_spatial, kernel, strides, dilations, pads)
        if problem is None and batch is not None:
            nd = len(kernel)
            out = [
                (in_spatial[i] + pads[i] + pads[i + nd] - (kernel[i] - 1) * dilations[i] - 1) // strides[i] + 1
                for i in range(nd)
            ]
            problem = conv_work_problem(batch, int(w_shape[0]), int(w_shape[1]), out, kernel)
    if problem:
        raise ValueError(problem)


def window_view(
    xp: np.ndarray, kernel: Sequence[int], strides: Sequence[int], dilations: Sequence[int], out: Sequence[int]
) -> np.ndarray:
    """Read-only view ``(N, C, *out, *kernel)`` of the windows of an already padded ``(N, C, *spatial)`` array."""
    nd = len(kernel)
    st = xp.strides
    shape = (*xp.shape[:2], *out, *kernel)
    view_strides = (
        *st[:2],
        *(st[2 + i] * strides[i] for i in range(nd)),
        *(st[2 + i] * dilations[i] for i in range(nd)),
    )
    return as_strided(xp, shape=shape, strides=view_strides, writeable=False)


def pad_spatial(x: np.ndarray, pads: Sequence[int], value: float | int = 0) -> np.ndarray:
    """Pad the spatial dims of ``(N, C, *spatial)``; ``pads`` is ``[begin..., end...]`` and must be >= 0."""
    nd = x.ndim - 2
    if not any(pads):
        return x
    widths = [(0, 0), (0, 0)] + [(pads[i], pads[i + nd]) for i in range(nd)]
    return np.pad(x, widths, mode="constant", constant_values=value)


def conv_nd(
    x: np.ndarray,
    w: np.ndarray,
    bias: np.ndarray | None,
    pads: Sequence[int],
    strides: Sequence[int],
    dilations: Sequence[int],
    group: int,
) -> np.ndarray:
    """Grouped N-d convolution in the compute dtype of ``x`` (im2col + one batched matmul)."""
    n, c = x.shape[:2]
    m = w.shape[0]
    kernel = w.shape[2:]
    nd = len(kernel)
    cg, mg = c // group, m // group
    if w.shape[1] != cg or m % group:
        raise ValueError(f"weight shape {w.shape} does not fit {c} input channels in {group} groups")
    lo = [max(0, -p) for p in pads]  # negative pads crop
    if any(lo):
        x = x[(slice(None), slice(None), *(slice(lo[i], x.shape[2 + i] - lo[i + nd]) for i in range(nd)))]
        pads = [max(0, p) for p in pads]
    xp = pad_spatial(x, pads)
    out = [(xp.shape[2 + i] - ((kernel[i] - 1) * dilations[i] + 1)) // strides[i] + 1 for i in range(nd)]
    if min(out, default=1) <= 0:
        raise ValueError(f"kernel {tuple(kernel)} larger than padded input {xp.shape[2:]}")
    n_out = int(np.prod(out))
    k_size = int(np.prod(kernel))
    if n > 1 and n * c * k_size * n_out * xp.itemsize > _IM2COL_BYTES:
        # bound the im2col buffer: one sample at a time
        return np.concatenate(
            [conv_nd(xp[i : i + 1], w, bias, [0] * (2 * nd), strides, dilations, group) for i in range(n)]
        )
    if k_size == 1:
        sub = xp[(slice(None), slice(None), *(slice(0, out[i] * strides[i], strides[i]) for i in range(nd)))]
        cols = sub.reshape(n, group, cg, n_out)
    else:
        view = window_view(xp, kernel, strides, dilations, out)  # (N, C, *out, *k)
        view = view.reshape(n, group, cg, *out, *kernel)
        perm = (0, 1, 2, *range(3 + nd, 3 + 2 * nd), *range(3, 3 + nd))
        cols = view.transpose(perm).reshape(n, group, cg * k_size, n_out)
    w_mat = w.reshape(group, mg, cg * k_size)
    y = np.matmul(w_mat, cols)  # (N, G, Mg, P)
    y = y.reshape(n, m, *out)
    if bias is not None:
        y = y + bias.reshape(1, m, *([1] * nd))
    return y


def col2im_add(
    cols: np.ndarray, out_spatial: Sequence[int], strides: Sequence[int], dilations: Sequence[int]
) -> np.ndarray:
    """Scatter-add ``cols`` of shape ``(N, C, *kernel, *blocks)`` into a zero ``(N, C, *out_spatial)`` image.

    Loops over kernel offsets only; each step adds one strided slab.
    """
    nd = len(out_spatial)
    kernel = cols.shape[2 : 2 + nd]
    blocks = cols.shape[2 + nd :]
    img = np.zeros((*cols.shape[:2], *out_spatial), dtype=cols.dtype)
    for k_idx in itertools.product(*(range(k) for k in kernel)):
        slab = tuple(
            slice(k_idx[i] * dilations[i], k_idx[i] * dilations[i] + strides[i] * (blocks[i] - 1) + 1, strides[i])
            for i in range(nd)
        )
        src: tuple[Any, ...] = (slice(None), slice(None), *k_idx)
        img[(slice(None), slice(None), *slab)] += cols[src]
    return img


def crop_or_extend(full: np.ndarray, head: Sequence[int], out: Sequence[int]) -> np.ndarray:
    """``out``-sized spatial window of ``full`` starting at ``head`` (may be negative); outside reads as zero."""
    nd = len(out)
    if all(h == 0 for h in head) and tuple(full.shape[2:]) == tuple(out):
        return full
    if all(h >= 0 and h + o <= f for h, o, f in zip(head, out, full.shape[2:], strict=True)):
        return full[(slice(None), slice(None), *(slice(head[i], head[i] + out[i]) for i in range(nd)))]
    res = np.zeros((*full.shape[:2], *out), dtype=full.dtype)
    src, dst = [], []
    for i in range(nd):
        start, stop = max(head[i], 0), min(head[i] + out[i], full.shape[2 + i])
        src.append(slice(start, max(start, stop)))
        dst.append(slice(start - head[i], start - head[i] + max(0, stop - start)))
    res[(slice(None), slice(None), *dst)] = full[(slice(None), slice(None), *src)]
    return res


class _Convolution(Kernel):
    """The convolutions' traits: GEMMs on BLAS, worth running in low precision; ``auto_pad`` and ``group``."""

    uses_blas = True
    amp_class = "low"
    attr_defaults: ClassVar[dict[str, Any]] = {"auto_pad": "NOTSET", "group": 1}


@register
class Conv(_Convolution):
    """N-d grouped convolution with explicit or automatic padding, strides and dilations."""

    op_type = "Conv"
    #: The compiled path for weights fed at run time (``prepare`` sets it; see ``runtime.kernels.step_conv``).
    _step: Any = None

    def prepare(self, constants: Sequence[Any], shapes: Sequence[Any]) -> None:
        """Weights fed every run (a training graph's) take the compiled NHWC kernel; constant weights are the graph
        passes' business (they pack them once), and this NumPy kernel stays their yardstick."""
        if len(constants) > 1 and constants[1] is None:
            from runtime.kernels.step_conv import StepConv

            self._step = StepConv()

    def compute(self, x: np.ndarray, w: np.ndarray, b: np.ndarray | None = None) -> np.ndarray:
        kernel = w.shape[2:]
        strides, dilations = spatial_attrs(self.attrs, kernel)
        pads = resolve_pads(self.attrs["auto_pad"], self.attrs.get("pads"), x.shape[2:], kernel, strides, dilations)
        check_conv_geometry("Conv", self.attrs, x.shape[2:], w.shape, pads, x.shape[0])
        if self._step is not None:
            fast = self._step(x, w, b, int(self.attrs["group"]), strides, dilations, pads)
            if fast is not None:
                return fast
        ct = compute_dtype(x.dtype)
        y = conv_nd(
            x.astype(ct, copy=False),
            w.astype(ct, copy=False),
            None if b is None else b.astype(ct, copy=False),
            pads,
            strides,
            dilations,
            int(self.attrs["group"]),
        )
        return y.astype(x.dtype, copy=False)


@register
class ConvTranspose(_Convolution):
    """Transposed (fractionally strided) N-d convolution: GEMM to columns, then col2im."""

    op_type = "ConvTranspose"

    def compute(self, x: np.ndarray, w: np.ndarray, b: np.ndarray | None = None) -> np.ndarray:
        group = int(self.attrs["group"])
        n, c = x.shape[:2]
        in_shape = x.shape[2:]
        nd = len(in_shape)
        kernel = w.shape[2:]
        problem = window_attr_problem("ConvTranspose", self.attrs, nd, kernel)
        if problem:
            raise ValueError(problem)
        cg, mg = c // group, w.shape[1]
        m = mg * group
        strides, dilations = spatial_attrs(self.attrs, kernel)
        out_pad = list(self.attrs.get("output_padding") or [0] * nd)[:nd]
        full = [strides[i] * (in_shape[i] - 1) + (kernel[i] - 1) * dilations[i] + 1 for i in range(nd)]
        head, out = self._geometry(in_shape, full, strides, out_pad)
        if nd == 2 and x.dtype == np.float32:  # the compiled gather, when available
            from runtime.kernels.conv_transpose import conv_transpose_2d

            fast = conv_transpose_2d(x, w, b, group, strides, dilations, head, out)
            if fast is not None:
                return fast

        ct = compute_dtype(x.dtype)
        k_size = int(np.prod(kernel))
        x_mat = x.astype(ct, copy=False).reshape(n, group, cg, -1)  # (N, G, Cg, P)
        w_mat = w.astype(ct, copy=False).reshape(group, cg, mg * k_size).transpose(0, 2, 1)  # (G, Mg*K, Cg)
        cols = np.matmul(w_mat, x_mat).reshape(n, m, *kernel, *in_shape)
        img = col2im_add(cols, full, strides, dilations)
        y = crop_or_extend(img, head, out)
        if b is not None:
            y = y + b.astype(ct, copy=False).reshape(1, m, *([1] * nd))
        return y.astype(x.dtype, copy=False)

    def _geometry(
        self, in_shape: Sequence[int], full: Sequence[int], strides: Sequence[int], out_pad: Sequence[int]
    ) -> tuple[list[int], list[int]]:
        """Begin offsets into the uncropped result and the output spatial shape."""
        nd = len(in_shape)
        auto_pad = self.attrs["auto_pad"]
        output_shape = self.attrs.get("output_shape")
        pads = self.attrs.get("pads")
        if output_shape is not None or (auto_pad in ("SAME_UPPER", "SAME_LOWER") and not pads):
            if output_shape is not None:
                out = list(output_shape)[-nd:]
            else:
                out = [in_shape[i] * strides[i] for i in range(nd)]
            head = []
            for i in range(nd):
                total = full[i] + out_pad[i] - out[i]
                head.append(total // 2 if auto_pad == "SAME_UPPER" else total - total // 2)
            return head, out
        pads = list(pads) if pads else [0] * (2 * nd)
        out = [full[i] + out_pad[i] - pads[i] - pads[i + nd] for i in range(nd)]
        return pads[:nd], out


@register
class Col2Im(Kernel):
    """Rearrange column blocks ``(N, C*prod(block), L)`` back into an image, summing overlaps."""

    op_type = "Col2Im"
    since_version = 18

    def compute(self, cols: np.ndarray, image_shape: np.ndarray, block_shape: np.ndarray) -> np.ndarray:
        image = [int(v) for v in image_shape]
        block = [int(v) for v in block_shape]
        nd = len(image)
        strides, dilations = spatial_attrs(self.attrs, block)
        pads = list(self.attrs.get("pads") or [0] * (2 * nd))
        padded = [image[i] + pads[i] + pads[i + nd] for i in range(nd)]
        blocks = [(padded[i] - ((block[i] - 1) * dilations[i] + 1)) // strides[i] + 1 for i in range(nd)]
        n = cols.shape[0]
        k_size = int(np.prod(block))
        if cols.shape[1] % k_size or cols.shape[2] != int(np.prod(blocks)):
            raise ValueError(f"input shape {cols.shape} does not match blocks {block} over image {image}")
        c = cols.shape[1] // k_size
        img = col2im_add(cols.reshape(n, c, *block, *blocks), padded, strides, dilations)
        return np.ascontiguousarray(crop_or_extend(img, pads[:nd], image))


def bilinear_gather(img: np.ndarray, ys: np.ndarray, xs: np.ndarray) -> np.ndarray:
    """Sample ``img`` ``(N, C, H, W)`` at per-batch points ``ys, xs`` ``(N, *pts)`` -> ``(N, C, *pts)``.

    Bilinear with zero outside the image (each of the four corners is checked on its own).
    """
    n, c, h, w = img.shape
    pts_shape = ys.shape[1:]
    ys = ys.reshape(n, -1)
    xs = xs.reshape(n, -1)
    y0 = np.floor(ys)
    x0 = np.floor(xs)
    wy1 = ys - y0
    wx1 = xs - x0
    y0i = y0.astype(np.int64)
    x0i = x0.astype(np.int64)
    flat = img.reshape(n, c, h * w)
    out = np.zeros((n, c, ys.shape[1]), dtype=img.dtype)
    for dy, dx in ((0, 0), (0, 1), (1, 0), (1, 1)):
        yy, xx = y0i + dy, x0i + dx
        weight = (wy1 if dy else 1 - wy1) * (wx1 if dx else 1 - wx1)
        valid = (yy >= 0) & (yy < h) & (xx >= 0) & (xx < w)
        idx = np.where(valid, yy * w + xx, 0)
        vals = np.take_along_axis(flat, np.broadcast_to(idx[:, None, :], (n, c, idx.shape[1])), axis=2)
        out += vals * (weight * valid)[:, None, :].astype(img.dtype)
    return out.reshape(n, c, *pts_shape)


@register
class DeformConv(Kernel):
    """2-d deformable convolution: bilinear samples at offset kernel taps, optional mask, then one GEMM."""

    op_type = "DeformConv"
    uses_blas = True
    since_version = 19
    attr_defaults: ClassVar[dict[str, Any]] = {"group": 1, "offset_group": 1}

    def compute(
        self,
        x: np.ndarray,
        w: np.ndarray,
        offset: np.ndarray,
        b: np.ndarray | None = None,
        mask: np.ndarray | None = None,
    ) -> np.ndarray:
        if x.ndim != 4:
            raise ValueError(f"only 2-d DeformConv is supported, got input rank {x.ndim}")
        group, off_groups = int(self.attrs["group"]), int(self.attrs["offset_group"])
        n, c, _, _ = x.shape
        m, cg, kh, kw = w.shape
        strides, dilations = spatial_attrs(self.attrs, (kh, kw))
        pads = list(self.attrs.get("pads") or [0, 0, 0, 0])
        oh, ow = offset.shape[2:]
        ct = compute_dtype(x.dtype)
        xc = x.astype(ct, copy=False)
        off = offset.astype(ct, copy=False).reshape(n, off_groups, kh, kw, 2, oh, ow)
        base_h = (np.arange(oh) * strides[0] - pads[0])[None, :, None] + (np.arange(kh) * dilations[0])[:, None, None]
        base_w = (np.arange(ow) * strides[1] - pads[1])[None, None, :] + (np.arange(kw) * dilations[1])[:, None, None]
        # sampling points per offset group: (N, G_off, kh, kw, oh, ow)
        ys = base_h[None, None, :, None, :, :] + off[:, :, :, :, 0]
        xs = base_w[None, None, None, :, :, :] + off[:, :, :, :, 1]
        c_off = c // off_groups
        cols = np.empty((n, c, kh, kw, oh, ow), dtype=ct)
        for g in range(off_groups):
            chans = slice(g * c_off, (g + 1) * c_off)
            cols[:, chans] = bilinear_gather(xc[:, chans], ys[:, g], xs[:, g])
        if mask is not None:
            mk = mask.astype(ct, copy=False).reshape(n, off_groups, 1, kh, kw, oh, ow)
            cols = (cols.reshape(n, off_groups, c_off, kh, kw, oh, ow) * mk).reshape(cols.shape)
        cols_mat = cols.reshape(n, group, cg * kh * kw, oh * ow)
        y = np.matmul(w.astype(ct, copy=False).reshape(group, m // group, cg * kh * kw), cols_mat)
        y = y.reshape(n, m, oh, ow)
        if b is not None:
            y = y + b.astype(ct, copy=False).reshape(1, m, 1, 1)
        return y.astype(x.dtype, copy=False)


@register
class CausalConvWithState(Kernel):
    """Depthwise causal 1-d conv over ``(B, C, L)`` with carried state of the last ``k-1`` inputs."""

    op_type = "CausalConvWithState"
    since_version = 27
    attr_defaults: ClassVar[dict[str, Any]] = {"activation": "none"}

    def setup(self) -> None:
        if self.attrs["activation"] not in ("none", "silu", "swish"):
            raise ValueError(f"unsupported activation {self.attrs['activation']!r}")

    def compute(
        self,
        x: np.ndarray,
        w: np.ndarray,
        b: np.ndarray | None = None,
        past_state: np.ndarray | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        n, c, _ = x.shape
        k = w.shape[2]
        if past_state is None:
            past_state = np.zeros((n, c, k - 1), dtype=x.dtype)
        padded = np.concatenate([past_state.astype(x.dtype, copy=False), x], axis=2)
        ct = compute_dtype(x.dtype)
        y = conv_nd(
            padded.astype(ct, copy=False),
            w.astype(ct, copy=False),
            None if b is None else b.astype(ct, copy=False),
            [0, 0],
            [1],
            [1],
            c,
        ).astype(x.dtype)
        if self.attrs["activation"] != "none":
            yf = y.astype(np.float32)
            y = (yf / (1.0 + np.exp(-yf))).astype(x.dtype)
        present = padded[:, :, padded.shape[2] - (k - 1) :]
        return y, np.ascontiguousarray(present)
