"""Training settings and the training error type."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from runtime.errors import RuntimeModelError

OPTIMIZERS = ("sgd", "adam")
PRECISIONS = ("fp32", "fp16", "bf16")
#: Who trains: the runtime's own executor, PyTorch eager or with the model compiled by ``torch.compile``
#: (``runtime.training.torch_trainer``, for PyTorch plans), or TensorFlow with or without XLA
#: (``runtime.training.tf_trainer``, for TensorFlow plans). A compiled engine is named ``{engine}-{compiler}``, the
#: catalog's ``trains_onnx`` and the route's compiler id, which is how a plan's image entry picks it.
ENGINES = ("appopt", "torch", "torch-inductor", "tensorflow", "tensorflow-xla")
LOSSES = ("cross_entropy", "mse")
#: The activations' memory layout, by engine: PyTorch's engines run either (``NHWC``: ``torch.channels_last``, the
#: catalog's NHWC route); the runtime trains in its graph's layout (NCHW) and TensorFlow's graph runs NHWC.
LAYOUTS = {"appopt": ("NCHW",), "torch": ("NCHW", "NHWC"), "torch-inductor": ("NCHW", "NHWC"),
           "tensorflow": ("NHWC",), "tensorflow-xla": ("NHWC",)}  # fmt: skip


class TrainingError(RuntimeModelError):
    """A training setup the runtime cannot run (bad setting, data that does not fit the model, bad checkpoint)."""


@dataclass
class TrainConfig:
    """Everything a training run needs besides the model and the data (all fields have defaults)."""

    epochs: int = 10
    batch_size: int = 32
    lr: float = 0.05
    optimizer: str = "sgd"
    #: SGD momentum (0 for plain SGD); Adam uses ``betas``.
    momentum: float = 0.9
    betas: tuple[float, float] = (0.9, 0.999)
    adam_eps: float = 1e-8
    #: L2 regularisation added to the gradient (PyTorch's ``weight_decay``).
    weight_decay: float = 0.0
    #: Micro-batches whose gradients are summed before one optimiser step.
    accumulation_steps: int = 1
    precision: str = "fp32"
    #: The 4-D activations' memory layout (``LAYOUTS``; default: the engine's own).
    layout: str | None = None
    loss: str = "cross_entropy"
    #: Model output the loss reads (default: the first output).
    output: str | None = None
    #: Initializers to train (default: every float initializer the loss depends on, running statistics aside).
    trainable: Sequence[str] | None = None
    seed: int = 0
    threads: int | None = None
    #: Dynamic loss scaling (fp16/bf16): initial scale, and clean steps before it doubles.
    loss_scale: float | None = None
    loss_scale_growth_interval: int = 2000
    #: Checkpoints go here (atomically) after every epoch and, if set, every N optimiser steps.
    checkpoint_dir: str | None = None
    checkpoint_every_steps: int | None = None
    #: Graph passes for the training graph (default none: the graph's ops stay exactly as built).
    passes: Sequence[str] = field(default_factory=tuple)

    def validate(self) -> None:
        """Raise TrainingError naming the first bad field."""
        checks: list[tuple[bool, str]] = [
            (self.epochs >= 0, "epochs must be >= 0"),
            (self.batch_size >= 1, "batch_size must be >= 1"),
            (self.lr > 0, "lr must be > 0"),
            (self.optimizer in OPTIMIZERS, f"optimizer must be one of {', '.join(OPTIMIZERS)}"),
            (0 <= self.momentum < 1, "momentum must be in [0, 1)"),
            (all(0 <= b < 1 for b in self.betas), "betas must be in [0, 1)"),
            (self.weight_decay >= 0, "weight_decay must be >= 0"),
            (self.accumulation_steps >= 1, "accumulation_steps must be >= 1"),
            (self.precision in PRECISIONS, f"precision must be one of {', '.join(PRECISIONS)}"),
            (self.layout in (None, "NCHW", "NHWC"), "layout must be NCHW or NHWC"),
            (self.loss in LOSSES, f"loss must be one of {', '.join(LOSSES)}"),
            (self.loss_scale is None or self.loss_scale > 0, "loss_scale must be > 0"),
            (self.loss_scale_growth_interval >= 1, "loss_scale_growth_interval must be >= 1"),
            (
                self.checkpoint_every_steps is None or self.checkpoint_every_steps >= 1,
                "checkpoint_every_steps must be >= 1",
            ),
        ]
        for ok, message in checks:
            if not ok:
                raise TrainingError(f"training config: {message}")

    @property
    def amp(self) -> bool:
        return self.precision != "fp32"

    def initial_loss_scale(self) -> float:
        """fp16 starts high (2^15) and backs off; bf16 has fp32's range and starts at 1."""
        if self.loss_scale is not None:
            return float(self.loss_scale)
        return 2.0**15 if self.precision == "fp16" else 1.0

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["betas"] = list(self.betas)
        data["trainable"] = None if self.trainable is None else list(self.trainable)
        data["passes"] = list(self.passes)
        return data

    #: Fields a resumed run must share with the checkpoint (they shape the state it holds).
    STATE_FIELDS: tuple[str, ...] = ("optimizer", "precision", "loss", "output", "trainable")
