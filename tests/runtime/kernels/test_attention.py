"""Attention family: the ONNX backend cases, and onnxruntime's Attention-23/24 over head layouts, masks, caches."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from tests.runtime.kernels.backend_cases import backend_cases_test
from tests.runtime.kernels.ort_compare import assert_matches_ort, rand

OPS = ["Attention", "RotaryEmbedding", "LinearAttention", "FlexAttention"]


test_backend_cases_pass = backend_cases_test(OPS)


B, HQ, HKV, SQ, SKV, D, DV = 2, 4, 2, 3, 5, 8, 6


def qkv(rng: np.random.Generator, q_heads: int = HQ, kv_heads: int = HKV) -> dict[str, np.ndarray]:
    return {
        "q": rand(rng, B, q_heads, SQ, D),
        "k": rand(rng, B, kv_heads, SKV, D),
        "v": rand(rng, B, kv_heads, SKV, DV),
    }


@pytest.mark.parametrize(
    "attrs",
    [
        {},
        {"is_causal": 1},
        {"scale": 0.3},
        {"softcap": 2.0},
        {"is_causal": 1, "softcap": 1.5, "scale": 0.5},
    ],
)
@pytest.mark.parametrize("kv_heads", [HQ, HKV, 1])
def test_attention_4d_matches_onnxruntime(attrs: dict[str, Any], kv_heads: int) -> None:
    rng = np.random.default_rng(0)
    assert_matches_ort("Attention", qkv(rng, kv_heads=kv_heads), opset=23, **attrs)


@pytest.mark.parametrize("mask_kind", ["bool", "float"])
@pytest.mark.parametrize("causal", [0, 1])
def test_attention_masks_match_onnxruntime(mask_kind: str, causal: int) -> None:
    rng = np.random.default_rng(1)
    inputs: dict[str, Any] = qkv(rng)
    if mask_kind == "float":
        inputs["mask"] = rand(rng, B, 1, SQ, SKV)
    else:
        mask = rng.random((SQ, SKV)) > 0.3
        mask[:, 0] = True  # keep every row attendable so no row is fully masked
        inputs["mask"] = mask
    assert_matches_ort("Attention", inputs, opset=23, is_causal=causal)


@pytest.mark.parametrize("causal", [0, 1])
def test_attention_kv_cache_matches_onnxruntime(causal: int) -> None:
    rng = np.random.default_rng(2)
    inputs: dict[str, Any] = qkv(rng)
    inputs["mask"] = None
    inputs["past_key"] = rand(rng, B, HKV, 4, D)
    inputs["past_value"] = rand(rng, B, HKV, 4, DV)
    outputs = ("y", "present_key", "present_value", "qk")
    ours = assert_matches_ort("Attention", inputs, outputs, opset=23, is_causal=causal)
    assert ours[1].shape == (B, HKV, 4 + SKV, D)
    assert ours[3].shape == (B, HQ, SQ, 4 + SKV)


def test_attention_3d_packed_heads_match_onnxruntime() -> None:
    rng = np.random.default_rng(3)
    inputs = {"q": rand(rng, B, SQ, HQ * D), "k": rand(rng, B, SKV, HKV * D), "v": rand(rng, B, SKV, HKV * DV)}
    assert_matches_ort("Attention", inputs, opset=23, q_num_heads=HQ, kv_num_heads=HKV, is_causal=1)


@pytest.mark.parametrize("mode", [0, 1, 2, 3])
def test_attention_qk_output_modes_match_onnxruntime(mode: int) -> None:
    rng = np.random.default_rng(4)
    inputs: dict[str, Any] = qkv(rng)
    inputs["mask"] = rand(rng, SQ, SKV)
    # no is_causal here: onnxruntime writes its causal mask as -FLT_MAX where the spec (and mode 2) has -inf
    assert_matches_ort("Attention", inputs, ("y", "", "", "qk"), opset=23, softcap=3.0, qk_matmul_output_mode=mode)


def test_fully_masked_rows_give_zeros_not_nan(make_kernel) -> None:
    rng = np.random.default_rng(5)
    data = qkv(rng)
    mask = np.ones((SQ, SKV), dtype=bool)
    mask[1] = False
    (y,) = make_kernel("Attention", opset=23, n_inputs=4).run(data["q"], data["k"], data["v"], mask)
    assert not np.isnan(y).any()
    np.testing.assert_array_equal(y[:, :, 1], 0)


def test_short_mask_is_padded_as_masked(make_kernel) -> None:
    """A mask shorter than the key sequence is padded with False (-inf): those keys get no weight."""
    rng = np.random.default_rng(6)
    data = qkv(rng)
    short = rng.random((SQ, SKV - 2)) > 0.2
    short[:, 0] = True
    padded = np.concatenate([short, np.zeros((SQ, 2), dtype=bool)], axis=1)
    kernel = make_kernel("Attention", opset=23, n_inputs=4)
    (y_short,) = kernel.run(data["q"], data["k"], data["v"], short)
    (y_padded,) = kernel.run(data["q"], data["k"], data["v"], padded)
    np.testing.assert_array_equal(y_short, y_padded)
