"""An ONNX graph as a trainable ``torch.nn.Module``: what ``python -m runtime train --engine torch`` trains.

A PyTorch training plan for an ONNX model with no command of its own runs the model in PyTorch: float
initializers become ``nn.Parameter``s named after them (so the trained values go back into the same ONNX file),
BatchNorm running statistics become buffers updated in training mode, and the nodes run in graph order as torch
functions, one per op type in ``OPS``. An op outside that table fails naming the node and the ops it knows.

Only imported when the torch engine is asked for: the runtime itself needs NumPy and onnx alone.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import onnx
import torch
import torch.nn.functional as F
from onnx import numpy_helper
from torch import nn

from runtime.training.config import TrainingError
from runtime.training.graph_nodes import graph_nodes

Op = Callable[..., Any]
OPS: dict[str, Op] = {}


def op(*names: str) -> Callable[[Op], Op]:
    """Register ``fn(module, node_attrs, *inputs) -> output(s)`` for ONNX op types ``names``."""

    def register(fn: Op) -> Op:
        for name in names:
            OPS[name] = fn
        return fn

    return register


class OnnxModule(nn.Module):
    """Runs ``proto``'s graph with torch ops; ``forward(*inputs)`` returns the graph's outputs by name."""

    def __init__(self, proto: onnx.ModelProto) -> None:
        super().__init__()
        graph = proto.graph
        checked = graph_nodes(proto, OPS, "--engine torch")
        self.opset, self.nodes, self.attrs = checked.opset, checked.nodes, checked.attrs
        stats = checked.statistics
        #: ONNX initializer name -> the attribute of this module that holds it (names may hold dots).
        self.slots: dict[str, str] = {}
        self.constants: dict[str, torch.Tensor] = {}
        for index, init in enumerate(graph.initializer):
            arr = numpy_helper.to_array(init)
            tensor = torch.from_numpy(np.array(arr, copy=True))
            slot = f"v{index}"
            if arr.dtype.kind == "f" and init.name in stats:
                self.register_buffer(slot, tensor.float())
            elif arr.dtype.kind == "f" and arr.ndim > 0:
                self.register_parameter(slot, nn.Parameter(tensor.float()))
            else:
                self.constants[init.name] = tensor
                continue
            self.slots[init.name] = slot
        self.input_names, self.output_names = checked.input_names, list(checked.output_names)
        #: The nodes as plain Python (op function, attributes, input and output names): ``torch.compile`` traces the
        #: forward through these, where each read of a protobuf node broke its graph and recompiled every op alone.
        self.program: list[tuple[Op, dict[str, Any], tuple[str, ...], tuple[str, ...]]] = [
            (OPS[node.op_type], attrs, tuple(node.input), tuple(node.output))
            for node, attrs in zip(self.nodes, self.attrs, strict=True)
        ]

    def values(self) -> dict[str, np.ndarray]:
        """Every trained parameter and running statistic, by ONNX initializer name (for ``export_trained``)."""
        return {name: getattr(self, slot).detach().cpu().numpy() for name, slot in self.slots.items()}

    def forward(self, *inputs: torch.Tensor) -> dict[str, torch.Tensor]:
        env: dict[str, Any] = dict(self.constants)
        env.update({name: getattr(self, slot) for name, slot in self.slots.items()})
        env.update(zip(self.input_names, inputs, strict=True))
        for fn, attrs, inputs_of, outputs_of in self.program:
            args = [env[i] if i else None for i in inputs_of]
            result = fn(self, attrs, *args)
            outs = result if isinstance(result, tuple) else (result,)
            for name, value in zip(outputs_of, outs, strict=False):
                if name:
                    env[name] = value
        return {name: env[name] for name in self.output_names}


def _ints(value: Any) -> list[int]:
    return [int(v) for v in (value.tolist() if isinstance(value, torch.Tensor) else value)]


def _sym_pads(x: torch.Tensor, pads: Sequence[int], fill: float = 0.0) -> tuple[torch.Tensor, list[int]]:
    """ONNX ``[begin..., end...]`` pads as torch's symmetric padding, padding ``x`` explicitly when they differ."""
    nd = len(pads) // 2
    begin, end = list(pads[:nd]), list(pads[nd:])
    if begin == end:
        return x, begin
    widths = [p for i in reversed(range(nd)) for p in (begin[i], end[i])]
    return F.pad(x, widths, value=fill), [0] * nd


def _window(attrs: dict[str, Any], x: torch.Tensor, kernel: Sequence[int]) -> tuple[list[int], list[int], list[int]]:
    nd = len(kernel)
    if attrs.get("auto_pad", b"NOTSET") not in (b"NOTSET", "NOTSET", b"VALID", "VALID"):
        raise TrainingError(f"--engine torch: auto_pad {attrs['auto_pad']!r} is not supported; give explicit pads")
    pads = list(attrs.get("pads", [0] * 2 * nd))
    return list(attrs.get("strides", [1] * nd)), list(attrs.get("dilations", [1] * nd)), pads


@op("Conv")
def _conv(m: OnnxModule, attrs: dict[str, Any], x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None = None) -> Any:
    strides, dilations, pads = _window(attrs, x, list(w.shape[2:]))
    x, padding = _sym_pads(x, pads)
    conv = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}[w.dim() - 2]
    return conv(x, w, b, strides, padding, dilations, int(attrs.get("group", 1)))


@op("MaxPool")
def _max_pool(m: OnnxModule, attrs: dict[str, Any], x: torch.Tensor) -> Any:
    kernel = list(attrs["kernel_shape"])
    strides, dilations, pads = _window(attrs, x, kernel)
    x, padding = _sym_pads(x, pads, -math.inf)
    pool = {1: F.max_pool1d, 2: F.max_pool2d, 3: F.max_pool3d}[len(kernel)]
    return pool(x, kernel, strides, padding, dilations, ceil_mode=bool(attrs.get("ceil_mode", 0)))


@op("AveragePool")
def _average_pool(m: OnnxModule, attrs: dict[str, Any], x: torch.Tensor) -> Any:
    kernel = list(attrs["kernel_shape"])
    strides, _, pads = _window(attrs, x, kernel)
    x, padding = _sym_pads(x, pads)
    pool = {1: F.avg_pool1d, 2: F.avg_pool2d, 3: F.avg_pool3d}[len(kernel)]
    include = bool(attrs.get("count_include_pad", 0))
    return pool(x, kernel, strides, padding, ceil_mode=bool(attrs.get("ceil_mode", 0)), count_include_pad=include)


@op("GlobalAveragePool")
def _global_avg(m: OnnxModule, attrs: dict[str, Any], x: torch.Tensor) -> Any:
    return x.mean(dim=tuple(range(2, x.dim())), keepdim=True)


@op("BatchNormalization")
def _batch_norm(m: OnnxModule, attrs: dict[str, Any], x: Any, scale: Any, bias: Any, mean: Any, var: Any) -> Any:
    # ONNX: running = running * momentum + batch * (1 - momentum); torch's momentum is the batch's weight
    momentum = 1.0 - float(attrs.get("momentum", 0.9))
    eps = float(attrs.get("epsilon", 1e-5))
    return F.batch_norm(x, mean, var, scale, bias, m.training, momentum, eps)


@op("Gemm")
def _gemm(m: OnnxModule, attrs: dict[str, Any], a: Any, b: Any, c: Any = None) -> Any:
    a = a.t() if attrs.get("transA", 0) else a
    b = b.t() if attrs.get("transB", 0) else b
    y = float(attrs.get("alpha", 1.0)) * (a @ b)
    return y if c is None else y + float(attrs.get("beta", 1.0)) * c


@op("MatMul")
def _matmul(m: OnnxModule, attrs: dict[str, Any], a: Any, b: Any) -> Any:
    return a @ b


def _elementwise(fn: Callable[..., Any]) -> Op:
    return lambda m, attrs, *xs: fn(*xs)


def _identity(x: Any) -> Any:
    return x


#: One torch function each, no attributes.
_ELEMENTWISE: dict[str, Callable[..., Any]] = {
    "Add": torch.add,
    "Sub": torch.sub,
    "Mul": torch.mul,
    "Div": torch.div,
    "Relu": F.relu,
    "Sigmoid": torch.sigmoid,
    "Tanh": torch.tanh,
    "Erf": torch.erf,
    "Identity": _identity,
}
OPS.update({name: _elementwise(fn) for name, fn in _ELEMENTWISE.items()})


@op("LeakyRelu")
def _leaky_relu(m: OnnxModule, attrs: dict[str, Any], x: Any) -> Any:
    return F.leaky_relu(x, float(attrs.get("alpha", 0.01)))


def _softmax_with(fn: Callable[..., Any]) -> Op:
    def run(m: OnnxModule, attrs: dict[str, Any], x: Any) -> Any:
        axis = int(attrs.get("axis", -1 if m.opset >= 13 else 1))
        if m.opset >= 13 or axis in (-1, x.dim() - 1):
            return fn(x, axis)
        flat = x.reshape(math.prod(x.shape[:axis]), -1)  # opset < 13: over the flattened trailing dims
        return fn(flat, 1).reshape(x.shape)

    return run


OPS["Softmax"] = _softmax_with(torch.softmax)
OPS["LogSoftmax"] = _softmax_with(torch.log_softmax)


@op("Gather")
def _gather(m: OnnxModule, attrs: dict[str, Any], x: Any, indices: Any) -> Any:
    axis = int(attrs.get("axis", 0)) % x.dim()
    picked = torch.index_select(x, axis, indices.reshape(-1).long() % x.shape[axis])  # (backward: index_add)
    return picked.reshape(*x.shape[:axis], *indices.shape, *x.shape[axis + 1 :])


@op("LayerNormalization")
def _layer_norm(m: OnnxModule, attrs: dict[str, Any], x: Any, scale: Any, bias: Any = None) -> Any:
    axis = int(attrs.get("axis", -1)) % x.dim()
    return F.layer_norm(x, x.shape[axis:], scale, bias, float(attrs.get("epsilon", 1e-5)))


@op("Dropout")
def _dropout(m: OnnxModule, attrs: dict[str, Any], x: Any, ratio: Any = None, training: Any = None) -> Any:
    rate = float(ratio) if ratio is not None else float(attrs.get("ratio", 0.5))
    return F.dropout(x, rate, m.training)


@op("Flatten")
def _flatten(m: OnnxModule, attrs: dict[str, Any], x: Any) -> Any:
    axis = int(attrs.get("axis", 1)) % max(x.dim(), 1) if x.dim() else 0
    return x.reshape(math.prod(x.shape[:axis]), -1)


@op("Reshape")
def _reshape(m: OnnxModule, attrs: dict[str, Any], x: Any, shape: Any) -> Any:
    target = _ints(shape)
    if not attrs.get("allowzero", 0):
        target = [x.shape[i] if d == 0 else d for i, d in enumerate(target)]
    return x.reshape(target)


@op("Transpose")
def _transpose(m: OnnxModule, attrs: dict[str, Any], x: Any) -> Any:
    return x.permute(list(attrs.get("perm", reversed(range(x.dim())))))


@op("Concat")
def _concat(m: OnnxModule, attrs: dict[str, Any], *xs: Any) -> Any:
    return torch.cat(xs, int(attrs["axis"]))


@op("Constant")
def _constant(m: OnnxModule, attrs: dict[str, Any]) -> Any:
    if "value" not in attrs:
        raise TrainingError("--engine torch: a Constant needs its 'value' attribute")
    return torch.from_numpy(np.array(numpy_helper.to_array(attrs["value"]), copy=True))
