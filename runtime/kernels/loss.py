"""Losses: NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss (reductions, class weights, ignore_index)."""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from runtime.kernels.base import Kernel, register
from runtime.kernels.conv import compute_dtype


def nll_loss(
    log_prob: np.ndarray,
    target: np.ndarray,
    weight: np.ndarray | None,
    ignore_index: int | None,
    reduction: str,
) -> np.ndarray:
    """``-log_prob[n, target[n, ...], ...] * weight[target]``, reduced; ignored targets weigh 0.

    ``mean`` divides by the sum of the applied weights (the count of non-ignored targets without weights).
    """
    n_classes = log_prob.shape[1]
    target = target.astype(np.int64, copy=False)
    keep = np.ones(target.shape, dtype=bool) if ignore_index is None else target != ignore_index
    safe = np.where(keep, target, 0)
    if (safe < 0).any() or (safe >= n_classes).any():
        raise ValueError(f"target values must lie in [0, {n_classes}) (or equal ignore_index)")
    picked = np.take_along_axis(log_prob, safe[:, None, ...], axis=1)[:, 0, ...]
    w = np.ones(target.shape, dtype=log_prob.dtype) if weight is None else weight.astype(log_prob.dtype)[safe]
    w = w * keep
    loss = -picked * w
    if reduction == "none":
        return loss
    if reduction == "sum":
        return np.asarray(loss.sum())
    if reduction == "mean":
        total = w.sum()
        return np.asarray(loss.sum() / total if total != 0 else loss.sum() * 0)
    raise ValueError(f"reduction must be none, sum or mean, got {reduction!r}")


@register
class NegativeLogLikelihoodLoss(Kernel):
    op_type = "NegativeLogLikelihoodLoss"
    amp_class = "fp32"
    since_version = 12
    attr_defaults: ClassVar[dict[str, Any]] = {"reduction": "mean"}

    def compute(self, x: np.ndarray, target: np.ndarray, weight: np.ndarray | None = None) -> np.ndarray:
        ct = compute_dtype(x.dtype)
        loss = nll_loss(
            x.astype(ct, copy=False), target, weight, self.attrs.get("ignore_index"), self.attrs["reduction"]
        )
        return loss.astype(x.dtype)


@register
class SoftmaxCrossEntropyLoss(Kernel):
    """NLL of ``log_softmax(scores, axis=1)``; the optional second output is that log-probability tensor."""

    op_type = "SoftmaxCrossEntropyLoss"
    amp_class = "fp32"
    since_version = 12
    attr_defaults: ClassVar[dict[str, Any]] = {"reduction": "mean"}

    def compute(self, scores: np.ndarray, labels: np.ndarray, weights: np.ndarray | None = None) -> Any:
        ct = compute_dtype(scores.dtype)
        s = scores.astype(ct, copy=False)
        shifted = s - s.max(axis=1, keepdims=True)
        log_prob = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
        loss = nll_loss(log_prob, labels, weights, self.attrs.get("ignore_index"), self.attrs["reduction"])
        if self.node.n_outputs > 1:
            return loss.astype(scores.dtype), log_prob.astype(scores.dtype)
        return loss.astype(scores.dtype)
