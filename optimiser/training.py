"""``appopt train``: resolve the model (a spec or an ONNX file), load the data, train with the runtime, export.

The training itself is ``runtime.training.Trainer``; this module adds what the runtime may not import (the spec,
scikit-learn's digits) and turns every user mistake into an :class:`~optimiser.errors.AppoptError` line.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from optimiser.errors import AppoptError

_SPEC_SUFFIXES = (".yaml", ".yml")


@dataclass
class TrainRequest:
    """What the command line asked for; ``None`` means "from the spec, else the trainer's default"."""

    target: Path
    data: str
    output: Path
    epochs: int | None = None
    batch_size: int | None = None
    lr: float | None = None
    optimizer: str = "sgd"
    precision: str | None = None
    checkpoint: Path | None = None
    resume: bool = False
    threads: int | None = None
    seed: int = 0


@dataclass
class TrainReport:
    output: Path
    epochs_run: int
    test_accuracy: float | None
    test_loss: float | None
    seconds_per_epoch: float | None
    resumed_from: Path | None


def resolve_model(request: TrainRequest) -> tuple[Path, dict[str, object]]:
    """The ONNX model to train and the settings a spec supplies (batch size, epochs, precision)."""
    target = request.target
    if target.suffix.lower() not in _SPEC_SUFFIXES:
        if not target.is_file():
            raise AppoptError(f"{target}: no such model file")
        return target, {}
    from optimiser.spec import load_spec

    spec = load_spec(target)
    app = spec.application
    if app.type != "training":
        raise AppoptError(f"{target}: application.type is {app.type!r}; appopt train needs type: training")
    model = spec.model_path()
    if model is None:
        raise AppoptError(
            f"{target}: application.model names architecture {app.model.architecture!r}; appopt train needs an "
            "ONNX file (application.model.onnx)"
        )
    if not model.is_file():
        raise AppoptError(f"{target}: application.model.onnx: {model} does not exist")
    defaults: dict[str, object] = {"batch_size": app.batch_size}
    if app.precision in ("fp32", "fp16", "bf16"):
        defaults["precision"] = app.precision
    elif app.precision == "int8":
        raise AppoptError(f"{target}: application.precision: int8 training is not supported (use fp32, fp16 or bf16)")
    if app.data is not None:
        defaults["epochs"] = max(1, math.ceil(app.data.epochs))
    return model, defaults


def load_data(name: str, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, np.ndarray | None]:
    """``digits`` (scikit-learn's 8x8 digits, 80/20 split) or an ``.npz`` file, as ``x, y, x_test, y_test``."""
    from runtime.training.config import TrainingError
    from runtime.training.data import load_npz, split

    if name == "digits":
        try:
            from sklearn.datasets import load_digits
        except ImportError:
            raise AppoptError('--data digits needs scikit-learn (pip install "appopt[datasets]")') from None
        raw = load_digits()
        ds = split((raw.data / 16.0).astype(np.float32), raw.target.astype(np.int64), 0.2, seed)
    else:
        if not name.endswith(".npz"):
            raise AppoptError(f"--data: {name!r} is neither 'digits' nor an .npz file")
        try:
            ds = load_npz(name, 0.2, seed)
        except TrainingError as exc:
            raise AppoptError(f"--data: {exc}") from None
    return ds.x_train, ds.y_train, ds.x_test, ds.y_test


def run_training(request: TrainRequest, echo: Callable[[str], None] = print) -> TrainReport:
    """Train as ``request`` says, print one line per epoch, write the trained model; return the figures."""
    from runtime.errors import RuntimeModelError
    from runtime.training import TrainConfig, Trainer
    from runtime.training.export import save_model_atomic

    if request.optimizer not in ("sgd", "adam"):
        raise AppoptError(f"--optimizer: {request.optimizer!r}; use sgd or adam")
    if request.precision is not None and request.precision not in ("fp32", "fp16", "bf16"):
        raise AppoptError(f"--precision: {request.precision!r}; use fp32, fp16 or bf16")
    if request.resume and request.checkpoint is None:
        raise AppoptError("--resume needs --checkpoint DIR")
    model, defaults = resolve_model(request)
    x, y, x_test, y_test = load_data(request.data, request.seed)
    default_lr = 0.05 if request.optimizer == "sgd" else 1e-3
    config = TrainConfig(
        epochs=int(request.epochs if request.epochs is not None else defaults.get("epochs", 10)),  # type: ignore[call-overload]
        batch_size=int(request.batch_size if request.batch_size is not None else defaults.get("batch_size", 32)),  # type: ignore[call-overload]
        lr=request.lr if request.lr is not None else default_lr,
        optimizer=request.optimizer,
        precision=str(request.precision or defaults.get("precision", "fp32")),
        checkpoint_dir=str(request.checkpoint) if request.checkpoint is not None else None,
        threads=request.threads,
        seed=request.seed,
    )
    validation = (x_test, y_test) if x_test is not None and y_test is not None else None
    try:
        trainer = Trainer(model, config, resume=request.resume)
        if trainer.resumed_from is not None:
            echo(f"resumed from {trainer.resumed_from} at epoch {trainer.epoch}")
        trainer.fit(x, y, validation=validation, on_epoch=lambda s: echo(_epoch_line(s, config.epochs)))
        metrics = trainer.evaluate(*validation) if validation is not None else {}
        save_model_atomic(trainer.export(), request.output)
    except RuntimeModelError as exc:
        raise AppoptError(str(exc)) from None
    times = [h.seconds for h in trainer.history if h.steps]
    report = TrainReport(
        output=request.output,
        epochs_run=trainer.epoch,
        test_accuracy=metrics.get("accuracy"),
        test_loss=metrics.get("loss"),
        seconds_per_epoch=float(np.median(times)) if times else None,
        resumed_from=trainer.resumed_from,
    )
    summary = f"wrote {request.output}"
    if report.test_accuracy is not None:
        summary += f" (test accuracy {100 * report.test_accuracy:.2f}%)"
    echo(summary)
    return report


def _epoch_line(stats: object, total: int) -> str:
    from runtime.training import EpochStats

    assert isinstance(stats, EpochStats)
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
