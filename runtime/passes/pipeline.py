"""The ordered pass list. Each entry says why it sits where it does; any pass can be disabled by name.

Every pass takes ``(graph, ctx)``, rewrites the graph in place and returns how many rewrites it made. When a
guard is unsure (value read by a subgraph, graph output, overridable initializer...) a pass leaves the graph as is.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from runtime.errors import RuntimeModelError
from runtime.ir import Graph, Model
from runtime.passes import constant_folding, dead_nodes, identity_elimination


@dataclass(frozen=True)
class PassContext:
    #: Constant folding keeps a result only up to this many bytes (or the size of its inputs), so a folded
    #: model does not balloon (e.g. ConstantOfShape weight generators stay nodes).
    fold_limit_bytes: int = 1 << 20


PassFn = Callable[[Graph, PassContext], int]


@dataclass(frozen=True)
class Pass:
    name: str
    run: PassFn
    reason: str


PIPELINE: tuple[Pass, ...] = (
    Pass(
        "identity_elimination",
        identity_elimination.run,
        "first: cheapest rewrite, and later passes then see producers and consumers directly connected",
    ),
    Pass(
        "constant_folding",
        constant_folding.run,
        "after identities are gone, so chains of constant ops fold in one sweep; turns Constant nodes into "
        "initializers",
    ),
    Pass(
        "dead_node_elimination",
        dead_nodes.run,
        "last: removes what the earlier passes orphaned (folded producers, unused initializers)",
    ),
)

#: The pipeline repeats while it still changes something, at most this often.
MAX_ROUNDS = 3


def pass_names() -> list[str]:
    return [p.name for p in PIPELINE]


def run_passes(
    model: Model,
    names: Sequence[str] | None = None,
    disable: Sequence[str] = (),
    max_alloc_bytes: int | None = None,
) -> dict[str, int]:
    """Run the selected passes (default: all, in pipeline order) on ``model``; return rewrites per pass."""
    known = pass_names()
    for name in [*(names or ()), *disable]:
        if name not in known:
            raise RuntimeModelError(f"unknown pass {name!r}; known passes: {', '.join(known)}")
    wanted = set(names) if names is not None else set(known)
    selected = [p for p in PIPELINE if p.name in wanted and p.name not in set(disable)]
    limit = 1 << 20
    if max_alloc_bytes is not None:
        limit = min(limit, max_alloc_bytes)
    ctx = PassContext(fold_limit_bytes=limit)
    counts = {p.name: 0 for p in selected}
    for _ in range(MAX_ROUNDS):
        changed = 0
        for p in selected:
            n = p.run(model.graph, ctx)
            counts[p.name] += n
            changed += n
        if not changed:
            break
    return counts
