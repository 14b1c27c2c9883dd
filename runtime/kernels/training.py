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


class _Optimizer(Kernel):
    """``R, T`` then groups of ``per_tensor`` inputs ``(x, g, *state)``: ``update`` gives each tensor's new value and
    state (in that order, each cast to its input's dtype); the outputs are every new ``x``, then every new state."""

    domain = TRAINING_DOMAIN
    since_version = 1
    per_tensor: ClassVar[int] = 3

    def compute(self, r: np.ndarray, t: np.ndarray, *tensors: np.ndarray) -> tuple[np.ndarray, ...]:
        rate, step = _scalar(r), _scalar(t)
        columns: list[list[np.ndarray]] = [[] for _ in range(self.per_tensor - 1)]
        for x, g, *state in _groups(tensors, self.per_tensor):
            for column, new, old in zip(columns, self.update(rate, step, x, g, *state), (x, *state), strict=True):
                column.append(new.astype(old.dtype))
        return tuple(value for column in columns for value in column)

    def update(self, rate: float, step: float, x: np.ndarray, g: np.ndarray, *state: np.ndarray) -> tuple[Any, ...]:
        raise NotImplementedError


@register
class Adagrad(_Optimizer):
    op_type = "Adagrad"
    attr_defaults: ClassVar[dict[str, Any]] = {"decay_factor": 0.0, "epsilon": 1e-6, "norm_coefficient": 0.0}

    def update(self, rate: float, step: float, x: np.ndarray, g: np.ndarray, *state: np.ndarray) -> tuple[Any, ...]:
        (h,) = state
        rate = rate / (1 + step * float(self.attrs["decay_factor"]))
        norm, eps = float(self.attrs["norm_coefficient"]), float(self.attrs["epsilon"])
        g_reg = norm * x + g
        h_new = h + g_reg * g_reg
        return x - rate * g_reg / (np.sqrt(h_new) + eps), h_new


@register
class Momentum(_Optimizer):
    """SGD with standard or Nesterov momentum; the gradient coefficient is 1 on the first step (T == 0)."""

    op_type = "Momentum"
    attr_defaults: ClassVar[dict[str, Any]] = {"mode": "standard", "norm_coefficient": 0.0}

    def update(self, rate: float, step: float, x: np.ndarray, g: np.ndarray, *state: np.ndarray) -> tuple[Any, ...]:
        (v,) = state
        alpha, beta = float(self.attrs["alpha"]), float(self.attrs["beta"])
        beta_now = beta if step > 0 else 1.0
        g_reg = float(self.attrs["norm_coefficient"]) * x + g
        v_new = alpha * v + beta_now * g_reg
        moved = g_reg + alpha * v_new if self.attrs["mode"] == "nesterov" else v_new
        return x - rate * moved, v_new


@register
class Adam(_Optimizer):
    """Adam with optional bias correction (T > 0), L2 regularisation and post-update decay."""

    op_type = "Adam"
    per_tensor = 4
    attr_defaults: ClassVar[dict[str, Any]] = {
        "alpha": 0.9,
        "beta": 0.999,
        "epsilon": 1e-6,
        "norm_coefficient": 0.0,
        "norm_coefficient_post": 0.0,
    }

    def update(self, rate: float, step: float, x: np.ndarray, g: np.ndarray, *state: np.ndarray) -> tuple[Any, ...]:
        v, h = state
        alpha, beta, eps = (float(self.attrs[k]) for k in ("alpha", "beta", "epsilon"))
        norm, post = float(self.attrs["norm_coefficient"]), float(self.attrs["norm_coefficient_post"])
        if step > 0:
            rate = rate * np.sqrt(1 - beta**step) / (1 - alpha**step)
        g_reg = norm * x + g
        v_new = alpha * v + (1 - alpha) * g_reg
        h_new = beta * h + (1 - beta) * (g_reg * g_reg)
        return (1 - post) * (x - rate * (v_new / (np.sqrt(h_new) + eps))), v_new, h_new
