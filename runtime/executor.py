"""Compile a model into an executable plan and run it.

``compile_model`` = load -> (old opsets converted) -> shape/dtype inference -> IR -> function expansion ->
static checks -> graph passes -> kernels resolved and built once. ``Executable.run`` walks the nodes in topological
order over a name -> value map and drops every value right after its last reader.

Threads: ``threads=N`` caps the BLAS/OpenMP pools NumPy uses, through threadpoolctl when it is importable (applied
around each ``run`` so other code in the process keeps its own setting). Without threadpoolctl the cap can only be
set through ``OPENBLAS_NUM_THREADS``/``OMP_NUM_THREADS`` before NumPy is imported; ``Executable.threads_applied``
says which happened.

Example::

    exe = compile_model("model.onnx", threads=2)
    outputs = exe.run({"input": x})            # {output name: array}
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx

from runtime import kernels
from runtime.check import (
    DEFAULT_MAX_ALLOC_BYTES,
    check_allocations,
    check_initializer_types,
    check_kernels,
    check_node_types,
    check_reshapes,
    topological_order,
)
from runtime.errors import KernelError, ModelCheckError, RuntimeModelError, UnsupportedOpError
from runtime.functions import ExpansionStats, FunctionKey, expand_graph, local_function_table
from runtime.ir import Graph, Model, Node, Value, elem_type_name, graph_free_names
from runtime.kernels.base import Kernel, NodeContext, SubgraphFn
from runtime.loader import ModelSource, load_model_proto, upgrade_old_opset, validate_proto
from runtime.shapes import SIZE_CREATING_OPS, estimate_output_elements, infer_model

__all__ = ["CompileOptions", "Executable", "compile_model", "compile_proto", "resolve_kernel"]


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
    #: Skip onnx inference and the static checks (only for artifacts this runtime already checked).
    prechecked: bool = False


def resolve_kernel(node: Node) -> type[Kernel]:
    return kernels.resolve(node.op_type, node.domain, node.opset or 10_000)


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


class Plan:
    """One graph (main or subgraph) with its kernels built, ready to execute."""

    def __init__(
        self,
        graph: Graph,
        shared: _Shared,
        outer_values: Mapping[str, Value] | None = None,
        checked_order: list[Node] | None = None,
    ) -> None:
        self.graph = graph
        self.shared = shared
        self._local = threading.local()
        outer = dict(outer_values or {})
        order = checked_order if checked_order is not None else _check_graph(graph, outer, shared.options)
        self.order = order
        #: Every name this scope can see: what nested subgraphs may read.
        self.visible: dict[str, Value] = {**outer, **graph.values}
        for name in list(graph.initializers) + graph.input_names + [o for n in order for o in n.outputs if o]:
            self.visible.setdefault(name, Value(name))
        defined = set(graph.input_names) | set(graph.initializers) | {o for n in order for o in n.outputs if o}
        self.free_vars = sorted(
            {name for n in order for name in _reads(n) if name not in defined}
            | {o for o in graph.output_names if o not in defined}
        )
        self.constants: dict[str, Any] = dict(graph.initializers)
        self.input_names = graph.input_names
        self.output_names = graph.output_names
        self.steps = self._build_steps(order)

    def _build_steps(self, order: list[Node]) -> list[_Step]:
        last_use: dict[str, int] = {}
        for idx, node in enumerate(order):
            for name in _reads(node):
                last_use[name] = idx
        keep = set(self.output_names)
        frees: list[list[str]] = [[] for _ in order]
        for name, idx in last_use.items():
            if name not in keep:
                frees[idx].append(name)
        for idx, node in enumerate(order):  # outputs nobody reads are dropped at once
            for out in node.outputs:
                if out and out not in last_use and out not in keep:
                    frees[idx].append(out)
        steps = []
        for idx, node in enumerate(order):
            kernel = self._instantiate(node)
            steps.append(
                _Step(
                    node=node,
                    kernel=kernel,
                    inputs=tuple(node.inputs),
                    outputs=tuple(node.outputs),
                    free_after=tuple(frees[idx]),
                    guard_size=node.op_type in SIZE_CREATING_OPS and node.domain == "",
                )
            )
        return steps

    def _instantiate(self, node: Node) -> Kernel:
        cls = resolve_kernel(node)
        ctx = NodeContext(
            name=node.name,
            op_type=node.op_type,
            domain=node.domain,
            opset=node.opset or 1,
            n_inputs=len(node.inputs),
            n_outputs=len(node.outputs),
            input_present=tuple(bool(i) for i in node.inputs),
            output_present=tuple(bool(o) for o in node.outputs),
            compile_subgraph=self.compile_subgraph,
        )
        try:
            return cls(ctx, dict(node.attrs))
        except RuntimeModelError:
            raise
        except Exception as exc:
            raise ModelCheckError(f"{node.label()}: invalid attributes: {type(exc).__name__}: {exc}") from None

    # -- subgraphs ---------------------------------------------------------------------------------------------
    def compile_subgraph(self, proto: onnx.GraphProto) -> SubgraphFn:
        """Compile a GraphProto attribute; the callable takes its inputs positionally and returns its outputs."""
        shared = self.shared
        sub = Graph.from_onnx(proto, self.graph.opsets)
        expand_graph(sub, shared.functions, has_kernel, shared.expansion, self.visible)
        plan = Plan(sub, shared, self.visible)
        shared.subgraphs_compiled += 1
        parent = self

        def run_subgraph(*args: Any) -> list[Any]:
            outer_env = parent.current_env()
            env = {name: outer_env[name] for name in plan.free_vars if name in outer_env}
            if len(args) != len(plan.input_names):
                raise KernelError(f"subgraph {sub.name!r} takes {len(plan.input_names)} inputs, {len(args)} given")
            env.update(zip(plan.input_names, args, strict=True))
            return plan.execute(env)

        run_subgraph.output_values = [sub.value(n) for n in plan.output_names]  # type: ignore[attr-defined]
        return run_subgraph

    def current_env(self) -> dict[str, Any]:
        env = getattr(self._local, "env", None)
        if env is None:
            raise KernelError("a subgraph was called outside its parent node's execution")
        return env

    # -- execution ---------------------------------------------------------------------------------------------
    def execute(self, env: dict[str, Any]) -> list[Any]:
        """Run every step; ``env`` holds the inputs (and outer values) and is consumed."""
        for name, value in self.constants.items():
            env.setdefault(name, value)
        previous = getattr(self._local, "env", None)
        self._local.env = env
        limit = self.shared.options.max_alloc_bytes
        try:
            for step in self.steps:
                args = [env[name] if name else None for name in step.inputs]
                if step.guard_size:
                    _guard_size(step, args, limit)
                results = step.kernel.run(*args)
                outputs = step.outputs
                if len(results) < len(outputs) and any(outputs[len(results) :]):
                    raise KernelError(
                        f"{step.node.label()}: kernel returned {len(results)} outputs, {len(outputs)} expected"
                    )
                for name, value in zip(outputs, results, strict=False):
                    if name:
                        env[name] = np.asarray(value) if isinstance(value, np.generic) else value
                for name in step.free_after:
                    env.pop(name, None)
            return [env[name] for name in self.output_names]
        except KeyError as exc:
            raise KernelError(f"value {exc.args[0]!r} was not available when needed") from None
        finally:
            self._local.env = previous


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
    if not options.prechecked:
        check_initializer_types(graph)
        check_node_types(order, {**outer, **graph.values})
        check_reshapes(graph, order)
        check_allocations(graph, order, options.max_alloc_bytes)
    return order


# -- threads ---------------------------------------------------------------------------------------------------
_CONTROLLER: Any = None
_CONTROLLER_LOCK = threading.Lock()


def _threadpool_controller() -> Any:
    global _CONTROLLER
    with _CONTROLLER_LOCK:
        if _CONTROLLER is None:
            try:
                from threadpoolctl import ThreadpoolController
            except ImportError:
                _CONTROLLER = False
            else:
                _CONTROLLER = ThreadpoolController()
    return _CONTROLLER


@contextlib.contextmanager
def limit_threads(threads: int | None) -> Iterator[str]:
    """Cap BLAS/OpenMP threads for the duration of the block; yields how it was applied."""
    if not threads:
        yield "unlimited"
        return
    controller = _threadpool_controller()
    if controller:
        with controller.limit(limits=threads):
            yield "threadpoolctl"
        return
    yield "environment" if os.environ.get("OMP_NUM_THREADS") == str(threads) else "not applied"


# -- the public object -----------------------------------------------------------------------------------------
class Executable:
    """A compiled model: ``run({name: array}) -> {output name: value}``."""

    def __init__(self, model: Model, plan: Plan, options: CompileOptions, stats: dict[str, Any]) -> None:
        self.model = model
        self.plan = plan
        self.options = options
        self.stats = stats
        graph = model.graph
        required = [v for v in graph.inputs if v.name not in graph.initializers]
        #: Inputs the caller must feed (graph inputs not backed by an initializer).
        self.input_names: list[str] = [v.name for v in required]
        #: Graph inputs with an initializer default; they may be fed to override it.
        self.optional_input_names: list[str] = [v.name for v in graph.inputs if v.name in graph.initializers]
        self.output_names: list[str] = graph.output_names
        self.inputs: dict[str, Value] = {v.name: v for v in graph.inputs}
        self.outputs: dict[str, Value] = {v.name: v for v in graph.outputs}
        self.threads = options.threads
        self.threads_applied = "unlimited"

    def run(self, feeds: Mapping[str, Any]) -> dict[str, Any]:
        """Run once. Tensors are NumPy arrays (strings: dtype=object), sequences lists, empty optionals None."""
        env = self._check_feeds(feeds)
        with limit_threads(self.threads) as how:
            self.threads_applied = how
            values = self.plan.execute(env)
        return dict(zip(self.output_names, values, strict=True))

    def _check_feeds(self, feeds: Mapping[str, Any]) -> dict[str, Any]:
        unknown = [k for k in feeds if k not in self.inputs]
        if unknown:
            raise RuntimeModelError(f"unknown input {unknown[0]!r}; the model takes {self.input_names}")
        missing = [k for k in self.input_names if k not in feeds]
        if missing:
            raise RuntimeModelError(f"missing input {missing[0]!r}; the model takes {self.input_names}")
        env: dict[str, Any] = {}
        for name, value in feeds.items():
            decl = self.inputs[name]
            if decl.kind == "tensor":
                if not isinstance(value, np.ndarray):
                    value = np.asarray(value, dtype=decl.dtype)
                _check_tensor_feed(name, value, decl)
            env[name] = value
        return env


def _check_tensor_feed(name: str, value: np.ndarray, decl: Value) -> None:
    want = decl.dtype
    if want is not None:
        is_text = value.dtype == object or value.dtype.kind in "US"
        ok = is_text if want == np.dtype(object) else value.dtype == want
        if not ok:
            raise RuntimeModelError(f"input {name!r}: expected {elem_type_name(decl.elem_type)}, got {value.dtype}")
    if decl.shape is not None:
        if len(decl.shape) != value.ndim:
            raise RuntimeModelError(
                f"input {name!r}: expected rank {len(decl.shape)} {list(decl.shape)}, got shape {list(value.shape)}"
            )
        for want_dim, got in zip(decl.shape, value.shape, strict=True):
            if isinstance(want_dim, int) and want_dim != got:
                raise RuntimeModelError(f"input {name!r}: expected shape {list(decl.shape)}, got {list(value.shape)}")


def compile_model(
    model: ModelSource,
    threads: int | None = None,
    *,
    passes: Sequence[str] | None = None,
    disable: Sequence[str] = (),
    max_alloc_bytes: int | None = None,
    base_dir: str | None = None,
) -> Executable:
    """Load, check, optimise and prepare ``model`` (path, bytes or ``onnx.ModelProto``) for ``run``.

    Raises ``RuntimeModelError`` (``UnsupportedOpError``/``ModelCheckError``) before any kernel runs when the
    model is malformed, unsafe or uses an op with neither a kernel nor a function body.

    >>> exe = compile_model("model.onnx", threads=2)   # doctest: +SKIP
    >>> exe.run({"input": x})["output"].shape           # doctest: +SKIP
    """
    from runtime.artifact import is_artifact_dir, load_artifact

    if isinstance(model, str | os.PathLike) and is_artifact_dir(model):
        return load_artifact(model, threads=threads)
    options = CompileOptions(
        threads=threads,
        passes=passes,
        disable=tuple(disable),
        max_alloc_bytes=max_alloc_bytes if max_alloc_bytes is not None else DEFAULT_MAX_ALLOC_BYTES,
        base_dir=base_dir,
    )
    proto = load_model_proto(model, base_dir)
    return compile_proto(proto, options)


def _sort_proto_nodes(proto: onnx.ModelProto, order: list[int] | None) -> None:
    """Put the proto's nodes in topological order (onnx's checker rejects unsorted graphs)."""
    if order is None:
        return
    nodes = [onnx.NodeProto() for _ in order]
    for target, i in zip(nodes, order, strict=True):
        target.CopyFrom(proto.graph.node[i])
    del proto.graph.node[:]
    proto.graph.node.extend(nodes)


def compile_proto(proto: onnx.ModelProto, options: CompileOptions) -> Executable:
    """Compile an already loaded ModelProto (external data resolved)."""
    started = time.perf_counter()
    stats: dict[str, Any] = {}
    if not options.prechecked:
        proto = upgrade_old_opset(proto, stats)
    try:
        model = Model.from_onnx(proto)
    except RuntimeModelError:
        raise
    except Exception as exc:  # malformed attribute or tensor payloads
        raise ModelCheckError(f"cannot read the model: {type(exc).__name__}: {exc}") from None
    # Names and order first: cycles, dangling reads and double definitions get the clearest messages here.
    order = topological_order(model.graph)
    if not options.prechecked:
        position = {id(n): i for i, n in enumerate(model.graph.nodes)}
        indices = [position[id(n)] for n in order]
        _sort_proto_nodes(proto, indices if indices != sorted(indices) else None)
        model.graph.nodes = order
        validate_proto(proto)
        model.graph.apply_types(infer_model(proto, stats).graph)
    for name, opset in options.node_opsets.items():
        for node in model.graph.nodes:
            if node.name == name:
                node.opset = opset
    shared = _Shared(options, local_function_table(proto))
    expand_graph(model.graph, shared.functions, has_kernel, shared.expansion)
    _check_graph(model.graph, {}, options)

    from runtime.passes.pipeline import run_passes

    stats["passes"] = run_passes(model, options.passes, options.disable, options.max_alloc_bytes)
    order = topological_order(model.graph)
    plan = Plan(model.graph, shared, checked_order=order)
    stats.update(shared.expansion.as_dict())
    stats["nodes"] = len(plan.steps)
    stats["subgraphs_compiled"] = shared.subgraphs_compiled
    stats["compile_seconds"] = round(time.perf_counter() - started, 4)
    model.stats = stats
    return Executable(model, plan, options, stats)
