"""2-D convolutions whose weights change every run (a training graph feeds them each step), on the compiled NHWC
kernel (``runtime.native.conv.NhwcConv2d``) instead of NumPy's im2col and batched GEMM.

An inference graph's passes pack constant weights once; here the kernel object (its argument blocks and packed-weight
buffer) is kept per geometry and the new weights are packed into the same buffer before each call, so the argument
blocks stay valid. Activations stay NCHW around it: the NHWC copies in and out cost a few microseconds on the
digits CNN's planes, against the half of a step that its im2col and 32 small GEMMs took.

``conv_input_grad`` is the backward-data pass of a stride-1 ungrouped convolution, itself a convolution: of the
output gradient with the weights flipped and transposed, padded by ``dilation * (k - 1) - pad`` per side.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from runtime import native
from runtime.native.abi import Epilogue, pack_bias
from runtime.native.conv import NhwcConv2d
from runtime.native.training import pack_conv_weights


class StepConv:
    """NCHW float32 2-D convolutions with per-call weights, one compiled kernel object per geometry."""

    def __init__(self) -> None:
        self._kernels: dict[tuple[object, ...], NhwcConv2d | None] = {}

    def __call__(
        self,
        x: np.ndarray,
        w: np.ndarray,
        b: np.ndarray | None,
        group: int,
        strides: Sequence[int],
        dilations: Sequence[int],
        pads: Sequence[int],
    ) -> np.ndarray | None:
        """``Conv(x, w, b)`` in NCHW, or None when the compiled kernels cannot take it (the caller uses NumPy)."""
        lib = native.lib()
        if lib is None or not usable(x, w, b, pads):
            return None
        key = (w.shape, b is not None, group, tuple(strides), tuple(dilations), tuple(pads))
        if key not in self._kernels:
            conv: NhwcConv2d | None = NhwcConv2d(lib, w, b, group, strides, dilations, pads, Epilogue())
            self._kernels[key] = conv if conv is not None and conv.supported else None
        else:
            conv = self._kernels[key]
            if conv is not None:
                _repack(conv, w, b)
        if conv is None:
            return None
        y = conv(np.ascontiguousarray(x.transpose(0, 2, 3, 1)))
        return np.ascontiguousarray(y.transpose(0, 3, 1, 2))


def usable(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, pads: Sequence[int]) -> bool:
    """float32 2-D with non-negative pads: what the compiled NHWC kernel takes."""
    return (
        x.ndim == 4
        and x.dtype == np.float32
        and w.dtype == np.float32
        and (b is None or b.dtype == np.float32)
        and min(pads) >= 0
    )


def _repack(conv: NhwcConv2d, w: np.ndarray, b: np.ndarray | None) -> None:
    """New weights into the kernel's own buffers (their addresses are in its argument blocks)."""
    if conv.depthwise:
        conv.weight[:, : conv.m] = w.reshape(conv.m, conv.kh * conv.kw).T
        if b is not None and conv.bias is not None:
            conv.bias[: conv.m] = b
        return
    # [G][block][kh][kw][Cg][bw] written straight from any strided view of w: one copy, no transposed temporary;
    # the padding lanes of a last, partial block keep the zeros the kernel was built with
    g, bw, cg, kh, kw = conv.group, conv.bw, conv.cg, conv.kh, conv.kw
    lib = native.lib()
    if lib is None or not pack_conv_weights(lib, w, conv.weight, g, bw):  # compiled: a pool task per block
        full = conv.mg // bw
        wg = w.reshape(g, conv.mg, cg, kh, kw)
        packed = conv.weight.reshape(g, conv.nmb, kh, kw, cg, bw)
        if full:
            packed[:, :full] = wg[:, : full * bw].reshape(g, full, bw, cg, kh, kw).transpose(0, 1, 4, 5, 3, 2)
        if conv.mg > full * bw:
            packed[:, full, ..., : conv.mg - full * bw] = wg[:, full * bw :].transpose(0, 3, 4, 2, 1)
    if b is not None and conv.bias is not None:
        conv.bias[...] = pack_bias(b, conv.group, conv.mg, conv.bw)


def input_grad_geometry(
    w_shape: Sequence[int], pads: Sequence[int], dilations: Sequence[int]
) -> list[int] | None:
    """The pads of the convolution that gives a stride-1 convolution's input gradient, or None when one is
    negative (a pad wider than the dilated kernel: that input gradient is not a plain convolution)."""
    k_h, k_w = int(w_shape[2]), int(w_shape[3])
    reach = [dilations[0] * (k_h - 1), dilations[1] * (k_w - 1)]
    grad_pads = [reach[0] - pads[0], reach[1] - pads[1], reach[0] - pads[2], reach[1] - pads[3]]
    return grad_pads if min(grad_pads) >= 0 else None


def conv_input_grad(
    step: StepConv, dy: np.ndarray, w: np.ndarray, pads: Sequence[int], dilations: Sequence[int]
) -> np.ndarray | None:
    """dL/dX of a stride-1, one-group 2-D convolution from dL/dY, on the compiled kernel; None when it cannot."""
    grad_pads = input_grad_geometry(w.shape, pads, dilations)
    if grad_pads is None:
        return None
    # (C, M, kh, kw) as a view: packing it is the one copy (a transposed copy first took 7 ms at 512x2048, whose
    # power-of-two rows alias in the cache)
    flipped = w.transpose(1, 0, 2, 3)[:, :, ::-1, ::-1]
    return step(dy, flipped, None, 1, [1, 1], dilations, grad_pads)
