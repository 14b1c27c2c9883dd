"""Optimisers: SGD with momentum and Adam, updating the fp32 master weights and their state in place.

The arithmetic is that of ONNX's ``ai.onnx.preview.training`` ops, ``Momentum`` (standard mode, gradient coefficient
1: PyTorch's SGD with momentum and ``dampening=0``; momentum 0 is plain SGD) and ``Adam`` (with bias correction),
whose kernels in ``runtime.kernels.training`` stay the yardstick the tests compare these updates with. Every gradient
is first multiplied by ``grad_scale`` (1 / (loss scale x accumulated micro-batches)), so loss scaling and gradient
accumulation need no extra pass over the weights. The update runs in place, a few NumPy calls per tensor and one
scratch array, with no graph, copies or allocation of new weights per step: on small models the optimiser step was
a fifth of the training step. SGD on a float32 tensor is one compiled pass where the native kernels are built.
Gradients are read only (they may be views of the training graph's buffers). State tensors (velocities, moments)
are fp32, like the master weights (float64 stays float64).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from runtime import native
from runtime.native.training import sgd_momentum
from runtime.training.config import TrainConfig, TrainingError

#: Smallest tensor SGD updates in one compiled pass (LOADED, one thread: 256x256 took 28 us against NumPy's 34,
#: 128x128 20 against 11).
_FUSED_MIN = 1 << 16


class Optimizer:
    """Holds per-parameter state and applies one update in place."""

    #: State tensors per parameter, in the ONNX op's input order after X and G.
    state_kinds: tuple[str, ...] = ()
    #: The ``ai.onnx.preview.training`` op whose arithmetic this is.
    op_type = ""

    def __init__(self, config: TrainConfig, params: Mapping[str, np.ndarray]) -> None:
        self.config = config
        self.names = list(params)
        self.state: dict[str, np.ndarray] = {
            f"{kind}:{name}": np.zeros(arr.shape, dtype=np.float32 if arr.dtype != np.float64 else arr.dtype)
            for kind in self.state_kinds
            for name, arr in params.items()
        }
        #: Optimiser steps taken (the ONNX op's ``T`` input).
        self.steps = 0

    def attributes(self) -> dict[str, Any]:
        """The ONNX op's attributes for this configuration."""
        raise NotImplementedError

    def step_count_input(self) -> int:
        return self.steps

    def apply(
        self, params: dict[str, np.ndarray], grads: Mapping[str, np.ndarray], lr: float, grad_scale: float
    ) -> dict[str, np.ndarray]:
        """One update of every parameter, in place; returns ``params`` (the same arrays, updated)."""
        norm = float(self.config.weight_decay)  # the op's norm_coefficient (L2 added to the gradient)
        for name in self.names:
            x = params[name]
            if not x.flags.writeable:  # e.g. restored from a read-only mapping: take a private copy first
                x = params[name] = np.array(x, copy=True)
            if self._fused(name, x, grads[name], grad_scale, norm, lr):
                continue
            scaled = np.multiply(grads[name], grad_scale, dtype=x.dtype)  # the scratch array: g_reg, then the step
            if norm:
                scaled += norm * x
            self._update(name, x, scaled, lr)
        self.steps += 1
        return params

    def _update(self, name: str, x: np.ndarray, g_reg: np.ndarray, lr: float) -> None:
        raise NotImplementedError

    def _fused(self, name: str, x: np.ndarray, g: np.ndarray, grad_scale: float, norm: float, lr: float) -> bool:
        """The whole update of one tensor in one compiled pass, where there is one; False: use ``_update``."""
        return False

    def load_state(self, state: Mapping[str, np.ndarray], steps: int) -> None:
        missing = [k for k in self.state if k not in state]
        if missing:
            raise TrainingError(f"checkpoint lacks optimiser state {missing[0]!r}")
        self.state = {k: np.array(state[k], copy=True) for k in self.state}
        self.steps = int(steps)


class SGD(Optimizer):
    """SGD with (optional) momentum, PyTorch-style: ``v = m v + g; w -= lr v``."""

    state_kinds = ("v",)
    op_type = "Momentum"

    def attributes(self) -> dict[str, Any]:
        return {
            "alpha": self.config.momentum,
            "beta": 1.0,
            "mode": "standard",
            "norm_coefficient": self.config.weight_decay,
        }

    def _fused(self, name: str, x: np.ndarray, g: np.ndarray, grad_scale: float, norm: float, lr: float) -> bool:
        # NumPy's five passes over weights, velocity and gradient were 35 ms of ResNet-50's step (23.5M weights);
        # below _FUSED_MIN elements the compiled call's few microseconds cost more than the passes it saves
        lib = native.lib()
        if lib is None or x.size < _FUSED_MIN:
            return False
        return sgd_momentum(lib, x, g, self.state[f"v:{name}"], grad_scale, norm, self.config.momentum, lr)

    def _update(self, name: str, x: np.ndarray, g_reg: np.ndarray, lr: float) -> None:
        # v = alpha v + g_reg (beta is 1, so T == 0 changes nothing); x -= lr v
        v = self.state[f"v:{name}"]
        alpha = self.config.momentum
        if alpha:
            v *= alpha
            v += g_reg
        else:
            v[...] = g_reg
        np.multiply(v, lr, out=g_reg)
        x -= g_reg


class Adam(Optimizer):
    """Adam with bias correction (``T`` counts from 1)."""

    state_kinds = ("m", "v")
    op_type = "Adam"

    def attributes(self) -> dict[str, Any]:
        beta1, beta2 = self.config.betas
        return {
            "alpha": beta1,
            "beta": beta2,
            "epsilon": self.config.adam_eps,
            "norm_coefficient": self.config.weight_decay,
        }

    def step_count_input(self) -> int:
        return self.steps + 1

    def _update(self, name: str, x: np.ndarray, g_reg: np.ndarray, lr: float) -> None:
        # v = a v + (1-a) g; h = b h + (1-b) g^2; x -= lr sqrt(1-b^T)/(1-a^T) v / (sqrt(h) + eps)
        alpha, beta = self.config.betas
        t = self.step_count_input()
        rate = lr * np.sqrt(1 - beta**t) / (1 - alpha**t)
        v, h = self.state[f"m:{name}"], self.state[f"v:{name}"]
        v *= alpha
        v += (1 - alpha) * g_reg
        h *= beta
        np.multiply(g_reg, g_reg, out=g_reg)
        g_reg *= 1 - beta
        h += g_reg
        np.sqrt(h, out=g_reg)
        g_reg += self.config.adam_eps
        np.divide(v, g_reg, out=g_reg)
        g_reg *= rate
        x -= g_reg


def make_optimizer(config: TrainConfig, params: Mapping[str, np.ndarray]) -> Optimizer:
    if config.optimizer == "adam":
        return Adam(config, params)
    return SGD(config, params)
