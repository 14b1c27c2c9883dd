"""Sequence and optional kernels: positions, immutability of input sequences, and one-output wrapping."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from runtime.errors import KernelError
from runtime.kernels import NodeContext, resolve
from runtime.kernels.base import Kernel


def kernel(op: str, opset: int = 21, **attrs: Any) -> Kernel:
    return resolve(op, "", opset)(NodeContext(name=f"test_{op}", op_type=op, opset=opset), attrs)


def one(op: str, *inputs: Any, **attrs: Any) -> Any:
    """Run a single-output kernel; a sequence result must come back as exactly one output."""
    outs = kernel(op, **attrs).run(*inputs)
    assert len(outs) == 1
    return outs[0]


def seq(*values: int) -> list[np.ndarray]:
    return [np.array([v], np.float32) for v in values]


def flat(s: list[np.ndarray]) -> list[float]:
    return [float(t[0]) for t in s]


def test_construct_empty_and_length() -> None:
    s = one("SequenceConstruct", *seq(1, 2))
    assert flat(s) == [1, 2]
    assert one("SequenceEmpty", dtype=1) == []
    length = one("SequenceLength", s)
    assert length.dtype == np.int64 and int(length) == 2


@pytest.mark.parametrize(("position", "expected"), [(None, [1, 2, 9]), (0, [9, 1, 2]), (-1, [1, 9, 2]), (2, [1, 2, 9])])
def test_insert_positions(position: int | None, expected: list[int]) -> None:
    original = seq(1, 2)
    pos = None if position is None else np.array(position, np.int64)
    out = one("SequenceInsert", original, np.array([9], np.float32), pos)
    assert flat(out) == expected
    assert flat(original) == [1, 2]  # the input sequence is not modified


@pytest.mark.parametrize(("position", "expected"), [(None, [1, 2]), (0, [2, 3]), (-2, [1, 3])])
def test_erase_positions(position: int | None, expected: list[int]) -> None:
    original = seq(1, 2, 3)
    out = one("SequenceErase", original, None if position is None else np.array(position, np.int64))
    assert flat(out) == expected and flat(original) == [1, 2, 3]


def test_at_counts_negative_positions_from_the_end_and_rejects_out_of_range() -> None:
    assert one("SequenceAt", seq(1, 2, 3), np.array(-1, np.int64)).tolist() == [3]
    with pytest.raises(KernelError, match="out of range"):
        kernel("SequenceAt").run(seq(1), np.array(1, np.int64))


def test_split_to_sequence_forms() -> None:
    x = np.arange(10).reshape(5, 2)
    assert [p.shape for p in one("SplitToSequence", x)] == [(1, 2)] * 5
    assert [p.shape for p in one("SplitToSequence", x, keepdims=0)] == [(2,)] * 5
    assert [p.shape for p in one("SplitToSequence", x, np.array(2, np.int64))] == [(2, 2), (2, 2), (1, 2)]
    parts = one("SplitToSequence", x, np.array([1, 1], np.int64), axis=1)
    np.testing.assert_array_equal(np.concatenate(parts, axis=1), x)


def test_concat_from_sequence_concatenates_or_stacks() -> None:
    parts = [np.ones((2, 3)), np.zeros((2, 3))]
    assert one("ConcatFromSequence", parts, axis=1).shape == (2, 6)
    assert one("ConcatFromSequence", parts, axis=-1, new_axis=1).shape == (2, 3, 2)
    assert one("ConcatFromSequence", parts, axis=0, new_axis=1).shape == (2, 2, 3)


def test_optional_wraps_values_and_reports_emptiness() -> None:
    values = seq(4)
    assert one("Optional", values) is values
    assert one("Optional") is None
    assert bool(one("OptionalHasElement", values)) is True
    assert bool(one("OptionalHasElement", None)) is False
    assert one("OptionalHasElement").dtype == np.bool_
    assert one("OptionalGetElement", values) is values
    with pytest.raises(KernelError, match="empty"):
        kernel("OptionalGetElement").run(None)
