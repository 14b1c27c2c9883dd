"""Static checks run before any kernel: structure, kernels, dtypes, shapes and allocation sizes.

Every failure is a ``ModelCheckError`` (or ``UnsupportedOpError``) whose message names the node and op, so the CLI
can print it as one line.
"""

from __future__ import annotations

import heapq
import os
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import numpy as np
import onnx

from runtime.errors import ModelCheckError, UnsupportedOpError
from runtime.geometry import CONV_OPS, POOL_OPS, window_attr_problem
from runtime.ir import Graph, Node, Value, elem_type_name, graph_free_names, node_reads
from runtime.op_traits import SIZE_CREATING_OPS
from runtime.shapes import estimate_output_elements, num_elements

#: Default ceiling for any single tensor the model asks for (override: ``max_alloc_bytes=`` or the environment).
DEFAULT_MAX_ALLOC_BYTES = int(os.environ.get("APPOPT_MAX_ALLOC_BYTES", 8 * 2**30))


def topological_order(graph: Graph, outer_names: Iterable[str] = ()) -> list[Node]:
    """Check names (single producer, every read defined) and return the nodes in a stable topological order."""
    scope = set(graph.input_names) | set(graph.initializers)
    outer = set(outer_names)
    producer: dict[str, int] = {}
    for idx, node in enumerate(graph.nodes):
        for out in node.outputs:
            if not out:
                continue
            if out in producer:
                other = graph.nodes[producer[out]]
                raise ModelCheckError(f"{node.label()}: output {out!r} is also produced by {other.label()}")
            if out in scope:
                raise ModelCheckError(f"{node.label()}: output {out!r} redefines a graph input or initializer")
            producer[out] = idx
    deps: list[set[int]] = []
    for node in graph.nodes:
        needs: set[int] = set()
        for name in node_reads(node):
            if name in producer:
                needs.add(producer[name])
            elif name not in scope and name not in outer:
                raise ModelCheckError(
                    f"{node.label()}: input {name!r} is not produced by any node, graph input or initializer"
                )
        deps.append(needs)
    for out in graph.output_names:
        if out not in producer and out not in scope and out not in outer:
            raise ModelCheckError(f"graph {graph.name!r}: output {out!r} is never produced")
    # Kahn's algorithm, smallest original index first so a sorted model keeps its order.
    users: dict[int, list[int]] = {}
    pending = [len(d) for d in deps]
    for idx, needs in enumerate(deps):
        for d in needs:
            users.setdefault(d, []).append(idx)
        if idx in needs:
            raise ModelCheckError(f"{graph.nodes[idx].label()}: reads its own output (cycle)")
    ready = [i for i, p in enumerate(pending) if p == 0]
    heapq.heapify(ready)
    order: list[int] = []
    while ready:
        i = heapq.heappop(ready)
        order.append(i)
        for u in users.get(i, ()):
            pending[u] -= 1
            if pending[u] == 0:
                heapq.heappush(ready, u)
    if len(order) != len(graph.nodes):
        stuck = [graph.nodes[i].label() for i, p in enumerate(pending) if p > 0]
        more = f" and {len(stuck) - 4} more" if len(stuck) > 4 else ""
        raise ModelCheckError(f"graph {graph.name!r} has a cycle through {', '.join(stuck[:4])}{more}")
    return [graph.nodes[i] for i in order]


def check_kernels(nodes: Iterable[Node], resolve: Callable[[Node], Any]) -> None:
    """Every node must resolve to a kernel (function bodies were already expanded)."""
    for node in nodes:
        try:
            resolve(node)
        except UnsupportedOpError as exc:
            origin = f" (from the body of {node.origin})" if node.origin else ""
            raise UnsupportedOpError(
                f"{node.label()}{origin}: {exc}, and its ONNX schema defines no function body"
            ) from None


_TYPE_STR_CACHE: dict[int, str] = {}


def tensor_type_str(elem_type: int) -> str:
    """The schema spelling of a tensor type, e.g. ``tensor(float)``."""
    if elem_type not in _TYPE_STR_CACHE:
        try:
            name = onnx.TensorProto.DataType.Name(elem_type).lower()
        except ValueError:  # not a data type ONNX defines
            name = f"unknown type {elem_type}"
        _TYPE_STR_CACHE[elem_type] = f"tensor({name})"
    return _TYPE_STR_CACHE[elem_type]


def check_node_types(nodes: Iterable[Node], values: Mapping[str, Value]) -> None:
    """Inputs must satisfy the op schema's type constraints, and inputs sharing a type variable must agree."""
    for node in nodes:
        try:
            schema = onnx.defs.get_schema(node.op_type, node.opset or 1, node.domain)
        except onnx.defs.SchemaError:
            continue
        constraints = {c.type_param_str: set(c.allowed_type_strs) for c in schema.type_constraints}
        formals = list(schema.inputs)
        if not formals:
            continue
        bound: dict[str, tuple[int, int]] = {}
        for idx, name in enumerate(node.inputs):
            if not name:
                continue
            formal = formals[min(idx, len(formals) - 1)]
            if idx >= len(formals) and formal.option != onnx.defs.OpSchema.FormalParameterOption.Variadic:
                raise ModelCheckError(
                    f"{node.label()}: {len(node.inputs)} inputs given, the op takes at most {len(formals)}"
                )
            value = values.get(name)
            if value is None or value.kind != "tensor" or not value.elem_type:
                continue
            type_str = formal.type_str
            actual = tensor_type_str(value.elem_type)
            allowed = constraints.get(type_str, {type_str})
            if actual not in allowed and any(a.startswith("tensor(") for a in allowed):
                raise ModelCheckError(
                    f"{node.label()}: input {idx} ({name!r}) is {elem_type_name(value.elem_type)}, "
                    f"which {node.op_type} does not accept"
                )
            if type_str in constraints and formal.is_homogeneous:
                prev = bound.setdefault(type_str, (idx, value.elem_type))
                if prev[1] != value.elem_type:
                    raise ModelCheckError(
                        f"{node.label()}: dtype mismatch: input {prev[0]} is {elem_type_name(prev[1])} "
                        f"but input {idx} is {elem_type_name(value.elem_type)}"
                    )


def constant_values(graph: Graph) -> dict[str, np.ndarray]:
    """Values known before running: initializers and the outputs of ``Constant`` nodes."""
    consts = dict(graph.initializers)
    for node in graph.nodes:
        if node.op_type == "Constant" and node.domain == "" and node.outputs and node.attrs:
            value = _constant_attr(node.attrs)
            if value is not None:
                consts[node.outputs[0]] = value
    return consts


def _constant_attr(attrs: Mapping[str, Any]) -> np.ndarray | None:
    if "value" in attrs:
        return np.asarray(attrs["value"])
    if "sparse_value" in attrs:
        return np.asarray(attrs["sparse_value"])
    scalar = {
        "value_float": np.float32,
        "value_int": np.int64,
        "value_floats": np.float32,
        "value_ints": np.int64,
    }
    for key, dtype in scalar.items():
        if key in attrs:
            return np.asarray(attrs[key], dtype=dtype)
    if "value_string" in attrs:
        return np.asarray(attrs["value_string"], dtype=object)
    if "value_strings" in attrs:
        return np.asarray(attrs["value_strings"], dtype=object)
    return None


def check_allocations(graph: Graph, nodes: Iterable[Node], limit_bytes: int) -> None:
    """Refuse any tensor whose known size exceeds ``limit_bytes``: from inferred static shapes, and from the
    constant inputs of size-creating ops (ConstantOfShape, Expand, Tile, Range, Resize)."""
    consts = constant_values(graph)
    for node in nodes:
        for out in node.outputs:
            value = graph.values.get(out) if out else None
            shape = value.static_shape if value is not None else None
            if value is None or shape is None:
                continue
            itemsize = value.dtype.itemsize if value.dtype is not None else 1
            _refuse_if_large(node, out, num_elements(shape) * itemsize, limit_bytes, shape)
        if node.op_type in SIZE_CREATING_OPS and node.domain == "":
            inputs = [consts.get(i) if i else None for i in node.inputs]
            shapes = [graph.values[i].static_shape if i in graph.values else None for i in node.inputs]
            elements = estimate_output_elements(node.op_type, inputs, shapes, node.attrs)
            if elements is not None:
                _refuse_if_large(node, node.outputs[0], elements * _out_itemsize(graph, node), limit_bytes, None)


def _out_itemsize(graph: Graph, node: Node) -> int:
    value = graph.values.get(node.outputs[0])
    if value is not None and value.dtype is not None:
        return int(value.dtype.itemsize)
    return 4


def _refuse_if_large(node: Node, out: str, nbytes: int, limit: int, shape: tuple[int, ...] | None) -> None:
    if nbytes > limit:
        shape_txt = f" {list(shape)}" if shape is not None else ""
        raise ModelCheckError(
            f"{node.label()}: output {out!r}{shape_txt} would need {_human(nbytes)}, above the "
            f"{_human(limit)} limit (max_alloc_bytes)"
        )


def _human(nbytes: int) -> str:
    size = float(nbytes)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if size < 1024 or unit == "PiB":
            return f"{size:.1f} {unit}" if unit != "B" else f"{nbytes} B"
        size /= 1024
    return f"{nbytes} B"


def check_reshapes(graph: Graph, nodes: Iterable[Node]) -> None:
    """Reshape with a static input and a constant target must keep the element count."""
    consts = constant_values(graph)
    for node in nodes:
        if node.op_type != "Reshape" or node.domain or len(node.inputs) < 2:
            continue
        data = graph.values.get(node.inputs[0])
        target = consts.get(node.inputs[1])
        in_shape = data.static_shape if data is not None else None
        if in_shape is None or target is None or target.dtype.kind not in "iu":
            continue
        dims = [int(d) for d in target.reshape(-1)]
        allowzero = bool(node.attrs.get("allowzero", 0))
        if dims.count(-1) > 1:
            raise ModelCheckError(f"{node.label()}: shape {dims} has more than one -1")
        resolved = [in_shape[i] if d == 0 and not allowzero and i < len(in_shape) else d for i, d in enumerate(dims)]
        known = num_elements([d for d in resolved if d != -1])
        total = num_elements(in_shape)
        ok = (total % known == 0) if -1 in resolved and known else (known == total)
        if -1 in resolved and known == 0:
            ok = total == 0
        if not ok:
            raise ModelCheckError(f"{node.label()}: cannot reshape {list(in_shape)} ({total} elements) to {dims}")


def check_initializer_types(graph: Graph) -> None:
    """A graph input backed by an initializer must declare the initializer's dtype."""
    for value in graph.inputs:
        arr = graph.initializers.get(value.name)
        if arr is None or value.kind != "tensor" or not value.elem_type or value.dtype is None:
            continue
        if arr.dtype != object and value.dtype != arr.dtype:
            raise ModelCheckError(
                f"graph input {value.name!r} is declared {elem_type_name(value.elem_type)} but its initializer "
                f"is {arr.dtype}"
            )


def subgraph_free_names(node: Node) -> set[str]:
    names: set[str] = set()
    for g in node.subgraphs():
        names |= graph_free_names(g)
    return names


#: Input index of the weight of each Conv-like op.
_WEIGHT_INPUT = {"Conv": 1, "ConvTranspose": 1, "ConvInteger": 1, "DeformConv": 1, "QLinearConv": 3}


def check_windows(graph: Graph, nodes: Iterable[Node]) -> None:
    """Conv-like and pool attributes must be in range and consistent with the input rank and the weight's shape
    (``kernel_shape`` equal to the weight's spatial dims, as onnxruntime requires)."""
    for node in nodes:
        if node.domain or node.op_type not in CONV_OPS | POOL_OPS:
            continue
        x = graph.values.get(node.inputs[0]) if node.inputs else None
        nd = len(x.shape) - 2 if x is not None and x.shape is not None and len(x.shape) >= 2 else None
        weight_kernel = None
        index = _WEIGHT_INPUT.get(node.op_type)
        if index is not None and index < len(node.inputs):
            w = graph.values.get(node.inputs[index])
            w_shape = w.static_shape if w is not None else None
            if w_shape is None and node.inputs[index] in graph.initializers:
                w_shape = tuple(graph.initializers[node.inputs[index]].shape)
            if w_shape is not None and len(w_shape) >= 2:
                weight_kernel = list(w_shape[2:])
                if nd is not None and len(weight_kernel) != nd:
                    raise ModelCheckError(
                        f"{node.label()}: the weight has {len(weight_kernel)} spatial dims, the input {nd}"
                    )
        try:
            problem = window_attr_problem(node.op_type, node.attrs, nd, weight_kernel)
        except (TypeError, ValueError) as exc:
            problem = f"malformed window attributes: {exc}"
        if problem:
            raise ModelCheckError(f"{node.label()}: {problem}")


#: Attributes ONNX defines as 0/1 flags: any other value would be read as one or the other without a word.
FLAG_ATTRS = frozenset(
    {
        "keepdims",
        "noop_with_empty_axes",
        "select_last_index",
        "allowzero",
        "ceil_mode",
        "count_include_pad",
        "storage_order",
        "transA",
        "transB",
        "exclusive",
        "reverse",
        "largest",
        "sorted",
        "onesided",
        "inverse",
        "detect_negative",
        "detect_positive",
        "linear_before_reset",
        "input_forget",
    }
)


def check_flag_attrs(nodes: Iterable[Node]) -> None:
    """0/1 flags of ONNX ops (``keepdims``, ``transA``...) hold 0 or 1."""
    for node in nodes:
        if node.domain:
            continue
        for name in FLAG_ATTRS.intersection(node.attrs):
            value = node.attrs[name]
            if isinstance(value, bool) or (isinstance(value, int) and value in (0, 1)):
                continue
            raise ModelCheckError(f"{node.label()}: attribute {name} must be 0 or 1, got {str(value)[:40]}")
