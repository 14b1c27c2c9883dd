"""Attention family: Attention (opsets 23-25), RotaryEmbedding, LinearAttention, FlexAttention (ai.onnx.preview).

Attention builds one additive bias (mask, causal frontier, sliding window, padding), runs two batched matmuls
and a softmax that maps fully masked rows to zeros instead of NaN, as the spec requires. It computes in the input
dtype, step by step like the spec's function body, so fp16/bf16 results round as the reference does.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
from onnx import helper

from runtime.kernels.base import Kernel, register


def _compute_type(dtype: np.dtype[Any]) -> type:
    return np.float64 if dtype == np.float64 else np.float32


def _round_to(x: np.ndarray, dtype: np.dtype[Any]) -> np.ndarray:
    """Round ``x`` through ``dtype`` (to mimic a narrow-precision step) but keep ``x``'s dtype."""
    if np.dtype(dtype).itemsize >= x.dtype.itemsize:
        return x
    return x.astype(dtype).astype(x.dtype)


def _split_heads(x: np.ndarray, heads: int) -> np.ndarray:
    """``(B, S, H*D) -> (B, H, S, D)``."""
    b, s, hd = x.shape
    if hd % heads:
        raise ValueError(f"hidden size {hd} is not divisible by {heads} heads")
    return x.reshape(b, s, heads, hd // heads).transpose(0, 2, 1, 3)


def _merge_heads(x: np.ndarray) -> np.ndarray:
    """``(B, H, S, D) -> (B, S, H*D)``."""
    b, h, s, d = x.shape
    return x.transpose(0, 2, 1, 3).reshape(b, s, h * d)


def _repeat_kv(x: np.ndarray, q_heads: int) -> np.ndarray:
    """Grouped-query attention: repeat each KV head ``q_heads / kv_heads`` times (h0, h0, h1, h1, ...)."""
    kv_heads = x.shape[1]
    if kv_heads == q_heads:
        return x
    if q_heads % kv_heads:
        raise ValueError(f"{q_heads} query heads is not a multiple of {kv_heads} key/value heads")
    return np.repeat(x, q_heads // kv_heads, axis=1)


def _matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``np.matmul`` keeping ``a``'s dtype (NumPy promotes some narrow floats such as bfloat16)."""
    return np.matmul(a, b).astype(a.dtype, copy=False)


def masked_softmax(scores: np.ndarray) -> np.ndarray:
    """Softmax over the last axis; rows that are entirely ``-inf`` give zeros, not NaN."""
    zero, one = scores.dtype.type(0), scores.dtype.type(1)
    row_max = scores.max(axis=-1, keepdims=True)
    safe_max = np.where(np.isneginf(row_max), zero, row_max)
    e = np.exp(scores - safe_max)
    total = e.sum(axis=-1, keepdims=True)
    return e / np.where(total == zero, one, total)


def _frontier_bias(q_len: int, kv_len: int, offset: int | np.ndarray, allowed_fn: Any, ct: type) -> np.ndarray:
    """0/-inf bias from ``allowed_fn(diff)`` where ``diff = (i + offset) - j``; per-batch offsets add a batch
    axis as ``(B, 1, q, kv)``."""
    i = np.arange(q_len)[:, None]
    j = np.arange(kv_len)[None, :]
    if np.ndim(offset) > 0:
        off = np.asarray(offset).reshape(-1, 1, 1)
        allowed = allowed_fn((i + off) - j)[:, None]
    else:
        allowed = allowed_fn((i + int(offset)) - j)
    return np.where(allowed, ct(0), ct(-np.inf))


@register
class Attention(Kernel):
    """Scaled dot-product attention with MHA/GQA/MQA, masks, causal and windowed frontiers, KV cache,
    softcap and the four ``qk_matmul_output_mode`` debug outputs."""

    op_type = "Attention"
    uses_blas = True
    since_version = 23
    attr_defaults: ClassVar[dict[str, Any]] = {
        "is_causal": 0,
        "qk_matmul_output_mode": 0,
        "softcap": 0.0,
        "left_window_size": -1,
        "right_window_size": -1,
    }

    def compute(
        self,
        q: np.ndarray,
        k: np.ndarray,
        v: np.ndarray,
        attn_mask: np.ndarray | None = None,
        past_key: np.ndarray | None = None,
        past_value: np.ndarray | None = None,
        nonpad_kv_seqlen: np.ndarray | None = None,
    ) -> tuple[np.ndarray, ...]:
        if (past_key is None) != (past_value is None):
            raise ValueError("past_key and past_value must be given together")
        # Computed in the input dtype, step by step as the spec's function body does, so fp16/bf16
        # results round the way the reference rounds them.
        dtype = q.dtype
        ct = dtype.type
        is_3d = q.ndim == 3
        if is_3d:
            q = _split_heads(q, int(self.attrs["q_num_heads"]))
            k = _split_heads(k, int(self.attrs["kv_num_heads"]))
            v = _split_heads(v, int(self.attrs["kv_num_heads"]))
        if past_key is not None and past_value is not None:
            k = np.concatenate([past_key.astype(k.dtype, copy=False), k], axis=2)
            v = np.concatenate([past_value.astype(v.dtype, copy=False), v], axis=2)
        present_key, present_value = k, v
        batch, q_heads, q_len, head_size = q.shape
        kv_len = k.shape[2]

        scale = self.attrs.get("scale")
        scale = 1.0 / np.sqrt(head_size) if scale is None else float(scale)
        sqrt_scale = ct(np.sqrt(scale))  # the spec scales Q and K by sqrt(scale) in T1
        bias = self._bias(q_len, kv_len, batch, attn_mask, past_key, nonpad_kv_seqlen, ct)
        raw = _matmul(q * sqrt_scale, np.swapaxes(_repeat_kv(k, q_heads) * sqrt_scale, -1, -2))
        softcap = float(self.attrs["softcap"])
        capped = np.tanh(raw / softcap) * softcap if softcap > 0 else raw
        with_bias = capped + bias
        mode = int(self.attrs["qk_matmul_output_mode"])

        precision = self.attrs.get("softmax_precision")
        logits = with_bias
        if precision is not None:
            logits = with_bias.astype(helper.tensor_dtype_to_np_dtype(int(precision)))
        probs = masked_softmax(logits)
        fully_masked = np.isneginf(bias.max(axis=-1, keepdims=True))
        probs = np.where(fully_masked, probs.dtype.type(0), probs)

        y = _matmul(probs.astype(dtype), _repeat_kv(v, q_heads))
        if is_3d:
            y = _merge_heads(y)
        qk_out = {0: raw, 1: capped, 2: with_bias, 3: probs}.get(mode, raw)
        outs = (
            y.astype(dtype, copy=False),
            present_key,
            present_value,
            np.ascontiguousarray(np.broadcast_to(qk_out, (batch, q_heads, q_len, kv_len))).astype(dtype),
        )
        return outs[: max(1, self.node.n_outputs)]

    def _bias(
        self,
        q_len: int,
        kv_len: int,
        batch: int,
        attn_mask: np.ndarray | None,
        past_key: np.ndarray | None,
        nonpad: np.ndarray | None,
        ct: type,
    ) -> np.ndarray:
        """Additive bias broadcastable to ``(B, H, q, kv)``: mask + causal + window + padding."""
        bias: np.ndarray = np.zeros((q_len, kv_len), dtype=ct)
        if attn_mask is not None:
            pad = kv_len - attn_mask.shape[-1]
            is_bool = attn_mask.dtype == np.bool_
            mask_bias = np.where(attn_mask, ct(0), ct(-np.inf)) if is_bool else attn_mask.astype(ct)
            if pad > 0:
                widths = [(0, 0)] * (mask_bias.ndim - 1) + [(0, pad)]
                mask_bias = np.pad(mask_bias, widths, constant_values=-np.inf)
            bias = bias + mask_bias
        if past_key is not None:
            offset: int | np.ndarray = past_key.shape[2]
        elif nonpad is not None:
            offset = nonpad.reshape(-1).astype(np.int64) - q_len
        else:
            offset = 0
        if self.attrs["is_causal"]:
            bias = bias + _frontier_bias(q_len, kv_len, offset, lambda d: d >= 0, ct)
        left, right = int(self.attrs["left_window_size"]), int(self.attrs["right_window_size"])
        if left >= 0 or right >= 0:

            def in_window(d: np.ndarray) -> np.ndarray:
                ok = np.ones(d.shape, dtype=bool)
                if left >= 0:
                    ok &= d <= left
                if right >= 0:
                    ok &= -d <= right
                return ok

            bias = bias + _frontier_bias(q_len, kv_len, offset, in_window, ct)
        if nonpad is not None:
            valid = np.arange(kv_len)[None, :] < nonpad.reshape(-1, 1)
            bias = bias + np.where(valid, ct(0), ct(-np.inf)).reshape(batch, 1, 1, kv_len)
        return bias


@register
class RotaryEmbedding(Kernel):
    """Rotate (part of) each head by position-dependent angles from ``cos_cache``/``sin_cache``."""

    op_type = "RotaryEmbedding"
    since_version = 23
    attr_defaults: ClassVar[dict[str, Any]] = {"interleaved": 0, "rotary_embedding_dim": 0}

    def compute(
        self, x: np.ndarray, cos_cache: np.ndarray, sin_cache: np.ndarray, position_ids: np.ndarray | None = None
    ) -> np.ndarray:
        shape = x.shape
        if x.ndim == 4:
            xh = x.transpose(0, 2, 1, 3)  # (B, S, H, D)
        else:
            heads = int(self.attrs.get("num_heads") or 0)
            if heads <= 0:
                raise ValueError("num_heads is required for 3-d input")
            xh = x.reshape(shape[0], shape[1], heads, -1)
        head_size = xh.shape[-1]
        dim = int(self.attrs["rotary_embedding_dim"]) or head_size
        if position_ids is not None:
            cos_cache, sin_cache = cos_cache[position_ids], sin_cache[position_ids]
        cos = cos_cache[:, :, None, :]
        sin = sin_cache[:, :, None, :]
        if cos.shape[-1] != dim // 2:
            raise ValueError(f"cos/sin cache width {cos.shape[-1]} != rotary_embedding_dim/2 = {dim // 2}")
        rot = xh[..., :dim]
        if self.attrs["interleaved"]:
            x1, x2 = rot[..., 0::2], rot[..., 1::2]
        else:
            x1, x2 = rot[..., : dim // 2], rot[..., dim // 2 :]
        real = cos * x1 - sin * x2
        imag = sin * x1 + cos * x2
        if self.attrs["interleaved"]:
            rotated = np.stack([real, imag], axis=-1).reshape(rot.shape)
        else:
            rotated = np.concatenate([real, imag], axis=-1)
        out = np.concatenate([rotated, xh[..., dim:]], axis=-1).astype(x.dtype, copy=False)
        return out.transpose(0, 2, 1, 3) if x.ndim == 4 else out.reshape(shape)


@register
class LinearAttention(Kernel):
    """Recurrent linear attention over ``(B, T, H*D)`` with linear / gated / delta / gated_delta state updates.

    The state ``(B, H_kv, d_k, d_v)`` is carried in float32; the loop is over time steps, batched over
    batch and heads.
    """

    op_type = "LinearAttention"
    since_version = 27
    attr_defaults: ClassVar[dict[str, Any]] = {"update_rule": "gated_delta", "scale": 0.0, "chunk_size": 64}

    def compute(
        self,
        query: np.ndarray,
        key: np.ndarray,
        value: np.ndarray,
        past_state: np.ndarray | None = None,
        decay: np.ndarray | None = None,
        beta: np.ndarray | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        rule = self.attrs["update_rule"]
        if rule not in ("linear", "gated", "delta", "gated_delta"):
            raise ValueError(f"unsupported update_rule {rule!r}")
        q_heads, kv_heads = int(self.attrs["q_num_heads"]), int(self.attrs["kv_num_heads"])
        gated, delta = rule in ("gated", "gated_delta"), rule in ("delta", "gated_delta")
        if gated != (decay is not None):
            raise ValueError(f"update_rule {rule!r} {'requires' if gated else 'forbids'} the decay input")
        if delta != (beta is not None):
            raise ValueError(f"update_rule {rule!r} {'requires' if delta else 'forbids'} the beta input")
        b, t, _ = query.shape
        q4 = _split_heads(query, q_heads).astype(np.float32)
        k4 = _split_heads(key, kv_heads).astype(np.float32)
        v4 = _split_heads(value, kv_heads).astype(np.float32)
        d_k, d_v = q4.shape[-1], v4.shape[-1]
        group = q_heads // kv_heads
        if decay is not None:
            if decay.shape[-1] == kv_heads:
                decay4 = decay.reshape(b, t, kv_heads, 1).transpose(0, 2, 1, 3).astype(np.float32)
            else:
                decay4 = _split_heads(decay, kv_heads).astype(np.float32)
        if beta is not None:
            beta4 = beta.reshape(b, t, beta.shape[-1], 1).transpose(0, 2, 1, 3).astype(np.float32)
        state_dtype = query.dtype if past_state is None else past_state.dtype
        state = (
            np.zeros((b, kv_heads, d_k, d_v), dtype=np.float32) if past_state is None else past_state.astype(np.float32)
        )
        scale = float(self.attrs["scale"]) or 1.0 / np.sqrt(d_k)
        out = np.empty((b, q_heads, t, d_v), dtype=np.float32)
        for i in range(t):
            k_t, v_t = k4[:, :, i], v4[:, :, i]
            if gated:
                state = state * np.exp(decay4[:, :, i])[..., None]
            if delta:
                retrieved = np.matmul(k_t[:, :, None, :], state)[:, :, 0]  # k^T S
                v_t = beta4[:, :, i] * (v_t - retrieved)
            state = state + k_t[..., :, None] * v_t[..., None, :]
            read = np.repeat(state, group, axis=1) if group > 1 else state
            out[:, :, i] = scale * np.matmul(q4[:, :, i][:, :, None, :], read)[:, :, 0]
        return _merge_heads(out).astype(query.dtype), state.astype(state_dtype)


_PREVIEW_DOMAIN = "ai.onnx.preview"


@register
class FlexAttention(Kernel):
    """Attention with optional ``score_mod``/``prob_mod`` subgraphs applied to scores and probabilities."""

    op_type = "FlexAttention"
    domain = _PREVIEW_DOMAIN
    since_version = 1

    def setup(self) -> None:
        self.mods: dict[str, Any] = {}
        for name in ("score_mod", "prob_mod"):
            graph = self.attrs.get(name)
            if graph is None:
                continue
            if self.node.compile_subgraph is None:
                raise ValueError(f"{name} needs a subgraph compiler")
            self.mods[name] = self.node.compile_subgraph(graph)

    def _apply(self, name: str, x: np.ndarray) -> np.ndarray:
        fn = self.mods.get(name)
        if fn is None:
            return x
        outs = fn(x)
        if len(outs) != 1:
            raise ValueError(f"{name} must return exactly one output")
        return np.asarray(outs[0], dtype=x.dtype)

    def compute(self, q: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray:
        if q.ndim != 4 or k.ndim != 4 or v.ndim != 4:
            raise ValueError("FlexAttention needs rank-4 Q, K and V")
        head_size = q.shape[-1]
        scale = self.attrs.get("scale")
        scale = 1.0 / np.sqrt(head_size) if scale is None else float(scale)
        precision = self.attrs.get("softmax_precision")
        if precision is not None:
            soft_dtype = np.dtype(helper.tensor_dtype_to_np_dtype(int(precision)))
        else:
            soft_dtype = np.dtype(np.float64) if q.dtype == np.float64 else np.dtype(np.float32)
        ct = _compute_type(q.dtype)
        sqrt_scale = float(q.dtype.type(np.sqrt(np.float32(scale))))
        heads = q.shape[1]
        qs = _round_to(q.astype(ct) * ct(sqrt_scale), q.dtype)
        ks = _round_to(_repeat_kv(k, heads).astype(ct) * ct(sqrt_scale), q.dtype)
        scores = _round_to(np.matmul(qs, np.swapaxes(ks, -1, -2)), q.dtype).astype(soft_dtype)
        scores = self._apply("score_mod", scores)
        probs = masked_softmax(scores)
        probs = self._apply("prob_mod", probs)
        y = np.matmul(probs, _repeat_kv(v, heads).astype(soft_dtype))
        return y.astype(v.dtype)
