"""The gradient kernels' layout-driven paths against float64 references: ``ConvGrad`` at power-of-two and odd
channel counts (both dW orientations, the compiled dX with whole and partial weight blocks, new weights call after
call), ``swap_leading``, and ``MatMulGrad`` of a stack of rows by one weight (dW as one flattened GEMM)."""

from __future__ import annotations

import numpy as np
import pytest

from runtime import native
from runtime.kernels import grad_conv
from runtime.kernels.base import NodeContext
from runtime.kernels.grad_base import swap_leading
from runtime.kernels.grad_conv import ConvGrad, Window, _conv_grad_chunk
from runtime.kernels.grad_tensor import MatMulGrad


def _conv_grad(pads: list[int]) -> ConvGrad:
    return ConvGrad(NodeContext("g", "ConvGrad", n_inputs=3, n_outputs=3), {"pads": pads})


@pytest.mark.parametrize(
    ("n", "c", "m", "size", "k"),
    [
        (4, 64, 256, 1, 1),  # power of two, 1x1 pixels: a short reduction, dW formed without a transpose
        (4, 65, 255, 1, 1),  # odd counts, a partial block of packed weights
        (2, 128, 64, 2, 3),  # power of two, 3x3 over 2x2: padded planes, short reduction
        (2, 33, 40, 5, 3),  # odd, long reduction: the transposed GEMM and the strip copy
        (3, 32, 32, 8, 3),  # the digits CNN's shape: long reduction
    ],
)
def test_conv_grad_matches_im2col_in_float64_at_power_of_two_and_odd_channels(
    n: int, c: int, m: int, size: int, k: int
) -> None:
    pads = [k // 2] * 4
    kernel = _conv_grad(pads)
    rng = np.random.default_rng(5)
    for _ in range(2):  # the second call packs new weights into the kept compiled kernel
        x = rng.standard_normal((n, c, size, size))
        w = rng.standard_normal((m, c, k, k))
        dy = rng.standard_normal((n, m, size, size))
        want_dx, want_dw = _conv_grad_chunk(dy, x, w, Window(pads, [1, 1], [1, 1], 1), True, True)
        assert want_dx is not None and want_dw is not None
        want_db = dy.sum(axis=(0, 2, 3))
        for dtype, tol in ((np.float64, 1e-10), (np.float32, 2e-4)):
            dx, dw, db = kernel.compute(dy.astype(dtype), x.astype(dtype), w.astype(dtype))
            assert dx is not None and dw is not None and db is not None
            assert dx.dtype == dtype and dw.shape == w.shape
            scale = np.sqrt(n * size * size * m)  # the sums' magnitude
            np.testing.assert_allclose(dx, want_dx, rtol=tol, atol=tol * scale)
            np.testing.assert_allclose(dw, want_dw.reshape(w.shape), rtol=tol, atol=tol * scale)
            np.testing.assert_allclose(db, want_db, rtol=tol, atol=tol * scale)


@pytest.mark.parametrize("short", [0, 1 << 30])  # every reduction long, every reduction short
@pytest.mark.parametrize(("c", "m", "size"), [(64, 128, 1), (33, 17, 6)])
def test_both_dw_orientations_give_im2cols_gradient(
    monkeypatch: pytest.MonkeyPatch, short: int, c: int, m: int, size: int
) -> None:
    monkeypatch.setattr(grad_conv, "_SHORT_REDUCTION", short)
    rng = np.random.default_rng(8)
    x, w = rng.standard_normal((3, c, size, size)), rng.standard_normal((m, c, 3, 3))
    dy = rng.standard_normal((3, m, size, size))
    win = Window([1, 1, 1, 1], [1, 1], [1, 1], 1)
    _, got = grad_conv._flat_conv_grad(dy, x, w, win, False, True)
    _, want = _conv_grad_chunk(dy, x, w, win, False, True)
    assert got is not None and want is not None
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-10)


@pytest.mark.skipif(native.lib() is None, reason=f"compiled kernels unavailable: {native.status()}")
def test_conv_grad_dx_runs_compiled_for_float32() -> None:
    """The float32 dX above comes from the compiled kernel (a packed-weight bug would show as a mismatch there)."""
    kernel = _conv_grad([0, 0, 0, 0])
    rng = np.random.default_rng(6)
    w = rng.standard_normal((64, 48, 1, 1)).astype(np.float32)
    kernel.compute(rng.standard_normal((2, 64, 3, 3)).astype(np.float32), np.ones((2, 48, 3, 3), np.float32), w)
    assert any(conv is not None for conv in kernel._step._kernels.values())


@pytest.mark.parametrize("shape", [(512, 256), (130, 3, 5), (64, 64, 2, 2), (1, 7)])
def test_swap_leading_is_numpys_transpose(shape: tuple[int, ...]) -> None:
    a = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
    got = swap_leading(a)
    assert got.flags.c_contiguous
    np.testing.assert_array_equal(got, a.swapaxes(0, 1))


@pytest.mark.parametrize(
    ("a_shape", "b_shape"),
    [((3, 5, 8), (8, 6)), ((2, 3, 4, 16), (16, 32)), ((4, 7, 5), (5,)), ((1, 6, 4), (4, 3))],
)
@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.float16])
def test_matmul_grad_of_a_stack_by_one_weight_matches_float64(
    a_shape: tuple[int, ...], b_shape: tuple[int, ...], dtype: type
) -> None:
    rng = np.random.default_rng(7)
    a, b = rng.standard_normal(a_shape), rng.standard_normal(b_shape)
    y_shape = np.matmul(a, b).shape
    dy = rng.standard_normal(y_shape)
    kernel = MatMulGrad(NodeContext("g", "MatMulGrad", n_inputs=3, n_outputs=2), {})
    da, db = kernel.compute(dy.astype(dtype), a.astype(dtype), b.astype(dtype))
    assert da is not None and db is not None
    assert da.shape == a.shape and db.shape == b.shape and da.dtype == dtype and db.dtype == dtype
    b2 = b[:, None] if b.ndim == 1 else b
    g = dy[..., None] if b.ndim == 1 else dy
    want_da = np.einsum("...ij,kj->...ik", g, b2).reshape(a.shape)
    # per sample, summed: the slow way the kernel no longer takes
    want_db = sum(a[i].T @ g[i] for i in np.ndindex(a.shape[:-2])).reshape(b.shape)
    tol = {np.float64: 1e-12, np.float32: 1e-4, np.float16: 2e-2}[dtype]
    scale = np.sqrt(a.size / a.shape[-1])
    np.testing.assert_allclose(da.astype(np.float64), want_da, rtol=tol, atol=tol * scale)
    np.testing.assert_allclose(db.astype(np.float64), want_db, rtol=tol, atol=tol * scale)


def _batch_norm_grad_reference(dy: np.ndarray, x: np.ndarray, scale: np.ndarray, eps: float) -> tuple[np.ndarray, ...]:
    """The textbook batch-statistics gradient in float64, over every axis but the channels."""
    axes = tuple(i for i in range(x.ndim) if i != 1)
    shape = (1, -1, *([1] * (x.ndim - 2)))
    mean = x.mean(axis=axes)
    inv_std = 1 / np.sqrt(x.var(axis=axes) + eps)
    xhat = (x - mean.reshape(shape)) * inv_std.reshape(shape)
    dbias, dscale = dy.sum(axis=axes), (dy * xhat).sum(axis=axes)
    count = x.size // x.shape[1]
    gain = (scale * inv_std).reshape(shape)
    dx = gain * (dy - (dbias / count).reshape(shape) - xhat * (dscale / count).reshape(shape))
    return dx, dscale, dbias


@pytest.mark.parametrize("shape", [(4, 3, 5, 6), (6, 5), (2, 4, 7)])
@pytest.mark.parametrize("saved", [True, False])  # the forward's saved statistics, or recomputed from X
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_batch_norm_grad_per_channel_sums_match_float64(shape: tuple[int, ...], saved: bool, dtype: type) -> None:
    from runtime.kernels.grad_norm import BatchNormGrad

    rng = np.random.default_rng(9)
    x = rng.standard_normal(shape) * 3 + 2
    dy, scale = rng.standard_normal(shape), rng.standard_normal(shape[1])
    eps = 1e-5
    want = _batch_norm_grad_reference(dy, x, scale, eps)
    axes = tuple(i for i in range(x.ndim) if i != 1)
    stats = (x.mean(axis=axes), 1 / np.sqrt(x.var(axis=axes) + eps)) if saved else ()
    kernel = BatchNormGrad(NodeContext("g", "BatchNormGrad", n_inputs=5, n_outputs=3), {"epsilon": eps})
    got = kernel.compute(*(a.astype(dtype) for a in (dy, x, scale, *stats)))
    tol = 1e-10 if dtype == np.float64 else 1e-4
    for value, expected in zip(got, want, strict=True):
        assert value is not None and value.dtype == dtype
        np.testing.assert_allclose(value, expected, rtol=tol, atol=tol * np.sqrt(x.size))


@pytest.mark.parametrize("shape", [(4, 3, 5, 6), (6, 5), (2, 4, 7)])
def test_batch_norm_training_forward_matches_float64(shape: tuple[int, ...]) -> None:
    from runtime.kernels.grad_norm import BatchNormTraining

    rng = np.random.default_rng(10)
    x = rng.standard_normal(shape) * 3 + 2
    scale, bias = rng.standard_normal(shape[1]), rng.standard_normal(shape[1])
    mean, var = rng.standard_normal(shape[1]), rng.random(shape[1]) + 0.5
    axes = tuple(i for i in range(x.ndim) if i != 1)
    cs = (1, -1, *([1] * (x.ndim - 2)))
    inv_std = 1 / np.sqrt(x.var(axis=axes) + 1e-5)
    y = (x - x.mean(axis=axes).reshape(cs)) * (scale * inv_std).reshape(cs) + bias.reshape(cs)
    new_mean, new_var = mean * 0.9 + x.mean(axis=axes) * 0.1, var * 0.9 + x.var(axis=axes) * 0.1
    want = (y, new_mean, new_var, x.mean(axis=axes), inv_std)
    kernel = BatchNormTraining(NodeContext("b", "BatchNormTraining", n_inputs=5, n_outputs=5), {})
    for dtype, tol in ((np.float64, 1e-10), (np.float32, 1e-4)):
        got = kernel.compute(*(a.astype(dtype) for a in (x, scale, bias, mean, var)))
        for value, expected in zip(got, want, strict=True):
            np.testing.assert_allclose(value, expected, rtol=tol, atol=tol)
        assert got[0].dtype == dtype and got[0].shape == x.shape
