"""PyTorch eager mode (``torch.optim.SGD``, momentum 0.9), intra-op threads pinned with ``torch.set_num_threads``."""

from __future__ import annotations

import importlib.util
from typing import Any

import numpy as np

from benchmarks.trainers.base import MOMENTUM, SharedModel, torch_accuracy


class TorchSession:
    def __init__(self, module: Any, lr: float) -> None:
        import torch

        self.module = module.train()
        self.optimizer = torch.optim.SGD(module.parameters(), lr=lr, momentum=MOMENTUM)
        self.loss = torch.nn.CrossEntropyLoss()
        self.forward = module

    def step(self, x: np.ndarray, y: np.ndarray) -> float:
        import torch

        self.optimizer.zero_grad(set_to_none=True)
        loss = self.loss(self.forward(torch.from_numpy(x)), torch.from_numpy(y))
        loss.backward()
        self.optimizer.step()
        return float(loss.item())

    def accuracy(self, x: np.ndarray, y: np.ndarray) -> float:
        return torch_accuracy(self.module, x, y)

    def optimizer_state_bytes(self) -> int:
        return sum(
            int(v.numel() * v.element_size())
            for state in self.optimizer.state.values()
            for v in state.values()
            if hasattr(v, "numel")
        )


class TorchEager:
    name = "torch"
    framework = "pytorch"
    compiler = "none"
    precision = "fp32"

    def unavailable(self) -> str | None:
        return None if importlib.util.find_spec("torch") else "torch: extra not installed"

    def session(self, model: SharedModel, lr: float, threads: int, batch: int, seed: int) -> TorchSession:
        import torch

        torch.set_num_threads(threads)
        torch.manual_seed(seed)
        return TorchSession(model.fresh_module(), lr)

    def versions(self) -> dict[str, Any]:
        import torch

        return {"torch": torch.__version__}


PLUGIN = TorchEager()
