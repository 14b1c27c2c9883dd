"""The FusedAttention kernel: the compiled path against its NumPy path (the unfused ops' arithmetic) over strided
views, tails of every block size, broadcast batches and masks, and the planned (prebound) call."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from runtime import native
from runtime.kernels import NodeContext
from runtime.kernels.fused_attention import FusedAttention, inverse_perm, source_view
from runtime.native import attention as native_attention

rng = np.random.default_rng(3)


def _kernel(**attrs: Any) -> FusedAttention:
    ctx = NodeContext("att", "FusedAttention", "com.appopt", 1, 4, 1, (True,) * 4, (True,))
    return FusedAttention(ctx, attrs)


def _reference(kernel: FusedAttention, *inputs: Any) -> np.ndarray:
    q, k, v = kernel._operands(*inputs[:3])
    return kernel.compute_numpy(q, k, v, inputs[3] if len(inputs) > 3 else None)


needs_native = pytest.mark.skipif(native.lib() is None, reason=f"compiled kernels unavailable: {native.status()}")


@needs_native
@pytest.mark.parametrize(
    ("b", "h", "sq", "sk", "d", "dv"),
    [
        (1, 3, 65, 65, 64, 64),  # ViT-tiny's heads
        (2, 4, 7, 13, 5, 9),  # every dimension a tail
        (1, 1, 1, 40, 16, 80),  # one query (decoding); Dv over one 64-column block
        (3, 2, 33, 17, 24, 48),  # cross attention, Sq > Sk
    ],
)
def test_compiled_matches_numpy(b: int, h: int, sq: int, sk: int, d: int, dv: int) -> None:
    q = rng.standard_normal((b, h, sq, d)).astype(np.float32)
    k = rng.standard_normal((b, h, sk, d)).astype(np.float32)
    v = rng.standard_normal((b, h, sk, dv)).astype(np.float32)
    mask = np.where(rng.random((b, 1, 1, sk)) > 0.25, 0.0, -10000.0).astype(np.float32)
    kernel = _kernel(scale=0.3, trans_k=1)
    y = kernel.compute(q, k, v, mask)
    np.testing.assert_allclose(y, _reference(kernel, q, k, v, mask), rtol=2e-5, atol=2e-6)


@needs_native
def test_views_of_a_packed_tensor_and_a_transposed_output() -> None:
    b, s, h, d = 2, 19, 3, 8
    packed = rng.standard_normal((b, s, 3, h, d)).astype(np.float32)
    perm = [2, 0, 3, 1, 4]
    kernel = _kernel(
        scale=0.25,
        trans_k=1,
        q_perm=perm,
        k_perm=perm,
        v_perm=perm,
        q_index=0,
        k_index=1,
        v_index=2,
        out_perm=[0, 2, 1, 3],
    )
    y = kernel.compute(packed, packed, packed)
    assert y.shape == (b, s, h, d) and y.flags.c_contiguous
    t = packed.transpose(perm)
    expected = _reference(_kernel(scale=0.25), t[0], np.swapaxes(t[1], -1, -2), t[2]).transpose(0, 2, 1, 3)
    np.testing.assert_allclose(y, expected, rtol=2e-5, atol=2e-6)


@needs_native
def test_broadcast_batch_and_full_mask_with_minus_infinity() -> None:
    q = rng.standard_normal((2, 4, 6, 8)).astype(np.float32)
    kt = rng.standard_normal((1, 4, 8, 6)).astype(np.float32)  # K^T shared by the batch
    v = rng.standard_normal((4, 6, 8)).astype(np.float32)  # rank 3: broadcast over the batch
    causal = np.triu(np.full((6, 6), -np.inf, dtype=np.float32), 1)
    kernel = _kernel(scale=1.0)
    np.testing.assert_allclose(kernel.compute(q, kt, v, causal), _reference(kernel, q, kt, v, causal), rtol=2e-5)


@needs_native
@pytest.mark.parametrize("keep", [0, 1])
def test_a_boolean_mask_selects_scores(keep: int) -> None:
    q = rng.standard_normal((2, 3, 20, 16)).astype(np.float32)
    k = rng.standard_normal((2, 3, 20, 16)).astype(np.float32)
    v = rng.standard_normal((2, 3, 20, 16)).astype(np.float32)
    cond = rng.random((2, 1, 1, 20)) > 0.4
    kernel = _kernel(scale=0.25, trans_k=1, mask_select=1, mask_keep=keep, mask_fill=-3.0e38)
    y = kernel.compute(q, k, v, cond)
    np.testing.assert_allclose(y, _reference(kernel, q, k, v, cond), rtol=2e-5, atol=2e-6)


@needs_native
def test_prebound_call_writes_the_planned_buffer() -> None:
    q = rng.standard_normal((1, 2, 9, 16)).astype(np.float32)
    k = rng.standard_normal((1, 2, 9, 16)).astype(np.float32)
    v = rng.standard_normal((1, 2, 9, 16)).astype(np.float32)
    kernel = _kernel(scale=0.5, trans_k=1, out_perm=[0, 2, 1, 3])
    out = np.full((1, 9, 2, 16), np.nan, dtype=np.float32)
    call = kernel.bind(out, q, k, v)
    assert call is not None
    call()
    np.testing.assert_allclose(out, _reference(kernel, q, k, v), rtol=2e-5, atol=2e-6)


def test_unsupported_operands_take_the_numpy_path() -> None:
    q = rng.standard_normal((2, 3, 4, 5)).astype(np.float64)
    kt = rng.standard_normal((2, 3, 5, 4)).astype(np.float64)
    v = rng.standard_normal((2, 3, 4, 5)).astype(np.float64)
    kernel = _kernel(scale=0.5)
    y = kernel.compute(q, kt, v)
    assert y.dtype == np.float64
    s = q @ kt * 0.5
    p = np.exp(s - s.max(-1, keepdims=True))
    np.testing.assert_allclose(y, (p / p.sum(-1, keepdims=True)) @ v, rtol=1e-12)


def test_view_helpers() -> None:
    x = np.arange(24).reshape(2, 3, 4)
    assert np.shares_memory(source_view(x, [2, 0, 1], 1), x)
    np.testing.assert_array_equal(source_view(x, [2, 0, 1], 1), x.transpose(2, 0, 1)[1])
    assert inverse_perm([2, 0, 3, 1]) == [1, 3, 0, 2]


def test_task_chunks_split_few_heads_for_two_threads() -> None:
    assert native_attention.task_chunk(batch_heads=3, q_len=65, threads=2) % native_attention.ROWS == 0
    assert native_attention.task_chunk(batch_heads=64, q_len=65, threads=2) >= 65  # whole heads
    assert native_attention.task_chunk(batch_heads=1, q_len=5, threads=8) >= native_attention.MIN_CHUNK


@needs_native
def test_a_masked_key_gets_exactly_zero_weight() -> None:
    """No denormal probability survives a masked score: it would make P @ V crawl, and here it would show, since the
    masked key's value is huge (exact softmax gives the key weight 0, so the output is exactly 0)."""
    q = rng.standard_normal((1, 2, 5, 16)).astype(np.float32)
    k = rng.standard_normal((1, 2, 20, 16)).astype(np.float32)
    v = np.zeros((1, 2, 20, 16), dtype=np.float32)
    v[:, :, 3] = 1e38
    mask = np.zeros((1, 1, 1, 20), dtype=np.float32)
    mask[..., 3] = -10000.0
    y = _kernel(scale=0.25, trans_k=1).compute(q, k, v, mask)
    assert np.all(y == 0.0)


@needs_native
def test_compiled_softmax_flushes_tiny_probabilities_to_zero() -> None:
    from runtime.native import ops

    x = np.zeros((3, 40), dtype=np.float32)
    x[:, 7] = -10000.0
    y = ops.softmax_rows(native.lib(), x, None)
    assert np.all(y[:, 7] == 0.0)
    np.testing.assert_allclose(y.sum(axis=1), 1.0, rtol=1e-6)


@needs_native
@pytest.mark.parametrize("batch_shape", [(), (6,)])
def test_unbatched_and_single_batch_axis(batch_shape: tuple[int, ...]) -> None:
    q = rng.standard_normal((*batch_shape, 10, 12)).astype(np.float32)
    kt = rng.standard_normal((*batch_shape, 12, 7)).astype(np.float32)
    v = rng.standard_normal((*batch_shape, 7, 20)).astype(np.float32)
    kernel = _kernel(scale=0.4)
    y = kernel.compute(q, kt, v)
    assert y.shape == (*batch_shape, 10, 20)
    np.testing.assert_allclose(y, _reference(kernel, q, kt, v), rtol=2e-5, atol=2e-6)
