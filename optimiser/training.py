"""``appopt train``: resolve the model (a spec or an ONNX file), load the data, train with the runtime, export.

The training itself is ``runtime.training.Trainer``; this module adds what the runtime may not import (the spec,
scikit-learn's digits) and turns every user mistake into an :class:`~optimiser.errors.AppoptError` line.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from optimiser.errors import AppoptError

if TYPE_CHECKING:  # the runtime is imported when training runs, not when the CLI starts
    from runtime.training.data import Dataset
    from runtime.training.run import TrainOutcome

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


def load_data(name: str, seed: int = 0) -> Dataset:
    """``digits`` (scikit-learn's 8x8 digits, 80/20 split) or an ``.npz`` file (as ``runtime.training.data``)."""
    from runtime.training.config import TrainingError
    from runtime.training.data import load_npz, split

    if name == "digits":
        try:
            from sklearn.datasets import load_digits
        except ImportError:
            raise AppoptError('--data digits needs scikit-learn (pip install "appopt[datasets]")') from None
        raw = load_digits()
        return split((raw.data / 16.0).astype(np.float32), raw.target.astype(np.int64), 0.2, seed)
    if not name.endswith(".npz"):
        raise AppoptError(f"--data: {name!r} is neither 'digits' nor an .npz file")
    try:
        return load_npz(name, 0.2, seed)
    except TrainingError as exc:
        raise AppoptError(f"--data: {exc}") from None


def run_training(request: TrainRequest, echo: Callable[[str], None] = print) -> TrainOutcome:
    """Train as ``request`` says, print one line per epoch, write the trained model; return the figures."""
    from runtime.errors import RuntimeModelError
    from runtime.training.run import train_to_file, training_config

    try:
        if request.resume and request.checkpoint is None:
            raise AppoptError("--resume needs --checkpoint DIR")
        training_config(optimizer=request.optimizer, precision=request.precision or "fp32")  # the flags, before loading
        model, defaults = resolve_model(request)
        data = load_data(request.data, request.seed)
        config = training_config(
            epochs=int(request.epochs if request.epochs is not None else defaults.get("epochs", 10)),  # type: ignore[call-overload]
            batch_size=int(request.batch_size if request.batch_size is not None else defaults.get("batch_size", 32)),  # type: ignore[call-overload]
            lr=request.lr,
            optimizer=request.optimizer,
            precision=str(request.precision or defaults.get("precision", "fp32")),
            checkpoint=request.checkpoint,
            threads=request.threads,
            seed=request.seed,
        )
        return train_to_file(model, data, request.output, config, resume=request.resume, echo=echo)
    except RuntimeModelError as exc:
        raise AppoptError(str(exc)) from None
