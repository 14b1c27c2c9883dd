"""What every trainer plugin provides: a name, the catalog ids it stands for, why it cannot run here, and a session.

A ``TrainerPlugin`` turns a ``SharedModel`` (the PyTorch module every trainer starts from, and its ONNX export) into
a ``TrainingSession`` that takes one optimiser step per call on the batch it is given. All sessions use SGD with
momentum 0.9 and softmax cross-entropy, so the same weights, batches and learning rate give the same trajectory up
to floating-point order. The driver (``benchmarks.training_bench``) owns batch order, timing and threads.
"""

from __future__ import annotations

import copy
import io
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

if TYPE_CHECKING:
    from torch import nn

MOMENTUM = 0.9


@dataclass
class SharedModel:
    """The initial model: a PyTorch module (never trained in place: sessions copy it) and its ONNX export."""

    module: nn.Module
    example: np.ndarray
    _onnx: bytes | None = field(default=None, repr=False)

    def fresh_module(self) -> nn.Module:
        return copy.deepcopy(self.module)

    def onnx_bytes(self) -> bytes:
        """The module exported to ONNX (opset 17, dynamic batch, BatchNormalization kept apart from Conv)."""
        if self._onnx is None:
            self._onnx = export_onnx(self.module, self.example)
        return self._onnx


def export_onnx(module: nn.Module, example: np.ndarray) -> bytes:
    import warnings

    import torch

    buffer = io.BytesIO()
    model = copy.deepcopy(module).train()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the legacy exporter's deprecation notice
        torch.onnx.export(
            model,
            (torch.from_numpy(example),),
            buffer,  # type: ignore[arg-type]  # the legacy exporter writes to a file object too
            dynamo=False,
            opset_version=17,
            input_names=["input"],
            output_names=["logits"],
            dynamic_axes={"input": {0: "batch"}, "logits": {0: "batch"}},
            training=torch.onnx.TrainingMode.EVAL,
            do_constant_folding=False,
        )
    return _restore_buffers(buffer.getvalue(), module)


def _restore_buffers(data: bytes, module: nn.Module) -> bytes:
    """Undo the legacy exporter's initializer sharing: it replaces a tensor equal to another (a fresh BatchNorm's
    running variance and its scale are both ones) by ``Identity(other)``, which would tie a running statistic to a
    trained weight. Each such output becomes its own initializer again, from the module's state."""
    import onnx
    from onnx import numpy_helper

    proto = onnx.load_from_string(data)
    graph = proto.graph
    initializers = {t.name: t for t in graph.initializer}
    state = module.state_dict()
    kept = []
    for node in graph.node:
        if node.op_type == "Identity" and node.input[0] in initializers:
            name = node.output[0]
            value = (
                state[name].detach().numpy().copy()
                if name in state
                else numpy_helper.to_array(initializers[node.input[0]]).copy()
            )
            graph.initializer.append(numpy_helper.from_array(value, name))
        else:
            kept.append(node)
    del graph.node[:]
    graph.node.extend(kept)
    return proto.SerializeToString()


class TrainingSession(Protocol):
    def step(self, x: np.ndarray, y: np.ndarray) -> float:
        """One forward, backward and optimiser step; returns the loss."""

    def accuracy(self, x: np.ndarray, y: np.ndarray) -> float:
        """Test accuracy of the current weights (inference mode)."""

    def optimizer_state_bytes(self) -> int:
        """Bytes the optimiser keeps besides the weights (momentum buffers, master copies)."""


class TrainerPlugin(Protocol):
    #: Name used on the command line and in the result rows' ``backend`` column.
    name: str
    framework: str
    compiler: str
    precision: str
    #: The activations' memory layout the trainer runs (the catalog's layout id: ``NCHW``, ``NHWC``).
    layout: str

    def unavailable(self) -> str | None:
        """Why this trainer cannot run here ("extra not installed", ...), or None."""

    def session(self, model: SharedModel, lr: float, threads: int, batch: int, seed: int) -> TrainingSession:
        """A session starting from ``model``'s initial weights with ``threads`` pinned."""

    def versions(self) -> dict[str, Any]:
        """Package -> version of what this trainer runs on."""


def torch_accuracy(module: Any, x: np.ndarray, y: np.ndarray, batch: int = 512) -> float:
    import torch

    module.eval()
    correct = 0
    with torch.no_grad():
        for start in range(0, len(y), batch):
            out = module(torch.from_numpy(x[start : start + batch]))
            correct += int((out.argmax(1).numpy() == y[start : start + batch]).sum())
    module.train()
    return correct / max(1, len(y))
