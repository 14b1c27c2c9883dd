"""Training on the runtime's executor: losses, SGD/Adam, gradient accumulation, mixed precision, checkpoints, export.

>>> from runtime.training import Trainer, TrainConfig
>>> trainer = Trainer("model.onnx", TrainConfig(epochs=5, optimizer="adam", lr=1e-3))   # doctest: +SKIP
>>> trainer.fit(x_train, y_train, validation=(x_test, y_test))                           # doctest: +SKIP
>>> onnx.save(trainer.export(), "trained.onnx")                                          # doctest: +SKIP
"""

from __future__ import annotations

from runtime.training.config import TrainConfig, TrainingError
from runtime.training.graph import TrainingGraph, build_training_graph
from runtime.training.loss_scale import DynamicLossScaler
from runtime.training.trainer import EpochStats, Trainer, train

__all__ = [
    "DynamicLossScaler",
    "EpochStats",
    "TrainConfig",
    "Trainer",
    "TrainingError",
    "TrainingGraph",
    "build_training_graph",
    "train",
]
