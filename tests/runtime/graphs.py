"""Small ONNX graph builders shared by the runtime core tests."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
F = TensorProto.FLOAT
I64 = TensorProto.INT64


def model(
    nodes: Sequence[onnx.NodeProto],
    inputs: Sequence[onnx.ValueInfoProto],
    outputs: Sequence[onnx.ValueInfoProto],
    initializers: Sequence[onnx.TensorProto] = (),
    opset: int = OPSET,
    extra_opsets: Sequence[tuple[str, int]] = (),
    functions: Sequence[onnx.FunctionProto] = (),
    ir_version: int | None = None,
) -> onnx.ModelProto:
    graph = helper.make_graph(list(nodes), "g", list(inputs), list(outputs), list(initializers))
    opsets = [helper.make_opsetid("", opset), *(helper.make_opsetid(d, v) for d, v in extra_opsets)]
    m = helper.make_model(graph, opset_imports=opsets, functions=list(functions))
    if ir_version is not None:
        m.ir_version = ir_version
    return m


def vi(name: str, elem: int = F, shape: Sequence[Any] | None = None) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, shape)


def const(name: str, value: Any, dtype: Any = np.float32) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(value, dtype=dtype), name)


def gelu(x: str, y: str) -> list[onnx.NodeProto]:
    """GELU as PyTorch exports it, (x * (erf(x / sqrt 2) + 1)) * 0.5, over the :func:`gelu_constants`."""
    return [
        helper.make_node("Div", [x, "sqrt2"], [f"{y}_d"]),
        helper.make_node("Erf", [f"{y}_d"], [f"{y}_e"]),
        helper.make_node("Add", [f"{y}_e", "one"], [f"{y}_a"]),
        helper.make_node("Mul", [x, f"{y}_a"], [f"{y}_m"]),
        helper.make_node("Mul", [f"{y}_m", "half"], [y]),
    ]


def gelu_constants() -> list[onnx.TensorProto]:
    """The initializers :func:`gelu` reads."""
    return [const("sqrt2", np.sqrt(2.0)), const("one", 1.0), const("half", 0.5)]
