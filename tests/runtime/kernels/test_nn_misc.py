"""Dropout, SwiGLU, TensorScatter, RoiAlign, NonMaxSuppression, GridSample, AffineGrid: the ONNX backend cases,
onnxruntime on random inputs, and the training-mode Dropout contract."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from tests.runtime.kernels.backend_cases import backend_cases_test
from tests.runtime.kernels.ort_compare import assert_matches_ort, rand

OPS = ["Dropout", "SwiGLU", "TensorScatter", "RoiAlign", "NonMaxSuppression", "GridSample", "AffineGrid"]


test_backend_cases_pass = backend_cases_test(OPS)


@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
@pytest.mark.parametrize("padding_mode", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("align_corners", [0, 1])
def test_grid_sample_2d_matches_onnxruntime(mode: str, padding_mode: str, align_corners: int) -> None:
    rng = np.random.default_rng(0)
    x = rand(rng, 2, 3, 5, 6)
    grid = (rng.random((2, 4, 7, 2)) * 2.6 - 1.3).astype(np.float32)  # some points fall outside [-1, 1]
    attrs: dict[str, Any] = {"mode": mode, "padding_mode": padding_mode, "align_corners": align_corners}
    assert_matches_ort("GridSample", {"x": x, "grid": grid}, opset=20, **attrs)


@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_grid_sample_3d_matches_onnxruntime(mode: str) -> None:
    rng = np.random.default_rng(1)
    x = rand(rng, 1, 2, 4, 5, 3)
    grid = (rng.random((1, 3, 2, 4, 3)) * 2.4 - 1.2).astype(np.float32)
    assert_matches_ort("GridSample", {"x": x, "grid": grid}, opset=20, mode=mode, padding_mode="border")


@pytest.mark.parametrize("align_corners", [0, 1])
@pytest.mark.parametrize("size", [(2, 3, 4, 5), (2, 3, 2, 4, 5)])
def test_affine_grid_matches_onnxruntime(size: tuple[int, ...], align_corners: int) -> None:
    nd = len(size) - 2
    theta = rand(np.random.default_rng(2), 2, nd, nd + 1)
    inputs = {"theta": theta, "size": np.array(size, dtype=np.int64)}
    assert_matches_ort("AffineGrid", inputs, opset=20, align_corners=align_corners)


@pytest.mark.parametrize("mode", ["avg", "max"])
@pytest.mark.parametrize("transform", ["half_pixel", "output_half_pixel"])
@pytest.mark.parametrize("sampling_ratio", [0, 2])
def test_roi_align_matches_onnxruntime(mode: str, transform: str, sampling_ratio: int) -> None:
    rng = np.random.default_rng(3)
    x = rand(rng, 2, 3, 12, 10)
    rois = np.array([[1.0, 1.5, 7.0, 9.0], [0.0, 0.0, 9.5, 11.5], [3.2, 2.1, 4.0, 3.0]], dtype=np.float32)
    batch = np.array([0, 1, 1], dtype=np.int64)
    attrs: dict[str, Any] = {
        "mode": mode,
        "coordinate_transformation_mode": transform,
        "sampling_ratio": sampling_ratio,
        "output_height": 3,
        "output_width": 4,
        "spatial_scale": 0.9,
    }
    assert_matches_ort("RoiAlign", {"x": x, "rois": rois, "batch": batch}, opset=16, **attrs)


@pytest.mark.parametrize("center_point_box", [0, 1])
def test_non_max_suppression_matches_onnxruntime(center_point_box: int) -> None:
    rng = np.random.default_rng(4)
    corners = rng.random((2, 20, 2, 2)).astype(np.float32) * 10
    boxes = corners.reshape(2, 20, 4)
    if center_point_box:
        boxes[..., 2:] = np.abs(boxes[..., 2:]) + 0.5
    inputs: dict[str, np.ndarray | None] = {
        "boxes": boxes,
        "scores": rng.random((2, 3, 20)).astype(np.float32),
        "max_out": np.array([5], dtype=np.int64),
        "iou": np.array([0.3], dtype=np.float32),
        "score": np.array([0.2], dtype=np.float32),
    }
    assert_matches_ort("NonMaxSuppression", inputs, ("selected",), opset=11, center_point_box=center_point_box)


def test_training_dropout_is_seeded_scaled_and_masks_the_ratio(make_kernel) -> None:
    x = np.ones((200, 100), dtype=np.float32)
    kernel = make_kernel("Dropout", opset=13, seed=7)
    kernel.node = type(kernel.node)(name="d", op_type="Dropout", opset=13, n_inputs=3, n_outputs=2)
    ratio, training = np.array(0.25, dtype=np.float32), np.array(True)
    y, mask = kernel.run(x, ratio, training)
    y_again, mask_again = kernel.run(x, ratio, training)
    assert mask.dtype == np.bool_ and y.dtype == np.float32
    np.testing.assert_array_equal(mask, mask_again)
    np.testing.assert_array_equal(y, y_again)
    assert abs(1 - mask.mean() - 0.25) < 0.02
    np.testing.assert_allclose(y[mask], 1 / 0.75, rtol=1e-6)
    assert (y[~mask] == 0).all()


def test_inference_dropout_is_identity_with_all_true_mask(make_kernel) -> None:
    x = rand(np.random.default_rng(5), 3, 4)
    kernel = make_kernel("Dropout", opset=13)
    kernel.node = type(kernel.node)(name="d", op_type="Dropout", opset=13, n_inputs=1, n_outputs=2)
    y, mask = kernel.run(x)
    np.testing.assert_array_equal(y, x)
    assert mask.dtype == np.bool_ and mask.all()
