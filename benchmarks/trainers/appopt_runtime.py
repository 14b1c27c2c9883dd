"""appopt's own runtime (``runtime.training``): trains the ONNX export of the shared model, fp32 or mixed precision.

``appopt-runtime`` keeps everything in fp32; ``appopt-runtime-amp`` runs the training graph through the AMP pass in
fp16 with dynamic loss scaling (fp32 master weights), as ``TrainConfig(precision="fp16")`` does.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from benchmarks.trainers.base import MOMENTUM, SharedModel


class RuntimeSession:
    def __init__(self, trainer: Any) -> None:
        self.trainer = trainer
        self.input = trainer.graph.data_inputs[0]

    def step(self, x: np.ndarray, y: np.ndarray) -> float:
        loss, _ = self.trainer.train_step({self.input: x}, y)
        return loss

    def accuracy(self, x: np.ndarray, y: np.ndarray) -> float:
        return float(self.trainer.evaluate(x, y)["accuracy"])

    def optimizer_state_bytes(self) -> int:
        return sum(int(np.asarray(v).nbytes) for v in self.trainer.optimizer.state.values())


class AppoptRuntime:
    name = "appopt-runtime"
    framework = "appopt-runtime"
    compiler = "none"
    precision = "fp32"
    layout = "NCHW"

    def unavailable(self) -> str | None:
        return None

    def session(self, model: SharedModel, lr: float, threads: int, batch: int, seed: int) -> RuntimeSession:
        from runtime.training import TrainConfig, Trainer

        config = TrainConfig(
            epochs=1,
            batch_size=batch,
            lr=lr,
            optimizer="sgd",
            momentum=MOMENTUM,
            precision=self.precision,
            threads=threads,
            seed=seed,
        )
        return RuntimeSession(Trainer(model.onnx_bytes(), config))

    def versions(self) -> dict[str, Any]:
        import onnx

        return {"onnx": onnx.__version__, "numpy": np.__version__}


class AppoptRuntimeAmp(AppoptRuntime):
    name = "appopt-runtime-amp"
    precision = "fp16"


PLUGIN = AppoptRuntime()
AMP_PLUGIN = AppoptRuntimeAmp()
