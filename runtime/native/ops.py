"""Python side of the compiled kernels: weight packing, argument blocks, and one callable per operation.

Each class packs what is constant (weights, bias, tap offsets) once, at construction; ``__call__`` only fills in
the addresses of the arrays of this call. Activations are NHWC float32, C-contiguous. The argument block
indices mirror the enums in ``kernels.c``.

The code lives per family: ``abi`` (argument-block enums, epilogue, packing, binding helpers), ``conv``
(convolutions), ``matmul`` (matrix products) and ``rows`` (pooling, row-wise and shuffle operations). This module
re-exports what callers use, so ``from runtime.native import ops`` keeps working.
"""

from __future__ import annotations

from runtime.native.abi import (
    ACTIVATIONS,
    CV_CHUNK,
    CV_OH,
    CV_OW,
    DP_MAXC,
    EW_NARGS,
    MAXTAPS,
    NB,
    VL,
    Bound,
    Epilogue,
    _bound,
    block_width,
    default_chunk,
    pack_bias,
    pack_blocks,
)
from runtime.native.conv import NhwcConv2d, NhwcDwPw
from runtime.native.matmul import DynamicMatMul, PackedMatMul
from runtime.native.rows import (
    PoolWindow,
    bind_channel_shuffle,
    bind_lrn,
    bind_pool,
    bind_rows,
    channel_shuffle,
    gelu,
    global_average_pool_nhwc,
    layernorm_rows,
    lrn,
    pool,
    softmax_rows,
    transpose_last2,
)

__all__ = [
    "ACTIVATIONS",
    "CV_CHUNK",
    "CV_OH",
    "CV_OW",
    "DP_MAXC",
    "EW_NARGS",
    "MAXTAPS",
    "NB",
    "VL",
    "Bound",
    "DynamicMatMul",
    "Epilogue",
    "NhwcConv2d",
    "NhwcDwPw",
    "PackedMatMul",
    "PoolWindow",
    "_bound",
    "bind_channel_shuffle",
    "bind_lrn",
    "bind_pool",
    "bind_rows",
    "block_width",
    "channel_shuffle",
    "default_chunk",
    "gelu",
    "global_average_pool_nhwc",
    "layernorm_rows",
    "lrn",
    "pack_bias",
    "pack_blocks",
    "pool",
    "softmax_rows",
    "transpose_last2",
]
