"""TensorFlow/Keras, with and without XLA (``jit_compile=True``): listed, not built.

The trainer needs the suite's models written in Keras (or converted) with the shared initial weights; that is not
built yet. Where TensorFlow is missing the reason is the usual "extra not installed".
"""

from __future__ import annotations

import importlib.util
from typing import Any

from benchmarks.trainers.base import SharedModel, TrainingSession


class Keras:
    framework = "tensorflow"
    precision = "fp32"

    def __init__(self, xla: bool) -> None:
        self.name = "keras-xla" if xla else "keras"
        self.compiler = "xla" if xla else "none"

    def unavailable(self) -> str | None:
        if importlib.util.find_spec("tensorflow") is None:
            return "tensorflow: extra not installed"
        return "keras trainer: not built yet (the suite's models exist in PyTorch only)"

    def session(self, model: SharedModel, lr: float, threads: int, batch: int, seed: int) -> TrainingSession:
        raise RuntimeError(self.unavailable() or "keras trainer: not built yet")

    def versions(self) -> dict[str, Any]:
        return {}


PLUGIN = Keras(xla=False)
XLA_PLUGIN = Keras(xla=True)
