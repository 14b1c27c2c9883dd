"""Loss gradients: SoftmaxCrossEntropyLossGrad and NegativeLogLikelihoodLossGrad.

Both follow the forward ops' conventions (``runtime/kernels/loss.py``): class dimension 1, optional class
weights, ``ignore_index`` targets weigh zero, ``mean`` divides by the sum of the applied weights.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from runtime.kernels.base import register
from runtime.kernels.grad_base import GradKernel, shape_tuple, wide


def _target_weights(
    target: np.ndarray, n_classes: int, weight: np.ndarray | None, ignore_index: int | None, dtype: np.dtype[Any]
) -> tuple[np.ndarray, np.ndarray]:
    """Safe class ids (ignored ones mapped to 0) and per-target weights (0 where ignored)."""
    target = target.astype(np.int64, copy=False)
    keep = np.ones(target.shape, dtype=bool) if ignore_index is None else target != ignore_index
    safe = np.where(keep, target, 0)
    if (safe < 0).any() or (safe >= n_classes).any():
        raise ValueError(f"target values must lie in [0, {n_classes}) (or equal ignore_index)")
    w = np.ones(target.shape, dtype=dtype) if weight is None else wide(weight).astype(dtype)[safe]
    return safe, w * keep


def _per_target_scale(dloss: np.ndarray, w: np.ndarray, reduction: str) -> np.ndarray:
    """d loss / d (-log p[target]) for every target."""
    g = wide(dloss).astype(w.dtype, copy=False)
    if reduction == "none":
        return g * w
    if reduction == "sum":
        return g * w
    if reduction == "mean":
        total = w.sum()
        return g * w / total if total != 0 else np.zeros_like(w)
    raise ValueError(f"reduction must be none, sum or mean, got {reduction!r}")


@register
class SoftmaxCrossEntropyLossGrad(GradKernel):
    """``(dLoss, scores, labels, weights?) -> dScores = (softmax(scores) - onehot(labels)) * scale``."""

    op_type = "SoftmaxCrossEntropyLossGrad"
    attr_defaults: ClassVar[dict[str, Any]] = {"reduction": "mean"}

    def compute(
        self, dloss: np.ndarray, scores: np.ndarray, labels: np.ndarray, weights: np.ndarray | None = None
    ) -> np.ndarray:
        s = wide(scores)
        shifted = s - s.max(axis=1, keepdims=True)
        e = np.exp(shifted)
        prob = e / e.sum(axis=1, keepdims=True)
        safe, w = _target_weights(labels, s.shape[1], weights, self.attrs.get("ignore_index"), s.dtype)
        scale = _per_target_scale(dloss, w, self.attrs["reduction"])[:, None, ...]
        grad = prob * scale
        np.put_along_axis(grad, safe[:, None, ...], np.take_along_axis(grad, safe[:, None, ...], axis=1) - scale, 1)
        return grad.astype(scores.dtype, copy=False)


@register
class NegativeLogLikelihoodLossGrad(GradKernel):
    """``(dLoss, labels, input_shape, weights?) -> dInput``: ``-scale`` at each target's class, 0 elsewhere."""

    op_type = "NegativeLogLikelihoodLossGrad"
    attr_defaults: ClassVar[dict[str, Any]] = {"reduction": "mean"}

    def compute(
        self, dloss: np.ndarray, labels: np.ndarray, input_shape: np.ndarray, weights: np.ndarray | None = None
    ) -> np.ndarray:
        shape = shape_tuple(input_shape)
        dtype = wide(dloss).dtype
        safe, w = _target_weights(labels, shape[1], weights, self.attrs.get("ignore_index"), dtype)
        scale = _per_target_scale(dloss, w, self.attrs["reduction"])[:, None, ...]
        grad = np.zeros(shape, dtype=dtype)
        np.put_along_axis(grad, safe[:, None, ...], -scale, 1)
        return grad.astype(dloss.dtype, copy=False)
