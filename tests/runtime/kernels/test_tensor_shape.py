"""Shape-moving kernels beyond the backend cases: opset forms, edge cases and properties against NumPy."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from runtime.errors import KernelError
from runtime.kernels import NodeContext, resolve
from runtime.kernels.base import Kernel


def kernel(op: str, opset: int = 21, n_outputs: int = 1, **attrs: Any) -> Kernel:
    node = NodeContext(name=f"test_{op}", op_type=op, opset=opset, n_outputs=n_outputs)
    return resolve(op, "", opset)(node, attrs)


def i64(*values: int) -> np.ndarray:
    return np.array(values, dtype=np.int64)


def test_shape_slices_with_start_and_end_and_returns_int64() -> None:
    x = np.zeros((2, 3, 4, 5), np.float32)
    (out,) = kernel("Shape", start=-3, end=-1).run(x)
    assert out.dtype == np.int64
    assert out.tolist() == [3, 4]
    assert kernel("Shape", start=10).run(x)[0].tolist() == []


def test_size_is_an_int64_scalar() -> None:
    (out,) = kernel("Size").run(np.zeros((3, 0, 2)))
    assert out.shape == () and out.dtype == np.int64 and int(out) == 0


@pytest.mark.parametrize(
    ("in_shape", "target", "allowzero", "expected"),
    [
        ((2, 3, 4), (0, -1), 0, (2, 12)),
        ((2, 3, 4), (4, 0, 2), 0, (4, 3, 2)),
        ((0, 3), (3, 0), 1, (3, 0)),
        ((2, 3, 4), (-1,), 0, (24,)),
    ],
)
def test_reshape_resolves_zero_and_minus_one(in_shape, target, allowzero, expected) -> None:
    x = np.arange(int(np.prod(in_shape)), dtype=np.float32).reshape(in_shape)
    (out,) = kernel("Reshape", allowzero=allowzero).run(x, i64(*target))
    assert out.shape == expected
    np.testing.assert_array_equal(out.reshape(-1), x.reshape(-1))


def test_reshape_with_two_inferred_dims_fails_naming_the_node() -> None:
    with pytest.raises(KernelError, match="test_Reshape"):
        kernel("Reshape").run(np.zeros((2, 3)), i64(-1, -1))


@pytest.mark.parametrize("axis", [-3, -2, -1, 0, 1, 2, 3])
def test_flatten_splits_dims_at_axis(axis: int) -> None:
    x = np.zeros((2, 3, 4))
    (out,) = kernel("Flatten", axis=axis).run(x)
    cut = axis % 3 if axis < 0 else axis
    assert out.shape == (int(np.prod(x.shape[:cut])), int(np.prod(x.shape[cut:])))


def test_squeeze_and_unsqueeze_attribute_and_input_forms_agree() -> None:
    x = np.zeros((1, 3, 1, 2))
    assert kernel("Squeeze", opset=11, axes=[0, -2]).run(x)[0].shape == (3, 2)
    assert kernel("Squeeze", opset=13).run(x, i64(0, -2))[0].shape == (3, 2)
    assert kernel("Squeeze", opset=13).run(x)[0].shape == (3, 2)
    y = np.zeros((3, 2))
    assert kernel("Unsqueeze", opset=11, axes=[0, -1]).run(y)[0].shape == (1, 3, 2, 1)
    assert kernel("Unsqueeze", opset=13).run(y, i64(-1, 0))[0].shape == (1, 3, 2, 1)


def test_unsqueeze_rejects_duplicate_axes() -> None:
    with pytest.raises(KernelError, match="duplicate"):
        kernel("Unsqueeze").run(np.zeros(3), i64(0, 0))


def test_concat_opset1_defaults_to_axis_1() -> None:
    a, b = np.ones((2, 1)), np.zeros((2, 2))
    assert kernel("Concat", opset=1).run(a, b)[0].shape == (2, 3)
    assert kernel("Concat", axis=-1).run(a, b)[0].shape == (2, 3)


@pytest.mark.parametrize(
    ("dim", "n_outputs", "attrs", "sizes"),
    [
        (7, 3, {"num_outputs": 3}, [3, 3, 1]),  # opset 18: last chunk smaller
        (6, 3, {}, [2, 2, 2]),  # equal split from the number of outputs
        (5, 2, {"split": [1, 4]}, [1, 4]),  # opsets 2-12: split attribute
    ],
)
def test_split_sizes(dim: int, n_outputs: int, attrs: dict[str, Any], sizes: list[int]) -> None:
    x = np.arange(dim)
    opset = 11 if "split" in attrs else 18
    parts = kernel("Split", opset=opset, n_outputs=n_outputs, **attrs).run(x)
    assert [len(p) for p in parts] == sizes
    np.testing.assert_array_equal(np.concatenate(parts), x)


def test_split_input_form_and_zero_sized_parts() -> None:
    parts = kernel("Split", opset=13, n_outputs=3).run(np.arange(4), i64(0, 4, 0))
    assert [p.shape for p in parts] == [(0,), (4,), (0,)]


def test_split_that_does_not_sum_fails() -> None:
    with pytest.raises(KernelError, match="does not sum"):
        kernel("Split", opset=13, n_outputs=2).run(np.arange(4), i64(1, 2))


def test_expand_broadcasts_both_ways_and_copies() -> None:
    x = np.arange(3, dtype=np.int32).reshape(3, 1)
    (out,) = kernel("Expand").run(x, i64(2, 1, 4))
    assert out.shape == (2, 3, 4) and out.flags.writeable
    np.testing.assert_array_equal(out, np.broadcast_to(x, (2, 3, 4)))


@pytest.mark.parametrize("mode", ["DCR", "CRD"])
def test_depth_to_space_and_space_to_depth_are_inverse(mode: str) -> None:
    x = np.random.default_rng(0).standard_normal((2, 8, 3, 5)).astype(np.float32)
    (spread,) = kernel("DepthToSpace", blocksize=2, mode=mode).run(x)
    assert spread.shape == (2, 2, 6, 10)
    (back,) = kernel("SpaceToDepth", blocksize=2, mode=mode).run(spread)
    np.testing.assert_array_equal(back, x)


def test_depth_to_space_dcr_places_channel_blocks() -> None:
    # channel c = (i * bs + j) * C' + k goes to pixel (h * bs + i, w * bs + j) of output channel k
    x = np.arange(8).reshape(1, 8, 1, 1)
    (out,) = kernel("DepthToSpace", blocksize=2).run(x)
    assert out[0, 0].tolist() == [[0, 2], [4, 6]]
    assert out[0, 1].tolist() == [[1, 3], [5, 7]]


def test_center_crop_pad_crops_and_pads_centred() -> None:
    x = np.arange(1, 6, dtype=np.float32)
    assert kernel("CenterCropPad").run(x, i64(3))[0].tolist() == [2, 3, 4]
    assert kernel("CenterCropPad").run(x, i64(8))[0].tolist() == [0, 1, 2, 3, 4, 5, 0, 0]


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge", "wrap"])
@settings(max_examples=25, deadline=None)
@given(
    x=hnp.arrays(np.int32, hnp.array_shapes(min_dims=1, max_dims=3, min_side=3, max_side=5)),
    data=st.data(),
)
def test_pad_matches_numpy_for_non_negative_pads(mode: Any, x: np.ndarray, data: st.DataObject) -> None:
    pads = data.draw(st.lists(st.integers(0, 2), min_size=2 * x.ndim, max_size=2 * x.ndim))
    (out,) = kernel("Pad", mode=mode).run(x, np.array(pads, np.int64), np.array(7, np.int32))
    widths = list(zip(pads[: x.ndim], pads[x.ndim :], strict=True))
    expected = np.pad(x, widths, mode="constant", constant_values=7) if mode == "constant" else np.pad(x, widths, mode)
    np.testing.assert_array_equal(out, expected)


def test_pad_negative_pads_crop_and_axes_select_dims() -> None:
    x = np.arange(12).reshape(3, 4)
    (out,) = kernel("Pad").run(x, i64(-1, 1, 0, -2))  # rows: drop 1 at the start; cols: +1 before, -2 after
    np.testing.assert_array_equal(out, np.pad(x[1:, :2], [(0, 0), (1, 0)]))
    (only_cols,) = kernel("Pad").run(x, i64(1, 1), None, i64(-1))
    assert only_cols.shape == (3, 6)


def test_pad_opset2_attribute_form() -> None:
    (out,) = kernel("Pad", opset=2, pads=[1, 0, 0, 1], value=2.5).run(np.zeros((1, 1), np.float32))
    np.testing.assert_array_equal(out, [[2.5, 2.5], [0, 2.5]])


def test_identity_passes_sequences_through_as_one_output() -> None:
    seq = [np.zeros(2), np.ones(3)]
    outs = kernel("Identity").run(seq)
    assert len(outs) == 1 and outs[0] is seq


@settings(max_examples=30, deadline=None)
@given(x=hnp.arrays(np.float32, hnp.array_shapes(min_dims=1, max_dims=4, max_side=3)), data=st.data())
def test_transpose_matches_numpy(x: np.ndarray, data: st.DataObject) -> None:
    perm = data.draw(st.permutations(range(x.ndim)))
    np.testing.assert_array_equal(kernel("Transpose", perm=list(perm)).run(x)[0], np.transpose(x, perm))
    np.testing.assert_array_equal(kernel("Transpose").run(x)[0], x.T)
