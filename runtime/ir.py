"""The runtime's own graph IR: values with dtype/shape, nodes with decoded attributes, graphs and models.

Built from ONNX protobufs (``Model.from_onnx``) and written back (``Model.to_onnx``) so passes can work on plain
Python objects and the compiled artifact is still an ONNX file. Subgraph attributes (If/Loop/Scan bodies) stay
``onnx.GraphProto``; the executor compiles them on demand through ``NodeContext.compile_subgraph``.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
from onnx import AttributeProto, GraphProto, TypeProto, helper, numpy_helper

from runtime.errors import ModelCheckError

Dim = int | str | None


def elem_np_dtype(elem_type: int) -> np.dtype[Any] | None:
    """NumPy dtype for an ONNX element type (``None`` when undefined or unknown)."""
    if not elem_type:
        return None
    try:
        return np.dtype(helper.tensor_dtype_to_np_dtype(elem_type))
    except (KeyError, TypeError, ValueError):
        return None


def elem_type_name(elem_type: int) -> str:
    """Readable name of an ONNX element type, e.g. ``float32`` / ``string``."""
    if elem_type == onnx.TensorProto.STRING:
        return "string"
    dt = elem_np_dtype(elem_type)
    if dt is not None:
        return str(dt)
    try:
        return onnx.TensorProto.DataType.Name(elem_type).lower()
    except ValueError:
        return f"elem_type {elem_type}"


@dataclass
class Value:
    """A named value: kind (tensor/sequence/optional/map/...), element type and shape where known."""

    name: str
    kind: str = "unknown"
    elem_type: int = 0
    shape: tuple[Dim, ...] | None = None
    type_proto: TypeProto | None = field(default=None, repr=False, compare=False)

    @property
    def dtype(self) -> np.dtype[Any] | None:
        return elem_np_dtype(self.elem_type) if self.kind == "tensor" else None

    @property
    def static_shape(self) -> tuple[int, ...] | None:
        """The shape when every dimension is a known integer."""
        if self.shape is None or not all(isinstance(d, int) for d in self.shape):
            return None
        return tuple(int(d) for d in self.shape)  # type: ignore[arg-type]

    @classmethod
    def from_type(cls, name: str, tp: TypeProto | None) -> Value:
        if tp is None:
            return cls(name)
        which = tp.WhichOneof("value")
        if which == "tensor_type" or which == "sparse_tensor_type":
            tt = tp.tensor_type if which == "tensor_type" else tp.sparse_tensor_type
            shape: tuple[Dim, ...] | None = None
            if tt.HasField("shape"):
                shape = tuple(_dim(d) for d in tt.shape.dim)
            kind = "tensor" if which == "tensor_type" else "sparse_tensor"
            return cls(name, kind, tt.elem_type, shape, tp)
        if which == "sequence_type":
            return cls(name, "sequence", 0, None, tp)
        if which == "optional_type":
            return cls(name, "optional", 0, None, tp)
        if which == "map_type":
            return cls(name, "map", 0, None, tp)
        return cls(name, "unknown", 0, None, tp)

    def to_value_info(self) -> onnx.ValueInfoProto:
        vi = onnx.ValueInfoProto(name=self.name)
        if self.type_proto is not None:
            vi.type.CopyFrom(self.type_proto)
        elif self.kind == "tensor":
            vi.type.CopyFrom(helper.make_tensor_type_proto(self.elem_type, self.shape))
        return vi


def _dim(d: onnx.TensorShapeProto.Dimension) -> Dim:
    if d.HasField("dim_value"):
        return int(d.dim_value)
    if d.HasField("dim_param"):
        return d.dim_param
    return None


def decode_attribute(attr: AttributeProto) -> Any:
    """Decode one attribute per the kernel contract (see ``runtime/kernels/base.py``); a string that is not UTF-8
    is refused (``ModelCheckError``)."""
    try:
        return _decode_attribute(attr)
    except UnicodeDecodeError:
        raise ModelCheckError(f"attribute {attr.name[:80]!r} holds a string that is not UTF-8") from None
    except (ValueError, TypeError, OverflowError) as exc:  # a tensor whose dims and data disagree
        raise ModelCheckError(f"attribute {attr.name[:80]!r} cannot be read: {exc}") from None


def _decode_attribute(attr: AttributeProto) -> Any:
    t = attr.type
    A = AttributeProto
    if t == A.INT:
        return int(attr.i)
    if t == A.FLOAT:
        return float(attr.f)
    if t == A.STRING:
        return attr.s.decode("utf-8")
    if t == A.INTS:
        return [int(v) for v in attr.ints]
    if t == A.FLOATS:
        return [float(v) for v in attr.floats]
    if t == A.STRINGS:
        return [s.decode("utf-8") for s in attr.strings]
    if t == A.TENSOR:
        return numpy_helper.to_array(attr.t)
    if t == A.SPARSE_TENSOR:
        return sparse_to_dense(attr.sparse_tensor)
    if t == A.GRAPH:
        return attr.g
    if t == A.GRAPHS:
        return list(attr.graphs)
    if t == A.TENSORS:
        return [numpy_helper.to_array(x) for x in attr.tensors]
    if t == A.SPARSE_TENSORS:
        return [sparse_to_dense(x) for x in attr.sparse_tensors]
    if t == A.TYPE_PROTO:
        return attr.tp
    if t == A.TYPE_PROTOS:
        return list(attr.type_protos)
    raise ModelCheckError(f"attribute {attr.name!r} has undefined type {t}")


def sparse_to_dense(sp: onnx.SparseTensorProto) -> np.ndarray:
    """Densify a SparseTensorProto (COO indices either [NNZ] linear or [NNZ, rank])."""
    values = numpy_helper.to_array(sp.values)
    dims = tuple(int(d) for d in sp.dims)
    dense = np.zeros(dims, dtype=values.dtype)
    if values.size == 0:
        return dense
    indices = numpy_helper.to_array(sp.indices).astype(np.int64)
    flat = dense.reshape(-1)
    if indices.ndim == 1:
        flat[indices] = values
    else:
        flat[np.ravel_multi_index(tuple(indices.T), dims)] = values
    return dense


_node_counter = itertools.count()


@dataclass(eq=False)
class Node:
    """One operator application. ``opset`` is the version of ``domain`` this node is interpreted at."""

    name: str
    op_type: str
    domain: str
    inputs: list[str]
    outputs: list[str]
    attributes: list[AttributeProto] = field(default_factory=list, repr=False)
    opset: int = 0
    #: Where the node came from when it was produced by expanding a function (for stats/errors).
    origin: str = ""
    _decoded: dict[str, Any] | None = field(default=None, repr=False, compare=False)

    @property
    def attrs(self) -> dict[str, Any]:
        """Attributes decoded per the kernel contract (cached)."""
        if self._decoded is None:
            self._decoded = {a.name: decode_attribute(a) for a in self.attributes}
        return self._decoded

    def subgraphs(self) -> Iterator[GraphProto]:
        for a in self.attributes:
            if a.type == AttributeProto.GRAPH:
                yield a.g
            elif a.type == AttributeProto.GRAPHS:
                yield from a.graphs

    def label(self) -> str:
        return f"node {self.name!r} ({self.op_type})"

    @classmethod
    def from_onnx(cls, proto: onnx.NodeProto, opsets: dict[str, int]) -> Node:
        domain = "" if proto.domain == "ai.onnx" else proto.domain
        name = proto.name or f"{proto.op_type}_{next(_node_counter)}"
        return cls(
            name=name,
            op_type=proto.op_type,
            domain=domain,
            inputs=list(proto.input),
            outputs=list(proto.output),
            attributes=list(proto.attribute),
            opset=opsets.get(domain, 0),
        )

    def to_onnx(self) -> onnx.NodeProto:
        proto = onnx.NodeProto(name=self.name, op_type=self.op_type, domain=self.domain)
        proto.input.extend(self.inputs)
        proto.output.extend(self.outputs)
        proto.attribute.extend(self.attributes)
        return proto


@dataclass(eq=False)
class Graph:
    """A graph: inputs, outputs, initializers (as arrays), nodes, and what is known about every value."""

    name: str
    inputs: list[Value]
    outputs: list[Value]
    initializers: dict[str, np.ndarray]
    nodes: list[Node]
    values: dict[str, Value] = field(default_factory=dict)
    opsets: dict[str, int] = field(default_factory=dict)

    @property
    def input_names(self) -> list[str]:
        return [v.name for v in self.inputs]

    @property
    def output_names(self) -> list[str]:
        return [v.name for v in self.outputs]

    def value(self, name: str) -> Value:
        return self.values.get(name) or Value(name)

    def producers(self) -> dict[str, Node]:
        return {out: n for n in self.nodes for out in n.outputs if out}

    def consumers(self) -> dict[str, list[Node]]:
        """Name -> nodes that read it, including reads by subgraphs (outer-scope references)."""
        uses: dict[str, list[Node]] = {}
        for n in self.nodes:
            for name in node_reads(n):
                uses.setdefault(name, []).append(n)
        return uses

    def unique_name(self, base: str) -> str:
        taken = set(self.values) | set(self.initializers) | {o for n in self.nodes for o in n.outputs}
        taken |= set(self.input_names)
        if base not in taken:
            return base
        for i in itertools.count(1):
            cand = f"{base}__{i}"
            if cand not in taken:
                return cand
        raise AssertionError("unreachable")

    @classmethod
    def from_onnx(cls, proto: GraphProto, opsets: dict[str, int]) -> Graph:
        """Build the IR; initializers are decoded to arrays (external data must already be loaded)."""
        initializers: dict[str, np.ndarray] = {}
        for init in proto.initializer:
            initializers[init.name] = _tensor_to_array(init)
        for sp in proto.sparse_initializer:
            initializers[sp.values.name] = sparse_to_dense(sp)
        values: dict[str, Value] = {}
        for vi in itertools.chain(proto.value_info, proto.input, proto.output):
            values[vi.name] = Value.from_type(vi.name, vi.type if vi.HasField("type") else None)
        for name, arr in initializers.items():
            if name not in values or values[name].kind == "unknown":
                values[name] = value_of_array(name, arr)
        inputs = [values[vi.name] for vi in proto.input]
        outputs = [values[vi.name] for vi in proto.output]
        nodes = [Node.from_onnx(n, opsets) for n in proto.node]
        _dedupe_node_names(nodes)
        return cls(proto.name, inputs, outputs, initializers, nodes, values, dict(opsets))

    def apply_types(self, inferred: GraphProto) -> None:
        """Take value types from an inferred copy of this graph (same nodes, same order), subgraphs included."""
        for vi in itertools.chain(inferred.value_info, inferred.input, inferred.output):
            if not vi.HasField("type"):
                continue
            new = Value.from_type(vi.name, vi.type)
            old = self.values.get(vi.name)
            if old is None or old.kind == "unknown" or (new.kind == old.kind and _more_known(new, old)):
                self.values[vi.name] = new
        self.inputs = [self.values.get(v.name, v) for v in self.inputs]
        self.outputs = [self.values.get(v.name, v) for v in self.outputs]
        if len(inferred.node) == len(self.nodes):
            for node, proto in zip(self.nodes, inferred.node, strict=True):
                if proto.op_type == node.op_type and any(True for _ in node.subgraphs()):
                    node.attributes = list(proto.attribute)
                    node._decoded = None

    def to_onnx(self) -> GraphProto:
        init_names = set(self.initializers)
        io = {v.name for v in self.inputs} | {v.name for v in self.outputs}
        produced = [o for n in self.nodes for o in n.outputs if o and o not in init_names]
        return helper.make_graph(
            nodes=[n.to_onnx() for n in self.nodes],
            name=self.name,
            inputs=[v.to_value_info() for v in self.inputs],
            outputs=[v.to_value_info() for v in self.outputs],
            initializer=[numpy_helper.from_array(arr, name) for name, arr in self.initializers.items()],
            value_info=[
                self.values[name].to_value_info()
                for name in produced
                if name in self.values and name not in io and self.values[name].kind != "unknown"
            ],
        )


def _more_known(new: Value, old: Value) -> bool:
    """True when ``new`` knows at least as much as ``old`` about a tensor's element type and shape."""
    if old.elem_type and new.elem_type != old.elem_type:
        return False
    if old.shape is None:
        return True
    if new.shape is None or len(new.shape) != len(old.shape):
        return False
    return all(o is None or isinstance(o, str) or n == o for n, o in zip(new.shape, old.shape, strict=True))


def _tensor_to_array(t: onnx.TensorProto) -> np.ndarray:
    try:
        return numpy_helper.to_array(t)
    except Exception as exc:  # malformed raw_data, wrong sizes, unknown dtype
        raise ModelCheckError(f"initializer {t.name!r} cannot be decoded: {exc}") from exc


def value_of_array(name: str, arr: Any) -> Value:
    """A ``Value`` describing a concrete runtime value (array, list = sequence, None = optional)."""
    if isinstance(arr, np.ndarray):
        elem = helper.np_dtype_to_tensor_dtype(arr.dtype) if arr.dtype != object else onnx.TensorProto.STRING
        return Value(name, "tensor", elem, tuple(int(d) for d in arr.shape))
    if isinstance(arr, list):
        return Value(name, "sequence")
    if arr is None:
        return Value(name, "optional")
    return Value(name)


def _dedupe_node_names(nodes: Iterable[Node]) -> None:
    seen: set[str] = set()
    for n in nodes:
        if n.name in seen:
            base = n.name
            for i in itertools.count(1):
                cand = f"{base}__{i}"
                if cand not in seen:
                    n.name = cand
                    break
        seen.add(n.name)


def node_reads(node: Node) -> list[str]:
    """Every name ``node`` reads: its non-empty inputs plus outer-scope names used by its subgraphs."""
    names = [i for i in node.inputs if i]
    for g in node.subgraphs():
        names.extend(sorted(graph_free_names(g)))
    return names


def graph_free_names(graph: GraphProto) -> set[str]:
    """Names a (sub)graph reads from its enclosing scopes (not defined inside it)."""
    defined = {vi.name for vi in graph.input} | {t.name for t in graph.initializer}
    defined |= {sp.values.name for sp in graph.sparse_initializer}
    free: set[str] = set()
    for n in graph.node:
        for i in n.input:
            if i and i not in defined:
                free.add(i)
        for a in n.attribute:
            subs = [a.g] if a.type == AttributeProto.GRAPH else list(a.graphs)
            for g in subs:
                free |= {x for x in graph_free_names(g) if x not in defined}
        defined.update(o for o in n.output if o)
    free |= {o.name for o in graph.output if o.name not in defined}
    return free


@dataclass
class Model:
    """A model: the main graph plus what ONNX keeps around it."""

    graph: Graph
    ir_version: int
    opsets: dict[str, int]
    producer_name: str = ""
    metadata: dict[str, str] = field(default_factory=dict)
    #: Counters filled by loading and passes (inlined functions, expanded ops, folded nodes...).
    stats: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_onnx(cls, proto: onnx.ModelProto) -> Model:
        opsets = {("" if o.domain == "ai.onnx" else o.domain): int(o.version) for o in proto.opset_import}
        opsets.setdefault("", 1)
        graph = Graph.from_onnx(proto.graph, opsets)
        if proto.ir_version < 4:
            # Before IR 4 every initializer had to be listed as an input; like onnxruntime, treat them as
            # constants rather than as inputs a caller may override.
            graph.inputs = [v for v in graph.inputs if v.name not in graph.initializers]
        meta = {p.key: p.value for p in proto.metadata_props}
        return cls(graph, int(proto.ir_version), opsets, proto.producer_name, meta)

    def to_onnx(self) -> onnx.ModelProto:
        """Back to ONNX. Nodes whose opset differs from the model's (expanded function bodies) keep theirs in
        the node-opset metadata so the artifact loader can restore them."""
        graph = self.graph.to_onnx()
        model = helper.make_model(
            graph,
            opset_imports=[helper.make_operatorsetid(d, v) for d, v in sorted(self.opsets.items())],
            producer_name=self.producer_name or "appopt-runtime",
        )
        model.ir_version = max(self.ir_version, 4)
        for k, v in self.metadata.items():
            model.metadata_props.add(key=k, value=v)
        return model

    def node_opset_overrides(self) -> dict[str, int]:
        return {n.name: n.opset for n in self.graph.nodes if n.opset and n.opset != self.opsets.get(n.domain)}
