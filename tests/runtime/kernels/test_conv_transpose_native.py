"""2-D ConvTranspose on the compiled gather (runtime/native/upsample.c) against the NumPy GEMM + col2im path,
over strides, dilations, groups, pads, output padding, output_shape and auto_pad."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from runtime import native
from runtime.kernels import NodeContext, conv_transpose, resolve

pytestmark = pytest.mark.skipif(native.lib() is None, reason=f"compiled kernels unavailable: {native.status()}")

CASES: list[tuple[tuple[int, ...], tuple[int, ...], dict[str, Any]]] = [
    ((1, 64, 8, 8), (64, 32, 3, 3), {"strides": [2, 2], "pads": [1, 1, 1, 1], "output_padding": [1, 1]}),
    ((3, 6, 5, 7), (6, 2, 4, 3), {"strides": [2, 3], "group": 3, "dilations": [1, 2]}),
    ((2, 4, 6, 6), (4, 5, 2, 2), {"strides": [2, 2]}),
    ((1, 3, 4, 5), (3, 4, 3, 3), {"strides": [3, 2], "output_shape": [14, 12]}),  # extends past the full result
    ((1, 2, 5, 4), (2, 3, 5, 5), {"strides": [2, 2], "auto_pad": "SAME_LOWER"}),
    ((2, 5, 7, 6), (5, 1, 3, 3), {"pads": [2, 0, 1, 3], "dilations": [2, 2]}),
    ((1, 4, 1, 1), (4, 8, 4, 4), {"strides": [1, 1]}),
]


@pytest.mark.parametrize(("x_shape", "w_shape", "attrs"), CASES)
@pytest.mark.parametrize("bias", [True, False])
def test_compiled_gather_matches_the_numpy_path(
    x_shape: tuple[int, ...], w_shape: tuple[int, ...], attrs: dict[str, Any], bias: bool, monkeypatch
) -> None:
    rng = np.random.default_rng(len(x_shape) + sum(w_shape))
    x = rng.standard_normal(x_shape).astype(np.float32)
    w = rng.standard_normal(w_shape).astype(np.float32)
    b = rng.standard_normal(w_shape[1] * attrs.get("group", 1)).astype(np.float32) if bias else None
    kernel = resolve("ConvTranspose", "", 17)(
        NodeContext(name="ct", op_type="ConvTranspose", opset=17, n_inputs=3),
        {"kernel_shape": list(w_shape[2:]), **attrs},
    )
    taken: list[bool] = []
    real = conv_transpose.conv_transpose_2d

    def counting(*args: Any) -> Any:
        out = real(*args)
        taken.append(out is not None)
        return out

    monkeypatch.setattr(conv_transpose, "conv_transpose_2d", counting)
    got = kernel.compute(x, w, b)
    assert taken == [True]
    native.set_enabled(False)
    try:
        want = kernel.compute(x, w, b)
    finally:
        native.set_enabled(None)
    assert got.shape == want.shape and got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)


NHWC_CASES = [case for case in CASES if case[2].get("group", 1) == 1] + [
    ((2, 64, 16, 16), (64, 32, 2, 2), {"strides": [2, 2]}),  # U-Net's up-convolution: taps never overlap
    ((1, 16, 32, 32), (16, 1, 3, 3), {"strides": [2, 2], "pads": [1, 1, 1, 1], "output_padding": [1, 1]}),  # M=1
    ((3, 20, 5, 3), (20, 17, 3, 2), {"strides": [2, 1], "pads": [0, 1, 1, 0]}),  # odd channels: vector tails
]


@pytest.mark.parametrize(("x_shape", "w_shape", "attrs"), NHWC_CASES)
@pytest.mark.parametrize("bias", [True, False])
def test_nhwc_kernel_matches_the_nchw_op(
    x_shape: tuple[int, ...], w_shape: tuple[int, ...], attrs: dict[str, Any], bias: bool
) -> None:
    rng = np.random.default_rng(sum(x_shape) + sum(w_shape))
    x = rng.standard_normal(x_shape).astype(np.float32)
    w = rng.standard_normal(w_shape).astype(np.float32)
    b = rng.standard_normal(w_shape[1]).astype(np.float32) if bias else None
    full = {"kernel_shape": list(w_shape[2:]), **attrs}
    nchw = resolve("ConvTranspose", "", 17)(NodeContext(name="ct", op_type="ConvTranspose", opset=17), full)
    nhwc = resolve("NhwcConvTranspose", "com.appopt", 1)(
        NodeContext(name="ct", op_type="NhwcConvTranspose", domain="com.appopt", opset=1), full
    )
    x_nhwc = np.ascontiguousarray(x.transpose(0, 2, 3, 1))
    assert nhwc._native(x_nhwc, w, b) is not None  # the compiled path applies
    got = nhwc.compute(x_nhwc, w, b)
    native.set_enabled(False)
    try:
        want = nchw.compute(x, w, b)
    finally:
        native.set_enabled(None)
    assert got.shape == (want.shape[0], *want.shape[2:], want.shape[1])
    np.testing.assert_allclose(got.transpose(0, 3, 1, 2), want, rtol=1e-5, atol=1e-4)
    out = np.full(got.shape, np.nan, dtype=np.float32)  # the prebound call writes every element of its buffer
    call = nhwc.bind(out, x_nhwc, w, b)
    assert call is not None
    call()
    np.testing.assert_array_equal(out, got)
