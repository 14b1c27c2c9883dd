"""The ordered pass list, derived from the passes themselves; any pass can be disabled by name.

Every pass takes ``(graph, ctx)``, rewrites the graph in place and returns how many rewrites it made. When a
guard is unsure (value read by a subgraph, graph output, overridable initializer...) a pass leaves the graph as is.

A pass is one module of this package that declares ``PASS = Pass(name, run, reason, after=..., before=...)``: the
reason says why it sits where it does and ``after``/``before`` are the orderings the reason states. The pipeline is
those passes in a topological order of the constraints (ties broken by name), then ``memory_plan``. Modules without
``PASS`` (``util``, ``amp``, ``memory_plan``...) are helpers. ``python -m runtime passes`` prints the order with
reasons.
"""

from __future__ import annotations

import functools
import heapq
import importlib
import pkgutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from runtime.check import topological_order
from runtime.errors import RuntimeModelError
from runtime.ir import Graph, Model
from runtime.passes.util import APPOPT_DOMAIN


@dataclass(frozen=True)
class PassContext:
    #: Constant folding keeps a result only up to this many bytes (or the size of its inputs), so a folded
    #: model does not balloon (e.g. ConstantOfShape weight generators stay nodes).
    fold_limit_bytes: int = 1 << 20
    #: Folded values read as weights may be this large (they are materialised at run time anyway).
    weight_limit_bytes: int = 1 << 31
    #: "auto": NHWC where the compiled kernels exist; "nhwc": always (tests); "nchw": never.
    layout: str = "auto"
    #: Let passes measure alternatives (runtime.tuning) when shapes are static.
    tune: bool = True


PassFn = Callable[[Graph, PassContext], int]


@dataclass(frozen=True)
class Pass:
    """A graph pass: its name, what it runs, why it sits where it does, and the passes it must follow/precede."""

    name: str
    run: PassFn
    reason: str
    after: tuple[str, ...] = ()
    before: tuple[str, ...] = ()


#: Not a graph pass: the executor plans static buffers once every shape is known. It is always last.
MEMORY_PLAN = Pass(
    "memory_plan",
    lambda graph, ctx: 0,
    "last, and run by the executor: static buffer reuse once every shape is known (no graph change, so it "
    "stays on with passes=[]; disable it by name)",
)


def _declared() -> dict[str, tuple[str, Pass]]:
    """Every ``PASS`` of this package's modules by pass name, with the module that declares it."""
    import runtime.passes as package

    found: dict[str, tuple[str, Pass]] = {}
    for info in pkgutil.iter_modules(package.__path__):
        module = f"{package.__name__}.{info.name}"
        declared = getattr(importlib.import_module(module), "PASS", None)
        if declared is None:
            continue
        if not isinstance(declared, Pass):
            raise RuntimeModelError(f"{module}.PASS is {declared!r}, not a runtime.passes.pipeline.Pass")
        if declared.name in found or declared.name == MEMORY_PLAN.name:
            raise RuntimeModelError(f"pass {declared.name!r} is declared twice (again by {module})")
        found[declared.name] = (module, declared)
    return found


def _ordered(declared: dict[str, tuple[str, Pass]]) -> list[Pass]:
    """The passes in an order that keeps every ``after``/``before``; of the passes free to run next, the first by
    name (so the order is the same on every machine)."""
    follows: dict[str, set[str]] = {name: set() for name in declared}  # the passes each one must come after
    for name, (module, p) in declared.items():
        for field_name, others in (("after", p.after), ("before", p.before)):
            unknown = [other for other in others if other not in declared]
            if unknown:
                raise RuntimeModelError(f"pass {name!r} ({module}): {field_name} names unknown pass {unknown[0]!r}")
        follows[name].update(p.after)
        for other in p.before:
            follows[other].add(name)
    waiting: dict[str, set[str]] = {name: set() for name in declared}  # the passes that wait on each one
    for name, firsts in follows.items():
        for first in firsts:
            waiting[first].add(name)
    blockers = {name: len(firsts) for name, firsts in follows.items()}
    free = [name for name, count in blockers.items() if count == 0]
    heapq.heapify(free)
    order: list[Pass] = []
    while free:
        name = heapq.heappop(free)
        order.append(declared[name][1])
        for later in waiting[name]:
            blockers[later] -= 1
            if blockers[later] == 0:
                heapq.heappush(free, later)
    if len(order) < len(declared):
        raise RuntimeModelError(_cycle({p.name for p in order}, follows))
    return order


def _cycle(placed: set[str], follows: dict[str, set[str]]) -> str:
    """The line for constraints that leave passes unplaced: one cycle among them, named from its first pass."""
    # every unplaced pass follows at least one other unplaced pass, so walking back from one meets a cycle
    name = min(n for n in follows if n not in placed)
    path: list[str] = []
    while name not in path:
        path.append(name)
        name = min(n for n in follows[name] if n not in placed)
    cycle = path[path.index(name):]
    return f"pass {cycle[0]!r}: after/before constraints form a cycle: {' after '.join([*cycle, cycle[0]])}"


@functools.cache
def ordered_passes() -> tuple[Pass, ...]:
    """The whole pipeline in running order (the package is scanned once; :func:`rescan` scans it again)."""
    return (*_ordered(_declared()), MEMORY_PLAN)


def rescan() -> None:
    """Scan the package again on next use (after a pass module was added while running, e.g. in a test)."""
    ordered_passes.cache_clear()


def describe() -> list[str]:
    """The pipeline as text: one line per pass, in running order, with its reason."""
    width = max(len(p.name) for p in ordered_passes())
    return [f"{i:2d}. {p.name:<{width}}  {p.reason}" for i, p in enumerate(ordered_passes(), 1)]


def __getattr__(name: str) -> tuple[Pass, ...]:
    """``PIPELINE``: the current :func:`ordered_passes` (derived on first use: pass modules import this one)."""
    if name == "PIPELINE":
        return ordered_passes()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


#: The pipeline repeats while it still changes something, at most this often.
MAX_ROUNDS = 3

#: Called as ``verifier(graph, pass_name)`` after every pass that changed something (tests install one).
verifier: Callable[[Graph, str], None] | None = None


def verify_graph(graph: Graph, after: str = "") -> None:
    """Structural checks a rewritten graph must pass: every read defined, one producer per value, no cycle,
    a kernel for every node, every graph output produced. Raises ``ModelCheckError`` naming the pass."""
    from runtime import kernels
    from runtime.errors import ModelCheckError

    try:
        order = topological_order(graph)
        for node in order:
            kernels.resolve(node.op_type, node.domain, node.opset or 10_000)
    except RuntimeModelError as exc:
        raise ModelCheckError(f"after pass {after!r}: {exc}") from None
    produced = {o for n in graph.nodes for o in n.outputs if o}
    known = produced | set(graph.initializers) | set(graph.input_names)
    missing = [o for o in graph.output_names if o not in known]
    if missing:
        raise ModelCheckError(f"after pass {after!r}: graph output {missing[0]!r} is no longer produced")


def pass_names() -> list[str]:
    return [p.name for p in ordered_passes()]


def run_passes(
    model: Model,
    names: Sequence[str] | None = None,
    disable: Sequence[str] = (),
    max_alloc_bytes: int | None = None,
    layout_mode: str = "auto",
    tune: bool = True,
) -> dict[str, int]:
    """Run the selected passes (default: all, in pipeline order) on ``model``; return rewrites per pass."""
    known = pass_names()
    for name in [*(names or ()), *disable]:
        if name not in known:
            raise RuntimeModelError(f"unknown pass {name!r}; known passes: {', '.join(known)}")
    wanted = set(names) if names is not None else set(known)
    selected = [p for p in ordered_passes() if p.name in wanted and p.name not in set(disable)]
    limit = 1 << 20
    if max_alloc_bytes is not None:
        limit = min(limit, max_alloc_bytes)
    weight_limit = max_alloc_bytes if max_alloc_bytes is not None else PassContext.weight_limit_bytes
    ctx = PassContext(fold_limit_bytes=limit, weight_limit_bytes=weight_limit, layout=layout_mode, tune=tune)
    counts = {p.name: 0 for p in selected}
    for _ in range(MAX_ROUNDS):
        changed = 0
        for p in selected:
            n = p.run(model.graph, ctx)
            if n:
                # rewrites may place a fused node before a producer it now reads: restore topological order,
                # which also verifies every read is still defined
                model.graph.nodes = topological_order(model.graph)
                if verifier is not None:
                    verifier(model.graph, p.name)
            counts[p.name] += n
            changed += n
        if not changed:
            break
    if APPOPT_DOMAIN in model.graph.opsets or any(n.domain == APPOPT_DOMAIN for n in model.graph.nodes):
        model.opsets.setdefault(APPOPT_DOMAIN, 1)
    return counts
