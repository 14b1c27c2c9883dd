"""ResNet-8 trains as PyTorch does from the same weights: its strided 3x3 and 1x1 convolutions (phase planes), its
BatchNorms (compiled) and its ReLU gradients (compiled) in one trajectory."""

from __future__ import annotations

import importlib.util

import pytest

needs_torch = pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="extra not installed")


@needs_torch
def test_resnet8_takes_pytorchs_steps() -> None:
    from benchmarks.trainers import get_trainer
    from benchmarks.trainers.base import SharedModel
    from benchmarks.training_suite import get_task

    task = get_task("resnet8")
    data = task.data(0)
    shared = SharedModel(task.build(0), data.x_train[:2])
    losses = {}
    for trainer in ("appopt-runtime", "torch"):
        session = get_trainer(trainer).session(shared, task.lr, 1, 8, 0)
        losses[trainer] = [session.step(data.x_train[i : i + 8], data.y_train[i : i + 8]) for i in (0, 8, 16, 24)]
    assert losses["appopt-runtime"] == pytest.approx(losses["torch"], rel=1e-4)
