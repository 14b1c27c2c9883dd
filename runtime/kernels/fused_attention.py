"""FusedAttention (domain ``com.appopt``): ``softmax(scale * Q @ Kt + M) @ V`` as one op, created by
``runtime.passes.attention_fusion`` from the MatMul -> Mul/Div -> Add -> Softmax -> MatMul chain exporters emit.

Each of Q, Kt and V is read as a view of its source input: ``transpose(src, perm)[index]`` (attributes
``q_perm``/``q_index``... with ``index = -1`` for none), so head-splitting Transposes and the Gathers that slice a
packed QKV tensor cost nothing. ``trans_k = 1`` means the K view holds K (``[..., Sk, D]``) rather than K^T. The
result may be written transposed (``out_perm``), which absorbs the Transpose that merges the heads.

The mask is added to the scaled scores, or with ``mask_select = 1`` it is a boolean that keeps a score where it
equals ``mask_keep`` and puts ``mask_fill`` elsewhere (``Where``, as ``masked_fill`` exports).

The compiled kernel (``runtime/native/attention.c``) runs float32 operands whose batch dims fit (B, H); anything
else runs on NumPy, repeating the unfused ops step by step (MatMul, scale, Add, Softmax, MatMul).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np

from runtime import native
from runtime.kernels.activations import _softmax
from runtime.kernels.base import IntoKernel, register, store_into
from runtime.native.abi import Bound

DOMAIN = "com.appopt"


def source_view(src: np.ndarray, perm: Sequence[int] | None, index: int) -> np.ndarray:
    """``transpose(src, perm)[index]`` (no perm: ``src``; ``index < 0``: no indexing), always a view."""
    view = np.transpose(src, list(perm)) if perm else src
    return view[index] if index >= 0 else view


def inverse_perm(perm: Sequence[int]) -> list[int]:
    inv = [0] * len(perm)
    for i, p in enumerate(perm):
        inv[int(p)] = i
    return inv


def _lift(x: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """``x`` viewed with leading axes added (and broadcast) to ``shape``."""
    return np.broadcast_to(x, shape)


def _layout_key(arrays: Sequence[np.ndarray | None]) -> tuple[Any, ...]:
    """Address, shape, strides and dtype of each array: equal keys mean an argument block built for one set of
    arrays is valid for the other (the block keeps the first set alive, so the addresses cannot be reused)."""
    return tuple(
        None if a is None else (a.__array_interface__["data"][0], a.shape, a.strides, a.dtype.num) for a in arrays
    )


@register
class FusedAttention(IntoKernel):
    """``Y = softmax(scale * Q @ Kt + mask) @ V`` with Q, Kt and V read as views of the inputs (see module doc)."""

    op_type = "FusedAttention"
    uses_blas = True
    domain = DOMAIN
    since_version = 1
    fresh_output = True
    attr_defaults: ClassVar[dict[str, Any]] = {
        "scale": 1.0,
        "trans_k": 0,
        "q_index": -1,
        "k_index": -1,
        "v_index": -1,
        "mask_select": 0,
        "mask_keep": 0,
        "mask_fill": 0.0,
    }

    def setup(self) -> None:
        self.scale = float(self.attrs["scale"])
        div = self.attrs.get("div")
        #: The scale came from a Div by this value: the NumPy path divides, as the unfused graph did.
        self.div = None if div is None else float(div)
        self.trans_k = bool(self.attrs["trans_k"])
        self.views = [(self.attrs.get(f"{s}_perm"), int(self.attrs[f"{s}_index"])) for s in ("q", "k", "v")]
        #: A boolean mask selecting scores (Where): (the mask value that keeps the score, the fill elsewhere).
        self.select = None
        if int(self.attrs["mask_select"]):
            self.select = (bool(self.attrs["mask_keep"]), float(self.attrs["mask_fill"]))
        out_perm = self.attrs.get("out_perm")
        self.out_perm = list(out_perm) if out_perm else None
        #: The last compiled call made into a given output: (layout key of its arrays, argument block).
        self._last: tuple[tuple[Any, ...], native.Args] | None = None

    def _operands(
        self, q_src: np.ndarray, k_src: np.ndarray, v_src: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Q, Kt and V as the unfused MatMuls saw them (views)."""
        q, k, v = (source_view(a, perm, idx) for a, (perm, idx) in zip((q_src, k_src, v_src), self.views, strict=True))
        return q, (np.swapaxes(k, -1, -2) if self.trans_k else k), v

    def _geometry(
        self, q: np.ndarray, kt: np.ndarray, v: np.ndarray, mask: np.ndarray | None
    ) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
        """(4-D batch shape (B, H), the unfused result's shape) when the compiled kernel can take these operands."""
        if any(a.dtype != np.float32 or a.ndim < 2 for a in (q, kt, v)):
            return None
        if mask is not None and (mask.dtype != (np.bool_ if self.select else np.float32) or mask.ndim > 4):
            return None
        sq, d = q.shape[-2:]
        if kt.shape[-2] != d or v.shape[-2] != kt.shape[-1]:
            return None
        sk, dv = kt.shape[-1], v.shape[-1]
        try:
            mask_batch = () if mask is None else mask.shape[:-2]
            if mask is not None and np.broadcast_shapes(mask.shape[-2:], (sq, sk)) != (sq, sk):
                return None
            batch = np.broadcast_shapes(q.shape[:-2], kt.shape[:-2], v.shape[:-2], mask_batch)
        except ValueError:
            return None
        if len(batch) > 2:
            return None
        return (1,) * (2 - len(batch)) + tuple(batch), (*batch, sq, dv)

    def compute_into(
        self,
        out: np.ndarray | None,
        q_src: np.ndarray,
        k_src: np.ndarray,
        v_src: np.ndarray,
        mask: np.ndarray | None = None,
    ) -> np.ndarray:
        lib = native.lib()
        key = None
        if lib is not None and out is not None:
            # a planned run that could not prebind (an input reshaped by run-time values) meets the same arrays
            # every time: reuse the argument block built for them
            key = _layout_key((out, q_src, k_src, v_src, mask))
            cached = self._last
            if cached is not None and cached[0] == key:
                lib.attention(cached[1].ptr)
                return out
        q, kt, v = self._operands(q_src, k_src, v_src)
        if lib is not None:
            args = self._args(lib, q, kt, v, mask, out)
            if args is not None:
                block, y = args
                if key is not None:
                    self._last = (key, block)
                lib.attention(block.ptr)
                return y
        y = self.compute_numpy(q, kt, v, mask)
        return store_into(out, y)

    def _args(
        self,
        lib: native.NativeLib,
        q: np.ndarray,
        kt: np.ndarray,
        v: np.ndarray,
        mask: np.ndarray | None,
        out: np.ndarray | None,
    ) -> tuple[native.Args, np.ndarray] | None:
        """The compiled call's argument block and the output it writes (``out`` or a new array)."""
        from runtime.native.attention import attention_args

        geometry = self._geometry(q, kt, v, mask)
        if geometry is None:
            return None
        (b, h), y_shape = geometry
        sq, d, sk, dv = q.shape[-2], q.shape[-1], kt.shape[-1], v.shape[-1]
        if self.out_perm and sorted(self.out_perm) != list(range(len(y_shape))):
            return None
        final_shape = tuple(y_shape[p] for p in self.out_perm) if self.out_perm else y_shape
        if out is None:
            out = np.empty(final_shape, dtype=np.float32)
        elif out.shape != final_shape or out.dtype != np.float32:
            return None
        y = out.transpose(inverse_perm(self.out_perm)) if self.out_perm else out
        y4 = y[(None,) * (4 - y.ndim)]  # leading axes of size 1, as the batch (B, H) was padded
        q4 = _lift(q, (b, h, sq, d))
        k4 = np.swapaxes(_lift(kt, (b, h, d, sk)), -1, -2)
        v4 = _lift(v, (b, h, sk, dv))
        m4 = None if mask is None else _lift(mask, (b, h, sq, sk))
        block = attention_args(q4, k4, v4, m4, y4, self.scale, native.get_threads(), self.select)
        if block is None:
            return None
        block.keep.append(out)
        return block, out

    def bind(
        self,
        out: np.ndarray,
        q_src: np.ndarray,
        k_src: np.ndarray,
        v_src: np.ndarray,
        mask: np.ndarray | None = None,
    ) -> Bound | None:
        """A prebound compiled call over fixed buffers (the executor's static plan), or None."""
        lib = native.lib()
        if lib is None:
            return None
        from runtime.native.attention import bind_attention

        q, kt, v = self._operands(q_src, k_src, v_src)
        args = self._args(lib, q, kt, v, mask, out)
        if args is None or args[1] is not out:
            return None
        return bind_attention(lib, args[0])

    def compute_numpy(self, q: np.ndarray, kt: np.ndarray, v: np.ndarray, mask: np.ndarray | None) -> np.ndarray:
        """The unfused ops in order: MatMul, scale (Div or Mul), Add, Softmax, MatMul."""
        scores = np.matmul(q, kt)
        if self.div is not None:
            scores = scores / scores.dtype.type(self.div)
        elif self.scale != 1.0:
            scores = scores * scores.dtype.type(self.scale)
        if mask is not None and self.select is not None:
            keep, fill = self.select
            fill_value = scores.dtype.type(fill)
            scores = np.where(mask, scores, fill_value) if keep else np.where(mask, fill_value, scores)
        elif mask is not None:
            scores = scores + mask
        y = np.matmul(_softmax(scores, -1).astype(v.dtype, copy=False), v)
        if self.out_perm:
            y = np.ascontiguousarray(np.transpose(y, self.out_perm))
        return y
