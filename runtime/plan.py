"""The interpreter: one graph with its kernels built, walked in topological order over a name -> value map.

``Plan.run`` drops every value right after its last reader. The first run for an input signature records every
step's shapes; later runs with that signature use a static plan (``runtime.static_plan``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from typing import Any

import numpy as np
import onnx

from runtime.errors import KernelError, ModelCheckError, RuntimeModelError
from runtime.functions import expand_graph
from runtime.ir import Graph, Node, Value
from runtime.kernels.base import Kernel, SubgraphFn
from runtime.op_traits import SIZE_CREATING_OPS
from runtime.static_plan import MAX_STATIC_PLANS, _meta, _Replan, _shape_of, _signature, _StaticPlan
from runtime.steps import (
    _check_graph,
    _guard_size,
    _reads,
    _recording,
    _Shared,
    _Step,
    has_kernel,
    node_context,
    resolve_kernel,
    store_results,
)


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
        ctx = node_context(node, self.compile_subgraph)
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

    def staged_buffers(self, env: Mapping[str, Any]) -> dict[str, np.ndarray]:
        """This thread's staged-input buffers of the static plan for ``env``'s input signature ({} if none)."""
        signature = _signature(env, self.input_names)
        compiled = self._static.get(signature) if self._static and signature is not None else None
        return {} if compiled is None else compiled.staged_buffers()

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
                store_results(step, results, env)
                if record is not None:
                    record.append((tuple(_shape_of(a) for a in args), _meta(results[0] if results else None)))
                for name in step.free_after:
                    env.pop(name, None)
            return [env[name] for name in self.output_names]
        except KeyError as exc:
            raise KernelError(f"value {exc.args[0]!r} was not available when needed") from None
        finally:
            self._local.env = previous
