"""Sequence kernels: a sequence is a Python list of arrays; every op returns a new list (inputs stay intact).

A kernel returning a list would be read as several outputs, so sequence results are wrapped in a 1-tuple.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from runtime.kernels.base import Kernel, register
from runtime.kernels.tensor_shape import int_list, norm_axis, split_array, split_sizes


def seq_position(position: np.ndarray | None, length: int, *, insert: bool) -> int:
    """A position in ``[-n, n-1]`` (``[-n, n]`` when inserting) as a non-negative list index."""
    if position is None:
        return length if insert else length - 1
    pos = int(np.asarray(position).reshape(-1)[0])
    upper = length if insert else length - 1
    if not -length <= pos <= upper:
        raise IndexError(f"sequence position {pos} is out of range for a sequence of length {length}")
    return pos + length if pos < 0 else pos


@register
class SequenceConstruct(Kernel):
    """A sequence of the input tensors."""

    op_type = "SequenceConstruct"
    since_version = 11

    def compute(self, *tensors: np.ndarray) -> tuple[list[np.ndarray]]:
        return (list(tensors),)


@register
class SequenceEmpty(Kernel):
    """An empty sequence (the ``dtype`` attribute only types it)."""

    op_type = "SequenceEmpty"
    since_version = 11

    def compute(self) -> tuple[list[np.ndarray]]:
        return ([],)


@register
class SequenceInsert(Kernel):
    """The sequence with ``tensor`` inserted at ``position`` (default: appended)."""

    op_type = "SequenceInsert"
    since_version = 11

    def compute(
        self, seq: list[np.ndarray], tensor: np.ndarray, position: np.ndarray | None = None
    ) -> tuple[list[np.ndarray]]:
        out = list(seq)
        out.insert(seq_position(position, len(seq), insert=True), tensor)
        return (out,)


@register
class SequenceAt(Kernel):
    """The tensor at ``position`` (negative counts from the end)."""

    op_type = "SequenceAt"
    since_version = 11

    def compute(self, seq: list[np.ndarray], position: np.ndarray) -> np.ndarray:
        return seq[seq_position(position, len(seq), insert=False)]


@register
class SequenceErase(Kernel):
    """The sequence without the tensor at ``position`` (default: the last)."""

    op_type = "SequenceErase"
    since_version = 11

    def compute(self, seq: list[np.ndarray], position: np.ndarray | None = None) -> tuple[list[np.ndarray]]:
        out = list(seq)
        del out[seq_position(position, len(seq), insert=False)]
        return (out,)


@register
class SequenceLength(Kernel):
    """Number of tensors in the sequence, as an int64 scalar."""

    op_type = "SequenceLength"
    since_version = 11

    def compute(self, seq: list[np.ndarray]) -> np.ndarray:
        return np.array(len(seq), dtype=np.int64)


@register
class SplitToSequence(Kernel):
    """Split along ``axis`` into a sequence: by sizes, by a chunk size, or into size-1 parts (``keepdims``)."""

    op_type = "SplitToSequence"
    since_version = 11
    attr_defaults: ClassVar[dict[str, Any]] = {"axis": 0, "keepdims": 1}

    def compute(self, x: np.ndarray, split: np.ndarray | None = None) -> tuple[list[np.ndarray]]:
        axis = norm_axis(int(self.attrs["axis"]), x.ndim)
        dim = x.shape[axis]
        if split is None:
            parts = split_array(x, axis, [1] * dim)
            return (parts if self.attrs["keepdims"] else [np.squeeze(p, axis=axis) for p in parts],)
        if np.ndim(split) == 0:
            chunk = int(split)
            sizes = [min(chunk, dim - start) for start in range(0, dim, chunk)]
        else:
            sizes = split_sizes(dim, int_list(split), 0)
        return (split_array(x, axis, sizes),)


@register
class ConcatFromSequence(Kernel):
    """Concatenate a sequence along ``axis``, or stack it on a new axis when ``new_axis`` is 1."""

    op_type = "ConcatFromSequence"
    since_version = 11
    attr_defaults: ClassVar[dict[str, Any]] = {"new_axis": 0}

    def compute(self, seq: list[np.ndarray]) -> np.ndarray:
        axis = int(self.attrs["axis"])
        if self.attrs["new_axis"]:
            rank: Any = seq[0].ndim + 1
            return np.stack(seq, axis=norm_axis(axis, rank))
        return np.concatenate(seq, axis=norm_axis(axis, seq[0].ndim))
