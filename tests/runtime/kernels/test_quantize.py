"""Quantization kernels: (De)QuantizeLinear, DynamicQuantizeLinear, integer and quantized MatMul/Conv."""

from __future__ import annotations

import itertools

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from onnx import TensorProto

from tests.runtime.kernels.backend_cases import backend_cases_test

OPS = [
    "QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear", "QLinearMatMul", "MatMulInteger",
    "ConvInteger", "QLinearConv",
]  # fmt: skip


test_backend_cases_pass = backend_cases_test(OPS)


@settings(max_examples=40, deadline=None)
@given(
    x=hnp.arrays(np.float32, (3, 4), elements=st.floats(-100, 100, width=32)),
    scale=st.floats(0.05, 2.0),
    zero_point=st.integers(-20, 20),
)
def test_quantize_dequantize_round_trip_within_half_a_step(x, scale, zero_point, make_kernel) -> None:
    scale_arr, zp = np.array(scale, dtype=np.float32), np.array(zero_point, dtype=np.int8)
    (q,) = make_kernel("QuantizeLinear").run(x, scale_arr, zp)
    (back,) = make_kernel("DequantizeLinear").run(q, scale_arr, zp)
    assert q.dtype == np.int8 and back.dtype == np.float32
    low, high = (-128 - zero_point) * scale_arr, (127 - zero_point) * scale_arr
    inside = (x >= low) & (x <= high)
    assert np.all(np.abs(back - x)[inside] <= scale_arr / 2 * (1 + 1e-5))
    assert np.all(q[x > high] == 127) and np.all(q[x < low] == -128)


def test_quantize_rounds_half_to_even_and_defaults_to_uint8(make_kernel) -> None:
    (q,) = make_kernel("QuantizeLinear").run(
        np.array([0.5, 1.5, 2.5, -1.0, 300.0], np.float32), np.array(1.0, np.float32)
    )
    assert q.dtype == np.uint8 and q.tolist() == [0, 2, 2, 0, 255]


def test_per_axis_and_blocked_scales(make_kernel) -> None:
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    per_row = np.array([1.0, 2.0, 4.0], dtype=np.float32)
    (q,) = make_kernel("QuantizeLinear", axis=0).run(x, per_row, np.zeros(3, np.uint8))
    np.testing.assert_array_equal(q, np.rint(x / per_row[:, None]).astype(np.uint8))
    blocks = np.array([[1.0, 2.0], [1.0, 2.0], [1.0, 2.0]], dtype=np.float32)  # blocks of 2 along axis 1
    (qb,) = make_kernel("QuantizeLinear", axis=1, block_size=2, output_dtype=TensorProto.INT16).run(x, blocks)
    assert qb.dtype == np.int16
    np.testing.assert_array_equal(qb, np.rint(x / np.repeat(blocks, 2, axis=1)))
    (back,) = make_kernel("DequantizeLinear", axis=1, block_size=2).run(qb, blocks)
    np.testing.assert_array_equal(back, qb * np.repeat(blocks, 2, axis=1))


def test_narrow_targets(make_kernel) -> None:
    x = np.array([-100.0, -3.0, 0.4, 3.0, 100.0], dtype=np.float32)
    (int4,) = make_kernel("QuantizeLinear").run(x, np.array(1.0, np.float32), np.array(0, ml_dtypes.int4))
    assert int4.dtype == np.dtype(ml_dtypes.int4) and int4.astype(np.int32).tolist() == [-8, -3, 0, 3, 7]
    zp8 = np.array(0, ml_dtypes.float8_e4m3fn)
    (fp8,) = make_kernel("QuantizeLinear").run(x * 10, np.array(1.0, np.float32), zp8)
    assert fp8.astype(np.float32).tolist()[0] == -448.0  # saturated, not NaN
    (back,) = make_kernel("DequantizeLinear", output_dtype=TensorProto.FLOAT16).run(fp8, np.array(2.0, np.float32))
    assert back.dtype == np.float16 and back.tolist()[-1] == 896.0


def test_dynamic_quantize_covers_zero_and_range(make_kernel) -> None:
    x = np.array([[-1.0, 0.0], [0.5, 3.0]], dtype=np.float32)
    y, scale, zero_point = make_kernel("DynamicQuantizeLinear").run(x)
    assert (y.dtype, scale.dtype, zero_point.dtype) == (np.uint8, np.float32, np.uint8)
    assert scale.shape == () and zero_point.shape == ()
    np.testing.assert_allclose(scale, 4.0 / 255)
    assert y.min() == 0 and y.max() == 255
    np.testing.assert_allclose((y.astype(np.float32) - zero_point) * scale, x, atol=float(scale) / 2 + 1e-7)


def test_matmul_integer_with_per_row_and_per_column_zero_points(make_kernel) -> None:
    rng = np.random.default_rng(0)
    a = rng.integers(0, 255, (3, 5), dtype=np.uint8)
    b = rng.integers(-128, 127, (5, 2), dtype=np.int8)
    a_zp = np.array([1, 2, 3], dtype=np.uint8)
    b_zp = np.array([-1, 4], dtype=np.int8)
    (out,) = make_kernel("MatMulInteger").run(a, b, a_zp, b_zp)
    expected = (a.astype(np.int64) - a_zp[:, None]) @ (b.astype(np.int64) - b_zp)
    assert out.dtype == np.int32
    np.testing.assert_array_equal(out, expected)


def _naive_conv(x, w, stride, pad, dilation, group):
    """Direct 2-D convolution by loops: the yardstick for the im2col kernel."""
    n, _, h, wd = x.shape
    m, cg, kh, kw = w.shape
    xp = np.pad(x, [(0, 0), (0, 0), (pad, pad), (pad, pad)])
    oh = (h + 2 * pad - dilation * (kh - 1) - 1) // stride + 1
    ow = (wd + 2 * pad - dilation * (kw - 1) - 1) // stride + 1
    out = np.zeros((n, m, oh, ow), dtype=np.int64)
    for b, o, i, j in itertools.product(range(n), range(m), range(oh), range(ow)):
        g = o // (m // group)
        patch = xp[b, g * cg : (g + 1) * cg, i * stride :: dilation, j * stride :: dilation][:, :kh, :kw]
        out[b, o, i, j] = np.sum(patch * w[o])
    return out


@pytest.mark.parametrize(("stride", "pad", "dilation", "group"), [(1, 0, 1, 1), (2, 1, 1, 2), (1, 2, 2, 1)])
def test_conv_integer_matches_direct_convolution(stride, pad, dilation, group, make_kernel) -> None:
    rng = np.random.default_rng(stride + pad + dilation)
    x = rng.integers(0, 255, (1, 4, 6, 5), dtype=np.uint8)
    w = rng.integers(0, 255, (4, 4 // group, 3, 2), dtype=np.uint8)
    x_zp, w_zp = np.array(7, np.uint8), np.array(3, np.uint8)
    attrs = {"strides": [stride] * 2, "pads": [pad] * 4, "dilations": [dilation] * 2, "group": group}
    (out,) = make_kernel("ConvInteger", **attrs).run(x, w, x_zp, w_zp)
    expected = _naive_conv(x.astype(np.int64) - 7, w.astype(np.int64) - 3, stride, pad, dilation, group)
    assert out.dtype == np.int32
    np.testing.assert_array_equal(out, expected)


def test_conv_integer_same_padding_keeps_spatial_size(make_kernel) -> None:
    x = np.ones((1, 1, 5, 4), dtype=np.int8)
    w = np.ones((1, 1, 3, 3), dtype=np.int8)
    (upper,) = make_kernel("ConvInteger", auto_pad="SAME_UPPER").run(x, w)
    assert upper.shape == (1, 1, 5, 4)
    assert upper[0, 0, 0, 0] == 4 and upper[0, 0, 2, 1] == 9


def test_qlinear_conv_per_channel_scale_and_bias(make_kernel) -> None:
    x = np.full((1, 1, 3, 3), 12, dtype=np.uint8)
    w = np.ones((2, 1, 1, 1), dtype=np.int8)
    x_scale, x_zp = np.array(0.5, np.float32), np.array(2, np.uint8)
    w_scale, w_zp = np.array([1.0, 2.0], np.float32), np.array([0, 0], np.int8)
    y_scale, y_zp = np.array(0.25, np.float32), np.array(1, np.uint8)
    bias = np.array([0, 4], dtype=np.int32)
    (out,) = make_kernel("QLinearConv").run(x, x_scale, x_zp, w, w_scale, w_zp, y_scale, y_zp, bias)
    # channel 0: (12-2)*0.5*1/0.25 + 1 = 21; channel 1: ((12-2)+4)*0.5*2/0.25 + 1 = 57
    assert out.dtype == np.uint8
    assert out[0, :, 1, 1].tolist() == [21, 57]


def test_qlinear_matmul_saturates_to_output_type(make_kernel) -> None:
    a = np.array([[100, 100]], dtype=np.int8)
    b = np.array([[100], [100]], dtype=np.int8)
    one = np.array(1.0, np.float32)
    (out,) = make_kernel("QLinearMatMul").run(
        a, one, np.array(0, np.int8), b, one, np.array(0, np.int8), one, np.array(0, np.int8)
    )
    assert out.dtype == np.int8 and out.tolist() == [[127]]


def test_qlinear_matmul_float8_rounds_to_nearest_even_and_saturates(make_kernel) -> None:
    f8 = ml_dtypes.float8_e4m3fn
    a = np.array([[1, 2], [3, 4]], dtype=f8)
    b = np.array([[1, 0], [0, 100]], dtype=f8)
    one, zero = np.array(1.0, np.float32), np.array(0, dtype=f8)
    (out,) = make_kernel("QLinearMatMul").run(a, one, zero, b, one, zero, np.array(0.5, np.float32), zero)
    # [[2, 400], [6, 800]]: 400 ties between 384 and 416 (even mantissa wins), 800 saturates to 448
    assert out.dtype == np.dtype(f8)
    assert out.astype(np.float32).tolist() == [[2.0, 384.0], [6.0, 448.0]]
