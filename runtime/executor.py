"""Compile a model into an executable plan and run it.

``compile_model`` = load -> (old opsets converted) -> (input shapes fixed, if asked) -> shape/dtype inference -> IR
-> function expansion -> static checks -> graph passes (``runtime/passes/pipeline.py``) -> kernels resolved and
built once, with their constant inputs handed to them (``prepare``: weight packing, per-shape algorithm choice).

``Executable.run`` walks the steps in topological order over a name -> value map and drops every value right after
its last reader. The first run for an input signature records every step's shapes; later runs with that signature
use a static plan (``runtime/passes/memory_plan.py``): intermediate tensors live in a few reused per-thread buffers
(in place where a kernel allows), graph inputs are staged into fixed buffers, and every step whose inputs then sit
at fixed addresses runs as a prebound compiled call, so the run loop is a short list of calls. A step meeting
shapes other than recorded (value-dependent shapes) makes the run start again unplanned. A view op (Reshape,
Squeeze...) is fixed once only when what shapes it is a constant: one shaped by a graph input's values runs every
time, since those values may change between runs of one input signature.

Threads: ``threads=N`` sizes the compiled kernels' pool (``runtime.native``; default every available CPU), whose
workers stay hot during a run, and caps the BLAS/OpenMP pools NumPy uses (to one thread when the pool exists, so the
two never compete) through threadpoolctl when it is importable, around each ``run`` so other code in the process
keeps its own setting. Without threadpoolctl the cap can only be set through ``OPENBLAS_NUM_THREADS``/
``OMP_NUM_THREADS`` before NumPy is imported; ``Executable.threads_applied`` says which happened ("not needed" when
no step can reach BLAS).

Example::

    exe = compile_model("model.onnx", threads=2)
    outputs = exe.run({"input": x})            # {output name: array}
"""

from __future__ import annotations

import contextlib
import os
import sys
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
    check_flag_attrs,
    check_initializer_types,
    check_kernels,
    check_node_types,
    check_reshapes,
    check_windows,
    topological_order,
)
from runtime.errors import KernelError, ModelCheckError, RuntimeModelError, UnsupportedOpError
from runtime.functions import ExpansionStats, FunctionKey, expand_graph, local_function_table
from runtime.ir import Graph, Model, Node, Value, elem_type_name, graph_free_names
from runtime.kernels.base import Kernel, NodeContext, SubgraphFn
from runtime.loader import ModelSource, load_model_proto, upgrade_old_opset, validate_proto
from runtime.op_traits import BLAS_OPS, SIZE_CREATING_OPS, VIEW_OPS
from runtime.profiling import COPY_OUTPUTS, STAGE_INPUTS, Profile
from runtime.shapes import estimate_output_elements, infer_model

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
        self._static: dict[tuple[Any, ...], _StaticPlan] | None = None
        self._unplannable: set[tuple[Any, ...]] = set()
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
            self._prepare(node, kernel)
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

    def _prepare(self, node: Node, kernel: Kernel) -> None:
        """Give kernels that want them their constant inputs (weights) once, at compile time."""
        prepare = getattr(kernel, "prepare", None)
        if prepare is None:
            return
        overridable = set(self.graph.input_names)
        constants = tuple(
            self.constants.get(name) if name and name not in overridable else None for name in node.inputs
        )
        shapes = tuple(self.visible[name].shape if name in self.visible else None for name in node.inputs)
        try:
            prepare(constants, shapes)
        except Exception:  # preparation is an optimisation: the kernel still works unprepared
            return

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
        """Run every step; ``env`` holds the inputs (and outer values) and is consumed (see ``_execute``)."""
        profile = self.shared.profile
        if profile is None:
            return self._execute(env)
        profile.depth += 1
        try:
            return self._execute(env)
        finally:
            profile.depth -= 1

    def _execute(self, env: dict[str, Any]) -> list[Any]:
        """Run every step; ``env`` holds the inputs (and outer values) and is consumed.

        With a memory plan enabled (``enable_static``), the first run for an input signature records the shapes,
        and later runs with that signature write into the planned per-thread buffers instead of allocating.
        """
        static = self._static
        if static is None:
            return self._execute_generic(env)
        signature = _signature(env, self.input_names)
        if signature is None:
            return self._execute_generic(env)
        compiled = static.get(signature)
        if compiled is None:
            if signature in self._unplannable or len(static) >= MAX_STATIC_PLANS:
                return self._execute_generic(env)
            record: list[tuple[Any, ...]] = []
            feeds = dict(env)
            outputs = self._execute_generic(env, record)
            static[signature] = _StaticPlan(self, record, feeds)
            return outputs
        feeds = dict(env)
        try:
            return compiled.execute(env)
        except _Replan:
            del static[signature]
            self._unplannable.add(signature)
            return self._execute_generic(feeds)

    @property
    def planned_bytes(self) -> int:
        """Bytes of the planned buffers (slots and staged inputs) of one thread, summed over input signatures."""
        if not self._static:
            return 0
        return sum(p.buffer_bytes for p in self._static.values())

    @property
    def may_use_blas(self) -> bool:
        """Whether a run may reach NumPy's BLAS: false only when every step of the current static plans is a
        prebound compiled call, a fixed view, or an op that never multiplies matrices."""
        if not self._static:
            return True
        return any(plan.may_use_blas for plan in self._static.values())

    def enable_static(self) -> None:
        """Plan buffers per input signature (the ``memory_plan`` pass)."""
        self._static = {}
        self._unplannable = set()

    def _execute_generic(self, env: dict[str, Any], record: list[tuple[Any, ...]] | None = None) -> list[Any]:
        for name, value in self.constants.items():
            env.setdefault(name, value)
        previous = getattr(self._local, "env", None)
        self._local.env = env
        limit = self.shared.options.max_alloc_bytes
        profile = _recording(self.shared)
        try:
            for step in self.steps:
                args = [env[name] if name else None for name in step.inputs]
                if step.guard_size:
                    _guard_size(step, args, limit)
                if profile is None:
                    results = step.kernel.run(*args)
                else:
                    started = time.perf_counter()
                    results = step.kernel.run(*args)
                    profile.add(step.node.name or step.node.label(), step.node.op_type, time.perf_counter() - started)
                outputs = step.outputs
                if len(results) < len(outputs) and any(outputs[len(results) :]):
                    raise KernelError(
                        f"{step.node.label()}: kernel returned {len(results)} outputs, {len(outputs)} expected"
                    )
                for name, value in zip(outputs, results, strict=False):
                    if name:
                        env[name] = np.asarray(value) if isinstance(value, np.generic) else value
                if record is not None:
                    record.append((tuple(_shape_of(a) for a in args), _meta(results[0] if results else None)))
                for name in step.free_after:
                    env.pop(name, None)
            return [env[name] for name in self.output_names]
        except KeyError as exc:
            raise KernelError(f"value {exc.args[0]!r} was not available when needed") from None
        finally:
            self._local.env = previous


def _recording(shared: _Shared) -> Profile | None:
    """The profile the current steps record into: only the main graph's (a subgraph's time is its node's)."""
    profile = shared.profile
    return profile if profile is not None and profile.depth == 1 else None


#: Input signatures (shape sets) a plan keeps static buffers for.
MAX_STATIC_PLANS = 4


class _Replan(Exception):
    """A planned step met inputs of other shapes than recorded (value-dependent shapes): run unplanned."""


def _shape_of(value: Any) -> tuple[int, ...] | None:
    return value.shape if isinstance(value, np.ndarray) else None


def _meta(value: Any) -> tuple[tuple[int, ...], np.dtype[Any]] | None:
    """Shape and dtype of a plannable result (a non-empty, non-object array)."""
    if isinstance(value, np.ndarray) and value.dtype != object and value.size > 0:
        return value.shape, value.dtype
    return None


def _signature(env: Mapping[str, Any], names: Sequence[str]) -> tuple[Any, ...] | None:
    sig = []
    for name in names:
        value = env.get(name)
        if not isinstance(value, np.ndarray):
            return None
        sig.append((value.shape, value.dtype.str))
    return tuple(sig)


class _StaticPlan:
    """One input signature's schedule with planned buffers (built from a recorded run).

    Graph inputs are copied into fixed buffers at the start of a run and outputs that live in planned buffers are
    copied out at the end, so every step whose kernel can bind runs as a prebound compiled call.
    """

    def __init__(self, plan: Plan, record: list[tuple[Any, ...]], inputs: Mapping[str, Any]) -> None:
        from runtime.passes.memory_plan import StepInfo, plan_buffers

        self.plan = plan
        #: Outputs of view ops -> their node: copying such an output out materialises the view (the op's work).
        self.view_nodes = {step.outputs[0]: step.node for step in plan.steps if step.outputs and _is_view_op(step.node)}
        #: Those whose step the run skips (a view fixed once): their node runs only when copied out.
        self.skipped_views: set[str] = set()
        infos = []
        self.arg_shapes: list[tuple[Any, ...]] = []
        self.out_meta: list[tuple[tuple[int, ...], np.dtype[Any]] | None] = []
        for step, (arg_shapes, first) in zip(plan.steps, record, strict=True):
            kernel = step.kernel
            into = hasattr(kernel, "compute_into") and len(step.outputs) == 1 and first is not None
            reads = tuple(_reads(step.node))
            inplace = tuple(_read_position(step.node, p) for p in getattr(kernel, "inplace_inputs", ()))
            infos.append(
                StepInfo(
                    reads=reads,
                    outputs=step.outputs,
                    writes_into=into,
                    fresh=bool(getattr(kernel, "fresh_output", False)),
                    inplace=tuple(p for p in inplace if p is not None),
                    out_nbytes=int(np.prod(first[0], dtype=np.int64)) * first[1].itemsize if into else None,
                )
            )
            self.arg_shapes.append(arg_shapes)
            self.out_meta.append(first if into else None)
        # outputs are read (copied out) after the last step
        infos.append(StepInfo(reads=tuple(plan.output_names), outputs=()))
        self.memory = plan_buffers(infos, set())
        self.planned = [self.memory.slot_of.get(step.outputs[0]) if step.outputs else None for step in plan.steps]
        #: Graph inputs staged into fixed buffers: name -> (shape, dtype) of this signature.
        self.staged = {
            name: (value.shape, value.dtype)
            for name, value in inputs.items()
            if name in plan.input_names and isinstance(value, np.ndarray) and value.dtype != object
        }
        self._local = threading.local()
        #: Refined when a thread builds its program (until then assume BLAS may be used).
        self.may_use_blas = True
        #: Bytes one thread's planned buffers take (slots plus staged inputs).
        self.buffer_bytes = self.memory.total_bytes + sum(
            int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize for shape, dtype in self.staged.values()
        )

    def _state(self) -> tuple[dict[str, Any], list[tuple[str, Any, _Step, Any]], list[np.ndarray]]:
        """This thread's environment template, program and buffers (built once per thread)."""
        state = getattr(self._local, "state", None)
        if state is None:
            state = self._build_state()
            self._local.state = state
        return state

    def _build_state(self) -> tuple[dict[str, Any], list[tuple[str, Any, _Step, Any]], list[np.ndarray]]:
        """Allocate (and touch) the slots and input buffers, then decide per step how it runs:

        ``bound``: a prebound compiled call (every input lives at a fixed address: a constant, a staged input, a
        planned buffer or a fixed view of one); ``into``: the kernel writes into its planned buffer; ``skip``: a
        view op whose result is a fixed view computed here once; ``run``: the ordinary kernel call.
        """
        plan = self.plan
        slots = [np.zeros(n, dtype=np.uint8) for n in self.memory.slot_bytes]
        staged = {name: np.zeros(shape, dtype=dtype) for name, (shape, dtype) in self.staged.items()}
        overridable = set(plan.input_names)
        stable: dict[str, Any] = {k: v for k, v in plan.constants.items() if k not in overridable}
        stable.update(staged)
        program: list[tuple[str, Any]] = []
        for step, slot, meta in zip(plan.steps, self.planned, self.out_meta, strict=True):
            inputs_stable = all(not name or name in stable for name in step.inputs)
            args = [stable.get(name) if name else None for name in step.inputs]
            if slot is not None and meta is not None:
                shape, dtype = meta
                out = np.ndarray(shape, dtype=dtype, buffer=slots[slot])
                bound = None
                bind = getattr(step.kernel, "bind", None)
                if inputs_stable and bind is not None:
                    try:
                        bound = bind(out, *args)
                    except Exception:  # binding is an optimisation; the step still runs unbound
                        bound = None
                stable[step.outputs[0]] = out
                program.append(("bound", bound) if bound is not None else ("into", out))
                continue
            # a view is fixed only when what shapes it (Reshape's shape, Squeeze's axes...) is a constant: one read
            # from a graph input changes from run to run while the staged buffer it would be computed from does not
            shaped_by_constants = all(
                not name or (name in plan.constants and name not in overridable) for name in step.inputs[1:]
            )
            if inputs_stable and shaped_by_constants and _is_view_op(step.node) and len(step.outputs) == 1:
                try:
                    view = step.kernel.run(*args)[0]
                except Exception:
                    view = None
                if isinstance(view, np.ndarray) and isinstance(args[0], np.ndarray) and np.shares_memory(view, args[0]):
                    stable[step.outputs[0]] = view
                    self.skipped_views.add(step.outputs[0])
                    program.append(("skip", None))
                    continue
            program.append(("run", None))
        env = dict(plan.constants)
        env.update(stable)
        buffers = slots + list(staged.values())
        self.may_use_blas = any(
            kind != "bound" and kind != "skip" and step.node.op_type in BLAS_OPS
            for (kind, _), step in zip(program, plan.steps, strict=True)
        )
        # the run loop walks only the steps that do something, with what they need bound up front
        compact = [
            (kind, payload, step, self.arg_shapes[i])
            for i, ((kind, payload), step) in enumerate(zip(program, plan.steps, strict=True))
            if kind != "skip"
        ]
        return env, compact, buffers

    def execute(self, env: dict[str, Any]) -> list[Any]:
        plan = self.plan
        template, program, buffers = self._state()
        feeds = env
        env = template.copy()
        staged = self.staged
        profile = _recording(plan.shared)
        started = time.perf_counter() if profile is not None else 0.0
        for name, value in feeds.items():
            if name in staged:
                np.copyto(env[name], value)
            else:
                env[name] = value
        if profile is not None and staged:
            profile.add_io(STAGE_INPUTS, time.perf_counter() - started)
        previous = getattr(plan._local, "env", None)
        plan._local.env = env
        limit = plan.shared.options.max_alloc_bytes
        try:
            for kind, payload, step, arg_shapes in program:
                started = time.perf_counter() if profile is not None else 0.0
                if kind == "bound":
                    payload()
                elif kind == "into":
                    args = [env[name] if name else None for name in step.inputs]
                    for a, shape in zip(args, arg_shapes, strict=True):
                        if shape is not None and (not isinstance(a, np.ndarray) or a.shape != shape):
                            raise _Replan
                    _compute_into(step, payload, args)
                else:
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
                if profile is not None:
                    profile.add(step.node.name or step.node.label(), step.node.op_type, time.perf_counter() - started)
            if profile is None:
                return [_detach(env[name], buffers) for name in plan.output_names]
            return self._copy_out_profiled(env, buffers, profile)
        except KeyError as exc:
            raise KernelError(f"value {exc.args[0]!r} was not available when needed") from None
        finally:
            plan._local.env = previous

    def _copy_out_profiled(self, env: dict[str, Any], buffers: Sequence[np.ndarray], profile: Profile) -> list[Any]:
        """``_detach`` every output, timing each copy: a view op's output is materialised here (its node's time),
        any other output living in a planned buffer is copied out (``COPY_OUTPUTS``)."""
        values = []
        for name in self.plan.output_names:
            started = time.perf_counter()
            value = env[name]
            detached = _detach(value, buffers)
            values.append(detached)
            if detached is value:
                continue
            seconds = time.perf_counter() - started
            node = self.view_nodes.get(name)
            if node is None:
                profile.add_io(COPY_OUTPUTS, seconds)
            else:
                profile.add(node.name or node.label(), node.op_type, seconds, calls=int(name in self.skipped_views))
        return values


def _is_view_op(node: Node) -> bool:
    return node.op_type in VIEW_OPS and not node.domain


def _detach(value: Any, buffers: Sequence[np.ndarray]) -> Any:
    """A copy of an output that lives in (or views) this thread's reusable buffers; the value itself otherwise."""
    if isinstance(value, np.ndarray) and any(np.may_share_memory(value, b) for b in buffers):
        return value.copy()
    return value


def _compute_into(step: _Step, out: np.ndarray, args: list[Any]) -> None:
    try:
        result = step.kernel.compute_into(out, *args)  # type: ignore[attr-defined]
        if result is not None and result is not out:
            np.copyto(out, result)
    except (KernelError, _Replan):
        raise
    except Exception as exc:
        node = step.node
        raise KernelError(f"node {node.name!r} ({node.op_type}): {type(exc).__name__}: {exc}") from exc


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


# -- threads ---------------------------------------------------------------------------------------------------
_CONTROLLER: Any = None
_CONTROLLER_LOCK = threading.Lock()


_CONTROLLER_MODULES = -1


def _threadpool_controller() -> Any:
    """threadpoolctl's view of the loaded BLAS/OpenMP libraries, rescanned when new Python modules were imported
    since the last look (that is how a new native library, e.g. torch's OpenMP, usually arrives)."""
    global _CONTROLLER, _CONTROLLER_MODULES
    with _CONTROLLER_LOCK:
        if _CONTROLLER is False:
            return _CONTROLLER
        if _CONTROLLER is None or len(sys.modules) != _CONTROLLER_MODULES:
            try:
                from threadpoolctl import ThreadpoolController
            except ImportError:
                _CONTROLLER = False
            else:
                _CONTROLLER = ThreadpoolController()
                _CONTROLLER_MODULES = len(sys.modules)
    return _CONTROLLER


def available_cpus() -> int:
    """CPUs this process may run on (its affinity mask where the OS has one)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


@contextlib.contextmanager
def native_threads(threads: int | None, hold: bool = False) -> Iterator[bool]:
    """Threads of the compiled kernels' pool for the duration of the block (default: every available CPU);
    ``hold`` keeps its workers spinning between operations (a model run). Yields whether the pool exists."""
    from runtime import native

    lib = native.lib()
    if lib is None:
        yield False
        return
    wanted = threads or available_cpus()
    if hold:
        previous = lib.run_begin(wanted)
        try:
            yield True
        finally:
            lib.run_end(previous)
        return
    previous = native.get_threads()
    native.set_threads(wanted)
    try:
        yield True
    finally:
        native.set_threads(previous)


def _blas_controllers() -> list[Any]:
    """threadpoolctl's per-library controllers (empty without threadpoolctl)."""
    controller = _threadpool_controller()
    return list(getattr(controller, "lib_controllers", [])) if controller else []


@contextlib.contextmanager
def limit_threads(threads: int | None, blas: bool = True) -> Iterator[str]:
    """Set the compiled kernels' pool size and cap BLAS/OpenMP threads for the duration of a run; yields how the
    cap was applied. With the compiled kernels present, BLAS runs single-threaded: the pool does the parallel
    work, and two thread pools spinning on the same cores slow each other down. ``blas=False`` (no step of the
    run can reach a BLAS library) skips the cap and its cost."""
    with native_threads(threads, hold=True) as pooled:
        if not blas:
            yield "not needed"
            return
        blas_threads = 1 if pooled else threads
        if not blas_threads:
            yield "unlimited"
            return
        libs = _blas_controllers()
        if libs:
            changed = []
            try:
                for lc in libs:
                    current = lc.get_num_threads()
                    if current != blas_threads:
                        lc.set_num_threads(blas_threads)
                        changed.append((lc, current))
                yield "threadpoolctl"
            finally:
                for lc, current in changed:
                    lc.set_num_threads(current)
            return
        yield "environment" if os.environ.get("OMP_NUM_THREADS") == str(blas_threads) else "not applied"


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
        """Run once. Tensors are NumPy arrays (strings: dtype=object), sequences lists, empty optionals None.

        Failures are ``RuntimeModelError``s (kernel errors name their node); anything else the executor meets is
        reported as an internal error, with the original as its cause."""
        try:
            return self._profiled_run(feeds)
        except RuntimeModelError:
            raise
        except (MemoryError, RecursionError, ValueError, TypeError, KeyError, IndexError, AttributeError,
                ArithmeticError, AssertionError, RuntimeError, OSError, NotImplementedError) as exc:  # fmt: skip
            raise KernelError(f"internal error while running the model: {type(exc).__name__}: {exc}") from exc

    def _profiled_run(self, feeds: Mapping[str, Any]) -> dict[str, Any]:
        profile = self.plan.shared.profile
        if profile is None:
            return self._run(feeds)
        started = time.perf_counter()
        try:
            return self._run(feeds)
        finally:
            profile.runs += 1
            profile.run_seconds += time.perf_counter() - started

    def _run(self, feeds: Mapping[str, Any]) -> dict[str, Any]:
        env = self._check_feeds(feeds)
        plan = self.plan
        if not plan.may_use_blas:
            # the common planned case: only the compiled kernels' pool to set, two foreign calls
            from runtime import native

            lib = native.lib()
            if lib is not None:
                previous = lib.run_begin(self.threads or available_cpus())
                try:
                    values = plan.execute(env)
                finally:
                    lib.run_end(previous)
                self.threads_applied = "not needed"
                return dict(zip(self.output_names, values, strict=True))
        with limit_threads(self.threads, blas=plan.may_use_blas) as how:
            self.threads_applied = how
            values = plan.execute(env)
        return dict(zip(self.output_names, values, strict=True))

    @contextlib.contextmanager
    def profiling(self) -> Iterator[Profile]:
        """Record per-node times of the runs made inside the ``with`` block (one caller thread at a time)."""
        shared = self.plan.shared
        previous, shared.profile = shared.profile, Profile()
        try:
            yield shared.profile
        finally:
            shared.profile = previous

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
    layout: str = "auto",
    tune: bool | None = None,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
) -> Executable:
    """Load, check, optimise and prepare ``model`` (path, bytes or ``onnx.ModelProto``) for ``run``.

    ``layout`` picks the convolution layout ("auto": NHWC where the compiled kernels exist), ``tune`` allows
    measuring algorithm alternatives (default: ``APPOPT_TUNING``), ``input_shapes`` fixes input shapes so every
    shape in the graph becomes static (the model then only accepts those shapes).

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
        layout=layout,
        tune=tune,
        input_shapes=input_shapes,
    )
    if layout not in ("auto", "nhwc", "nchw"):
        raise RuntimeModelError(f"layout must be 'auto', 'nhwc' or 'nchw', not {layout!r}")
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


def specialise_input_shapes(proto: onnx.ModelProto, shapes: Mapping[str, Sequence[int]]) -> onnx.ModelProto:
    """A copy of ``proto`` whose named inputs have the given fixed shapes (shape inference then propagates them)."""
    proto = _copy(proto)
    by_name = {vi.name: vi for vi in proto.graph.input}
    for name, dims in shapes.items():
        vi = by_name.get(name)
        if vi is None:
            raise RuntimeModelError(f"input_shapes: the model has no input {name!r}; inputs: {list(by_name)}")
        if not vi.type.HasField("tensor_type"):
            raise RuntimeModelError(f"input_shapes: input {name!r} is not a tensor")
        shape = vi.type.tensor_type.shape
        if len(shape.dim) and len(shape.dim) != len(dims):
            raise RuntimeModelError(f"input_shapes: input {name!r} has rank {len(shape.dim)}, got {list(dims)}")
        for i, d in enumerate(dims):
            if i < len(shape.dim) and shape.dim[i].HasField("dim_value") and shape.dim[i].dim_value != int(d):
                raise RuntimeModelError(
                    f"input_shapes: input {name!r} dim {i} is fixed at {shape.dim[i].dim_value}, got {int(d)}"
                )
        shape.ClearField("dim")
        for d in dims:
            shape.dim.add().dim_value = int(d)
    return proto


def _copy(proto: onnx.ModelProto) -> onnx.ModelProto:
    out = onnx.ModelProto()
    out.CopyFrom(proto)
    return out


def compile_proto(proto: onnx.ModelProto, options: CompileOptions) -> Executable:
    """Compile an already loaded ModelProto (external data resolved).

    Whatever goes wrong ends in a ``RuntimeModelError``: a failure no check foresaw (a pass or kernel meeting a
    model it does not expect) is reported as an internal error, one line, with the original as its cause.
    """
    try:
        return _compile_proto(proto, options)
    except RuntimeModelError:
        raise
    except (MemoryError, RecursionError, ValueError, TypeError, KeyError, IndexError, AttributeError,
            ArithmeticError, AssertionError, RuntimeError, OSError, NotImplementedError) as exc:  # fmt: skip
        raise ModelCheckError(f"internal error while compiling the model: {type(exc).__name__}: {exc}") from exc


def _compile_proto(proto: onnx.ModelProto, options: CompileOptions) -> Executable:
    started = time.perf_counter()
    stats: dict[str, Any] = {}
    if not options.prechecked:
        proto = upgrade_old_opset(proto, stats)
    if options.input_shapes:
        proto = specialise_input_shapes(proto, options.input_shapes)
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

    from runtime import tuning
    from runtime.passes.pipeline import run_passes

    tune = options.tune if options.tune is not None else tuning.mode() != "off"
    # tuning inside the passes and kernel preparation must measure under the threading a run uses
    with limit_threads(options.threads):
        stats["passes"] = run_passes(
            model, options.passes, options.disable, options.max_alloc_bytes, options.layout, tune
        )
        order = topological_order(model.graph)
        plan = Plan(model.graph, shared, checked_order=order)
    # the memory plan rewrites nothing, so ``passes=[]`` (e.g. a compiled artifact's fast load) keeps it; it is
    # switched off by name only
    if "memory_plan" not in options.disable:
        plan.enable_static()
    stats.update(shared.expansion.as_dict())
    stats["nodes"] = len(plan.steps)
    stats["subgraphs_compiled"] = shared.subgraphs_compiled
    stats["compile_seconds"] = round(time.perf_counter() - started, 4)
    model.stats = stats
    return Executable(model, plan, options, stats)
