"""Convolution kernels: the ONNX backend cases, and onnxruntime on random shapes and attribute mixes."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from tests.runtime.kernels.backend_cases import backend_cases_test
from tests.runtime.kernels.ort_compare import assert_matches_ort, rand

OPS = ["Conv", "ConvTranspose", "DeformConv", "Col2Im", "CausalConvWithState"]


test_backend_cases_pass = backend_cases_test(OPS)


# (input shape, weight shape, attributes, with bias)
CONV_CASES: list[tuple[tuple[int, ...], tuple[int, ...], dict[str, Any], bool]] = [
    ((1, 3, 9, 9), (4, 3, 3, 3), {"pads": [1, 1, 1, 1]}, True),
    ((2, 4, 11, 10), (6, 4, 3, 2), {"strides": [2, 3], "pads": [0, 1, 2, 0], "dilations": [2, 1]}, True),
    ((1, 6, 8, 8), (4, 3, 3, 3), {"group": 2, "pads": [1, 1, 1, 1]}, False),
    ((2, 8, 7, 7), (8, 1, 3, 3), {"group": 8, "strides": [2, 2], "pads": [1, 1, 1, 1]}, True),
    ((1, 3, 10, 9), (5, 3, 3, 3), {"auto_pad": "SAME_UPPER", "strides": [2, 2]}, True),
    ((1, 3, 10, 9), (5, 3, 4, 4), {"auto_pad": "SAME_LOWER", "strides": [3, 2]}, False),
    ((1, 3, 10, 9), (5, 3, 3, 3), {"auto_pad": "VALID", "strides": [2, 2], "dilations": [2, 2]}, True),
    ((3, 5, 6, 7), (7, 5, 1, 1), {}, True),
    ((1, 5, 9, 7), (4, 5, 1, 1), {"strides": [2, 2]}, False),
    ((2, 3, 17), (4, 3, 5), {"pads": [2, 1], "strides": [2], "dilations": [2]}, True),
    ((1, 2, 6, 7, 5), (3, 2, 3, 2, 3), {"pads": [1, 0, 1, 1, 1, 0], "strides": [1, 2, 1]}, True),
]


@pytest.mark.parametrize(("x_shape", "w_shape", "attrs", "bias"), CONV_CASES)
def test_conv_matches_onnxruntime(x_shape, w_shape, attrs, bias) -> None:
    rng = np.random.default_rng(0)
    inputs = {"x": rand(rng, *x_shape), "w": rand(rng, *w_shape), "b": rand(rng, w_shape[0]) if bias else None}
    assert_matches_ort("Conv", inputs, **attrs)


# (input shape, weight shape (C, M/group, *k), attributes, with bias)
CONV_TRANSPOSE_CASES: list[tuple[tuple[int, ...], tuple[int, ...], dict[str, Any], bool]] = [
    ((1, 3, 5, 5), (3, 4, 3, 3), {}, True),
    ((2, 4, 4, 5), (4, 3, 3, 3), {"strides": [2, 2], "pads": [1, 1, 1, 1], "output_padding": [1, 1]}, True),
    ((1, 4, 5, 4), (4, 2, 3, 2), {"group": 2, "dilations": [2, 1], "strides": [1, 2]}, False),
    ((1, 2, 3, 4), (2, 3, 3, 3), {"strides": [3, 2], "output_shape": [10, 8]}, True),
    ((1, 2, 4, 4), (2, 3, 3, 3), {"strides": [2, 2], "auto_pad": "SAME_UPPER"}, False),
    ((2, 3, 7), (3, 2, 4), {"strides": [3], "pads": [1, 2]}, True),
    ((1, 2, 3, 4, 3), (2, 2, 2, 3, 2), {"strides": [2, 1, 2], "pads": [0, 1, 0, 1, 1, 0]}, True),
]


@pytest.mark.parametrize(("x_shape", "w_shape", "attrs", "bias"), CONV_TRANSPOSE_CASES)
def test_conv_transpose_matches_onnxruntime(x_shape, w_shape, attrs, bias) -> None:
    rng = np.random.default_rng(1)
    m = w_shape[1] * attrs.get("group", 1)
    inputs = {"x": rand(rng, *x_shape), "w": rand(rng, *w_shape), "b": rand(rng, m) if bias else None}
    assert_matches_ort("ConvTranspose", inputs, **attrs)


@pytest.mark.parametrize(
    ("attrs", "with_mask"),
    [({}, False), ({"pads": [1, 1, 1, 1], "strides": [2, 1], "group": 2, "offset_group": 2}, True)],
)
def test_deform_conv_matches_onnxruntime(attrs: dict[str, Any], with_mask: bool) -> None:
    rng = np.random.default_rng(2)
    x = rand(rng, 2, 4, 7, 6)
    w = rand(rng, 6, 4 // attrs.get("group", 1), 3, 3)
    pads = attrs.get("pads", [0, 0, 0, 0])
    strides = attrs.get("strides", [1, 1])
    oh = (7 + pads[0] + pads[2] - 3) // strides[0] + 1
    ow = (6 + pads[1] + pads[3] - 3) // strides[1] + 1
    groups = attrs.get("offset_group", 1)
    offset = (rng.standard_normal((2, groups * 18, oh, ow)) * 1.5).astype(np.float32)
    mask = rng.random((2, groups * 9, oh, ow)).astype(np.float32) if with_mask else None
    inputs = {"x": x, "w": w, "offset": offset, "b": rand(rng, 6), "mask": mask}
    assert_matches_ort("DeformConv", inputs, opset=19, **attrs)


def test_col2im_matches_onnxruntime() -> None:
    rng = np.random.default_rng(3)
    attrs: dict[str, Any] = {"strides": [2, 1], "pads": [1, 0, 1, 1], "dilations": [1, 2]}
    image, block = np.array([7, 6], dtype=np.int64), np.array([3, 2], dtype=np.int64)
    blocks_h = (7 + 2 - 3) // 2 + 1
    blocks_w = (6 + 1 - 3) // 1 + 1
    cols = rand(rng, 2, 3 * 6, blocks_h * blocks_w)
    assert_matches_ort("Col2Im", {"x": cols, "image": image, "block": block}, opset=18, **attrs)


def test_conv_keeps_float16_and_does_not_modify_inputs() -> None:
    rng = np.random.default_rng(4)
    x = rand(rng, 1, 2, 5, 5, dtype=np.float16)
    w = rand(rng, 3, 2, 3, 3, dtype=np.float16)
    x_before, w_before = x.copy(), w.copy()
    (y,) = assert_matches_ort("Conv", {"x": x, "w": w}, rtol=1e-2, atol=1e-2, pads=[1, 1, 1, 1])
    assert y.dtype == np.float16
    np.testing.assert_array_equal(x, x_before)
    np.testing.assert_array_equal(w, w_before)


def test_per_sample_path_for_large_batches_gives_the_same_result(monkeypatch: pytest.MonkeyPatch) -> None:
    from runtime.kernels import conv

    rng = np.random.default_rng(5)
    x, w, b = rand(rng, 3, 4, 9, 9), rand(rng, 6, 2, 3, 3), rand(rng, 6)
    args = ([1, 0, 1, 2], [2, 1], [1, 2], 2)
    whole = conv.conv_nd(x, w, b, *args)
    monkeypatch.setattr(conv, "_IM2COL_BYTES", 1)
    np.testing.assert_array_equal(conv.conv_nd(x, w, b, *args), whole)
