"""``TorchTrainer``: the runtime's ``Trainer`` interface with PyTorch doing the work (``--engine torch``, or
``torch-inductor`` with the model compiled by ``torch.compile``).

A PyTorch training plan for an ONNX model, with no command of its own, runs ``python -m runtime train MODEL --engine
torch`` (``torch-inductor`` on the torch.compile route): the same data, batch order (a seeded permutation per epoch),
epoch lines, checkpoints and ONNX export as the runtime's own trainer, with the model run as an ``OnnxModule`` and
optimised by ``torch.optim`` (SGD with momentum, or Adam). Mixed precision is ``torch.autocast`` (bf16 or fp16) on
the device; CUDA when present, else the CPU.

Compiled, the module's forward is ``torch.compile(module, dynamic=False)`` (inductor; its backward is compiled with
it) and the optimiser step stays eager, as ``benchmarks.trainers.torch_compile`` measures the route. The first step
of each batch shape compiles (an epoch's short last batch and evaluation's are shapes of their own), and inductor's
CPU backend builds C++ with the system compiler: the route's image installs one (the catalog's ``inductor``).
Checkpoints and the export read the uncompiled module, so they are the eager engine's and either engine resumes them.

``layout`` NHWC (the catalog's NHWC route for PyTorch) keeps the module's 4-D weights and every 4-D batch in
``torch.channels_last``; the graph's semantics are unchanged (PyTorch's ops read either memory format), and the
checkpoints and the export hold the same values.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import torch
import torch.nn.functional as F

from runtime.atomic import write_atomic
from runtime.ir import Value
from runtime.loader import ModelSource, load_model_proto
from runtime.training.config import TrainConfig, TrainingError
from runtime.training.data import Features, as_feeds, class_ids
from runtime.training.epochs import checkpoint_to_resume, loss_reads, sample_count, train_epochs
from runtime.training.export import export_trained
from runtime.training.torch_module import OnnxModule
from runtime.training.trainer import EpochStats

#: The checkpoint file inside ``config.checkpoint_dir``.
CHECKPOINT = "torch-checkpoint.pt"
_AUTOCAST = {"bf16": torch.bfloat16, "fp16": torch.float16}


class TorchTrainer:
    """Trains ``model`` with ``config`` in PyTorch (``compiled``: its forward and backward by ``torch.compile``);
    ``resume=True`` continues from ``config.checkpoint_dir``."""

    def __init__(
        self, model: ModelSource, config: TrainConfig | None = None, *, resume: bool = False, compiled: bool = False
    ) -> None:
        self.config = config or TrainConfig()
        self.config.validate()
        self.engine = "torch-inductor" if compiled else "torch"
        if self.config.loss != "cross_entropy":
            raise TrainingError(f"--engine {self.engine} trains classifiers (cross_entropy) only")
        if compiled and not torch.cuda.is_available() and not (shutil.which("g++") or shutil.which("c++")):
            raise TrainingError(
                "--engine torch-inductor: torch.compile builds C++ on a CPU and no C++ compiler is on PATH "
                "(install g++, or train with --engine torch)"
            )
        self.proto = load_model_proto(model)
        self.device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        if self.config.threads:
            torch.set_num_threads(self.config.threads)
        torch.manual_seed(self.config.seed)
        self.module = OnnxModule(self.proto).to(self.device)
        self.channels_last = self.config.layout == "NHWC"
        if self.channels_last:  # (before the optimiser and the compiled forward take the parameters)
            self.module = self.module.to(memory_format=torch.channels_last)  # type: ignore[call-overload]  # (its stubs omit memory_format)
        #: What runs the forward: the module itself, or its compiled form (the parameters are the module's).
        self.forward: Callable[..., dict[str, torch.Tensor]] = (
            torch.compile(self.module, dynamic=False) if compiled else self.module
        )
        self.output = self.config.output or self.module.output_names[0]
        self.reads, self.logits = loss_reads(self.proto, self.output)
        if self.logits != self.output:
            self.module.output_names.append(self.logits)
        inputs = {vi.name: Value.from_type(vi.name, vi.type) for vi in self.proto.graph.input}
        self._inputs = {name: inputs[name] for name in self.module.input_names}
        params = [p for p in self.module.parameters() if p.requires_grad]
        if not params:
            raise TrainingError("the model has no trainable float initializer")
        if self.config.optimizer == "adam":
            self.optimizer: torch.optim.Optimizer = torch.optim.Adam(
                params,
                self.config.lr,
                betas=self.config.betas,
                eps=self.config.adam_eps,
                weight_decay=self.config.weight_decay,
            )
        else:
            self.optimizer = torch.optim.SGD(
                params, self.config.lr, momentum=self.config.momentum, weight_decay=self.config.weight_decay
            )
        self.epoch = 0
        self.history: list[EpochStats] = []
        self.resumed_from: Path | None = None
        if resume and checkpoint_to_resume(self.config, CHECKPOINT):
            self.load_checkpoint()

    def _loss(self, outputs: dict[str, torch.Tensor], target: torch.Tensor) -> torch.Tensor:
        scores = outputs[self.logits].float()
        return F.nll_loss(scores, target) if self.reads == "LogSoftmax" else F.cross_entropy(scores, target)

    def _tensors(self, x: Features) -> list[torch.Tensor]:
        feeds = as_feeds(x, self._inputs)
        return [torch.from_numpy(np.ascontiguousarray(feeds[n])).to(self.device) for n in self.module.input_names]

    def _laid_out(self, batch: list[torch.Tensor]) -> list[torch.Tensor]:
        """``batch`` with its 4-D tensors in the trainer's memory format (indexing a batch out may not keep it)."""
        if not self.channels_last:
            return batch
        return [t.contiguous(memory_format=torch.channels_last) if t.dim() == 4 else t for t in batch]

    def _autocast(self) -> Any:
        dtype = _AUTOCAST.get(self.config.precision)
        return torch.autocast(self.device.type, dtype=dtype or torch.bfloat16, enabled=dtype is not None)

    def _forward(self, *inputs: torch.Tensor) -> dict[str, torch.Tensor]:
        """``forward``, a compiler's failure (no working C++ compiler, an op inductor cannot lower) said in one
        line."""
        try:
            return self.forward(*inputs)
        except torch._dynamo.exc.TorchDynamoException as error:
            text = str(error).strip()
            first = text.splitlines()[0] if text else type(error).__name__
            raise TrainingError(
                f"--engine {self.engine}: torch.compile failed: {first} (or train with --engine torch)"
            ) from None

    def train_step(self, inputs: list[torch.Tensor], target: torch.Tensor) -> tuple[float, torch.Tensor]:
        """One optimiser step on a batch; returns its loss and the logits."""
        self.module.train()
        with self._autocast():
            outputs = self._forward(*inputs)
            loss = self._loss(outputs, target)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()
        return float(loss.item()), outputs[self.logits].detach()

    def fit(
        self,
        x: Features,
        y: np.ndarray,
        *,
        validation: tuple[Features, np.ndarray] | None = None,
        on_epoch: Callable[[EpochStats], None] | None = None,
    ) -> list[EpochStats]:
        """Train up to ``config.epochs`` epochs (counting those a resumed checkpoint already did)."""
        inputs = self._tensors(x)
        target = torch.from_numpy(class_ids(y)).to(self.device)
        n = sample_count(inputs, target)

        def step(idx: np.ndarray) -> tuple[float, int]:
            batch = torch.from_numpy(idx).to(self.device)
            loss, scores = self.train_step(self._laid_out([t[batch] for t in inputs]), target[batch])
            return loss, int((scores.argmax(dim=1) == target[batch]).sum())

        return train_epochs(self, n, step, validation, on_epoch)

    def evaluate(self, x: Features, y: np.ndarray, batch_size: int = 512) -> dict[str, float]:
        """Mean loss and accuracy of the model (in inference mode) on ``(x, y)``."""
        inputs = self._tensors(x)
        target = torch.from_numpy(class_ids(y)).to(self.device)
        self.module.eval()
        total, correct = 0.0, 0
        with torch.no_grad(), self._autocast():
            for start in range(0, len(target), batch_size):
                part = slice(start, start + batch_size)
                outputs = self._forward(*self._laid_out([t[part] for t in inputs]))
                total += float(self._loss(outputs, target[part])) * len(target[part])
                correct += int((outputs[self.logits].argmax(dim=1) == target[part]).sum())
        n = max(len(target), 1)
        return {"loss": total / n, "accuracy": correct / n}

    def export(self) -> onnx.ModelProto:
        """The original model with the trained weights and running statistics."""
        engine = f"{self.engine} {torch.__version__}"
        summary = {"epochs": self.epoch, "optimizer": self.config.optimizer, "engine": engine}
        return export_trained(self.proto, self.module.values(), {"appopt.training": json.dumps(summary)})

    # -- checkpoints (after every epoch, atomic) ------------------------------------------------------------------
    def save_checkpoint(self) -> Path | None:
        if self.config.checkpoint_dir is None:
            return None
        path = Path(self.config.checkpoint_dir) / CHECKPOINT
        path.parent.mkdir(parents=True, exist_ok=True)
        state = {
            "module": self.module.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "epoch": self.epoch,
            "optimizer_name": self.config.optimizer,
            "history": [h.as_dict() for h in self.history],
        }
        return write_atomic(path, lambda f: torch.save(state, f))

    def load_checkpoint(self) -> None:
        directory = Path(self.config.checkpoint_dir or ".")
        try:
            state = torch.load(directory / CHECKPOINT, map_location=self.device, weights_only=True)
            if state.get("optimizer_name") != self.config.optimizer:
                raise TrainingError(
                    f"checkpoint in {str(directory)!r} was made with optimizer {state.get('optimizer_name')!r}, "
                    f"not {self.config.optimizer!r}"
                )
            self.module.load_state_dict(state["module"])
            self.optimizer.load_state_dict(state["optimizer"])
        except (RuntimeError, KeyError, OSError, ValueError) as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise TrainingError(f"checkpoint in {str(directory)!r} does not fit this model: {first}") from None
        self.epoch = int(state["epoch"])
        self.history = [EpochStats(**h) for h in state.get("history", [])]
        self.resumed_from = directory
