"""Optimiser update ops of the ``ai.onnx.preview.training`` domain: Adam, Adagrad, Momentum.

Each takes a learning rate ``R``, a step count ``T`` and then groups of per-tensor inputs (values, gradients,
state...), and returns the updated values followed by the updated state tensors, group by group.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from runtime.kernels.base import Kernel, register

TRAINING_DOMAIN = "ai.onnx.preview.training"


def _groups(inputs: tuple[np.ndarray, ...], per_tensor: int) -> list[tuple[np.ndarray, ...]]:
    """Split ``x1..xn, g1..gn, s1..sn, ...`` into per-tensor tuples ``(x_i, g_i, s_i, ...)``."""
    if len(inputs) % per_tensor:
        raise ValueError(f"expected a multiple of {per_tensor} tensor inputs after R and T, got {len(inputs)}")
    n = len(inputs) // per_tensor
    return [tuple(inputs[k * n + i] for k in range(per_tensor)) for i in range(n)]


def _scalar(v: np.ndarray) -> float:
    return float(np.asarray(v).reshape(-1)[0])


@register
class Adagrad(Kernel):
    op_type = "Adagrad"
    domain = TRAINING_DOMAIN
    since_version = 1
    attr_defaults: ClassVar[dict[str, Any]] = {"decay_factor": 0.0, "epsilon": 1e-6, "norm_coefficient": 0.0}

    def compute(self, r: np.ndarray, t: np.ndarray, *tensors: np.ndarray) -> tuple[np.ndarray, ...]:
        rate = _scalar(r) / (1 + _scalar(t) * float(self.attrs["decay_factor"]))
        norm, eps = float(self.attrs["norm_coefficient"]), float(self.attrs["epsilon"])
        xs, hs = [], []
        for x, g, h in _groups(tensors, 3):
            g_reg = norm * x + g
            h_new = h + g_reg * g_reg
            xs.append((x - rate * g_reg / (np.sqrt(h_new) + eps)).astype(x.dtype))
            hs.append(h_new.astype(h.dtype))
        return (*xs, *hs)


@register
class Momentum(Kernel):
    """SGD with standard or Nesterov momentum; the gradient coefficient is 1 on the first step (T == 0)."""

    op_type = "Momentum"
    domain = TRAINING_DOMAIN
    since_version = 1
    attr_defaults: ClassVar[dict[str, Any]] = {"mode": "standard", "norm_coefficient": 0.0}

    def compute(self, r: np.ndarray, t: np.ndarray, *tensors: np.ndarray) -> tuple[np.ndarray, ...]:
        alpha, beta = float(self.attrs["alpha"]), float(self.attrs["beta"])
        norm = float(self.attrs["norm_coefficient"])
        beta_now = beta if _scalar(t) > 0 else 1.0
        rate = _scalar(r)
        nesterov = self.attrs["mode"] == "nesterov"
        xs, vs = [], []
        for x, g, v in _groups(tensors, 3):
            g_reg = norm * x + g
            v_new = alpha * v + beta_now * g_reg
            step = g_reg + alpha * v_new if nesterov else v_new
            xs.append((x - rate * step).astype(x.dtype))
            vs.append(v_new.astype(v.dtype))
        return (*xs, *vs)


@register
class Adam(Kernel):
    """Adam with optional bias correction (T > 0), L2 regularisation and post-update decay."""

    op_type = "Adam"
    domain = TRAINING_DOMAIN
    since_version = 1
    attr_defaults: ClassVar[dict[str, Any]] = {
        "alpha": 0.9,
        "beta": 0.999,
        "epsilon": 1e-6,
        "norm_coefficient": 0.0,
        "norm_coefficient_post": 0.0,
    }

    def compute(self, r: np.ndarray, t: np.ndarray, *tensors: np.ndarray) -> tuple[np.ndarray, ...]:
        alpha, beta, eps = (float(self.attrs[k]) for k in ("alpha", "beta", "epsilon"))
        norm, post = float(self.attrs["norm_coefficient"]), float(self.attrs["norm_coefficient_post"])
        step = _scalar(t)
        rate = _scalar(r)
        if step > 0:
            rate = rate * np.sqrt(1 - beta**step) / (1 - alpha**step)
        xs, vs, hs = [], [], []
        for x, g, v, h in _groups(tensors, 4):
            g_reg = norm * x + g
            v_new = alpha * v + (1 - alpha) * g_reg
            h_new = beta * h + (1 - beta) * (g_reg * g_reg)
            x_new = (1 - post) * (x - rate * (v_new / (np.sqrt(h_new) + eps)))
            xs.append(x_new.astype(x.dtype))
            vs.append(v_new.astype(v.dtype))
            hs.append(h_new.astype(h.dtype))
        return (*xs, *vs, *hs)
