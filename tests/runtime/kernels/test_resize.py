"""Resize/Upsample beyond the backend cases: random shapes against onnxruntime, dtypes, legacy opsets, axes."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import helper

from runtime.kernels import NodeContext, resolve
from runtime.kernels.base import Kernel


def kernel(op: str, opset: int = 19, **attrs: Any) -> Kernel:
    return resolve(op, "", opset)(NodeContext(name=f"test_{op}", op_type=op, opset=opset), attrs)


def onnxruntime_resize(x: np.ndarray, sizes: np.ndarray, **attrs: Any) -> np.ndarray:
    node = helper.make_node("Resize", ["x", "", "", "sizes"], ["y"], **attrs)
    graph = helper.make_graph(
        [node],
        "g",
        [
            helper.make_tensor_value_info("x", helper.np_dtype_to_tensor_dtype(x.dtype), x.shape),
            helper.make_tensor_value_info("sizes", onnx.TensorProto.INT64, sizes.shape),
        ],
        [onnx.ValueInfoProto(name="y")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)], ir_version=9)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x, "sizes": sizes})[0]


MODES = [
    {"mode": "nearest", "coordinate_transformation_mode": "half_pixel", "nearest_mode": "round_prefer_floor"},
    {"mode": "nearest", "coordinate_transformation_mode": "asymmetric", "nearest_mode": "floor"},
    {"mode": "nearest", "coordinate_transformation_mode": "align_corners", "nearest_mode": "round_prefer_ceil"},
    {"mode": "linear", "coordinate_transformation_mode": "half_pixel"},
    {"mode": "linear", "coordinate_transformation_mode": "pytorch_half_pixel"},
    {"mode": "linear", "coordinate_transformation_mode": "align_corners"},
    {"mode": "linear", "coordinate_transformation_mode": "asymmetric"},
    {"mode": "cubic", "coordinate_transformation_mode": "half_pixel"},
    {"mode": "cubic", "coordinate_transformation_mode": "half_pixel", "exclude_outside": 1, "cubic_coeff_a": -0.5},
]


@pytest.mark.parametrize("attrs", MODES, ids=lambda a: "-".join(str(v) for v in a.values()))
@settings(max_examples=12, deadline=None)
@given(
    in_hw=st.tuples(st.integers(1, 6), st.integers(2, 6)),
    out_hw=st.tuples(st.integers(1, 9), st.integers(1, 9)),
    seed=st.integers(0, 2**16),
)
def test_resize_with_sizes_matches_onnxruntime(attrs, in_hw, out_hw, seed) -> None:
    x = np.random.default_rng(seed).standard_normal((1, 2, *in_hw)).astype(np.float32)
    sizes = np.array([1, 2, *out_hw], np.int64)
    (ours,) = kernel("Resize", **attrs).run(x, None, None, sizes)
    np.testing.assert_allclose(ours, onnxruntime_resize(x, sizes, **attrs), rtol=1e-4, atol=1e-5)


def test_resize_integer_input_rounds_and_saturates() -> None:
    x = np.array([[0, 255]], np.uint8)
    (out,) = kernel("Resize", mode="linear", coordinate_transformation_mode="align_corners").run(
        x, None, None, np.array([1, 3], np.int64)
    )
    assert out.dtype == np.uint8 and out.tolist() == [[0, 128, 255]]  # 127.5 rounds half to even -> 128
    (cubic,) = kernel("Resize", mode="cubic").run(
        np.array([0, 0, 255, 255], np.uint8), None, np.array([2.0], np.float32)
    )
    assert cubic.dtype == np.uint8 and cubic.min() >= 0  # cubic overshoot is clamped, not wrapped


def test_resize_axes_and_keep_aspect_ratio() -> None:
    x = np.zeros((1, 3, 4, 8), np.float32)
    k = kernel("Resize", axes=[2, 3], keep_aspect_ratio_policy="not_larger")
    assert k.run(x, None, None, np.array([6, 6], np.int64))[0].shape == (1, 3, 3, 6)
    k = kernel("Resize", axes=[-1], keep_aspect_ratio_policy="not_smaller")
    assert k.run(x, None, None, np.array([4], np.int64))[0].shape == (1, 3, 4, 4)


def test_antialias_downsampling_keeps_a_constant_image_constant_and_smooths() -> None:
    x = np.full((1, 1, 8, 8), 3.0, np.float32)
    k = kernel("Resize", mode="linear", antialias=1)
    np.testing.assert_allclose(k.run(x, None, np.array([1, 1, 0.25, 0.25], np.float32))[0], 3.0, rtol=1e-6)
    stripes = np.tile(np.array([0.0, 1.0], np.float32), 8).reshape(1, 16)
    (smooth,) = kernel("Resize", mode="linear", antialias=1).run(stripes, None, np.array([1, 0.25], np.float32))
    np.testing.assert_allclose(smooth, 0.5, atol=0.1)  # a 4-tap average of alternating 0/1


def test_tf_crop_and_resize_extrapolates_outside_the_roi() -> None:
    x = np.arange(4, dtype=np.float32).reshape(1, 4)
    roi = np.array([0, 0.5, 1, 1.5], np.float32)  # columns 1.5 .. 4.5 of a 4-wide row (x0=0.5*3, x1=1.5*3)
    k = kernel("Resize", mode="linear", coordinate_transformation_mode="tf_crop_and_resize", extrapolation_value=-1.0)
    (out,) = k.run(x, roi, None, np.array([1, 3], np.int64))
    np.testing.assert_allclose(out, [[1.5, 3.0, -1.0]])


def test_resize10_and_upsample_use_asymmetric_floor_nearest() -> None:
    x = np.arange(3, dtype=np.float32).reshape(1, 3)
    expected = [[0, 0, 1, 1, 2, 2]]
    assert kernel("Resize", opset=10).run(x, np.array([1, 2], np.float32))[0].tolist() == expected
    assert kernel("Upsample", opset=9).run(x, np.array([1, 2], np.float32))[0].tolist() == expected
    assert kernel("Upsample", opset=7, scales=[1.0, 2.0]).run(x)[0].tolist() == expected
    (linear,) = kernel("Upsample", opset=9, mode="linear").run(x, np.array([1, 2], np.float32))
    np.testing.assert_allclose(linear, [[0, 0.5, 1, 1.5, 2, 2]])


def test_nearest_resize_keeps_strings_and_bools() -> None:
    x = np.array(["a", "b"], dtype=object)
    assert kernel("Resize").run(x, None, np.array([2.0], np.float32))[0].tolist() == ["a", "a", "b", "b"]


@pytest.mark.parametrize(
    "attrs", [a for a in MODES if a["mode"] != "nearest"], ids=lambda a: "-".join(map(str, a.values()))
)
@pytest.mark.parametrize("out_hw", [(37, 50), (7, 9)], ids=["up", "down"])
def test_sparse_tap_interpolation_on_larger_images_matches_onnxruntime(attrs, out_hw) -> None:
    """Images wider than twice the taps take the gathered-slab path (float32 throughout), not the dense product."""
    x = np.random.default_rng(4).standard_normal((2, 3, 20, 24)).astype(np.float32)
    sizes = np.array([2, 3, *out_hw], np.int64)
    (ours,) = kernel("Resize", **attrs).run(x, None, None, sizes)
    assert ours.dtype == np.float32
    np.testing.assert_allclose(ours, onnxruntime_resize(x, sizes, **attrs), rtol=1e-4, atol=1e-5)
    (ref,) = kernel("Resize", **attrs).run(x.astype(np.float64), None, None, sizes)
    np.testing.assert_allclose(ours, ref, rtol=1e-5, atol=1e-5)
