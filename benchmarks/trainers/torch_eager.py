"""PyTorch eager mode (``torch.optim.SGD``, momentum 0.9), intra-op threads pinned with ``torch.set_num_threads``.

``torch`` runs PyTorch's default (contiguous, NCHW) memory format; ``torch-nhwc`` the same model with its 4-D weights
and inputs in ``torch.channels_last`` (the catalog's NHWC layout), which PyTorch's oneDNN convolutions keep through the
backward: here a depthwise-separable net's step ran up to 1.5x faster so (not in every run), a plain ResNet-style
one no faster (docs/decisions.md, 2026-11-28, PyTorch's NHWC training route)."""

from __future__ import annotations

import importlib.util
from typing import Any

import numpy as np

from benchmarks.trainers.base import MOMENTUM, SharedModel, torch_accuracy


class TorchSession:
    def __init__(self, module: Any, lr: float, channels_last: bool = False) -> None:
        import torch

        self.channels_last = channels_last
        if channels_last:  # (before the optimiser: it holds the parameters as they are then)
            module = module.to(memory_format=torch.channels_last)
        self.module = module.train()
        self.optimizer = torch.optim.SGD(module.parameters(), lr=lr, momentum=MOMENTUM)
        self.loss = torch.nn.CrossEntropyLoss()
        self.forward = module

    def inputs(self, x: np.ndarray) -> Any:
        """``x`` as the tensor the module is fed (channels-last where the session runs so and ``x`` is 4-D)."""
        import torch

        tensor = torch.from_numpy(x)
        if self.channels_last and tensor.dim() == 4:
            tensor = tensor.contiguous(memory_format=torch.channels_last)
        return tensor

    def step(self, x: np.ndarray, y: np.ndarray) -> float:
        import torch

        self.optimizer.zero_grad(set_to_none=True)
        loss = self.loss(self.forward(self.inputs(x)), torch.from_numpy(y))
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
    layout = "NCHW"

    def unavailable(self) -> str | None:
        return None if importlib.util.find_spec("torch") else "torch: extra not installed"

    def session(self, model: SharedModel, lr: float, threads: int, batch: int, seed: int) -> TorchSession:
        import torch

        torch.set_num_threads(threads)
        torch.manual_seed(seed)
        return TorchSession(model.fresh_module(), lr, channels_last=self.layout == "NHWC")

    def versions(self) -> dict[str, Any]:
        import torch

        return {"torch": torch.__version__}


class TorchEagerChannelsLast(TorchEager):
    name = "torch-nhwc"
    layout = "NHWC"


PLUGIN = TorchEager()
NHWC_PLUGIN = TorchEagerChannelsLast()
