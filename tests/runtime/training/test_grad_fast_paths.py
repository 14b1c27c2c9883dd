"""The gradient kernels' fast paths against their general paths (the yardsticks): ConvGrad on flat planes (2-D,
one group; strided ones on phase planes, also against a pixel-by-pixel reference) and MaxPoolGrad for windows that
tile the plane (in NumPy and compiled)."""

from __future__ import annotations

import numpy as np
import pytest

from runtime import native
from runtime.kernels.grad_conv import Window, _conv_grad_chunk, _flat_conv_grad
from runtime.kernels.grad_pool import _native_tiled_max_pool_grad, _tiled_max_pool_grad


@pytest.mark.parametrize(
    ("kernel", "pads", "dilations", "size"),
    [
        ((3, 3), [1, 1, 1, 1], [1, 1], (8, 8)),
        ((3, 3), [0, 2, 1, 0], [1, 1], (7, 5)),  # asymmetric pads, a non-square plane
        ((3, 2), [2, 1, 2, 1], [2, 3], (9, 10)),  # dilations
        ((1, 1), [0, 0, 0, 0], [1, 1], (6, 6)),
        ((5, 5), [2, 2, 2, 2], [1, 1], (4, 4)),  # kernel wider than the plane
    ],
)
def test_flat_planes_give_the_im2col_gradients(
    kernel: tuple[int, int], pads: list[int], dilations: list[int], size: tuple[int, int]
) -> None:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 4, *size))
    w = rng.standard_normal((5, 4, *kernel))
    out = [size[i] + pads[i] + pads[i + 2] - (kernel[i] - 1) * dilations[i] for i in range(2)]
    dy = rng.standard_normal((3, 5, *out))
    win = Window(pads, [1, 1], dilations, 1)
    expected = _conv_grad_chunk(dy, x, w, win, True, True)
    got = _flat_conv_grad(dy, x, w, win, True, True)
    assert got[0] is not None and expected[0] is not None and got[1] is not None and expected[1] is not None
    np.testing.assert_allclose(got[0], expected[0], rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(got[1], expected[1], rtol=1e-10, atol=1e-10)
    only_dw = _flat_conv_grad(dy, x, w, win, False, True)
    assert only_dw[0] is None and np.allclose(only_dw[1], expected[1])


def _conv_grads_by_pixels(
    dy: np.ndarray, x: np.ndarray, w: np.ndarray, pads: list[int], strides: list[int], dilations: list[int]
) -> tuple[np.ndarray, np.ndarray]:
    """dX and dW of a one-group 2-D convolution, output pixel by output pixel and tap by tap (the reference)."""
    n, c, height, width = x.shape
    xp = np.zeros((n, c, height + pads[0] + pads[2], width + pads[1] + pads[3]))
    xp[:, :, pads[0] : pads[0] + height, pads[1] : pads[1] + width] = x
    dxp, dw = np.zeros_like(xp), np.zeros(w.shape)
    for i, j in np.ndindex(*dy.shape[2:]):
        for a, b in np.ndindex(*w.shape[2:]):
            r, s = i * strides[0] + a * dilations[0], j * strides[1] + b * dilations[1]
            dw[:, :, a, b] += dy[:, :, i, j].T @ xp[:, :, r, s]
            dxp[:, :, r, s] += dy[:, :, i, j] @ w[:, :, a, b]
    return dxp[:, :, pads[0] : pads[0] + height, pads[1] : pads[1] + width], dw


@pytest.mark.parametrize(
    ("kernel", "pads", "strides", "dilations", "size", "depthwise"),
    [
        ((3, 3), [1, 1, 1, 1], [2, 2], [1, 1], (8, 8), False),  # ResNet's downsampling 3x3
        ((3, 3), [1, 1, 1, 1], [2, 2], [1, 1], (7, 9), False),  # odd sizes: the last row and column are read
        ((1, 1), [0, 0, 0, 0], [2, 2], [1, 1], (7, 6), False),  # the 1x1 shortcut: one phase of four is read
        ((3, 3), [0, 0, 0, 0], [3, 3], [1, 1], (10, 11), False),  # leftover rows and columns no output reads
        ((7, 7), [3, 3, 3, 3], [2, 2], [1, 1], (11, 10), False),  # ResNet-50's stem
        ((3, 2), [0, 1, 2, 1], [2, 3], [2, 1], (9, 11), False),  # asymmetric pads, strides and dilations
        ((2, 3), [1, 0, 0, 2], [3, 2], [2, 3], (8, 9), False),  # dilation and stride sharing a factor
        ((3, 3), [1, 1, 1, 1], [1, 1], [1, 1], (8, 8), True),  # MobileNetV2's depthwise 3x3
        ((3, 3), [1, 1, 1, 1], [2, 2], [1, 1], (9, 7), True),  # and its downsampling one, at odd sizes
        ((5, 3), [2, 0, 1, 1], [2, 3], [1, 2], (11, 10), True),  # asymmetric everything
    ],
)
def test_phase_planes_give_the_reference_gradients(
    kernel: tuple[int, int],
    pads: list[int],
    strides: list[int],
    dilations: list[int],
    size: tuple[int, int],
    depthwise: bool,
) -> None:
    """Against the im2col yardstick (grouped for depthwise), and one-group ones also pixel by pixel."""
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 4, *size))
    w = rng.standard_normal((4, 1 if depthwise else 4, *kernel))
    out = [(size[i] + pads[i] + pads[i + 2] - (kernel[i] - 1) * dilations[i] - 1) // strides[i] + 1 for i in range(2)]
    dy = rng.standard_normal((2, 4, *out))
    win = Window(pads, strides, dilations, 4 if depthwise else 1)
    got = _flat_conv_grad(dy, x, w, win, True, True)
    assert got[0] is not None and got[1] is not None
    general = _conv_grad_chunk(dy, x, w, win, True, True)
    assert general[0] is not None and general[1] is not None
    np.testing.assert_allclose(got[0], general[0], rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(got[1], general[1], rtol=1e-10, atol=1e-10)
    if not depthwise:
        want_dx, want_dw = _conv_grads_by_pixels(dy, x, w, pads, strides, dilations)
        np.testing.assert_allclose(got[0], want_dx, rtol=1e-10, atol=1e-10)
        np.testing.assert_allclose(got[1].reshape(w.shape), want_dw, rtol=1e-10, atol=1e-10)


@pytest.mark.skipif(native.lib() is None, reason=f"compiled kernels unavailable: {native.status()}")
@pytest.mark.parametrize("dilation", [1, 2])
def test_depthwise_conv_grad_takes_the_compiled_input_gradient(dilation: int) -> None:
    from runtime.kernels.base import NodeContext
    from runtime.kernels.grad_conv import ConvGrad, _compiled_input_grad
    from runtime.kernels.step_conv import StepConv

    rng = np.random.default_rng(8)
    x = rng.standard_normal((4, 24, 9, 10)).astype(np.float32)
    w = rng.standard_normal((24, 1, 3, 3)).astype(np.float32)
    pads = [dilation, 1, dilation, 2]
    dy = rng.standard_normal((4, 24, 9, 11)).astype(np.float32)
    window = Window(pads, [1, 1], [dilation, 1], 24)
    want = _conv_grad_chunk(dy.astype(np.float64), x.astype(np.float64), w.astype(np.float64), window, True, True)
    assert want[0] is not None and want[1] is not None
    compiled = _compiled_input_grad(StepConv(), dy, w, pads, [dilation, 1], 24)
    assert compiled is not None  # the compiled kernel took it
    np.testing.assert_allclose(compiled, want[0], rtol=1e-4, atol=1e-4)
    attrs = {"pads": pads, "group": 24, "dilations": [dilation, 1]}
    got = ConvGrad(NodeContext("g", "ConvGrad", n_inputs=3, n_outputs=3), attrs).compute(dy, x, w)
    assert got[0] is not None and got[1] is not None
    np.testing.assert_allclose(got[0], want[0], rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(got[1], want[1].reshape(w.shape), rtol=1e-4, atol=1e-3)


def _max_pool_grad_by_windows(dy: np.ndarray, x: np.ndarray, k: int) -> np.ndarray:
    """Window by window: the gradient goes to the first maximum in C order."""
    dx = np.zeros_like(x)
    for index in np.ndindex(*dy.shape):
        n, c, i, j = index
        window = x[n, c, i * k : (i + 1) * k, j * k : (j + 1) * k]
        a, b = np.unravel_index(int(window.argmax()), window.shape)
        dx[n, c, i * k + a, j * k + b] += dy[index]
    return dx


@pytest.mark.parametrize("k", [2, 3])
def test_tiled_max_pool_grad_sends_each_gradient_to_the_first_maximum(k: int) -> None:
    rng = np.random.default_rng(1)
    x = rng.integers(0, 3, size=(2, 3, 2 * k * 2, 3 * k)).astype(np.float32)  # many ties
    dy = rng.standard_normal((2, 3, 4, 3)).astype(np.float32)
    np.testing.assert_allclose(_tiled_max_pool_grad(dy, x, [k, k]), _max_pool_grad_by_windows(dy, x, k))


@pytest.mark.skipif(native.lib() is None, reason=f"compiled kernels unavailable: {native.status()}")
@pytest.mark.parametrize(("k", "shape"), [(2, (3, 5, 8, 16)), (2, (2, 3, 6, 10)), (3, (2, 4, 6, 9)), (2, (1, 2, 4, 8))])
def test_the_compiled_tiled_max_pool_grad_is_numpys(k: int, shape: tuple[int, int, int, int]) -> None:
    rng = np.random.default_rng(3)
    x = rng.integers(0, 3, size=shape).astype(np.float32)  # many ties: the first maximum must win
    x[0, 0, 0, 1] = np.nan  # a NaN counts as a maximum, as argmax has it
    x[-1, -1, -1, -1] = -0.0
    dy = rng.standard_normal((shape[0], shape[1], shape[2] // k, shape[3] // k)).astype(np.float32)
    got = _native_tiled_max_pool_grad(dy, x, [k, k])
    assert got is not None
    np.testing.assert_array_equal(got, _tiled_max_pool_grad(dy, x, [k, k]))
    np.testing.assert_array_equal(got, _max_pool_grad_by_windows(dy, x, k))


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
def test_relu_grad_is_dy_where_y_is_positive_even_for_non_finite_dy(dtype: type) -> None:
    from runtime import compile_model
    from runtime.kernels.grad_base import GRAD_DOMAIN
    from tests.runtime.training.helpers import op_model

    rng = np.random.default_rng(4)
    y = np.maximum(rng.standard_normal((4, 3, 5, 5)), 0).astype(dtype)
    dy = rng.standard_normal(y.shape).astype(dtype)
    model = op_model(
        "ReluGrad", {"dy": dy, "r": y}, domain=GRAD_DOMAIN, extra_opsets=[(GRAD_DOMAIN, 1)], outputs=["dx"]
    )
    exe = compile_model(model, 1)
    np.testing.assert_array_equal(exe.run({"dy": dy, "r": y})["dx"], np.where(y > 0, dy, 0).astype(dtype))
    y[0, 0, 0, :2], y[0, 0, 0, 2:4] = 0, 1
    dy[0, 0, 0, :4] = [np.inf, np.nan, -np.inf, np.nan]  # an fp16 overflow: only where Y > 0 may it pass through
    got = exe.run({"dy": dy, "r": y})["dx"]
    np.testing.assert_array_equal(got, np.where(y > 0, dy, 0).astype(dtype))
    assert got[0, 0, 0, 0] == 0 and got[0, 0, 0, 1] == 0
