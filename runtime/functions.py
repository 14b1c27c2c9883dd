"""Function inlining: model-local functions and ONNX ops defined by a function body in their schema.

A node calling a model-local function (``model.functions``) is always replaced by the function's body. A node
whose op has no registered kernel but whose ONNX schema defines it as a function (``has_function``, or a
context-dependent body built from the node and its input types) is replaced by that body: the same expansion
onnxruntime performs. Attribute references (``ref_attr_name``) are resolved against the calling node's attributes,
then the function's or schema's defaults. Each body node keeps the opset its body was written for.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import onnx
from onnx import AttributeProto, FunctionProto, GraphProto, helper

from runtime.errors import ModelCheckError
from runtime.ir import Graph, Node, Value

#: Nested expansion deeper than this means a recursive function.
MAX_DEPTH = 32

FunctionKey = tuple[str, str]
_unique = itertools.count()


@dataclass
class ExpansionStats:
    inlined_local: Counter[str] = field(default_factory=Counter)
    expanded_schema: Counter[str] = field(default_factory=Counter)

    def as_dict(self) -> dict[str, dict[str, int]]:
        return {
            "inlined_local_functions": dict(self.inlined_local),
            "expanded_schema_functions": dict(self.expanded_schema),
        }


def local_function_table(proto: onnx.ModelProto) -> dict[FunctionKey, FunctionProto]:
    return {(_norm(f.domain), f.name): f for f in proto.functions}


def _norm(domain: str) -> str:
    return "" if domain == "ai.onnx" else domain


def expand_graph(
    graph: Graph,
    local_functions: Mapping[FunctionKey, FunctionProto],
    has_kernel: Callable[[Node], bool],
    stats: ExpansionStats,
    outer_values: Mapping[str, Value] | None = None,
) -> None:
    """Replace, in place, every node that calls a local function or needs its schema's function body."""
    if not any(_needs_expansion(n, local_functions, has_kernel) for n in graph.nodes):
        return
    types: dict[str, Value] = {**(outer_values or {}), **graph.values}
    expanded: list[Node] = []
    for node in graph.nodes:
        expanded.extend(_expand(node, graph, local_functions, has_kernel, stats, types, 0))
    graph.nodes = expanded


def _needs_expansion(
    node: Node, local_functions: Mapping[FunctionKey, FunctionProto], has_kernel: Callable[[Node], bool]
) -> bool:
    return (node.domain, node.op_type) in local_functions or not has_kernel(node)


def _expand(
    node: Node,
    graph: Graph,
    local_functions: Mapping[FunctionKey, FunctionProto],
    has_kernel: Callable[[Node], bool],
    stats: ExpansionStats,
    types: dict[str, Value],
    depth: int,
) -> list[Node]:
    if depth > MAX_DEPTH:
        raise ModelCheckError(
            f"{node.label()}: function expansion nested deeper than {MAX_DEPTH} (recursive function?)"
        )
    local = local_functions.get((node.domain, node.op_type))
    if local is not None:
        body, defaults = local, {a.name: a for a in local.attribute_proto}
        stats.inlined_local[f"{node.domain}.{node.op_type}" if node.domain else node.op_type] += 1
    elif has_kernel(node):
        return [node]
    else:
        found = schema_function(node, types)
        if found is None:
            return [node]  # reported as unsupported by the checks
        body, defaults = found
        stats.expanded_schema[node.op_type] += 1
    body_opsets = {_norm(o.domain): int(o.version) for o in body.opset_import}
    inner = instantiate_body(node, body, defaults, {**graph.opsets, **body_opsets})
    if any(_is_context_dependent(n) and not has_kernel(n) for n in inner):
        types.update(infer_body_types(inner, types, {**graph.opsets, **body_opsets}))
    out: list[Node] = []
    for n in inner:
        out.extend(_expand(n, graph, local_functions, has_kernel, stats, types, depth + 1))
    return out


def _is_context_dependent(node: Node) -> bool:
    schema = _schema(node)
    return schema is not None and schema.has_context_dependent_function


def _schema(node: Node) -> Any:
    """The node's OpSchema at its opset (typed Any: the stubs lack the function-body accessors), or None."""
    try:
        return onnx.defs.get_schema(node.op_type, node.opset or 1, node.domain)
    except (onnx.defs.SchemaError, TypeError, OverflowError):  # also an opset beyond a C int
        return None


def schema_function(node: Node, types: Mapping[str, Value]) -> tuple[FunctionProto, dict[str, AttributeProto]] | None:
    """The schema-defined body for ``node`` at its opset (plus attribute defaults), or None if there is none."""
    schema = _schema(node)
    if schema is None:
        return None
    defaults = {
        name: a.default_value
        for name, a in schema.attributes.items()
        if a.default_value is not None and a.default_value.type != AttributeProto.UNDEFINED
    }
    fn = FunctionProto()
    if schema.function_opset_versions:
        fn.ParseFromString(schema.get_function_with_opset_version(_pick(schema.function_opset_versions, node.opset)))
        return fn, defaults
    if schema.has_context_dependent_function:
        proto = node.to_onnx()
        proto.attribute.extend(a for name, a in defaults.items() if name not in {x.name for x in node.attributes})
        input_types = [_type_proto(types.get(i)) if i else onnx.TypeProto() for i in node.inputs]
        version = _pick(schema.context_dependent_function_opset_versions, node.opset)
        try:
            data = schema.get_context_dependent_function_with_opset_version(
                version, proto.SerializeToString(), [t.SerializeToString() for t in input_types]
            )
        except Exception as exc:  # the builder rejects nodes it cannot handle (e.g. unknown input types)
            raise ModelCheckError(f"{node.label()}: cannot expand its function body: {exc}") from None
        if not data:
            return None
        fn.ParseFromString(data)
        return fn, defaults
    return None


def _pick(versions: list[int], opset: int) -> int:
    usable = [v for v in versions if v <= opset]
    return max(usable) if usable else min(versions)


def _type_proto(value: Value | None) -> onnx.TypeProto:
    if value is None:
        return onnx.TypeProto()
    if value.type_proto is not None:
        return value.type_proto
    if value.kind == "tensor" and value.elem_type:
        return helper.make_tensor_type_proto(value.elem_type, value.shape)
    return onnx.TypeProto()


def instantiate_body(
    node: Node, body: FunctionProto, defaults: Mapping[str, AttributeProto], opsets: Mapping[str, int]
) -> list[Node]:
    """The body's nodes with names bound to ``node``'s inputs/outputs, internals prefixed, attributes resolved."""
    prefix = f"{node.name}/{next(_unique)}/"
    rename: dict[str, str] = {}
    for i, formal in enumerate(body.input):
        rename[formal] = node.inputs[i] if i < len(node.inputs) else ""
    for i, formal in enumerate(body.output):
        if i < len(node.outputs) and node.outputs[i]:
            rename[formal] = node.outputs[i]
    for inner in body.node:
        for o in inner.output:
            if o and o not in rename:
                rename[o] = prefix + o
    attrs = {**defaults, **{a.name: a for a in node.attributes}}
    nodes: list[Node] = []
    for i, inner in enumerate(body.node):
        domain = _norm(inner.domain)
        nodes.append(
            Node(
                name=f"{prefix}{inner.name or inner.op_type + str(i)}",
                op_type=inner.op_type,
                domain=domain,
                inputs=[rename.get(x, prefix + x) if x else "" for x in inner.input],
                outputs=[rename.get(x, prefix + x) if x else "" for x in inner.output],
                attributes=_resolve_attributes(inner.attribute, attrs, rename),
                opset=opsets.get(domain, 0),
                origin=node.origin or f"{node.op_type} {node.name!r}",
            )
        )
    return nodes


def _resolve_attributes(
    attributes: Any, caller: Mapping[str, AttributeProto], rename: Mapping[str, str]
) -> list[AttributeProto]:
    out: list[AttributeProto] = []
    for attr in attributes:
        if attr.ref_attr_name:
            ref = caller.get(attr.ref_attr_name)
            if ref is None:
                continue  # optional attribute not given: the body op falls back to its own default
            new = AttributeProto()
            new.CopyFrom(ref)
            new.name = attr.name
            out.append(new)
            continue
        new = AttributeProto()
        new.CopyFrom(attr)
        if new.type == AttributeProto.GRAPH:
            _rewrite_subgraph(new.g, caller, rename)
        elif new.type == AttributeProto.GRAPHS:
            for g in new.graphs:
                _rewrite_subgraph(g, caller, rename)
        out.append(new)
    return out


def _rewrite_subgraph(graph: GraphProto, caller: Mapping[str, AttributeProto], rename: Mapping[str, str]) -> None:
    """Bind a body's subgraph: outer names it reads get renamed, attribute references resolved (in place)."""
    for vi in list(graph.input) + list(graph.output) + list(graph.value_info):
        vi.name = rename.get(vi.name, vi.name)
    for node in graph.node:
        for seq in (node.input, node.output):
            for i, name in enumerate(seq):
                if name in rename:
                    seq[i] = rename[name]
        resolved = _resolve_attributes(node.attribute, caller, rename)
        del node.attribute[:]
        node.attribute.extend(resolved)


def infer_body_types(nodes: list[Node], known: Mapping[str, Value], opsets: Mapping[str, int]) -> dict[str, Value]:
    """Types of the values an expanded body defines, by running onnx inference on the body alone."""
    defined = {o for n in nodes for o in n.outputs if o}
    needed = {i for n in nodes for i in n.inputs if i and i not in defined}
    inputs = [
        known[name].to_value_info() if name in known else helper.make_value_info(name, onnx.TypeProto())
        for name in sorted(needed)
    ]
    outputs = [helper.make_value_info(o, onnx.TypeProto()) for o in sorted(defined)]
    graph = helper.make_graph([n.to_onnx() for n in nodes], "body", inputs, outputs)
    model = helper.make_model(graph, opset_imports=[helper.make_operatorsetid(d, v) for d, v in opsets.items() if v])
    try:
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=False)
    except Exception:
        return {}
    return {
        vi.name: Value.from_type(vi.name, vi.type)
        for vi in list(inferred.graph.value_info) + list(inferred.graph.output)
        if vi.type.WhichOneof("value") is not None
    }
