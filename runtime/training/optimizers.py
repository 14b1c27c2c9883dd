"""Optimisers as small ONNX graphs over ``ai.onnx.preview.training`` ops, run by the same executor.

``SGD`` uses ONNX's ``Momentum`` op (standard mode, gradient coefficient 1: PyTorch's SGD with momentum and
``dampening=0``; momentum 0 is plain SGD), ``Adam`` the ``Adam`` op with bias correction. Every gradient is first
multiplied by ``grad_scale`` (1 / (loss scale x accumulated micro-batches)), so loss scaling and gradient
accumulation need no extra pass over the weights. State tensors (velocities, moments) are fp32, like the master
weights.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper

from runtime.executor import Executable, compile_model
from runtime.training.config import TrainConfig, TrainingError

PREVIEW_TRAINING = "ai.onnx.preview.training"


class Optimizer:
    """Holds per-parameter state and applies one update with a compiled update graph."""

    #: State tensors per parameter, in the ONNX op's input order after X and G.
    state_kinds: tuple[str, ...] = ()
    op_type = ""

    def __init__(self, config: TrainConfig, params: Mapping[str, np.ndarray]) -> None:
        self.config = config
        self.names = list(params)
        self.state: dict[str, np.ndarray] = {
            f"{kind}:{name}": np.zeros(arr.shape, dtype=np.float32 if arr.dtype != np.float64 else arr.dtype)
            for kind in self.state_kinds
            for name, arr in params.items()
        }
        #: Optimiser steps taken (the ``T`` input).
        self.steps = 0
        self.exe: Executable = compile_model(self._update_model(params), config.threads, passes=())

    def attributes(self) -> dict[str, Any]:
        raise NotImplementedError

    def step_count_input(self) -> int:
        return self.steps

    def _update_model(self, params: Mapping[str, np.ndarray]) -> onnx.ModelProto:
        n = len(self.names)
        dtypes = [helper.np_dtype_to_tensor_dtype(params[p].dtype) for p in self.names]
        shapes = [list(params[p].shape) for p in self.names]
        inputs = [
            helper.make_tensor_value_info("R", TensorProto.FLOAT, []),
            helper.make_tensor_value_info("T", TensorProto.INT64, []),
            helper.make_tensor_value_info("grad_scale", TensorProto.FLOAT, []),
        ]
        nodes = []
        groups: list[list[str]] = [[f"x{i}" for i in range(n)], [f"gs{i}" for i in range(n)]]
        for i in range(n):
            inputs.append(helper.make_tensor_value_info(f"x{i}", dtypes[i], shapes[i]))
            inputs.append(helper.make_tensor_value_info(f"g{i}", dtypes[i], shapes[i]))
            scale = "grad_scale" if dtypes[i] == TensorProto.FLOAT else f"grad_scale{i}"
            if scale != "grad_scale":
                nodes.append(helper.make_node("Cast", ["grad_scale"], [scale], to=dtypes[i]))
            nodes.append(helper.make_node("Mul", [f"g{i}", scale], [f"gs{i}"]))
        outputs = [helper.make_tensor_value_info(f"x{i}_new", dtypes[i], shapes[i]) for i in range(n)]
        for kind in self.state_kinds:
            groups.append([f"{kind}{i}" for i in range(n)])
            for i in range(n):
                inputs.append(helper.make_tensor_value_info(f"{kind}{i}", dtypes[i], shapes[i]))
                outputs.append(helper.make_tensor_value_info(f"{kind}{i}_new", dtypes[i], shapes[i]))
        op_inputs = ["R", "T", *(name for group in groups for name in group)]
        op_outputs = [o.name for o in outputs]
        nodes.append(
            helper.make_node(self.op_type, op_inputs, op_outputs, domain=PREVIEW_TRAINING, **self.attributes())
        )
        graph = helper.make_graph(nodes, f"{self.op_type.lower()}_update", inputs, outputs)
        opsets = [helper.make_opsetid("", 17), helper.make_opsetid(PREVIEW_TRAINING, 1)]
        return helper.make_model(graph, opset_imports=opsets, producer_name="appopt-runtime")

    def apply(
        self, params: dict[str, np.ndarray], grads: Mapping[str, np.ndarray], lr: float, grad_scale: float
    ) -> dict[str, np.ndarray]:
        """One update: returns the new parameters and keeps the new state."""
        feeds: dict[str, np.ndarray] = {
            "R": np.asarray(lr, np.float32),
            "T": np.asarray(self.step_count_input(), np.int64),
            "grad_scale": np.asarray(grad_scale, np.float32),
        }
        for i, name in enumerate(self.names):
            feeds[f"x{i}"] = params[name]
            feeds[f"g{i}"] = grads[name]
            for kind in self.state_kinds:
                feeds[f"{kind}{i}"] = self.state[f"{kind}:{name}"]
        out = self.exe.run(feeds)
        self.steps += 1
        # copies: the values outlive this run, and an executor may reuse its buffers on the next one
        for i, name in enumerate(self.names):
            for kind in self.state_kinds:
                self.state[f"{kind}:{name}"] = np.array(out[f"{kind}{i}_new"], copy=True)
        return {name: np.array(out[f"x{i}_new"], copy=True) for i, name in enumerate(self.names)}

    def load_state(self, state: Mapping[str, np.ndarray], steps: int) -> None:
        missing = [k for k in self.state if k not in state]
        if missing:
            raise TrainingError(f"checkpoint lacks optimiser state {missing[0]!r}")
        self.state = {k: np.asarray(state[k]) for k in self.state}
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


def make_optimizer(config: TrainConfig, params: Mapping[str, np.ndarray]) -> Optimizer:
    if config.optimizer == "adam":
        return Adam(config, params)
    return SGD(config, params)
