"""Where a model's time goes: per-node wall time of the compiled graph, summed over runs.

A ``Profile`` is switched on around some runs (``Executable.profiling()``); every step of the main graph then
records its wall time under the node's label (a node with a subgraph — If, Loop, Scan — counts the subgraph's time
as its own). Nodes are those of the *optimised* graph: fused operators such as ``com.appopt.FusedConv`` stand for
the original nodes they replaced. The per-call overhead of timing (two clock reads) is a few tenths of a
microsecond, small next to any kernel but visible on models whose nodes each take a microsecond.

Example::

    >>> with exe.profiling() as profile:          # doctest: +SKIP
    ...     for _ in range(10):
    ...         exe.run(feeds)
    >>> print("\\n".join(profile.lines(top=5)))     # doctest: +SKIP
"""

from __future__ import annotations

from dataclasses import dataclass, field

#: ``Profile.io_seconds`` keys.
STAGE_INPUTS = "inputs staged"
COPY_OUTPUTS = "outputs copied out"


@dataclass
class NodeTime:
    """Accumulated time of one node of the compiled graph."""

    label: str
    op_type: str
    calls: int = 0
    seconds: float = 0.0


@dataclass
class Profile:
    """Per-node times collected while profiling was on."""

    nodes: dict[str, NodeTime] = field(default_factory=dict)
    #: Runs of the whole model while profiling was on.
    runs: int = 0
    #: Wall time of those runs (the nodes' times plus the executor's own work between them).
    run_seconds: float = 0.0
    #: How deep in nested graphs execution is now: only the main graph's steps (depth 1) are recorded.
    depth: int = 0
    #: Seconds of a planned run's work outside the nodes: ``STAGE_INPUTS`` (the feeds copied into their fixed
    #: buffers) and ``COPY_OUTPUTS`` (outputs copied out of the reused ones). A whole model pays them once per run,
    #: a one-node model around its node.
    io_seconds: dict[str, float] = field(default_factory=dict)

    def add(self, label: str, op_type: str, seconds: float, calls: int = 1) -> None:
        """Record ``seconds`` of ``label``'s work (``calls=0``: more of a call already counted)."""
        entry = self.nodes.get(label)
        if entry is None:
            entry = self.nodes[label] = NodeTime(label, op_type)
        entry.calls += calls
        entry.seconds += seconds

    def add_io(self, what: str, seconds: float) -> None:
        self.io_seconds[what] = self.io_seconds.get(what, 0.0) + seconds

    @property
    def node_seconds(self) -> float:
        return sum(n.seconds for n in self.nodes.values())

    def by_op_type(self) -> list[NodeTime]:
        """Time summed per op type, largest first (``calls`` counts node executions)."""
        totals: dict[str, NodeTime] = {}
        for node in self.nodes.values():
            entry = totals.setdefault(node.op_type, NodeTime(node.op_type, node.op_type))
            entry.calls += node.calls
            entry.seconds += node.seconds
        return sorted(totals.values(), key=lambda n: -n.seconds)

    def slowest(self, top: int = 10) -> list[NodeTime]:
        return sorted(self.nodes.values(), key=lambda n: -n.seconds)[:top]

    def lines(self, top: int = 10) -> list[str]:
        """A printable summary: time per op type, then the ``top`` slowest nodes, per run."""
        runs = max(self.runs, 1)
        total = self.node_seconds
        out = [
            f"profile over {self.runs} run(s): {total / runs * 1e3:.3f} ms per run in {len(self.nodes)} nodes"
            + (f", {max(self.run_seconds - total, 0.0) / runs * 1e3:.3f} ms between them" if self.run_seconds else "")
        ]
        if self.io_seconds:
            edges = sorted(self.io_seconds.items())
            parts = ", ".join(f"{what} {seconds / runs * 1e3:.3f} ms" for what, seconds in edges)
            out.append(f"  of which copies at the graph's edges: {parts}")
        out.append(f"  {'op type':<28} {'ms/run':>9} {'share':>6} {'nodes':>6}")
        for entry in self.by_op_type():
            out.append(
                f"  {entry.op_type:<28} {entry.seconds / runs * 1e3:9.3f} {_share(entry.seconds, total):>6}"
                f" {entry.calls // runs:>6}"
            )
        out.append(f"  slowest nodes ({min(top, len(self.nodes))} of {len(self.nodes)}):")
        for entry in self.slowest(top):
            out.append(
                f"  {_short(entry.label):<40} {entry.op_type:<22} {entry.seconds / runs * 1e3:9.3f} ms"
                f" {_share(entry.seconds, total):>6}"
            )
        return out


def _share(part: float, total: float) -> str:
    return f"{part / total:.1%}" if total > 0 else "-"


def _short(text: str, width: int = 40) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"
