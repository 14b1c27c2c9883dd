"""Other neural-network ops: Dropout, SwiGLU, TensorScatter, RoiAlign, NonMaxSuppression, GridSample, AffineGrid."""

from __future__ import annotations

import itertools
from typing import Any, ClassVar

import numpy as np

from runtime.kernels.base import Kernel, register
from runtime.kernels.conv import compute_dtype


@register
class Dropout(Kernel):
    """Identity at inference; with ``training_mode`` (opset 12+) a seeded Bernoulli mask scaled by 1/(1-ratio).

    The mask stream is NumPy's legacy ``RandomState(seed).uniform`` so a fixed ``seed`` reproduces the ONNX
    reference. Opsets before 12 have no training input: the op is always the identity.
    """

    op_type = "Dropout"
    never_fold = True
    amp_class = "either"
    since_version = 1
    attr_defaults: ClassVar[dict[str, Any]] = {"ratio": 0.5}

    def compute(self, x: np.ndarray, ratio: np.ndarray | None = None, training_mode: np.ndarray | None = None) -> Any:
        want_mask = self.node.n_outputs > 1
        rate = float(self.attrs["ratio"]) if ratio is None else float(ratio)
        training = training_mode is not None and bool(training_mode)
        if not training or rate == 0.0:
            # opsets 7-9 typed the mask like the data; bool from opset 10
            mask_dtype = x.dtype if self.node.opset < 10 else np.dtype(bool)
            return (x, np.ones(x.shape, dtype=mask_dtype)) if want_mask else x
        seed = self.attrs.get("seed")
        rng = np.random.RandomState(None if seed is None else int(seed))
        mask = rng.uniform(0.0, 1.0, x.shape) >= rate
        y = (mask * x * (1.0 / (1.0 - rate))).astype(x.dtype, copy=False)
        return (y, mask) if want_mask else y


@register
class SwiGLU(Kernel):
    """``A * sigmoid(alpha * A) * B`` (same shapes, no broadcasting)."""

    op_type = "SwiGLU"
    since_version = 28
    attr_defaults: ClassVar[dict[str, Any]] = {"alpha": 1.0}

    def compute(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        if a.shape != b.shape:
            raise ValueError(f"A {a.shape} and B {b.shape} must have the same shape")
        ct = compute_dtype(a.dtype)
        ac = a.astype(ct, copy=False)
        gate = (1.0 / (1.0 + np.exp(-float(self.attrs["alpha"]) * ac))).astype(a.dtype).astype(ct)
        return (ac * gate * b.astype(ct, copy=False)).astype(a.dtype, copy=False)


@register
class TensorScatter(Kernel):
    """Write ``update`` into a copy of ``past_cache`` along ``axis`` at per-batch offsets (linear or circular)."""

    op_type = "TensorScatter"
    since_version = 24
    attr_defaults: ClassVar[dict[str, Any]] = {"mode": "linear", "axis": -2}

    def compute(self, cache: np.ndarray, update: np.ndarray, write_indices: np.ndarray | None = None) -> np.ndarray:
        axis = int(self.attrs["axis"]) % cache.ndim
        if axis == 0:
            raise ValueError("axis cannot be the batch dimension")
        batch, max_len, seq = cache.shape[0], cache.shape[axis], update.shape[axis]
        starts = np.zeros(batch, dtype=np.int64) if write_indices is None else write_indices.astype(np.int64)
        positions = starts[:, None] + np.arange(seq)[None, :]
        if self.attrs["mode"] == "circular":
            positions %= max_len
        elif positions.size and (positions.max() >= max_len or positions.min() < 0):
            raise ValueError(f"write index + sequence length exceeds cache length {max_len}")
        out = cache.copy()
        out_view = np.moveaxis(out, axis, 1)
        out_view[np.arange(batch)[:, None], positions] = np.moveaxis(update, axis, 1)
        return out


@register
class RoiAlign(Kernel):
    """Average or max of bilinear samples on a regular grid in each output bin of each ROI.

    Loops over ROIs only; each ROI gathers all its samples for all channels at once.
    """

    op_type = "RoiAlign"
    since_version = 10
    attr_defaults: ClassVar[dict[str, Any]] = {
        "mode": "avg",
        "output_height": 1,
        "output_width": 1,
        "sampling_ratio": 0,
        "spatial_scale": 1.0,
    }

    def compute(self, x: np.ndarray, rois: np.ndarray, batch_indices: np.ndarray) -> np.ndarray:
        default_mode = "half_pixel" if self.node.opset >= 16 else "output_half_pixel"
        half_pixel = self.attrs.get("coordinate_transformation_mode", default_mode) == "half_pixel"
        ph, pw = int(self.attrs["output_height"]), int(self.attrs["output_width"])
        ratio = int(self.attrs["sampling_ratio"])
        scale = float(self.attrs["spatial_scale"])
        is_max = self.attrs["mode"] == "max"
        _, c, h, w = x.shape
        ct = np.float64 if x.dtype == np.float64 else np.float32
        xc = x.astype(ct, copy=False)
        out = np.empty((rois.shape[0], c, ph, pw), dtype=ct)
        offset = 0.5 if half_pixel else 0.0
        for r, (roi, b) in enumerate(zip(rois.astype(np.float64), batch_indices, strict=True)):
            x0, y0, x1, y1 = roi * scale - offset
            roi_w, roi_h = x1 - x0, y1 - y0
            if not half_pixel:
                roi_w, roi_h = max(roi_w, 1.0), max(roi_h, 1.0)
            bin_h, bin_w = roi_h / ph, roi_w / pw
            gh = ratio if ratio > 0 else int(np.ceil(roi_h / ph))
            gw = ratio if ratio > 0 else int(np.ceil(roi_w / pw))
            ys = y0 + (np.arange(ph)[:, None] * bin_h + (np.arange(gh)[None, :] + 0.5) * bin_h / gh).reshape(-1)
            xs = x0 + (np.arange(pw)[:, None] * bin_w + (np.arange(gw)[None, :] + 0.5) * bin_w / gw).reshape(-1)
            ylo, yhi, wy_lo, wy_hi = _roi_taps(ys, h)
            xlo, xhi, wx_lo, wx_hi = _roi_taps(xs, w)
            plane = xc[int(b)]
            corners = [
                plane[:, ylo[:, None], xlo[None, :]] * (wy_lo[:, None] * wx_lo[None, :]),
                plane[:, ylo[:, None], xhi[None, :]] * (wy_lo[:, None] * wx_hi[None, :]),
                plane[:, yhi[:, None], xlo[None, :]] * (wy_hi[:, None] * wx_lo[None, :]),
                plane[:, yhi[:, None], xhi[None, :]] * (wy_hi[:, None] * wx_hi[None, :]),
            ]  # each (C, ph*gh, pw*gw)
            if is_max:
                samples = np.maximum.reduce(corners).reshape(c, ph, gh, pw, gw)
                out[r] = samples.max(axis=(2, 4))
            else:
                samples = sum(corners[1:], corners[0]).reshape(c, ph, gh, pw, gw)
                out[r] = samples.sum(axis=(2, 4)) / max(gh * gw, 1)
        return out.astype(x.dtype, copy=False)


def _roi_taps(coords: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Low/high tap indices and weights for 1-d bilinear sampling as RoiAlign defines it."""
    outside = (coords < -1.0) | (coords > size)
    v = np.maximum(coords, 0.0)
    lo = v.astype(np.int64)
    at_edge = lo >= size - 1
    lo = np.where(at_edge, size - 1, lo)
    hi = np.where(at_edge, size - 1, lo + 1)
    v = np.where(at_edge, lo, v)
    frac = v - lo
    keep = ~outside
    return lo, hi, (1.0 - frac) * keep, frac * keep


@register
class NonMaxSuppression(Kernel):
    """Greedy per-(batch, class) suppression by IoU; output rows ``[batch, class, box]`` in score order."""

    op_type = "NonMaxSuppression"
    since_version = 10
    attr_defaults: ClassVar[dict[str, Any]] = {"center_point_box": 0}

    def compute(
        self,
        boxes: np.ndarray,
        scores: np.ndarray,
        max_output: np.ndarray | None = None,
        iou_threshold: np.ndarray | None = None,
        score_threshold: np.ndarray | None = None,
    ) -> np.ndarray:
        limit = 0 if max_output is None or max_output.size == 0 else max(int(max_output.reshape(-1)[0]), 0)
        iou_thr = 0.0 if iou_threshold is None or iou_threshold.size == 0 else float(iou_threshold.reshape(-1)[0])
        score_thr = (
            None if score_threshold is None or score_threshold.size == 0 else float(score_threshold.reshape(-1)[0])
        )
        corners = self._corners(boxes.astype(np.float64))
        selected: list[tuple[int, int, int]] = []
        if limit == 0:
            return np.zeros((0, 3), dtype=np.int64)
        for b, cls in itertools.product(range(scores.shape[0]), range(scores.shape[1])):
            s = scores[b, cls]
            cand = np.argsort(-s, kind="stable")
            if score_thr is not None:
                cand = cand[s[cand] > score_thr]
            box = corners[b]
            kept: list[int] = []
            while cand.size and len(kept) < limit:
                best, cand = cand[0], cand[1:]
                kept.append(int(best))
                if cand.size:
                    cand = cand[_iou(box[best], box[cand]) <= iou_thr]
            selected.extend((b, cls, k) for k in kept)
        return np.array(selected, dtype=np.int64).reshape(-1, 3)

    def _corners(self, boxes: np.ndarray) -> np.ndarray:
        """Boxes as ``[y_min, x_min, y_max, x_max]`` whatever the input format or corner order."""
        if self.attrs["center_point_box"]:
            xc, yc, w, h = np.moveaxis(boxes, -1, 0)
            return np.stack([yc - h / 2, xc - w / 2, yc + h / 2, xc + w / 2], axis=-1)
        y1, x1, y2, x2 = np.moveaxis(boxes, -1, 0)
        return np.stack([np.minimum(y1, y2), np.minimum(x1, x2), np.maximum(y1, y2), np.maximum(x1, x2)], axis=-1)


def _iou(one: np.ndarray, many: np.ndarray) -> np.ndarray:
    """IoU of one ``[y0, x0, y1, x1]`` box with each of ``many``; degenerate boxes give 0."""
    ih = np.minimum(one[2], many[:, 2]) - np.maximum(one[0], many[:, 0])
    iw = np.minimum(one[3], many[:, 3]) - np.maximum(one[1], many[:, 1])
    inter = np.where((ih > 0) & (iw > 0), ih * iw, 0.0)
    area1 = (one[2] - one[0]) * (one[3] - one[1])
    area2 = (many[:, 2] - many[:, 0]) * (many[:, 3] - many[:, 1])
    union = area1 + area2 - inter
    ok = (inter > 0) & (area1 > 0) & (area2 > 0) & (union > 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(ok, inter / np.where(union > 0, union, 1.0), 0.0)


_CUBIC_A = -0.75


def _cubic_coeffs(t: np.ndarray) -> list[np.ndarray]:
    """Keys cubic convolution weights (a = -0.75) for taps at -1, 0, 1, 2 around ``floor(x)``; ``t = x - floor``."""
    a = _CUBIC_A

    def near(d: np.ndarray) -> np.ndarray:
        return ((a + 2) * d - (a + 3)) * d * d + 1

    def far(d: np.ndarray) -> np.ndarray:
        return ((a * d - 5 * a) * d + 8 * a) * d - 4 * a

    return [far(t + 1), near(t), near(1 - t), far(2 - t)]


def _reflect(v: np.ndarray, lo: float, hi: float) -> np.ndarray:
    """Reflect coordinates into ``[lo, hi]`` by repeated mirroring at the borders."""
    rng = hi - lo
    if rng <= 0:
        return np.full_like(v, lo)
    below, above = v < lo, v > hi
    d = np.where(below, lo - v, np.where(above, v - hi, 0.0))
    flips = np.floor(d / rng)
    r = d - flips * rng
    even = flips % 2 == 0
    from_below = np.where(even, lo + r, hi - r)
    from_above = np.where(even, hi - r, lo + r)
    return np.where(below, from_below, np.where(above, from_above, v))


@register
class GridSample(Kernel):
    """Sample ``X`` ``(N, C, *spatial)`` at normalised grid points: nearest, (bi/tri)linear or (bi)cubic,
    with zeros, border or reflection padding. Separable taps are gathered per tap combination, not per pixel.
    """

    op_type = "GridSample"
    since_version = 16
    attr_defaults: ClassVar[dict[str, Any]] = {"padding_mode": "zeros", "align_corners": 0}

    _MODES: ClassVar[dict[str, str]] = {
        "bilinear": "linear",
        "bicubic": "cubic",
        "linear": "linear",
        "cubic": "cubic",
        "nearest": "nearest",
    }

    def setup(self) -> None:
        mode = self.attrs.get("mode", "linear" if self.node.opset >= 20 else "bilinear")
        if mode not in self._MODES:
            raise ValueError(f"unsupported mode {mode!r}")
        self.mode = self._MODES[mode]

    def compute(self, x: np.ndarray, grid: np.ndarray) -> np.ndarray:
        n, c = x.shape[:2]
        dims = x.shape[2:]
        nd = len(dims)
        out_shape = grid.shape[1:-1]
        align = bool(self.attrs["align_corners"])
        padding = self.attrs["padding_mode"]
        ct = np.float64 if x.dtype == np.float64 else np.float32
        g = grid.astype(np.float32, copy=False).reshape(n, -1, nd)
        coords, lows, highs = [], [], []
        for i, size in enumerate(dims):
            norm = g[..., nd - 1 - i]  # grid's last axis is (x, y, z): reversed spatial order
            v = (norm + 1) / 2 * (size - 1) if align else ((norm + 1) * size - 1) / 2
            if self.mode == "nearest":
                v = np.rint(v)
            lo, hi = (0.0, size - 1.0) if align else (-0.5, size - 0.5)
            if padding == "border" and self.mode != "cubic":
                # cubic clamps each tap index instead (as torch.grid_sample, which the spec follows, does)
                v = np.where((v < lo) | (v > hi), np.clip(v, 0, size - 1), v)
            elif padding == "reflection":
                v = _reflect(v, lo, hi)
            coords.append(v.astype(np.float64))
            lows.append(lo)
            highs.append(hi)

        taps_per_dim: list[list[tuple[np.ndarray, np.ndarray]]] = []
        for v in coords:
            if self.mode == "nearest":
                taps_per_dim.append([(np.trunc(v).astype(np.int64), np.ones_like(v))])
                continue
            base = np.floor(v)
            t = v - base
            base_i = base.astype(np.int64)
            if self.mode == "linear":
                taps_per_dim.append([(base_i, 1 - t), (base_i + 1, t)])
            else:
                w = _cubic_coeffs(t)
                taps_per_dim.append([(base_i + k - 1, w[k]) for k in range(4)])

        flat = x.astype(ct, copy=False).reshape(n, c, -1)
        y = np.zeros((n, c, g.shape[1]), dtype=np.float64)
        for combo in itertools.product(*taps_per_dim):
            weight = np.ones(g.shape[:2], dtype=np.float64)
            index = np.zeros(g.shape[:2], dtype=np.int64)
            valid = np.ones(g.shape[:2], dtype=bool)
            for i, (idx, wt) in enumerate(combo):
                idx, ok = self._pixel_index(idx, dims[i], lows[i], highs[i], padding)
                valid &= ok
                index = index * dims[i] + idx
                weight = weight * wt
            vals = np.take_along_axis(flat, np.broadcast_to(index[:, None, :], (n, c, index.shape[1])), axis=2)
            y += vals * (weight * valid)[:, None, :]
        return y.reshape(n, c, *out_shape).astype(x.dtype)

    @staticmethod
    def _pixel_index(idx: np.ndarray, size: int, lo: float, hi: float, padding: str) -> tuple[np.ndarray, np.ndarray]:
        """In-range index for a tap and whether it contributes (zeros padding drops out-of-range taps)."""
        if padding == "zeros":
            ok = (idx >= 0) & (idx < size)
            return np.clip(idx, 0, size - 1), ok
        if padding == "border":
            return np.clip(idx, 0, size - 1), np.ones(idx.shape, dtype=bool)
        refl = _reflect(idx.astype(np.float64), lo, hi).astype(np.int64)
        return np.clip(refl, 0, size - 1), np.ones(idx.shape, dtype=bool)


@register
class AffineGrid(Kernel):
    """Normalised sampling grid ``(N, *spatial, nd)`` from affine matrices ``theta`` for GridSample."""

    op_type = "AffineGrid"
    since_version = 20
    attr_defaults: ClassVar[dict[str, Any]] = {"align_corners": 0}

    def compute(self, theta: np.ndarray, size: np.ndarray) -> np.ndarray:
        spatial = [int(v) for v in size[2:]]
        nd = len(spatial)
        align = bool(self.attrs["align_corners"])
        axes = []
        for s in spatial:
            if align:
                axes.append(np.linspace(-1.0, 1.0, s) if s > 1 else np.zeros(1))
            else:
                axes.append((np.arange(s) * 2.0 + 1.0) / s - 1.0)
        mesh = np.meshgrid(*axes, indexing="ij")  # spatial order (d, h, w)
        # homogeneous coords in (x, y, z, 1) order: reversed spatial order
        homo = np.stack([*(mesh[nd - 1 - i] for i in range(nd)), np.ones(spatial)], axis=-1).reshape(-1, nd + 1)
        ct = compute_dtype(theta.dtype)
        grid = np.matmul(homo.astype(ct), np.swapaxes(theta.astype(ct, copy=False), 1, 2))  # (N, P, nd)
        return grid.reshape(theta.shape[0], *spatial, nd).astype(theta.dtype, copy=False)
