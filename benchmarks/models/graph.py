"""A small helper for building ONNX graphs in code with seeded weights.

The suite's models are written as plain Python over this builder so they need no download and are reproducible:
the same seed gives byte-identical weights. Weight scales follow He initialisation, with residual branches damped,
so activations stay finite through deep networks (the accuracy mode compares outputs across backends).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

#: Opset of every built model (LayerNormalization needs 17).
OPSET = 17
BATCH_DIM = "batch"


class GraphBuilder:
    """Accumulates nodes and initializers; each ``op`` call returns the new tensor's name."""

    def __init__(self, name: str, seed: int = 0) -> None:
        self.name = name
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self.inputs: list[onnx.ValueInfoProto] = []
        self.outputs: list[onnx.ValueInfoProto] = []
        self._counter = 0

    def _fresh(self, prefix: str) -> str:
        self._counter += 1
        return f"{prefix}_{self._counter}"

    # --- graph boundary --------------------------------------------------------------------------------------

    def input(self, name: str, shape: Sequence[int | str], elem_type: int = TensorProto.FLOAT) -> str:
        self.inputs.append(helper.make_tensor_value_info(name, elem_type, list(shape)))
        return name

    def output(self, tensor: str, shape: Sequence[int | str], elem_type: int = TensorProto.FLOAT) -> None:
        self.outputs.append(helper.make_tensor_value_info(tensor, elem_type, list(shape)))

    # --- constants -------------------------------------------------------------------------------------------

    def const(self, value: np.ndarray, prefix: str = "w") -> str:
        name = self._fresh(prefix)
        self.initializers.append(numpy_helper.from_array(np.ascontiguousarray(value), name))
        return name

    def weight(self, shape: Sequence[int], fan_in: int, gain: float = math.sqrt(2.0), prefix: str = "w") -> str:
        """A float32 weight drawn from N(0, gain² / fan_in)."""
        std = gain / math.sqrt(max(fan_in, 1))
        return self.const((self.rng.standard_normal(shape) * std).astype(np.float32), prefix)

    def bias(self, size: int, prefix: str = "b") -> str:
        return self.const((self.rng.standard_normal(size) * 0.01).astype(np.float32), prefix)

    def ints(self, values: Sequence[int], prefix: str = "shape") -> str:
        return self.const(np.asarray(values, dtype=np.int64), prefix)

    def scalar(self, value: float, prefix: str = "c") -> str:
        return self.const(np.asarray(value, dtype=np.float32), prefix)

    # --- ops -------------------------------------------------------------------------------------------------

    def op(self, op_type: str, inputs: Sequence[str], **attrs: Any) -> str:
        out = self._fresh(op_type.lower())
        self.nodes.append(helper.make_node(op_type, list(inputs), [out], name=out, **attrs))
        return out

    def conv(
        self,
        x: str,
        c_in: int,
        c_out: int,
        kernel: int,
        stride: int = 1,
        group: int = 1,
        gain: float = math.sqrt(2.0),
    ) -> str:
        """Conv with bias (BatchNorm already folded, as PyTorch's exporters leave it)."""
        pad = kernel // 2
        w = self.weight((c_out, c_in // group, kernel, kernel), fan_in=(c_in // group) * kernel * kernel, gain=gain)
        return self.op(
            "Conv",
            [x, w, self.bias(c_out)],
            kernel_shape=[kernel, kernel],
            strides=[stride, stride],
            pads=[pad] * 4,
            group=group,
        )

    def gemm(self, x: str, n_in: int, n_out: int, gain: float = math.sqrt(2.0)) -> str:
        w = self.weight((n_out, n_in), fan_in=n_in, gain=gain)
        return self.op("Gemm", [x, w, self.bias(n_out)], transB=1)

    def linear(self, x: str, n_in: int, n_out: int, gain: float = 1.0) -> str:
        """MatMul + bias Add over the last axis (the transformer's projection, as exporters write it)."""
        w = self.weight((n_in, n_out), fan_in=n_in, gain=gain)
        return self.op("Add", [self.op("MatMul", [x, w]), self.bias(n_out)])

    def relu(self, x: str) -> str:
        return self.op("Relu", [x])

    def relu6(self, x: str) -> str:
        return self.op("Clip", [x, self.scalar(0.0, "min"), self.scalar(6.0, "max")])

    # --- result ----------------------------------------------------------------------------------------------

    def build(self, doc: str = "") -> onnx.ModelProto:
        graph = helper.make_graph(self.nodes, self.name, self.inputs, self.outputs, self.initializers)
        model = helper.make_model(
            graph,
            opset_imports=[helper.make_opsetid("", OPSET)],
            producer_name="appopt-benchmarks",
            doc_string=doc,
        )
        model.ir_version = 8
        onnx.checker.check_model(model)
        return model
