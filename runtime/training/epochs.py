"""What the framework trainers share (``torch_trainer``, ``tf_trainer``): the output their loss reads, the samples
the data hold, whether a checkpoint is there to resume, and the epoch loop (a seeded permutation of the samples per
epoch, cut into batches, a line of figures per epoch, validation, a checkpoint after each)."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence, Sized
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import onnx

from runtime.training.config import TrainConfig, TrainingError
from runtime.training.data import Features
from runtime.training.trainer import EpochStats


def loss_reads(proto: onnx.ModelProto, output: str) -> tuple[str, str]:
    """(what the cross-entropy reads, the value it reads) for a classifier whose ``output`` is ``proto``'s: the logits
    before a final Softmax (``"Softmax"``, its input), the log-probabilities of a LogSoftmax (``"LogSoftmax"``,
    ``output``), else ``output`` taken as logits (``""``). The model's own output is kept."""
    producer = next((n for n in proto.graph.node if output in n.output), None)
    reads = producer.op_type if producer is not None and producer.op_type in ("Softmax", "LogSoftmax") else ""
    return reads, producer.input[0] if reads == "Softmax" and producer is not None else output


def checkpoint_to_resume(config: TrainConfig, name: str) -> bool:
    """Whether ``config.checkpoint_dir`` holds the checkpoint file ``name`` (TrainingError: no directory to look in)."""
    if config.checkpoint_dir is None:
        raise TrainingError("resume needs a checkpoint directory")
    return (Path(config.checkpoint_dir) / name).is_file()


def sample_count(inputs: Sequence[Sized], target: Sized) -> int:
    """How many samples ``target`` labels; TrainingError when an input holds another count."""
    n = len(target)
    if any(len(a) != n for a in inputs):
        raise TrainingError(f"data: {n} targets but {[len(a) for a in inputs]} samples")
    return n


#: One optimiser step on the batch of these sample indices: (its loss, how many of its samples it classed right).
Step = Callable[[np.ndarray], tuple[float, int]]


class EpochTrainer(Protocol):
    config: TrainConfig
    epoch: int
    history: list[EpochStats]

    def evaluate(self, x: Features, y: np.ndarray, batch_size: int = ...) -> dict[str, float]: ...

    def save_checkpoint(self) -> Path | None: ...


def train_epochs(
    trainer: EpochTrainer,
    samples: int,
    step: Step,
    validation: tuple[Features, np.ndarray] | None = None,
    on_epoch: Callable[[EpochStats], Any] | None = None,
) -> list[EpochStats]:
    """Run ``trainer``'s epochs up to ``config.epochs`` (counting those a resumed checkpoint already did): each the
    permutation seeded by (seed, epoch) of ``samples`` in ``batch_size`` steps."""
    config = trainer.config
    while trainer.epoch < config.epochs:
        order = np.random.default_rng([config.seed, trainer.epoch]).permutation(samples)
        started = time.perf_counter()
        losses: list[float] = []
        correct = 0
        for start in range(0, samples, config.batch_size):
            loss, right = step(order[start : start + config.batch_size])
            losses.append(loss)
            correct += right
        trainer.epoch += 1
        stats = EpochStats(
            epoch=trainer.epoch,
            loss=float(np.mean(losses)) if losses else math.nan,
            seconds=round(time.perf_counter() - started, 4),
            steps=len(losses),
            train_accuracy=correct / samples if samples else None,
        )
        if validation is not None:
            metrics = trainer.evaluate(*validation)
            stats.val_loss, stats.val_accuracy = metrics["loss"], metrics["accuracy"]
        trainer.history.append(stats)
        trainer.save_checkpoint()
        if on_epoch is not None:
            on_epoch(stats)
    return trainer.history
