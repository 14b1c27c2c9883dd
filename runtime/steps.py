"""What a plan is built from: compile options, kernel lookup, steps, and the checks and guards that both the
interpreter (``runtime.plan``) and memory-planned execution (``runtime.static_plan``) use."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx

from runtime import kernels
from runtime.check import (
    DEFAULT_MAX_ALLOC_BYTES,
    check_allocations,
    check_flag_attrs,
    check_initializer_types,
    check_kernels,
    check_node_types,
    check_reshapes,
    check_windows,
    topological_order,
)
from runtime.errors import KernelError, ModelCheckError, UnsupportedOpError
from runtime.functions import ExpansionStats, FunctionKey
from runtime.ir import Graph, Node, Value, graph_free_names
from runtime.kernels.base import Kernel, NodeContext, SubgraphFn
from runtime.profiling import Profile
from runtime.shapes import estimate_output_elements


@dataclass
class CompileOptions:
    """Knobs of one compilation (all optional)."""

    threads: int | None = None
    #: Pass names to run (None: the default pipeline); names in ``disable`` are skipped.
    passes: Sequence[str] | None = None
    disable: Sequence[str] = ()
    #: Largest single tensor the model may create, in bytes (checked statically and before size-creating ops).
    max_alloc_bytes: int = DEFAULT_MAX_ALLOC_BYTES
    #: Directory holding external data when the model is given as bytes or a ModelProto.
    base_dir: str | None = None
    #: Node name -> opset for nodes that keep a different opset than the model (restored compiled artifacts).
    node_opsets: Mapping[str, int] = field(default_factory=dict)
    #: Skip onnx's checker and inference (only for artifacts this runtime already checked; its own checks still run).
    prechecked: bool = False
    #: Layout pass mode: "auto" (NHWC where the compiled kernels exist), "nhwc" or "nchw".
    layout: str = "auto"
    #: Measure algorithm alternatives at compile time (``runtime.tuning``); None follows ``APPOPT_TUNING``.
    tune: bool | None = None
    #: Input name -> fixed shape: specialises every shape in the graph (static layout, tuning and memory plan).
    input_shapes: Mapping[str, Sequence[int]] | None = None


def resolve_kernel(node: Node) -> type[Kernel]:
    return kernels.resolve(node.op_type, node.domain, node.opset or 10_000)


def node_context(node: Node, compile_subgraph: Callable[[Any], SubgraphFn] | None = None) -> NodeContext:
    """What a kernel built for ``node`` knows of it besides its attributes (the executor's and constant folding's)."""
    return NodeContext(
        name=node.name,
        op_type=node.op_type,
        domain=node.domain,
        opset=node.opset or 1,
        n_inputs=len(node.inputs),
        n_outputs=len(node.outputs),
        input_present=tuple(bool(i) for i in node.inputs),
        output_present=tuple(bool(o) for o in node.outputs),
        compile_subgraph=compile_subgraph,
    )


def store_results(step: _Step, results: Sequence[Any], env: dict[str, Any]) -> None:
    """Bind a kernel's ``results`` to ``step``'s output names in ``env`` (NumPy scalars as 0-d arrays); a kernel
    that returned fewer outputs than the node wants is a KernelError."""
    outputs = step.outputs
    if len(results) < len(outputs) and any(outputs[len(results) :]):
        raise KernelError(f"{step.node.label()}: kernel returned {len(results)} outputs, {len(outputs)} expected")
    for name, value in zip(outputs, results, strict=False):
        if name:
            env[name] = np.asarray(value) if isinstance(value, np.generic) else value


def has_kernel(node: Node) -> bool:
    try:
        resolve_kernel(node)
    except UnsupportedOpError:
        return False
    return True


@dataclass
class _Step:
    node: Node
    kernel: Kernel
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    free_after: tuple[str, ...]
    guard_size: bool


class _Shared:
    """What every plan of one compiled model shares: options, local functions, stats."""

    def __init__(self, options: CompileOptions, functions: Mapping[FunctionKey, onnx.FunctionProto]) -> None:
        self.options = options
        self.functions = functions
        self.expansion = ExpansionStats()
        self.subgraphs_compiled = 0
        #: Set while ``Executable.profiling()`` is on: steps of the main graph record their time there.
        self.profile: Profile | None = None


def _recording(shared: _Shared) -> Profile | None:
    """The profile the current steps record into: only the main graph's (a subgraph's time is its node's)."""
    profile = shared.profile
    return profile if profile is not None and profile.depth == 1 else None


def _read_position(node: Node, input_index: int) -> int | None:
    """Index into ``_reads(node)`` of input ``input_index`` (empty optional inputs are not read)."""
    if input_index >= len(node.inputs) or not node.inputs[input_index]:
        return None
    return sum(1 for name in node.inputs[:input_index] if name)


def _reads(node: Node) -> list[str]:
    names = [i for i in node.inputs if i]
    for g in node.subgraphs():
        names.extend(sorted(graph_free_names(g)))
    return names


def _guard_size(step: _Step, args: list[Any], limit: int) -> None:
    elements = estimate_output_elements(step.node.op_type, args, [None] * len(args), step.node.attrs)
    if elements is not None and elements > limit:
        raise ModelCheckError(
            f"{step.node.label()}: output would have {elements} elements, above the max_alloc_bytes limit ({limit})"
        )


def _check_graph(graph: Graph, outer: Mapping[str, Value], options: CompileOptions) -> list[Node]:
    order = topological_order(graph, outer)
    check_kernels(order, resolve_kernel)
    # cheap, so they run on a compiled artifact's fast load too (its files are verified, not trusted)
    check_initializer_types(graph)
    check_node_types(order, {**outer, **graph.values})
    check_reshapes(graph, order)
    check_windows(graph, order)
    check_flag_attrs(order)
    check_allocations(graph, order, options.max_alloc_bytes)
    return order
