"""Convolutions with weights fed every run (training graphs) on the compiled NHWC kernel, against NumPy's im2col
(the yardstick): the forward Conv, and ConvGrad's input gradient, including new weights on a second call."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from runtime import compile_model, native
from runtime.kernels.conv import conv_nd
from runtime.kernels.grad_conv import Window, _flat_conv_grad
from runtime.kernels.step_conv import StepConv, conv_input_grad

pytestmark = pytest.mark.skipif(native.lib() is None, reason=f"compiled kernels unavailable: {native.status()}")

GEOMETRIES = [
    # (c, m, kernel, group, strides, dilations, pads)
    (16, 32, (3, 3), 1, [1, 1], [1, 1], [1, 1, 1, 1]),  # the digits CNN's second conv
    (1, 16, (3, 3), 1, [1, 1], [1, 1], [1, 1, 1, 1]),  # one input channel
    (8, 12, (5, 3), 1, [1, 1], [2, 1], [2, 0, 3, 1]),  # asymmetric pads, dilation
    (6, 10, (3, 3), 1, [2, 2], [1, 1], [1, 1, 1, 1]),  # stride 2
    (8, 8, (3, 3), 2, [1, 1], [1, 1], [1, 1, 1, 1]),  # two groups
    (8, 8, (3, 3), 8, [1, 1], [1, 1], [1, 1, 1, 1]),  # depthwise
    (8, 20, (1, 1), 1, [1, 1], [1, 1], [0, 0, 0, 0]),
]


@pytest.mark.parametrize(("c", "m", "kernel", "group", "strides", "dilations", "pads"), GEOMETRIES)
def test_fed_weights_give_numpys_convolution_call_after_call(
    c: int, m: int, kernel: tuple[int, int], group: int, strides: list[int], dilations: list[int], pads: list[int]
) -> None:
    rng = np.random.default_rng(0)
    step = StepConv()
    for _ in range(3):  # the second and third calls re-pack new weights into the kept kernel
        x = rng.standard_normal((5, c, 9, 7)).astype(np.float32)
        w = rng.standard_normal((m, c // group, *kernel)).astype(np.float32)
        b = rng.standard_normal(m).astype(np.float32)
        got = step(x, w, b, group, strides, dilations, pads)
        assert got is not None
        x64, w64, b64 = (a.astype(np.float64) for a in (x, w, b))
        want = conv_nd(x64, w64, b64, pads, strides, dilations, group)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_a_conv_node_whose_weight_is_an_input_runs_compiled_and_matches() -> None:
    rng = np.random.default_rng(1)
    x = rng.standard_normal((4, 16, 8, 8)).astype(np.float32)
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], pads=[1, 1, 1, 1])
    graph = helper.make_graph(
        [node],
        "conv",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 16, 8, 8]),
            helper.make_tensor_value_info("w", TensorProto.FLOAT, [32, 16, 3, 3]),
            helper.make_tensor_value_info("b", TensorProto.FLOAT, [32]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    exe = compile_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), 1, passes=())
    for _ in range(2):
        w = rng.standard_normal((32, 16, 3, 3)).astype(np.float32)
        b = rng.standard_normal(32).astype(np.float32)
        got = exe.run({"x": x, "w": w, "b": b})["y"]
        want = conv_nd(x.astype(np.float64), w.astype(np.float64), b.astype(np.float64), [1] * 4, [1, 1], [1, 1], 1)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(
    ("kernel", "pads", "dilations"),
    [
        ((3, 3), [1, 1, 1, 1], [1, 1]),
        ((3, 3), [0, 2, 1, 0], [1, 1]),
        ((3, 2), [2, 1, 2, 1], [2, 3]),
        ((1, 1), [0, 0, 0, 0], [1, 1]),
    ],
)
def test_the_input_gradient_is_numpys(kernel: tuple[int, int], pads: list[int], dilations: list[int]) -> None:
    rng = np.random.default_rng(2)
    x = rng.standard_normal((3, 6, 8, 7))
    w = rng.standard_normal((5, 6, *kernel))
    out = [x.shape[2 + i] + pads[i] + pads[i + 2] - (kernel[i] - 1) * dilations[i] for i in range(2)]
    dy = rng.standard_normal((3, 5, *out))
    want, _ = _flat_conv_grad(dy, x, w, Window(pads, [1, 1], dilations, 1), True, False)
    step = StepConv()
    for _ in range(2):
        got = conv_input_grad(step, dy.astype(np.float32), w.astype(np.float32), pads, dilations)
        assert got is not None and want is not None
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_a_pad_wider_than_the_kernel_is_left_to_numpy() -> None:
    w = np.ones((2, 2, 3, 3), np.float32)
    dy = np.ones((1, 2, 9, 9), np.float32)
    assert conv_input_grad(StepConv(), dy, w, [3, 3, 3, 3], [1, 1]) is None


def test_float64_is_left_to_numpy() -> None:
    x = np.ones((1, 2, 4, 4))
    assert StepConv()(x, np.ones((2, 2, 3, 3)), None, 1, [1, 1], [1, 1], [1, 1, 1, 1]) is None


@pytest.mark.skipif(native.lib() is None, reason=f"compiled kernels unavailable: {native.status()}")
@pytest.mark.parametrize(
    ("shape", "group", "view"),
    [
        ((40, 19, 3, 3), 1, "as is"),  # a partial block of 8 and 19 channels: every tile edge
        ((64, 16, 1, 1), 1, "as is"),
        ((70, 33, 1, 1), 1, "flipped transposed"),  # the dX convolution's weights, read as they lie
        ((24, 5, 3, 2), 1, "flipped transposed"),
        ((48, 6, 3, 3), 4, "as is"),  # grouped
    ],
)
def test_compiled_weight_packing_is_numpys(shape: tuple[int, int, int, int], group: int, view: str) -> None:
    from runtime.kernels.step_conv import _repack
    from runtime.native.abi import Epilogue
    from runtime.native.conv import NhwcConv2d
    from runtime.native.training import pack_conv_weights

    lib = native.lib()
    assert lib is not None
    rng = np.random.default_rng(11)
    w = rng.standard_normal(shape).astype(np.float32)
    if view != "as is":
        w = w.transpose(1, 0, 2, 3)[:, :, ::-1, ::-1]
        group = 1
    conv = NhwcConv2d(lib, np.zeros(w.shape, np.float32), None, group, [1, 1], [1, 1], [0, 0, 0, 0], Epilogue())
    numpy_packed = conv.weight.copy()
    packed = conv.weight.copy()
    assert pack_conv_weights(lib, w, packed, group, conv.bw)
    conv.weight = numpy_packed
    native.set_enabled(False)  # the NumPy copy (the yardstick)
    try:
        _repack(conv, w, None)
    finally:
        native.set_enabled(None)
    np.testing.assert_array_equal(packed, numpy_packed)
    assert not pack_conv_weights(lib, w.astype(np.float64), packed, group, conv.bw)  # another dtype
    assert not pack_conv_weights(lib, w, packed.reshape(-1)[:-1], group, conv.bw)  # a buffer of another size
