"""Gather's one-pass path (np.take on integer indices): negatives wrap, out-of-range is refused, shapes follow ONNX."""

from __future__ import annotations

import numpy as np
import pytest

from runtime.kernels import NodeContext, resolve
from runtime.kernels.base import Kernel


def gather(axis: int = 0) -> Kernel:
    return resolve("Gather", "", 13)(NodeContext(name="g", op_type="Gather", opset=13, n_inputs=2), {"axis": axis})


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_negative_indices_wrap_and_shapes_follow_the_index_tensor(dtype: type) -> None:
    table = np.arange(24, dtype=np.float32).reshape(4, 6)
    idx = np.array([[0, -1], [3, -4]], dtype=dtype)
    np.testing.assert_array_equal(gather().compute(table, idx), table[[[0, 3], [3, 0]]])
    np.testing.assert_array_equal(gather(1).compute(table, np.array(-2, dtype)), table[:, 4])
    assert gather().compute(table, np.zeros((0, 3), dtype)).shape == (0, 3, 6)


@pytest.mark.parametrize("bad", [4, -5])
def test_out_of_range_indices_are_refused_naming_the_dimension(bad: int) -> None:
    table = np.zeros((4, 6), np.float32)
    with pytest.raises(IndexError, match="dimension of size 4"):
        gather().compute(table, np.array([0, bad]))
