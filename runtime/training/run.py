"""One training run from arrays to a trained ONNX file, with a line per epoch: what ``python -m runtime train`` (inside
images) and ``appopt train`` (on a workstation) both do.

>>> data = load_npz("digits.npz")                                                          # doctest: +SKIP
>>> outcome = train_to_file("mlp.onnx", data, "trained.onnx", training_config(epochs=5))   # doctest: +SKIP
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from runtime.training.config import ENGINES, LAYOUTS, OPTIMIZERS, PRECISIONS, TrainConfig, TrainingError
from runtime.training.data import Dataset, load_npz, split
from runtime.training.export import save_model_atomic
from runtime.training.trainer import EpochStats, Trainer

if TYPE_CHECKING:
    import onnx

    from runtime.training.tf_trainer import TfTrainer
    from runtime.training.torch_trainer import TorchTrainer



@dataclass
class TrainOutcome:
    output: Path
    epochs_run: int
    test_accuracy: float | None
    test_loss: float | None
    seconds_per_epoch: float | None
    resumed_from: Path | None


def training_config(
    *,
    epochs: int = 10,
    batch_size: int = 32,
    lr: float | None = None,
    optimizer: str = "sgd",
    precision: str = "fp32",
    layout: str | None = None,
    checkpoint: str | os.PathLike[str] | None = None,
    threads: int | None = None,
    seed: int = 0,
) -> TrainConfig:
    """A ``TrainConfig`` from command-line choices (``lr`` defaults to 0.05 for SGD, 1e-3 for Adam); a bad choice
    raises ``TrainingError`` naming the flag."""
    if optimizer not in OPTIMIZERS:
        raise TrainingError(f"--optimizer: {optimizer!r}; use sgd or adam")
    if precision not in PRECISIONS:
        raise TrainingError(f"--precision: {precision!r}; use fp32, fp16 or bf16")
    if layout not in (None, "NCHW", "NHWC"):
        raise TrainingError(f"--layout: {layout!r}; use NCHW or NHWC")
    return TrainConfig(
        epochs=epochs,
        batch_size=batch_size,
        lr=lr if lr is not None else (0.05 if optimizer == "sgd" else 1e-3),
        optimizer=optimizer,
        precision=precision,
        layout=layout,
        checkpoint_dir=str(checkpoint) if checkpoint is not None else None,
        threads=threads,
        seed=seed,
    )


def model_and_data(
    model: str | None,
    arch: str | None,
    data: str | None,
    synthetic: int | None,
    classes: int = 1000,
    image_size: int = 224,
    seed: int = 0,
) -> tuple[str | onnx.ModelProto, Dataset]:
    """What ``python -m runtime train`` trains on: an ONNX file or a built-in architecture (``--arch``), and the
    ``.npz`` arrays of ``--data`` or ``--synthetic N`` seeded samples (``--arch`` only); a bad combination raises
    TrainingError naming the flags."""
    if (model is None) == (arch is None):
        raise TrainingError("train: give an ONNX file or --arch NAME (exactly one)")
    if (data is None) == (synthetic is None):
        raise TrainingError("train: give --data FILE.npz or --synthetic N (exactly one)")
    if synthetic is not None and arch is None:
        raise TrainingError("--synthetic: only with --arch (an ONNX file's input shape and classes are its own)")
    if arch is not None:
        from runtime.architectures import build_architecture, synthetic_inputs

        proto = build_architecture(arch, classes=classes, image_size=image_size, seed=seed)
        if synthetic is None:
            assert data is not None
            return proto, load_npz(data, 0.2, seed)
        x, y = synthetic_inputs(arch, synthetic, classes, image_size, seed)
        return proto, split(x, y, 0.2, seed) if synthetic >= 5 else Dataset(x, y)
    assert model is not None and data is not None
    return model, load_npz(data, 0.2, seed)


def train_to_file(
    model: str | os.PathLike[str] | onnx.ModelProto,
    data: Dataset,
    output: str | os.PathLike[str],
    config: TrainConfig,
    *,
    resume: bool = False,
    echo: Callable[[str], None] = print,
    engine: str = "appopt",
) -> TrainOutcome:
    """Train ``model`` on ``data`` (validating on its test arrays when it has them), print a line per epoch, write
    the trained model atomically to ``output``; ``resume`` continues from ``config.checkpoint_dir`` when it holds a
    checkpoint (a preempted batch job simply runs again). ``engine`` is one of ``ENGINES``."""
    if resume and config.checkpoint_dir is None:
        raise TrainingError("--resume needs --checkpoint DIR")
    if engine not in ENGINES:
        raise TrainingError(f"--engine: {engine!r}; use {' or '.join(ENGINES)}")
    if config.layout is not None and config.layout not in LAYOUTS[engine]:
        raise TrainingError(
            f"--layout {config.layout}: --engine {engine} trains {' or '.join(LAYOUTS[engine])} only"
            + ("" if engine.startswith("torch") else " (--engine torch runs either)")
        )
    validation = (data.x_test, data.y_test) if data.x_test is not None and data.y_test is not None else None
    trainer: Trainer | TorchTrainer | TfTrainer
    if engine in ("torch", "torch-inductor"):
        try:
            from runtime.training.torch_trainer import TorchTrainer
        except ImportError:
            raise TrainingError(f"--engine {engine}: the torch package is not installed") from None
        trainer = TorchTrainer(_source(model), config, resume=resume, compiled=engine == "torch-inductor")
    elif engine in ("tensorflow", "tensorflow-xla"):
        try:
            from runtime.training.tf_trainer import TfTrainer
        except ImportError:
            raise TrainingError(f"--engine {engine}: the tensorflow package is not installed") from None
        trainer = TfTrainer(_source(model), config, resume=resume, jit_compile=engine == "tensorflow-xla")
    else:
        trainer = Trainer(_source(model), config, resume=resume)
    if trainer.resumed_from is not None:
        echo(f"resumed from {trainer.resumed_from} at epoch {trainer.epoch}")
    trainer.fit(
        data.x_train, data.y_train, validation=validation, on_epoch=lambda s: echo(epoch_line(s, config.epochs))
    )
    metrics = trainer.evaluate(*validation) if validation is not None else {}
    written = save_model_atomic(trainer.export(), output)
    times = [h.seconds for h in trainer.history if h.steps]
    outcome = TrainOutcome(
        output=written,
        epochs_run=trainer.epoch,
        test_accuracy=metrics.get("accuracy"),
        test_loss=metrics.get("loss"),
        seconds_per_epoch=float(np.median(times)) if times else None,
        resumed_from=trainer.resumed_from,
    )
    summary = f"wrote {output}"
    if outcome.test_accuracy is not None:
        summary += f" (test accuracy {100 * outcome.test_accuracy:.2f}%)"
    echo(summary)
    return outcome


def _source(model: str | os.PathLike[str] | onnx.ModelProto) -> str | onnx.ModelProto:
    return model if not isinstance(model, str | os.PathLike) else str(model)


def epoch_line(stats: EpochStats, total: int) -> str:
    parts = [f"epoch {stats.epoch}/{total}", f"loss {stats.loss:.4f}"]
    if stats.train_accuracy is not None:
        parts.append(f"train acc {100 * stats.train_accuracy:.1f}%")
    if stats.val_accuracy is not None:
        parts.append(f"test acc {100 * stats.val_accuracy:.1f}%")
    elif stats.val_loss is not None:
        parts.append(f"test loss {stats.val_loss:.4f}")
    if stats.loss_scale is not None:
        parts.append(f"loss scale {stats.loss_scale:g} ({stats.skipped_steps} skipped)")
    parts.append(f"{stats.seconds:.2f} s")
    return "  ".join(parts)
