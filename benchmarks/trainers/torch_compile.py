"""PyTorch with ``torch.compile`` (inductor) on the model; the optimiser step stays eager. The first steps compile:
the driver reports that time apart (``compile_s``) and times only steps after warm-up."""

from __future__ import annotations

from typing import Any

from benchmarks.trainers.base import SharedModel
from benchmarks.trainers.torch_eager import TorchEager, TorchSession


class TorchCompile(TorchEager):
    name = "torch-compile"
    compiler = "inductor"

    def unavailable(self) -> str | None:
        reason = super().unavailable()
        if reason:
            return reason
        import shutil

        # inductor's CPU backend writes and builds C++: it needs a compiler on PATH
        return None if shutil.which("g++") or shutil.which("c++") else "torch.compile: no C++ compiler on PATH"

    def session(self, model: SharedModel, lr: float, threads: int, batch: int, seed: int) -> TorchSession:
        import torch

        session = super().session(model, lr, threads, batch, seed)
        session.forward = torch.compile(session.module, dynamic=False)
        return session

    def versions(self) -> dict[str, Any]:
        return super().versions()


PLUGIN = TorchCompile()
