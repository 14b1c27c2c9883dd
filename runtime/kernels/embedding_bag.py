"""The embedding bag as one op (domain ``com.appopt``), created by ``runtime.passes.embedding_bag``:

    EmbeddingBag(table, ids) = ReduceSum(Gather(table, ids[:, column] or ids, axis=0), axes=[1])   (mode "sum")

``table`` is ``[V, D]``; ``ids`` is ``[N, L]``, or ``[N, F, L]`` with ``column`` picking one of the F bags (the
``ids[:, i]`` Gather PyTorch puts before each table). ``mean`` divides by L (ReduceMean), ``keepdims`` keeps the
bag axis. The compiled kernel (``ap_embag``) sums the rows in one call; an id outside ``[-V, V)`` is an error, as
for Gather. The NumPy path repeats the unfused ops.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from runtime import native
from runtime.errors import KernelError
from runtime.kernels.base import IntoKernel, register, store_into
from runtime.kernels.fused import DOMAIN
from runtime.kernels.tensor_index import Gather
from runtime.native import ops
from runtime.native.convnets import embedding_bag_call, embedding_bag_ranges_call


@register
class EmbeddingBag(IntoKernel):
    op_type = "EmbeddingBag"
    domain = DOMAIN
    since_version = 1
    attr_defaults: ClassVar[dict[str, Any]] = {"column": -1, "mean": 0, "keepdims": 0}
    fresh_output = True

    def setup(self) -> None:
        self.column = int(self.attrs["column"])
        self.mean = bool(self.attrs["mean"])
        self.keepdims = bool(self.attrs["keepdims"])
        self.gather = Gather(self.node, {"axis": 0})

    def _out_shape(self, table: np.ndarray, ids: np.ndarray) -> tuple[int, ...]:
        return (ids.shape[0], 1, table.shape[1]) if self.keepdims else (ids.shape[0], table.shape[1])

    def bind(self, out: np.ndarray, table: np.ndarray, ids: np.ndarray) -> ops.Bound | None:
        """The compiled call writing into ``out`` (prebound for the static plan), or None where it does not apply."""
        lib = native.lib()
        if lib is None or out.shape != self._out_shape(table, ids):
            return None
        where = f"node {self.node.name!r} (EmbeddingBag)"
        return embedding_bag_call(lib, table, ids, self.column, out, self.mean, KernelError, where)

    def compute_into(self, out: np.ndarray | None, table: np.ndarray, ids: np.ndarray) -> np.ndarray:
        if table.ndim == 2 and ids.ndim >= 2 and table.dtype == np.float32:
            target = np.empty(self._out_shape(table, ids), dtype=np.float32) if out is None else out
            call = self.bind(target, table, np.ascontiguousarray(ids))
            if call is not None:
                call()
                return target
        return store_into(out, self.compute_numpy(table, ids))

    def compute_numpy(self, table: np.ndarray, ids: np.ndarray) -> np.ndarray:
        bag = np.take(ids, self.column, axis=1) if self.column >= 0 else ids
        rows = self.gather.compute(table, bag)
        if self.mean:
            return np.asarray(np.mean(rows, axis=1, keepdims=self.keepdims))
        return np.sum(rows, axis=1, keepdims=self.keepdims, dtype=rows.dtype)


@register
class EmbeddingBagRanges(IntoKernel):
    """Bags given by ranges, as PyTorch exports ``nn.EmbeddingBag`` (a Loop over bags, fused by
    ``runtime.passes.embedding_bag``): inputs ``table [V, D]``, ``idx [T]``, ``starts``, ``ends`` and the bag count
    (the Loop's trip count); ``out[i]`` sums (``mean``: averages) ``table[idx[starts[i]:ends[i]]]``, the bounds
    clamped as Slice clamps them."""

    op_type = "EmbeddingBagRanges"
    domain = DOMAIN
    since_version = 1
    attr_defaults: ClassVar[dict[str, Any]] = {"mean": 0}
    fresh_output = True

    def setup(self) -> None:
        self.mean = bool(self.attrs["mean"])
        self.gather = Gather(self.node, {"axis": 0})

    def bind(self, out: np.ndarray, *inputs: np.ndarray) -> ops.Bound | None:
        """The compiled call writing into ``out`` (prebound for the static plan), or None where it does not apply."""
        lib = native.lib()
        if lib is None or any(not isinstance(a, np.ndarray) for a in inputs):
            return None
        table, idx, starts, ends, bags = inputs
        where = f"node {self.node.name!r} (EmbeddingBagRanges)"
        return embedding_bag_ranges_call(lib, table, idx, starts, ends, bags, out, self.mean, KernelError, where)

    def compute_into(self, out: np.ndarray | None, *inputs: np.ndarray) -> np.ndarray:
        table, bags = inputs[0], inputs[4]
        if table.ndim == 2 and table.dtype == np.float32 and np.asarray(bags).size == 1:
            count = int(np.asarray(bags).reshape(-1)[0])
            target = np.empty((max(count, 0), table.shape[1]), np.float32) if out is None else out
            call = self.bind(target, *(np.ascontiguousarray(a) for a in inputs))
            if call is not None:
                call()
                return target
        return store_into(out, self.compute_numpy(*inputs))

    def compute_numpy(
        self, table: np.ndarray, idx: np.ndarray, starts: np.ndarray, ends: np.ndarray, bags: np.ndarray
    ) -> np.ndarray:
        rows = []
        for i in range(int(np.asarray(bags).reshape(-1)[0])):
            picked = self.gather.compute(table, idx[int(starts[i]) : int(ends[i])])
            rows.append(np.mean(picked, axis=0) if self.mean else np.sum(picked, axis=0, dtype=picked.dtype))
        return np.stack(rows) if rows else np.zeros((0, table.shape[1]), table.dtype)
