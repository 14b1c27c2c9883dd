"""Shared pieces of the gradient kernels (domain ``ai.appopt.training``).

ONNX has no backward ops, so the autodiff (``runtime/autodiff``) emits these private ones where a gradient is not a
short chain of standard ops. Every gradient kernel computes low-precision floats (fp16, bf16) in float32 and returns
the dtype of its forward input, like a GPU's fp16 GEMM with fp32 accumulation; float64 stays float64 (finite
difference tests run in it).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from runtime.kernels.base import Kernel

#: The private domain of the training ops (gradients, training-mode forward ops, overflow checks).
GRAD_DOMAIN = "ai.appopt.training"


class GradKernel(Kernel):
    """Base of the private training kernels: domain, version 1, and output-presence helpers."""

    domain = GRAD_DOMAIN
    since_version = 1

    def wants(self, index: int) -> bool:
        """True when output ``index`` exists and has a name (the autodiff leaves unneeded gradients unnamed)."""
        present = self.node.output_present
        if index >= self.node.n_outputs:
            return False
        return not present or index >= len(present) or present[index]


def wide(x: np.ndarray) -> np.ndarray:
    """``x`` in its compute dtype: float32 for fp16/bf16 (and float32), float64 for float64."""
    if x.dtype == np.float64 or x.dtype == np.float32:
        return x
    return x.astype(np.float32)


#: Rows of the source that ``swap_leading`` copies at once: a strip's reads and writes stay in cache.
_STRIP = 64


def swap_leading(a: np.ndarray) -> np.ndarray:
    """A C-contiguous copy of ``a`` with its first two axes swapped, ``(R, C, *rest) -> (C, R, *rest)``.

    One NumPy copy of a transposed view walks the destination with a stride of a whole source row; when that row
    is a power of two bytes long, every element lands in the same few cache sets (ResNet-50's 512x2048 weight
    gradient took 5x as long to transpose as a 520x2040 one). Copying strips of ``_STRIP`` source rows keeps the
    strip's lines in cache whatever the stride.
    """
    rows = a.shape[0]
    out = np.empty((a.shape[1], rows, *a.shape[2:]), dtype=a.dtype)
    for start in range(0, rows, _STRIP):
        out[:, start : start + _STRIP] = a[start : start + _STRIP].swapaxes(0, 1)
    return out


def shape_tuple(value: Any) -> tuple[int, ...]:
    """A shape given as an int64 tensor (the output of ``Shape`` or a constant) as a tuple."""
    return tuple(int(d) for d in np.asarray(value).reshape(-1))


def sum_to_shape(grad: np.ndarray, shape: Sequence[int]) -> np.ndarray:
    """Undo NumPy broadcasting: sum ``grad`` over the axes that broadcasting added or stretched to reach ``shape``."""
    shape = tuple(int(d) for d in shape)
    if grad.shape == shape:
        return grad
    lead = grad.ndim - len(shape)
    if lead < 0:
        raise ValueError(f"cannot reduce a gradient of shape {grad.shape} to the larger shape {shape}")
    stretched = tuple(lead + i for i, d in enumerate(shape) if d == 1 and grad.shape[lead + i] != 1)
    reduced = wide(grad).sum(axis=tuple(range(lead)) + stretched, keepdims=True) if lead or stretched else grad
    return reduced.reshape(shape).astype(grad.dtype, copy=False)


def refuse_cropping(pads: list[int]) -> list[int]:
    """A forward op's explicit pads (``conv.resolve_pads``), refused where negative: the gradient kernels do not
    undo a cropping."""
    if any(p < 0 for p in pads):
        raise ValueError(f"negative pads {pads} are not supported by the gradient kernels")
    return pads


def crop_spatial(xp: np.ndarray, pads: Sequence[int], shape: Sequence[int]) -> np.ndarray:
    """The ``shape``-sized spatial region of a padded array that starts after the begin pads."""
    nd = len(shape)
    region = tuple(slice(int(pads[i]), int(pads[i]) + int(shape[i])) for i in range(nd))
    return xp[(slice(None), slice(None), *region)]


def kernel_offsets(kernel: Sequence[int]) -> Iterator[tuple[int, ...]]:
    """Every position inside a kernel window, in C order (the order ``argmax`` over a flattened window uses)."""
    return itertools.product(*(range(k) for k in kernel))


def offset_slab(
    offset: Sequence[int], strides: Sequence[int], dilations: Sequence[int], out: Sequence[int]
) -> tuple[slice, ...]:
    """Index of the padded-input elements that kernel position ``offset`` touches, one per output pixel."""
    slabs = [
        slice(offset[i] * dilations[i], offset[i] * dilations[i] + strides[i] * (out[i] - 1) + 1, strides[i])
        for i in range(len(offset))
    ]
    return (slice(None), slice(None), *slabs)
