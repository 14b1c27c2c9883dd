"""Helpers the rewrite passes share: constants, consumers, shapes, and building new nodes."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, TypeVar

import numpy as np
import onnx
from onnx import helper

from runtime.ir import Graph, Node, Value, value_of_array

#: Domain of the ops the passes introduce (kernels in ``runtime/kernels/fused.py``).
APPOPT_DOMAIN = "com.appopt"
FLOAT = onnx.TensorProto.FLOAT
T = TypeVar("T")


class GraphIndex:
    """Producers, consumers and graph outputs of a graph, kept current by the rewrites that use it."""

    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self.refresh()

    def refresh(self) -> None:
        self.producers = self.graph.producers()
        self.consumers = self.graph.consumers()
        self.outputs = set(self.graph.output_names)
        self.inputs = set(self.graph.input_names)

    def sole_consumer(self, name: str) -> Node | None:
        """The only node reading ``name`` (as a plain input, once), if ``name`` is not a graph output."""
        readers = self.consumers.get(name, [])
        if name in self.outputs or len(readers) != 1:
            return None
        reader = readers[0]
        if reader.inputs.count(name) != 1 or any(True for _ in reader.subgraphs()):
            return None
        return reader

    def constant(self, name: str) -> np.ndarray | None:
        """The value of an initializer that callers cannot override (not a graph input)."""
        if not name or name in self.inputs:
            return None
        return self.graph.initializers.get(name)


def shape_of(graph: Graph, name: str) -> tuple[Any, ...] | None:
    value = graph.values.get(name)
    if value is None or value.kind != "tensor" or value.shape is None:
        arr = graph.initializers.get(name)
        return tuple(arr.shape) if arr is not None else None
    return value.shape


def one_rank(graph: Graph, names: Iterable[str]) -> bool:
    """Whether every value of ``names`` has a known shape, all of one rank.

    What a binary elementwise op needs to move across a layout change that permutes (or lifts) all its tensor
    operands alike: broadcasting commutes with a common permutation of the axes, so their shapes need not be equal.
    Equal is not even decidable where a model was exported with a dynamic length: it names each convolution's
    output length apart (a WaveNet gate's ``unk__3`` against its filter's ``unk__4``)."""
    ranks = set()
    for name in names:
        shape = shape_of(graph, name)
        if shape is None:
            return False
        ranks.add(len(shape))
    return len(ranks) == 1


def elem_type_of(graph: Graph, name: str) -> int:
    value = graph.values.get(name)
    if value is not None and value.kind == "tensor":
        return value.elem_type
    arr = graph.initializers.get(name)
    if arr is not None:
        return value_of_array(name, arr).elem_type
    return 0


def is_float32(graph: Graph, name: str) -> bool:
    return elem_type_of(graph, name) == FLOAT


#: The opset from which a Reduce op takes ``axes`` as an input instead of an attribute.
AXES_INPUT_SINCE = {"ReduceSum": 13}
AXES_INPUT_SINCE_OTHERS = 18


def reduced_axes(node: Node, index: GraphIndex) -> list[int] | None:
    """The constant axes a Reduce node reduces (None: not constant, or empty, which means every axis or none)."""
    if node.opset >= AXES_INPUT_SINCE.get(node.op_type, AXES_INPUT_SINCE_OTHERS):
        if len(node.inputs) < 2 or not node.inputs[1]:
            return None
        axes = index.constant(node.inputs[1])
        return None if axes is None or axes.size == 0 else [int(v) for v in axes.ravel()]
    return [int(v) for v in node.attrs.get("axes") or []] or None


def scalar_of(arr: np.ndarray | None) -> float | None:
    """The single value of a one-element float array."""
    if arr is None or arr.size != 1 or arr.dtype.kind != "f":
        return None
    return float(arr.reshape(-1)[0])


def add_constant(graph: Graph, base: str, value: np.ndarray) -> str:
    name = graph.unique_name(base)
    graph.initializers[name] = value
    graph.values[name] = value_of_array(name, value)
    return name


def make_node(
    graph: Graph,
    op_type: str,
    inputs: Sequence[str],
    outputs: Sequence[str],
    name: str,
    domain: str = APPOPT_DOMAIN,
    opset: int = 1,
    attributes: Mapping[str, Any] | None = None,
) -> Node:
    """A new IR node (attributes given as Python values; ``None`` values are left out)."""
    protos = [helper.make_attribute(k, v) for k, v in (attributes or {}).items() if v is not None]
    taken = {n.name for n in graph.nodes}
    unique = name
    i = 1
    while unique in taken:
        unique = f"{name}__{i}"
        i += 1
    if domain == APPOPT_DOMAIN:
        graph.opsets.setdefault(APPOPT_DOMAIN, 1)
    return Node(unique, op_type, domain, list(inputs), list(outputs), protos, opset)


def set_value(graph: Graph, name: str, elem_type: int, shape: Sequence[Any] | None) -> None:
    graph.values[name] = Value(name, "tensor", elem_type, None if shape is None else tuple(shape))


def replace_node(graph: Graph, old: Node, new: Sequence[Node]) -> None:
    """Put ``new`` where ``old`` was (graph order is re-sorted by the executor anyway)."""
    idx = next(i for i, n in enumerate(graph.nodes) if n is old)
    graph.nodes[idx : idx + 1] = list(new)


def remove_nodes(graph: Graph, dead: Sequence[Node]) -> None:
    ids = {id(n) for n in dead}
    graph.nodes = [n for n in graph.nodes if id(n) not in ids]


def live_matches(
    graph: Graph, index: GraphIndex, match: Callable[[Node, Graph, GraphIndex], T | None]
) -> Iterator[tuple[Node, T]]:
    """Each node, in graph order, that ``match`` finds something at, with what it found. The caller may rewrite the
    graph between items: nodes an earlier rewrite removed are skipped."""
    for node in list(graph.nodes):
        if any(n is node for n in graph.nodes):
            found = match(node, graph, index)
            if found is not None:
                yield node, found


def substitute(graph: Graph, index: GraphIndex, at: Node, new: Sequence[Node], dead: Sequence[Node]) -> None:
    """Put ``new`` where ``at`` was, remove the ``dead`` nodes it also replaces, and bring ``index`` up to date."""
    replace_node(graph, at, new)
    remove_nodes(graph, dead)
    index.refresh()


def attr(node: Node, name: str, default: Any = None) -> Any:
    return node.attrs.get(name, default)


def activation_of(node: Node, index: GraphIndex) -> tuple[str, float, float] | None:
    """``(name, lo, hi)`` when ``node`` is an activation a fused kernel can apply (float Relu, Clip with constant
    bounds, LeakyRelu, Sigmoid, Tanh, HardSigmoid, HardSwish, and the Gelu of gelu_fusion in PyTorch's form;
    ``runtime.native.abi.ACTIVATIONS``)."""
    if node.domain == APPOPT_DOMAIN and node.op_type == "Gelu":
        a = node.attrs
        if int(a.get("form", 0)) != 1 or a.get("div_op", "Div") != "Div":
            return None  # the fused NumPy path repeats form 1 only
        return ("Gelu", float(a.get("div", 1.4142135381698608)), float(a.get("half", 0.5)))
    if node.domain:
        return None
    if node.op_type == "Relu":
        return ("Relu", 0.0, 0.0)
    if node.op_type == "LeakyRelu":
        return ("LeakyRelu", float(node.attrs.get("alpha", 0.01)), 0.0)
    if node.op_type == "Sigmoid" and node.opset >= 6:
        return ("Sigmoid", 0.0, 0.0)
    if node.op_type == "Tanh" and node.opset >= 6:
        return ("Tanh", 0.0, 0.0)
    if node.op_type == "HardSigmoid" and node.opset >= 6:
        return ("HardSigmoid", float(node.attrs.get("alpha", 0.2)), float(node.attrs.get("beta", 0.5)))
    if node.op_type == "HardSwish" and node.opset >= 14:
        return ("HardSwish", 0.0, 0.0)
    if node.op_type == "Clip":
        if node.opset < 11:
            lo = float(node.attrs.get("min", -3.4028234663852886e38))
            hi = float(node.attrs.get("max", 3.4028234663852886e38))
            return ("Clip", lo, hi)
        bounds: list[float] = []
        for i, default in ((1, -np.inf), (2, np.inf)):
            name = node.inputs[i] if len(node.inputs) > i else ""
            if not name:
                bounds.append(default)
                continue
            value = scalar_of(index.constant(name))
            if value is None:
                return None
            bounds.append(value)
        return ("Clip", bounds[0], bounds[1])
    return None


def absorb_activation(attrs: dict[str, Any], node: Node, index: GraphIndex) -> bool:
    """Record ``node``'s activation (Relu, Clip, ...) in a fused op's ``attrs``; False if it is none or one is set."""
    act = activation_of(node, index)
    if act is None or attrs.get("activation"):
        return False
    attrs["activation"], attrs["act_lo"], attrs["act_hi"] = act
    return True


def rebuild(
    graph: Graph,
    old: Node,
    op_type: str,
    inputs: Sequence[str],
    outputs: Sequence[str],
    domain: str = APPOPT_DOMAIN,
    attributes: Mapping[str, Any] | None = None,
) -> Node:
    """Replace ``old`` by a new node of the same name (trailing empty inputs dropped)."""
    ins = list(inputs)
    while ins and not ins[-1]:
        ins.pop()
    protos = [helper.make_attribute(k, v) for k, v in (attributes or {}).items() if v is not None]
    if domain == APPOPT_DOMAIN:
        graph.opsets.setdefault(APPOPT_DOMAIN, 1)
    node = Node(old.name, op_type, domain, ins, list(outputs), protos, 1 if domain == APPOPT_DOMAIN else old.opset)
    replace_node(graph, old, [node])
    return node


#: Pulls a fused node's sole consumer, an op of the default domain that is not an activation, into the fused node's
#: input slots and attributes (copies it may change); True when the consumer fits.
AbsorbOther = Callable[[Node, Node, list[str], dict[str, Any], Graph, GraphIndex], bool]


def absorb_consumers(
    graph: Graph, index: GraphIndex, fusable: Callable[[Node], bool], op_type: str, absorb_other: AbsorbOther
) -> int:
    """Pull the sole consumer of each ``fusable`` node into it, until no more joins; the number pulled in.

    A fused node (``op_type``: data, weight, bias, residual inputs) takes an activation (Relu, Clip, the passes'
    Gelu...) when it has none yet; any other consumer of the default domain is for ``absorb_other`` to judge."""
    rewrites = 0
    changed = True
    while changed:
        changed = False
        for node in list(graph.nodes):
            if not fusable(node):
                continue
            nxt = index.sole_consumer(node.outputs[0])
            if nxt is not None and _absorb(graph, index, node, nxt, op_type, absorb_other):
                index.refresh()
                rewrites += 1
                changed = True
    return rewrites


def _absorb(graph: Graph, index: GraphIndex, fused: Node, nxt: Node, op_type: str, other: AbsorbOther) -> bool:
    ins = list(fused.inputs) + [""] * (4 - len(fused.inputs))
    attrs = plain_attrs(fused)
    if not absorb_activation(attrs, nxt, index) and (nxt.domain or not other(fused, nxt, ins, attrs, graph, index)):
        return False
    rebuild(graph, fused, op_type, ins, nxt.outputs, attributes=attrs)
    remove_nodes(graph, [nxt])
    return True


def plain_attrs(node: Node) -> dict[str, Any]:
    """A node's attributes as Python values (for copying into a rebuilt node)."""
    return {a.name: node.attrs[a.name] for a in node.attributes}
