"""Trainer plugins, one module each (see ``base.TrainerPlugin``); ``get_trainer(name)`` picks one."""

from __future__ import annotations

from benchmarks.trainers.appopt_runtime import AMP_PLUGIN as _RUNTIME_AMP
from benchmarks.trainers.appopt_runtime import PLUGIN as _RUNTIME
from benchmarks.trainers.base import SharedModel, TrainerPlugin, TrainingSession
from benchmarks.trainers.keras import PLUGIN as _KERAS
from benchmarks.trainers.keras import XLA_PLUGIN as _KERAS_XLA
from benchmarks.trainers.torch_compile import PLUGIN as _TORCH_COMPILE
from benchmarks.trainers.torch_eager import NHWC_PLUGIN as _TORCH_NHWC
from benchmarks.trainers.torch_eager import PLUGIN as _TORCH

TRAINER_PLUGINS: dict[str, TrainerPlugin] = {
    p.name: p for p in (_RUNTIME, _RUNTIME_AMP, _TORCH, _TORCH_NHWC, _TORCH_COMPILE, _KERAS, _KERAS_XLA)
}
TRAINER_NAMES = tuple(TRAINER_PLUGINS)


def get_trainer(name: str) -> TrainerPlugin:
    try:
        return TRAINER_PLUGINS[name]
    except KeyError:
        raise KeyError(f"unknown trainer {name!r}; known: {', '.join(TRAINER_NAMES)}") from None


__all__ = ["TRAINER_NAMES", "TRAINER_PLUGINS", "SharedModel", "TrainerPlugin", "TrainingSession", "get_trainer"]
