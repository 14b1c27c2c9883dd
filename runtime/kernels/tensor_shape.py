"""Kernels that move data without computing on it: shape queries, reshapes, transposes, joins, splits, pads.

Most return NumPy views of their input (kernels never write into inputs, so sharing is safe).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import numpy as np

from runtime.kernels.base import Kernel, register


def int_list(x: Any) -> list[int]:
    """A 0-d/1-d integer tensor (or list) as a list of Python ints."""
    return [int(v) for v in np.asarray(x).reshape(-1)]


def norm_axis(axis: int, rank: int) -> int:
    """``axis`` in ``[0, rank)``; negative axes count from the end."""
    if not -rank <= axis < max(rank, 1):
        raise ValueError(f"axis {axis} is out of range for rank {rank}")
    return axis + rank if axis < 0 else axis


@register
class Identity(Kernel):
    """The input itself: a tensor, a sequence (list) or an optional (``None`` when empty)."""

    op_type = "Identity"
    is_view = True
    amp_class = "either"
    since_version = 1

    def compute(self, x: Any) -> tuple[Any]:
        return (x,)  # a 1-tuple: a sequence (list) must not be read as several outputs


@register
class Shape(Kernel):
    """The input's shape as int64, optionally the ``[start, end)`` slice of it (opset 15)."""

    op_type = "Shape"
    amp_class = "either"
    since_version = 1

    def compute(self, x: np.ndarray) -> np.ndarray:
        dims = list(np.shape(x))
        rank = len(dims)
        start = int(self.attrs.get("start", 0))
        end = self.attrs.get("end")
        start = min(max(start + rank if start < 0 else start, 0), rank)
        stop = rank if end is None else int(end)
        stop = min(max(stop + rank if stop < 0 else stop, 0), rank)
        return np.array(dims[start:stop], dtype=np.int64)


@register
class Size(Kernel):
    """Number of elements, as an int64 scalar."""

    op_type = "Size"
    amp_class = "either"
    since_version = 1

    def compute(self, x: np.ndarray) -> np.ndarray:
        return np.array(np.size(x), dtype=np.int64)


def reshape_target(in_shape: Sequence[int], shape: Sequence[int], allowzero: bool) -> tuple[int, ...]:
    """Resolve ONNX Reshape's ``0`` (copy the input dim, unless ``allowzero``) and ``-1`` (infer) entries."""
    dims = list(shape)
    if not allowzero:
        dims = [in_shape[i] if d == 0 and i < len(in_shape) else d for i, d in enumerate(dims)]
    if dims.count(-1) > 1:
        raise ValueError(f"reshape target {list(shape)} has more than one -1")
    if -1 in dims:
        known = math.prod(d for d in dims if d != -1)
        total = math.prod(in_shape)
        if known == 0 or total % known:
            raise ValueError(f"cannot reshape {tuple(in_shape)} to {list(shape)}")
        dims[dims.index(-1)] = total // known
    return tuple(dims)


@register
class Reshape(Kernel):
    """Reshape to the ``shape`` input (0 copies a dim unless ``allowzero``, -1 is inferred)."""

    op_type = "Reshape"
    is_view = True
    amp_class = "either"
    since_version = 5
    attr_defaults: ClassVar[dict[str, Any]] = {"allowzero": 0}

    def compute(self, x: np.ndarray, shape: np.ndarray) -> np.ndarray:
        return x.reshape(reshape_target(x.shape, int_list(shape), bool(self.attrs["allowzero"])))


@register
class Flatten(Kernel):
    """2-D view: dims before ``axis`` become rows, the rest columns."""

    op_type = "Flatten"
    is_view = True
    amp_class = "either"
    since_version = 1
    attr_defaults: ClassVar[dict[str, Any]] = {"axis": 1}

    def compute(self, x: np.ndarray) -> np.ndarray:
        axis = int(self.attrs["axis"])
        axis = axis + x.ndim if axis < 0 else axis
        return x.reshape(math.prod(x.shape[:axis]), math.prod(x.shape[axis:]))


def squeeze(x: np.ndarray, axes: list[int] | None) -> np.ndarray:
    if axes is None:
        return x.reshape(tuple(d for d in x.shape if d != 1))
    return np.squeeze(x, axis=tuple(norm_axis(a, x.ndim) for a in axes))


def unsqueeze(x: np.ndarray, axes: list[int]) -> np.ndarray:
    rank = x.ndim + len(axes)
    norm = sorted(norm_axis(a, rank) for a in axes)
    if len(set(norm)) != len(norm):
        raise ValueError(f"duplicate axes {axes}")
    shape = list(x.shape)
    for a in norm:
        shape.insert(a, 1)
    return x.reshape(shape)


@register
class Squeeze1(Kernel):
    """Squeeze with an ``axes`` attribute (opsets 1-12); no axes: every size-1 dim."""

    op_type = "Squeeze"
    is_view = True
    amp_class = "either"
    since_version = 1

    def compute(self, x: np.ndarray) -> np.ndarray:
        axes = self.attrs.get("axes")
        return squeeze(x, None if axes is None else list(axes))


@register
class Squeeze13(Kernel):
    """Squeeze with an optional ``axes`` input (opset 13+)."""

    op_type = "Squeeze"
    is_view = True
    amp_class = "either"
    since_version = 13

    def compute(self, x: np.ndarray, axes: np.ndarray | None = None) -> np.ndarray:
        return squeeze(x, None if axes is None else int_list(axes))


@register
class Unsqueeze1(Kernel):
    """Unsqueeze with an ``axes`` attribute (opsets 1-12); axes index the output."""

    op_type = "Unsqueeze"
    is_view = True
    amp_class = "either"
    since_version = 1

    def compute(self, x: np.ndarray) -> np.ndarray:
        return unsqueeze(x, list(self.attrs["axes"]))


@register
class Unsqueeze13(Kernel):
    """Unsqueeze with an ``axes`` input (opset 13+)."""

    op_type = "Unsqueeze"
    is_view = True
    amp_class = "either"
    since_version = 13

    def compute(self, x: np.ndarray, axes: np.ndarray) -> np.ndarray:
        return unsqueeze(x, int_list(axes))


@register
class Transpose(Kernel):
    """Permute dims by ``perm`` (default: reverse them)."""

    op_type = "Transpose"
    is_view = True
    amp_class = "either"
    since_version = 1

    def compute(self, x: np.ndarray) -> np.ndarray:
        perm = self.attrs.get("perm")
        return np.transpose(x, None if perm is None else list(perm))


@register
class Concat(Kernel):
    """Join tensors along ``axis`` (opsets 1-3 default it to 1)."""

    op_type = "Concat"
    amp_class = "widest"
    since_version = 1
    attr_defaults: ClassVar[dict[str, Any]] = {"axis": 1}

    def compute(self, *xs: np.ndarray) -> np.ndarray:
        axis = int(self.attrs["axis"])
        return np.concatenate(xs, axis=norm_axis(axis, xs[0].ndim))

    #: Writes into its planned buffer, so the static plan can bind it and the ops reading it.
    fresh_output = True

    def compute_into(self, out: np.ndarray, *xs: np.ndarray) -> np.ndarray:
        if any(x.dtype != out.dtype for x in xs):
            return self.compute(*xs)
        return np.concatenate(xs, axis=norm_axis(int(self.attrs["axis"]), xs[0].ndim), out=out)

    def bind(self, out: np.ndarray, *xs: np.ndarray) -> Callable[[], None] | None:
        if not xs or any(not isinstance(x, np.ndarray) or x.dtype != out.dtype for x in xs):
            return None
        parts, axis = tuple(xs), norm_axis(int(self.attrs["axis"]), xs[0].ndim)

        def call() -> None:
            np.concatenate(parts, axis=axis, out=out)

        return call


@register
class Concat4(Concat):
    """Concat with a required ``axis`` (opset 4+)."""

    since_version = 4
    attr_defaults: ClassVar[dict[str, Any]] = {}


def split_sizes(dim: int, split: list[int] | None, n_parts: int) -> list[int]:
    """Part sizes: the explicit ``split``, else ``n_parts`` chunks of ``ceil(dim / n)`` (the last smaller)."""
    if split is not None:
        if sum(split) != dim:
            raise ValueError(f"split {split} does not sum to the dimension {dim}")
        return split
    chunk = -(-dim // n_parts)
    sizes = [min(chunk, max(dim - i * chunk, 0)) for i in range(n_parts)]
    return sizes


def split_array(x: np.ndarray, axis: int, sizes: list[int]) -> list[np.ndarray]:
    bounds = [0, *itertools.accumulate(sizes)]
    index: list[Any] = [slice(None)] * x.ndim
    parts = []
    for lo, hi in itertools.pairwise(bounds):
        index[axis] = slice(lo, hi)
        parts.append(x[tuple(index)])
    return parts


@register
class Split(Kernel):
    """Split along ``axis`` by an explicit ``split`` (attribute or input), ``num_outputs`` or equal parts."""

    op_type = "Split"
    amp_class = "either"
    since_version = 1
    attr_defaults: ClassVar[dict[str, Any]] = {"axis": 0}

    def compute(self, x: np.ndarray, split: np.ndarray | None = None) -> list[np.ndarray]:
        axis = norm_axis(int(self.attrs["axis"]), x.ndim)
        sizes_given = int_list(split) if split is not None else self.attrs.get("split")
        n_parts = int(self.attrs.get("num_outputs", self.node.n_outputs))
        sizes = split_sizes(x.shape[axis], None if sizes_given is None else list(sizes_given), n_parts)
        return split_array(x, axis, sizes)


@register
class Tile(Kernel):
    """Repeat the input ``repeats[i]`` times along each dim."""

    op_type = "Tile"
    creates_size = True
    amp_class = "either"
    since_version = 6

    def compute(self, x: np.ndarray, repeats: np.ndarray) -> np.ndarray:
        return np.tile(x, int_list(repeats))


@register
class Expand(Kernel):
    """Broadcast the input against ``shape`` (the result has the broadcast of both shapes)."""

    op_type = "Expand"
    creates_size = True
    amp_class = "either"
    since_version = 8

    def compute(self, x: np.ndarray, shape: np.ndarray) -> np.ndarray:
        out_shape = np.broadcast_shapes(x.shape, tuple(int_list(shape)))
        return np.broadcast_to(x, out_shape).copy()


class _BlockMove(Kernel):
    """Move ``blocksize`` x ``blocksize`` tiles between the channels and the spatial dims of an NCHW tensor, in
    ``DCR`` (depth-column-row) or ``CRD`` channel order."""

    amp_class = "either"
    since_version = 1
    attr_defaults: ClassVar[dict[str, Any]] = {"mode": "DCR"}

    def compute(self, x: np.ndarray) -> np.ndarray:
        return self.move(x, int(self.attrs["blocksize"]), self.attrs["mode"] == "CRD")

    def move(self, x: np.ndarray, bs: int, crd: bool) -> np.ndarray:
        raise NotImplementedError


@register
class DepthToSpace(_BlockMove):
    """Move channel blocks into ``blocksize`` x ``blocksize`` spatial tiles (DCR or CRD channel order)."""

    op_type = "DepthToSpace"

    def move(self, x: np.ndarray, bs: int, crd: bool) -> np.ndarray:
        n, c, h, w = x.shape
        if crd:
            tmp = x.reshape(n, c // (bs * bs), bs, bs, h, w).transpose(0, 1, 4, 2, 5, 3)
        else:
            tmp = x.reshape(n, bs, bs, c // (bs * bs), h, w).transpose(0, 3, 4, 1, 5, 2)
        return tmp.reshape(n, c // (bs * bs), h * bs, w * bs)


@register
class SpaceToDepth(_BlockMove):
    """Move ``blocksize`` x ``blocksize`` spatial tiles into channels (DCR order, or CRD from opset 25)."""

    op_type = "SpaceToDepth"

    def move(self, x: np.ndarray, bs: int, crd: bool) -> np.ndarray:
        n, c, h, w = x.shape
        perm = (0, 1, 3, 5, 2, 4) if crd else (0, 3, 5, 1, 2, 4)
        tmp = x.reshape(n, c, h // bs, bs, w // bs, bs).transpose(perm)
        return tmp.reshape(n, c * bs * bs, h // bs, w // bs)


@register
class CenterCropPad(Kernel):
    """Crop or zero-pad each of ``axes`` to the target ``shape``, keeping the content centred."""

    op_type = "CenterCropPad"
    since_version = 18

    def compute(self, x: np.ndarray, shape: np.ndarray) -> np.ndarray:
        targets = int_list(shape)
        axes_attr = self.attrs.get("axes")
        axes = list(range(x.ndim)) if axes_attr is None else [norm_axis(a, x.ndim) for a in axes_attr]
        out_shape = list(x.shape)
        src: list[slice] = [slice(None)] * x.ndim
        dst: list[slice] = [slice(None)] * x.ndim
        for axis, target in zip(axes, targets, strict=True):
            dim = x.shape[axis]
            out_shape[axis] = target
            if target < dim:
                lo = (dim - target) // 2
                src[axis] = slice(lo, lo + target)
            elif target > dim:
                lo = (target - dim) // 2
                dst[axis] = slice(lo, lo + dim)
        out = np.zeros(out_shape, dtype=x.dtype)
        out[tuple(dst)] = x[tuple(src)]
        return out


def pad_array(x: np.ndarray, pads: list[int], mode: str, value: Any, axes: list[int] | None = None) -> np.ndarray:
    """ONNX Pad: ``pads`` is ``[begin_0, ..., begin_k, end_0, ..., end_k]`` over ``axes``; negatives crop."""
    axes = list(range(x.ndim)) if axes is None else [norm_axis(a, x.ndim) for a in axes]
    if len(pads) != 2 * len(axes):
        raise ValueError(f"pads has {len(pads)} values, expected {2 * len(axes)}")
    widths = [[0, 0] for _ in range(x.ndim)]
    for i, axis in enumerate(axes):
        widths[axis] = [pads[i], pads[i + len(axes)]]
    crop = tuple(slice(max(-b, 0), x.shape[a] - max(-e, 0)) for a, (b, e) in enumerate(widths))
    x = x[crop]
    grow = [(max(b, 0), max(e, 0)) for b, e in widths]
    if not any(b or e for b, e in grow):
        return x.copy()
    if mode == "constant":
        return np.pad(x, grow, mode="constant", constant_values=value)
    if mode not in ("reflect", "edge", "wrap"):
        raise ValueError(f"unknown pad mode {mode!r}")
    return np.pad(x, grow, mode=mode)  # type: ignore[call-overload]


@register
class Pad2(Kernel):
    """Pad with ``pads``/``value`` attributes (opsets 2-10)."""

    op_type = "Pad"
    creates_size = True
    since_version = 2
    attr_defaults: ClassVar[dict[str, Any]] = {"mode": "constant", "value": 0.0}

    def compute(self, x: np.ndarray) -> np.ndarray:
        value = np.array(self.attrs["value"]).astype(x.dtype)
        return pad_array(x, list(self.attrs["pads"]), self.attrs["mode"], value)


@register
class Pad11(Kernel):
    """Pad with ``pads``, optional ``constant_value`` and (opset 18) ``axes`` inputs."""

    op_type = "Pad"
    creates_size = True
    since_version = 11
    attr_defaults: ClassVar[dict[str, Any]] = {"mode": "constant"}

    def compute(
        self,
        x: np.ndarray,
        pads: np.ndarray,
        constant_value: np.ndarray | None = None,
        axes: np.ndarray | None = None,
    ) -> np.ndarray:
        if constant_value is None or np.size(constant_value) == 0:
            value = np.zeros((), dtype=x.dtype)
        else:
            value = np.asarray(constant_value).reshape(-1)[0]
        return pad_array(x, int_list(pads), self.attrs["mode"], value, None if axes is None else int_list(axes))
