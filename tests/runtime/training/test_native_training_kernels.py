"""The compiled training kernels (BatchNorm's forward and backward, LayerNorm's and ReLU's gradients) against the
NumPy kernels, their yardsticks, at odd shapes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from runtime import native
from runtime.kernels.base import NodeContext
from runtime.kernels.grad_norm import BatchNormGrad, BatchNormTraining, LayerNormGrad
from runtime.native.training import batch_norm_train, batch_norm_train_grad, layer_norm_grad, relu_grad

pytestmark = pytest.mark.skipif(native.lib() is None, reason=f"compiled kernels unavailable: {native.status()}")


def _on_numpy(compute: Callable[..., Any], *args: Any) -> Any:
    """``compute(*args)`` with the compiled kernels switched off: the NumPy yardstick."""
    native.set_enabled(False)
    try:
        return compute(*args)
    finally:
        native.set_enabled(None)


def _kernels() -> tuple[BatchNormTraining, BatchNormGrad]:
    forward = BatchNormTraining(NodeContext("bn", "BatchNormTraining", n_inputs=5, n_outputs=5), {"momentum": 0.8})
    grad = BatchNormGrad(NodeContext("bng", "BatchNormGrad", n_inputs=5, n_outputs=3), {})
    return forward, grad


@pytest.mark.parametrize(
    "shape",
    [(3, 5, 7, 9), (2, 16, 16, 16), (4, 3, 1, 1), (5, 6), (2, 4, 3, 5, 7), (1, 1, 5000), (2, 8, 64, 130)],
)
def test_compiled_batch_norm_is_numpys(shape: tuple[int, ...]) -> None:
    rng = np.random.default_rng(7)
    c = shape[1]
    x = (rng.standard_normal(shape) * 3 + 5).astype(np.float32)  # an offset mean: the two-pass variance matters
    dy = rng.standard_normal(shape).astype(np.float32)
    scale, bias = rng.standard_normal(c).astype(np.float32), rng.standard_normal(c).astype(np.float32)
    mean, var = rng.standard_normal(c).astype(np.float32), rng.random(c).astype(np.float32) + 0.5
    forward, grad = _kernels()
    got = forward.compute(x, scale, bias, mean, var)
    got_grads = grad.compute(dy, x, scale, got[3], got[4])
    want = _on_numpy(forward.compute, x, scale, bias, mean, var)
    want_grads = _on_numpy(grad.compute, dy, x, scale, want[3], want[4])
    for g, w in zip(got, want, strict=True):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=2e-5, atol=2e-5)
    for g_grad, w_grad in zip(got_grads, want_grads, strict=True):
        assert g_grad is not None and w_grad is not None and g_grad.dtype == w_grad.dtype
        np.testing.assert_allclose(g_grad, w_grad, rtol=1e-4, atol=1e-4 * np.abs(w_grad).max())


def test_the_wrappers_refuse_what_the_kernels_do_not_take() -> None:
    lib = native.lib()
    assert lib is not None
    x = np.ones((2, 3, 4), dtype=np.float32)
    ones = np.ones(3, dtype=np.float32)
    assert batch_norm_train(lib, x.astype(np.float64), ones, ones, 1e-5) is None  # another dtype
    assert batch_norm_train(lib, x.transpose(0, 2, 1), ones, ones, 1e-5) is None  # not C-contiguous
    assert batch_norm_train(lib, x, np.ones(4, np.float32), ones, 1e-5) is None  # scale of another length
    assert batch_norm_train(lib, np.ones((0, 3, 4), np.float32), ones, ones, 1e-5) is None  # an empty batch
    assert batch_norm_train_grad(lib, np.ones((2, 3, 5), np.float32), x, ones, ones, ones, True) is None
    only = batch_norm_train_grad(lib, x, x, ones, ones, ones, False)
    assert only is not None and only[0] is None  # dX not asked for: not computed


def test_a_constant_channel_gets_a_finite_normalisation_and_zero_gradient() -> None:
    lib = native.lib()
    assert lib is not None
    x = np.full((4, 2, 3, 3), 7.0, dtype=np.float32)
    ones = np.ones(2, dtype=np.float32)
    found = batch_norm_train(lib, x, ones, np.zeros(2, np.float32), 1e-5)
    assert found is not None
    y, mean, var, inv_std = found
    assert np.all(y == 0) and np.all(mean == 7) and np.all(var == 0)
    grads = batch_norm_train_grad(lib, np.ones_like(x), x, ones, mean, inv_std, True)
    assert grads is not None and grads[0] is not None
    np.testing.assert_allclose(grads[0], 0, atol=1e-6)
    np.testing.assert_allclose(grads[2], 36)


@pytest.mark.parametrize("size", [1, 7, 8, 13, 70_001, 200_003])  # vector tails; several pool tasks
def test_compiled_relu_grad_is_the_select(size: int) -> None:
    lib = native.lib()
    assert lib is not None
    rng = np.random.default_rng(size)
    y = np.maximum(rng.standard_normal(size), 0).astype(np.float32)
    y[::5] = -0.0
    dy = rng.standard_normal(size).astype(np.float32)
    dy[::3] = np.inf  # overflowed dY: only where Y > 0 may it pass through
    dy[1::7] = np.nan
    got = relu_grad(lib, dy, y)
    assert got is not None
    np.testing.assert_array_equal(got, np.where(y > 0, dy, np.float32(0)))
    assert relu_grad(lib, dy.astype(np.float64), y) is None  # another dtype: the NumPy kernel's
    strided = np.ones((4, 6), np.float32)[:, ::2]
    assert relu_grad(lib, strided, strided) is None  # not C-contiguous


@pytest.mark.parametrize(
    ("shape", "axis"),
    [((3, 5, 7), -1), ((2, 3, 4, 5), 2), ((130, 33), 1), ((1, 256), -1), ((4, 9, 64), 1)],  # 130 rows: 3 tasks
)
def test_compiled_layer_norm_grad_is_numpys(shape: tuple[int, ...], axis: int) -> None:
    rng = np.random.default_rng(len(shape) * 100 + shape[-1])
    x = (rng.standard_normal(shape) * 2 + 3).astype(np.float32)
    dy = rng.standard_normal(shape).astype(np.float32)
    scale = rng.standard_normal(shape[axis:]).astype(np.float32)
    kernel = LayerNormGrad(NodeContext("ln", "LayerNormGrad", n_inputs=3, n_outputs=3), {"axis": axis})
    got, want = kernel.compute(dy, x, scale), _on_numpy(kernel.compute, dy, x, scale)
    for g, w in zip(got, want, strict=True):
        assert g is not None and w is not None and g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4 * max(1.0, float(np.abs(w).max())))
    lib = native.lib()
    assert lib is not None
    only = layer_norm_grad(lib, dy, x, scale, axis % len(shape), 1e-5, False)
    assert only is not None and only[0] is None  # dX not asked for: not computed
    assert layer_norm_grad(lib, dy.astype(np.float64), x, scale, axis % len(shape), 1e-5, True) is None
    assert layer_norm_grad(lib, dy, x, scale[..., :1], axis % len(shape), 1e-5, True) is None  # broadcast scale
