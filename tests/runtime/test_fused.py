"""The kernels of the ops the passes create: compiled and NumPy paths agree, buffers and bindings behave."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from runtime import native
from runtime.kernels import NodeContext, resolve
from runtime.kernels.fused import CHAIN_BINARY, CHAIN_UNARY, KIND_FULL, KIND_INNER, KIND_NONE, KIND_SCALAR

rng = np.random.default_rng(0)
HAVE_NATIVE = native.lib() is not None


def kernel(op: str, n_inputs: int, **attrs: Any) -> Any:
    cls = resolve(op, "com.appopt", 1)
    ctx = NodeContext(op, op, "com.appopt", 1, n_inputs, 1, (True,) * n_inputs, (True,))
    return cls(ctx, attrs)


def both_paths(fn: Any) -> tuple[Any, Any]:
    """``fn()`` with the compiled kernels, then with NumPy only."""
    compiled = fn()
    native.set_enabled(False)
    try:
        plain = fn()
    finally:
        native.set_enabled(None)
    return compiled, plain


@pytest.mark.parametrize("group", [1, 2, 6])
def test_nhwc_conv_paths_agree_and_fill_planned_buffers(group: int) -> None:
    x = rng.standard_normal((2, 7, 8, 6)).astype(np.float32)
    w = rng.standard_normal((6, 6 // group, 3, 3)).astype(np.float32)
    b = rng.standard_normal(6).astype(np.float32)
    res = rng.standard_normal((2, 3, 4, 6)).astype(np.float32)
    k = kernel(
        "NhwcConv", 4, pads=[1, 1, 0, 1], strides=[2, 2], group=group, activation="Clip", act_lo=-1.0, act_hi=1.0
    )
    compiled, plain = both_paths(lambda: k.compute(x, w, b, res))
    np.testing.assert_allclose(compiled, plain, rtol=1e-5, atol=1e-5)
    out = np.empty_like(plain)
    assert k.compute_into(out, x, w, b, res) is out
    np.testing.assert_allclose(out, plain, rtol=1e-5, atol=1e-5)


def test_fused_conv_nchw_applies_bias_residual_activation_in_order() -> None:
    from runtime.kernels.conv import conv_nd

    x = rng.standard_normal((1, 3, 6, 6)).astype(np.float32)
    w = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    b = rng.standard_normal(4).astype(np.float32)
    r = rng.standard_normal((1, 4, 6, 6)).astype(np.float32)
    y = kernel("FusedConv", 4, pads=[1, 1, 1, 1], activation="Relu").compute(x, w, b, r)
    np.testing.assert_array_equal(y, np.maximum(conv_nd(x, w, b, [1, 1, 1, 1], [1, 1], [1, 1], 1) + r, 0))


@pytest.mark.parametrize(
    ("a_shape", "b_shape", "attrs"),
    [
        ((3, 5, 8), (8, 4), {}),
        ((5, 8), (4, 8), {"transB": 1, "alpha": 0.5}),
        ((8, 5), (8, 4), {"transA": 1}),
        ((2, 3, 5, 8), (2, 3, 8, 4), {"div": 8.0, "alpha": 0.125}),
        ((1, 5, 8), (3, 8, 4), {"activation": "Relu"}),
        ((8,), (8, 4), {}),
    ],
)
def test_fused_matmul_matches_numpy_matmul(a_shape: tuple, b_shape: tuple, attrs: dict) -> None:
    a = rng.standard_normal(a_shape).astype(np.float32)
    b = rng.standard_normal(b_shape).astype(np.float32)
    k = kernel("FusedMatMul", 2, **attrs)
    compiled, plain = both_paths(lambda: k.compute(a, b))
    aa = a.swapaxes(-1, -2) if attrs.get("transA") else a
    bb = b.swapaxes(-1, -2) if attrs.get("transB") else b
    ref = np.matmul(aa, bb) * attrs.get("alpha", 1.0)
    if attrs.get("activation") == "Relu":
        ref = np.maximum(ref, 0)
    np.testing.assert_allclose(plain, ref, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(compiled, ref, rtol=1e-5, atol=1e-5)


def test_fused_matmul_with_prepared_constant_weights_and_bias() -> None:
    a = rng.standard_normal((4, 16)).astype(np.float32)
    b = rng.standard_normal((16, 40)).astype(np.float32)
    bias = rng.standard_normal(40).astype(np.float32)
    res = rng.standard_normal((4, 40)).astype(np.float32)
    k = kernel("FusedMatMul", 4, activation="Relu")
    k.prepare((None, b, bias, None), ((4, 16), (16, 40), (40,), (4, 40)))
    ref = np.maximum(a @ b + bias + res, 0)
    np.testing.assert_allclose(k.compute(a, b, bias, res), ref, rtol=1e-5, atol=1e-5)
    if HAVE_NATIVE:
        out = np.empty_like(ref)
        bound = k.bind(out, a, b, bias, res)
        assert bound is not None
        bound()
        np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5)


def test_layout_ops_round_trip() -> None:
    x = rng.standard_normal((2, 5, 7, 9)).astype(np.float32)
    nhwc = kernel("ToNhwc", 1).compute(x)
    np.testing.assert_array_equal(nhwc, x.transpose(0, 2, 3, 1))
    np.testing.assert_array_equal(kernel("ToNchw", 1).compute(nhwc), x)
    out = np.empty((2, 7, 9, 5), np.float32)
    kernel("ToNhwc", 1).compute_into(out, x)
    np.testing.assert_array_equal(out, nhwc)


@pytest.mark.parametrize("op", ["NhwcMaxPool", "NhwcAveragePool"])
def test_nhwc_pools_agree_with_the_nchw_kernels(op: str) -> None:
    x = rng.standard_normal((2, 9, 9, 5)).astype(np.float32)
    attrs = {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1], "ceil_mode": 1}
    if op == "NhwcAveragePool":
        attrs["count_include_pad"] = 1
    onnx_op = op.replace("Nhwc", "")
    nchw = resolve(onnx_op, "", 19)(NodeContext("p", onnx_op, "", 19), dict(attrs)).compute(x.transpose(0, 3, 1, 2))
    compiled, plain = both_paths(lambda: kernel(op, 1, **attrs).compute(x))
    np.testing.assert_allclose(plain, nchw.transpose(0, 2, 3, 1), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(compiled, nchw.transpose(0, 2, 3, 1), rtol=1e-5, atol=1e-6)


def test_elementwise_chain_covers_every_step_kind() -> None:
    shape = (2, 3, 16)
    x = rng.uniform(0.1, 2.0, shape).astype(np.float32)
    full = rng.uniform(0.5, 1.5, shape).astype(np.float32)
    inner = rng.uniform(0.5, 1.5, 16).astype(np.float32)
    steps: list[int] = []
    scalars = [0.5, -3.0, 3.0]
    for op in ("Add", "Sub", "Mul", "Div", "Max", "Min"):
        steps += [
            CHAIN_BINARY[op],
            KIND_SCALAR,
            0,
            0,
            CHAIN_BINARY[op],
            KIND_FULL,
            0,
            1,
            CHAIN_BINARY[op],
            KIND_INNER,
            1,
            0,
        ]
        steps += [CHAIN_UNARY["Abs"], KIND_NONE, 0, 0]
    for op in ("Sqrt", "Reciprocal", "Neg", "Exp", "Erf", "Sigmoid", "Tanh", "Relu"):
        steps += [CHAIN_UNARY[op], KIND_NONE, 0, 0]
    steps += [CHAIN_UNARY["Clip"], KIND_NONE, 1, 0]
    k = kernel("ElementwiseChain", 3, steps=steps, scalars=scalars)
    compiled, plain = both_paths(lambda: k.compute(x, full, inner))
    np.testing.assert_allclose(compiled, plain, rtol=2e-6, atol=1e-6)
    out = np.empty_like(x)
    k.compute_into(out, x, full, inner)
    np.testing.assert_allclose(out, compiled, rtol=2e-6, atol=1e-6)


def test_gelu_fallback_repeats_the_written_arithmetic() -> None:
    from runtime.kernels.elementwise import erf

    x = rng.standard_normal(1000).astype(np.float32)
    k = kernel("Gelu", 1, form=1, half=0.5, div=1.4142135, div_op="Div")
    compiled, plain = both_paths(lambda: k.compute(x))
    written = (x * (erf(x / np.float32(1.4142135)).astype(np.float32) + np.float32(1))) * np.float32(0.5)
    np.testing.assert_array_equal(plain, written)
    np.testing.assert_allclose(compiled, written, atol=1e-6)


@pytest.mark.parametrize("stride", [1, 2])
def test_fused_depthwise_pointwise_paths_agree(stride: int) -> None:
    x = rng.standard_normal((2, 9, 7, 24)).astype(np.float32)
    wd = rng.standard_normal((24, 1, 3, 3)).astype(np.float32)
    bd = rng.standard_normal(24).astype(np.float32)
    wp = rng.standard_normal((20, 24, 1, 1)).astype(np.float32)
    bp = rng.standard_normal(20).astype(np.float32)
    attrs = {
        "dw_pads": [1, 1, 1, 1],
        "dw_strides": [stride, stride],
        "dw_activation": "Relu",
        "activation": "Clip",
        "act_lo": -2.0,
        "act_hi": 2.0,
    }
    k = kernel("NhwcDwPwConv", 6, **attrs)
    oh, ow = (9 + 2 - 3) // stride + 1, (7 + 2 - 3) // stride + 1
    res = rng.standard_normal((2, oh, ow, 20)).astype(np.float32)
    compiled, plain = both_paths(lambda: k.compute(x, wd, bd, wp, bp, res))
    np.testing.assert_allclose(compiled, plain, rtol=1e-5, atol=1e-5)
    if HAVE_NATIVE:
        out = np.empty_like(plain)
        bound = k.bind(out, x, wd, bd, wp, bp, res)
        assert bound is not None
        bound()
        np.testing.assert_allclose(out, plain, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("groups", [2, 3, 4])
def test_channel_shuffle_matches_the_reshape_transpose_form(groups: int) -> None:
    c = groups * 5
    x = rng.standard_normal((2, 3, 4, c)).astype(np.float32)
    ref = x.reshape(2, 3, 4, groups, c // groups).swapaxes(-1, -2).reshape(x.shape)
    compiled, plain = both_paths(lambda: kernel("ChannelShuffle", 1, groups=groups).compute(x))
    np.testing.assert_array_equal(compiled, ref)
    np.testing.assert_array_equal(plain, ref)


def test_nhwc_concat_writes_into_its_buffer() -> None:
    a = rng.standard_normal((1, 2, 3, 4)).astype(np.float32)
    b = rng.standard_normal((1, 2, 3, 5)).astype(np.float32)
    k = kernel("NhwcConcat", 2)
    out = np.empty((1, 2, 3, 9), np.float32)
    bound = k.bind(out, a, b)
    assert bound is not None
    bound()
    np.testing.assert_array_equal(out, np.concatenate([a, b], axis=-1))
