"""What a gradient rule sees: the forward graph's types and shapes, and a builder for backward nodes."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx
from onnx import helper

from runtime.ir import Dim, Graph, Node, elem_np_dtype
from runtime.kernels.grad_base import GRAD_DOMAIN


class GradContext:
    """Emits backward nodes into ``nodes`` with fresh names; answers dtype/shape questions about forward values.

    While a rule runs, ``node`` is the forward node and ``needs[i]`` says whether input ``i`` wants a gradient.
    """

    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self.nodes: list[Node] = []
        self.node: Node | None = None
        self.needs: tuple[bool, ...] = ()
        self._taken: set[str] = set(graph.values) | set(graph.initializers) | set(graph.input_names)
        self._taken |= {o for n in graph.nodes for o in n.outputs if o} | {n.name for n in graph.nodes}
        self._counter = itertools.count()
        self._shapes: dict[str, str] = {}
        self._consts: dict[tuple[str, bytes, tuple[int, ...]], str] = {}

    # -- names and nodes ---------------------------------------------------------------------------------------
    def fresh(self, base: str) -> str:
        """A name no value or node of the graph uses yet."""
        name = base
        while name in self._taken:
            name = f"{base}_{next(self._counter)}"
        self._taken.add(name)
        return name

    def emit(
        self,
        op_type: str,
        inputs: Sequence[str],
        outputs: int | Sequence[bool] = 1,
        *,
        domain: str = "",
        attributes: Sequence[onnx.AttributeProto] = (),
        **attrs: Any,
    ) -> list[str]:
        """Add a backward node; ``outputs`` is a count or one flag per output (False: left unnamed)."""
        flags = [True] * outputs if isinstance(outputs, int) else list(outputs)
        hint = self.node.outputs[0] if self.node is not None and self.node.outputs else "grad"
        outs = [self.fresh(f"{hint}__{op_type}_d{i}") if want else "" for i, want in enumerate(flags)]
        protos = list(attributes) + [helper.make_attribute(k, v) for k, v in attrs.items() if v is not None]
        name = self.fresh(f"{self.node.name if self.node is not None else 'grad'}__{op_type}")
        self.nodes.append(
            Node(
                name=name,
                op_type=op_type,
                domain=domain,
                inputs=list(inputs),
                outputs=outs,
                attributes=protos,
                opset=self.graph.opsets.get(domain, 1),
            )
        )
        return outs

    def op(self, op_type: str, *inputs: str, **attrs: Any) -> str:
        """One standard ONNX op with one output."""
        return self.emit(op_type, list(inputs), **attrs)[0]

    def grad_op(
        self, op_type: str, inputs: Sequence[str], outputs: int | Sequence[bool] = 1, **attrs: Any
    ) -> list[str]:
        """A private gradient op (domain ``ai.appopt.training``)."""
        return self.emit(op_type, inputs, outputs, domain=GRAD_DOMAIN, **attrs)

    def const(self, value: np.ndarray, base: str = "grad_const") -> str:
        """A constant as an initializer (equal constants are shared)."""
        arr = np.ascontiguousarray(value)
        key = (str(arr.dtype), arr.tobytes(), tuple(arr.shape))
        if key not in self._consts:
            name = self.fresh(base)
            self.graph.initializers[name] = arr
            self._consts[key] = name
        return self._consts[key]

    def scalar_like(self, value: float, like: str) -> str:
        """A scalar constant with the dtype of value ``like`` (float32 when unknown)."""
        return self.const(np.asarray(value, dtype=self.dtype(like) or np.float32))

    # -- what is known about forward values ------------------------------------------------------------------
    def elem_type(self, name: str) -> int:
        value = self.graph.values.get(name)
        if value is not None and value.elem_type:
            return value.elem_type
        arr = self.graph.initializers.get(name)
        return helper.np_dtype_to_tensor_dtype(arr.dtype) if arr is not None else 0

    def dtype(self, name: str) -> np.dtype[Any] | None:
        return elem_np_dtype(self.elem_type(name))

    def shape(self, name: str) -> tuple[Dim, ...] | None:
        arr = self.graph.initializers.get(name)
        if arr is not None:
            return tuple(int(d) for d in arr.shape)
        value = self.graph.values.get(name)
        return value.shape if value is not None else None

    def rank(self, name: str) -> int | None:
        shape = self.shape(name)
        return None if shape is None else len(shape)

    def same_shape(self, a: str, b: str) -> bool:
        """True only when both shapes are known and equal dim by dim (named dims count as equal by name)."""
        sa, sb = self.shape(a), self.shape(b)
        if sa is None or sb is None or len(sa) != len(sb):
            return False
        return all(x is not None and x == y for x, y in zip(sa, sb, strict=True))

    def shape_of(self, name: str) -> str:
        """An int64 tensor holding ``name``'s shape: a constant when static, else one shared ``Shape`` node."""
        if name not in self._shapes:
            shape = self.shape(name)
            if shape is not None and all(isinstance(d, int) for d in shape) and name not in self.graph.input_names:
                self._shapes[name] = self.const(np.asarray(shape, dtype=np.int64), "grad_shape")
            else:
                self._shapes[name] = self.emit("Shape", [name])[0]
        return self._shapes[name]

    def sum_to(self, grad: str, like: str, out: str) -> str:
        """``grad`` (shaped like forward output ``out``) reduced to ``like``'s shape, skipped when equal."""
        if self.same_shape(like, out):
            return grad
        return self.grad_op("SumToShape", [grad, self.shape_of(like)])[0]
