"""Run an ONNX graph as PyTorch eager code: one ``torch`` call per node, weights as torch tensors.

This is what PyTorch eager does when the model is written in Python (one dispatcher call per op, no graph
optimisation), so it measures "PyTorch eager" on exactly the suite's graphs without a converter dependency. Nodes
computed only from constants run once when the graph is prepared: their outputs are the model's parameters. Only the
ops the suite's models use are supported; any other op raises ``UnsupportedTorchOp`` naming it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from analysis.modelinfo import NONDETERMINISTIC_OPS


class UnsupportedTorchOp(Exception):
    """The graph uses an op this interpreter does not map to torch."""


def _attrs(node: onnx.NodeProto) -> dict[str, Any]:
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def _pads(attrs: Mapping[str, Any], rank: int) -> tuple[list[int], bool]:
    """(torch padding per spatial axis, whether ONNX's pads are symmetric)."""
    pads = list(attrs.get("pads", [0] * 2 * rank))
    begin, end = pads[:rank], pads[rank:]
    return begin, begin == end


class TorchGraph:
    """A compiled ONNX graph: ``run(feeds) -> outputs`` with torch ops in graph order."""

    def __init__(self, model: onnx.ModelProto, threads: int, static_shapes: bool = False) -> None:
        import torch

        self.torch = torch
        #: Read shape-like constant inputs (Reshape's shape, Unsqueeze's axes) once, here, as Python ints: what a
        #: tracing compiler needs (``.tolist()`` on a tensor at run time breaks its graph). Eager keeps reading them
        #: per call, as measured so far.
        self.static_shapes = static_shapes
        self.opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 17)
        torch.set_num_threads(threads)
        graph = model.graph
        self.constants: dict[str, Any] = {
            init.name: torch.from_numpy(np.array(numpy_helper.to_array(init))) for init in graph.initializer
        }
        self.input_names = [i.name for i in graph.input if i.name not in self.constants]
        self.output_names = [o.name for o in graph.output]
        self.steps: list[tuple[Callable[..., Any], list[str], list[str]]] = []
        for node in graph.node:
            fn = self._compile(node)
            if node.op_type not in NONDETERMINISTIC_OPS and all(i in self.constants for i in node.input if i):
                self._fold(fn, list(node.input), list(node.output))
            else:
                self.steps.append((fn, list(node.input), list(node.output)))
        self.last_uses = self._last_uses()

    def _last_uses(self) -> list[list[str]]:
        """Per step, the activations no later step or output reads: dropped after it, as eager PyTorch drops a
        tensor when the last Python reference to it goes (keeping every activation alive until the end would make
        each op write to fresh, cold memory)."""
        keep = set(self.constants) | set(self.output_names)
        last: dict[str, int] = {}
        for index, (_, inputs, _) in enumerate(self.steps):
            for name in inputs:
                if name and name not in keep:
                    last[name] = index
        drops: list[list[str]] = [[] for _ in self.steps]
        for name, index in last.items():
            drops[index].append(name)
        return drops

    def _fold(self, fn: Callable[..., Any], inputs: list[str], outputs: list[str]) -> None:
        """Run a node whose inputs are all constants once, now: its outputs are parameters, as in a PyTorch model
        (the light model zoo builds its weights with ConstantOfShape; re-filling them every query is not eager
        PyTorch's cost)."""
        with self.torch.inference_mode():
            result = fn(*(self.constants[i] if i else None for i in inputs))
        results = result if isinstance(result, tuple) else (result,)
        self.constants.update(zip(outputs, results, strict=False))

    def run(self, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
        torch = self.torch
        env: dict[str, Any] = dict(self.constants)
        for name in self.input_names:
            env[name] = torch.from_numpy(np.ascontiguousarray(feeds[name]))
        with torch.inference_mode():
            for (fn, inputs, outputs), drops in zip(self.steps, self.last_uses, strict=True):
                result = fn(*(env[i] if i else None for i in inputs))
                if isinstance(result, tuple):
                    env.update(zip(outputs, result, strict=False))
                else:
                    env[outputs[0]] = result
                for name in drops:
                    env.pop(name, None)
        return [env[name].numpy() for name in self.output_names]

    def _scalar(self, name: str) -> float | None:
        """The value of a one-element constant input (None when it is absent or not a constant)."""
        value = self.constants.get(name) if name else None
        return float(value.reshape(-1)[0]) if value is not None and value.numel() == 1 else None

    def _compile(self, node: onnx.NodeProto) -> Callable[..., Any]:
        torch = self.torch
        f = torch.nn.functional
        a = _attrs(node)
        op = node.op_type
        simple: dict[str, Callable[..., Any]] = {
            "Relu": torch.relu,
            "Add": torch.add,
            "Sub": torch.sub,
            "Mul": torch.mul,
            "Div": torch.div,
            "MatMul": torch.matmul,
            "Erf": torch.erf,
            "Sigmoid": torch.sigmoid,
            "Tanh": torch.tanh,
            "Exp": torch.exp,
            "Sqrt": torch.sqrt,
            "Identity": lambda x: x,
            "Dropout": lambda x, *_: x,
            "Sum": lambda *xs: sum(xs[1:], xs[0]),
        }
        if op in simple:
            return simple[op]
        if op == "Conv":
            rank = len(a.get("kernel_shape", [0, 0]))
            begin, symmetric = _pads(a, rank)
            stride, dilation, group = a.get("strides", [1] * rank), a.get("dilations", [1] * rank), a.get("group", 1)
            if not symmetric:
                raise UnsupportedTorchOp(f"Conv {node.name}: asymmetric pads")
            return lambda x, w, b=None: f.conv2d(x, w, b, stride, begin, dilation, group)
        if op in ("MaxPool", "AveragePool"):
            kernel, stride = a["kernel_shape"], a.get("strides", [1] * len(a["kernel_shape"]))
            begin, symmetric = _pads(a, len(kernel))
            ceil = bool(a.get("ceil_mode", 0))
            if a.get("auto_pad", b"NOTSET") not in (b"NOTSET", "NOTSET"):
                raise UnsupportedTorchOp(f"{op} {node.name}: auto_pad")
            if op == "MaxPool" and not symmetric:
                pads = list(a["pads"])
                rank = len(kernel)
                torch_pads = [p for axis in reversed(range(rank)) for p in (pads[axis], pads[axis + rank])]
                return lambda x: f.max_pool2d(f.pad(x, torch_pads, value=-math.inf), kernel, stride, ceil_mode=ceil)
            if not symmetric:
                raise UnsupportedTorchOp(f"{op} {node.name}: asymmetric pads")
            if op == "MaxPool":
                return lambda x: f.max_pool2d(x, kernel, stride, begin, ceil_mode=ceil)
            include_pad = bool(a.get("count_include_pad", 0))
            return lambda x: f.avg_pool2d(x, kernel, stride, begin, ceil_mode=ceil, count_include_pad=include_pad)
        if op == "GlobalAveragePool":
            return lambda x: torch.mean(x, dim=(2, 3), keepdim=True)
        if op == "Flatten":
            axis = a.get("axis", 1)
            return lambda x: torch.flatten(x, start_dim=axis) if axis > 0 else x.reshape(1, -1)
        if op == "Gemm":
            alpha, beta, trans_a, trans_b = (
                a.get("alpha", 1.0),
                a.get("beta", 1.0),
                a.get("transA", 0),
                a.get("transB", 0),
            )

            def gemm(x: Any, w: Any, c: Any = None) -> Any:
                y = (x.T if trans_a else x) @ (w.T if trans_b else w)
                y = y * alpha if alpha != 1.0 else y
                return y if c is None else y + beta * c

            return gemm
        if op == "Clip":
            names = [*node.input[1:3], "", ""][:2]
            lo_value, hi_value = (self._scalar(name) for name in names)
            if all(not name or value is not None for name, value in zip(names, (lo_value, hi_value), strict=True)):
                # constant bounds as Python numbers, as F.relu6/hardtanh pass them (tensor bounds take a slower path)
                return lambda x, lo=None, hi=None: torch.clamp(x, lo_value, hi_value)
            return lambda x, lo=None, hi=None: torch.clamp(x, lo, hi)
        if op == "Reshape" and self.static_shapes and node.input[1] in self.constants:
            dims = [int(s) for s in self.constants[node.input[1]].tolist()]
            return lambda x, shape: x.reshape([x.shape[i] if s == 0 else s for i, s in enumerate(dims)])
        if op == "Reshape":
            return lambda x, shape: x.reshape([x.shape[i] if s == 0 else int(s) for i, s in enumerate(shape.tolist())])
        if op == "Transpose":
            perm = a.get("perm")
            return lambda x: x.permute(*(perm or reversed(range(x.dim()))))
        if op == "Softmax":
            axis = a.get("axis", -1 if self.opset >= 13 else 1)
            if self.opset < 13:
                return lambda x: torch.softmax(x.flatten(axis), dim=-1).reshape(x.shape)
            return lambda x: torch.softmax(x, dim=axis)
        if op == "Gather":
            axis = a.get("axis", 0)
            return lambda data, idx: torch.index_select(data, axis, idx.reshape(-1)).reshape(
                (*data.shape[:axis], *idx.shape, *data.shape[axis + 1 :])
            )
        if op == "LayerNormalization":
            eps = a.get("epsilon", 1e-5)
            return lambda x, scale, bias=None: f.layer_norm(x, scale.shape, scale, bias, eps)
        if op == "BatchNormalization":
            eps = a.get("epsilon", 1e-5)
            return lambda x, s, b, m, v: f.batch_norm(x, m, v, s, b, False, 0.0, eps)
        if op == "Concat":
            axis = a["axis"]
            return lambda *xs: torch.cat(xs, dim=axis)
        if op == "LRN":
            size, alpha, beta, bias = a["size"], a.get("alpha", 1e-4), a.get("beta", 0.75), a.get("bias", 1.0)
            return lambda x: f.local_response_norm(x, size, alpha, beta, bias)
        if op == "Unsqueeze":
            axes = a.get("axes")
            if axes is None and self.static_shapes and len(node.input) > 1 and node.input[1] in self.constants:
                axes = [int(v) for v in self.constants[node.input[1]].tolist()]

            def unsqueeze(x: Any, axes_input: Any = None) -> Any:
                for axis in sorted(axes if axes is not None else axes_input.tolist()):
                    x = x.unsqueeze(int(axis))
                return x

            return unsqueeze
        if op == "Pow":
            return torch.pow
        if op == "ConstantOfShape":
            value = a.get("value")
            fill = numpy_helper.to_array(value).reshape(-1) if value is not None else np.zeros(1, np.float32)
            return lambda shape: torch.full(
                [int(v) for v in shape.tolist()], fill[0].item(), dtype=torch.from_numpy(fill).dtype
            )
        if op == "Constant":
            tensor = torch.from_numpy(np.array(numpy_helper.to_array(a["value"])))
            return lambda: tensor
        raise UnsupportedTorchOp(f"op {op} (node {node.name or '?'}) has no torch mapping here")


def compile_torch(model: onnx.ModelProto, threads: int) -> TorchGraph:
    """Prepare ``model`` for eager execution; UnsupportedTorchOp if an op has no mapping."""
    return TorchGraph(model, threads)
