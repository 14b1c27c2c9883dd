"""A graph compiler's kernel-unit sum as its compiled graph pays it: compute kept, memory-bound kernels mostly fused.

A unit swept alone on a graph compiler (OpenVINO) is a one-kernel model: it pays the kernel and, for a memory-bound
kernel, mostly the engine's fixed cost of running a tiny graph. In a whole compiled graph the compiler fuses
element-wise kernels into their producers and writes concatenations in place, so summing the units overstates
models made of many such kernels: OpenVINO's unit sum was 2.8x DenseNet-121's measured time at 2 threads (58
concatenations, 62 element-wise units) and 2.1x BERT's, while it was within 10% on ResNets (docs/decisions.md,
2026-11-26).

So for a compiler's route the unit sum is split into its compute kernels (``COMPUTE_KINDS``) and the rest, and the
route's measured whole models fit how much of each the graph pays, plus a fixed cost per kernel::

    t = call + a·Σ compute units + b·Σ memory-bound units + c·kernels        (a, b, c ≥ 0)

by non-negative least squares on relative errors over the route's whole-model rows (``fit_in_graph``). On the
shipped OpenVINO rows ``a`` ≈ 0.8-1.0, ``b`` ≈ 0-0.17 and ``c`` ≈ 7-9 µs per kernel. Plain framework routes keep
their plain unit sums: an eager framework runs the kernels it was swept with.

Example::

    >>> scale = fit_in_graph(key, parts, seconds, families)                 # doctest: +SKIP
    >>> scale.seconds(unit_parts(route, units, batch=1))                     # doctest: +SKIP
    0.0231
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from analysis.units import Unit, decode_units
from perfmodels.fit import MIN_GROUP_FAMILIES, MIN_GROUP_ROWS, nnls
from perfmodels.unitfit import Key, UnitFit, UnitRoute

if TYPE_CHECKING:
    import pandas as pd

_GROUP = ["target", "framework", "compiler", "layout", "precision", "threads"]

#: Unit kinds a compiler runs as kernels of their own (convolutions and matrix products, with what they fuse); the
#: other kinds (element-wise, data movement, pooling, normalisation, softmax) are memory-bound and the ones it fuses.
COMPUTE_KINDS = frozenset({"conv", "dwconv", "dwpw", "gemm", "bmm", "recurrent"})
#: The per-kernel cost's unit in the fit (s): keeps the three columns of one order of magnitude.
_KERNEL_SCALE = 1e-5


@dataclass(frozen=True)
class UnitParts:
    """A model's unit sum on one route, split: the route's call, its compute units, its memory-bound units (s), and
    how many kernels (units, with their counts) it has."""

    call: float
    compute: float
    memory: float
    kernels: float

    @property
    def total(self) -> float:
        """The plain unit sum (``UnitFit.seconds``)."""
        return self.call + self.compute + self.memory


def unit_parts(route: UnitRoute, units: Sequence[Unit], batch: int) -> UnitParts | None:
    """``units``' time on ``route`` split into ``UnitParts`` (None when the route has not learned a kind they use,
    or for no units)."""
    if not units:
        return None
    times = route.unit_seconds(units, batch) * np.array([u.count for u in units], dtype=float)
    if np.isnan(times).any():
        return None
    compute = np.array([u.kind in COMPUTE_KINDS for u in units])
    return UnitParts(
        call=route.call_s,
        compute=float(times[compute].sum()),
        memory=float(times[~compute].sum()),
        kernels=float(sum(u.count for u in units if u.kind != "noop")),
    )


@dataclass(frozen=True)
class InGraph:
    """One compiler route's fitted share of its compute and memory-bound unit times and its cost per kernel."""

    key: Key
    compute: float
    memory: float
    #: Seconds per kernel of the compiled graph.
    kernel_s: float
    rows: int
    families: tuple[str, ...]
    #: Root-mean-square relative error on the rows it was fitted on.
    train_rmspe: float = math.nan

    def seconds(self, parts: UnitParts) -> float:
        """The compiled graph's time for a model of these unit ``parts``."""
        return parts.call + self.compute * parts.compute + self.memory * parts.memory + self.kernel_s * parts.kernels

    @property
    def usable(self) -> bool:
        """Fitted on as many rows and families as a whole-model group needs (``fit.MIN_GROUP_ROWS``)."""
        return self.rows >= MIN_GROUP_ROWS and len(self.families) >= MIN_GROUP_FAMILIES

    def describe(self) -> str:
        target, framework, compiler, layout, precision, threads = self.key
        return (
            f"{target} {framework}/{compiler}/{layout}/{precision} {threads}t: in the graph {self.compute:.2f}x its"
            f" compute units + {self.memory:.2f}x its memory-bound units + {self.kernel_s * 1e6:.1f} us/kernel"
            f" ({self.rows} rows of {len(self.families)} families, train RMSPE {self.train_rmspe:.0%})"
            + ("" if self.usable else " (too little data: not used)")
        )


def fit_in_graph(key: Key, parts: Sequence[UnitParts], seconds: Sequence[float], families: Sequence[str]) -> InGraph:
    """The ``InGraph`` of one route from its models' unit ``parts`` and measured ``seconds``: minimises
    Σ (t̂/t − 1)² with the three shares non-negative."""
    y = np.asarray(seconds, dtype=float)
    a = np.array([[p.compute, p.memory, p.kernels * _KERNEL_SCALE] for p in parts], dtype=float) / y[:, None]
    b = 1.0 - np.array([p.call for p in parts], dtype=float) / y
    w = nnls(a, b) if len(y) else np.zeros(3)
    scale = InGraph(key, float(w[0]), float(w[1]), float(w[2]) * _KERNEL_SCALE, len(y), tuple(sorted(set(families))))
    fitted = np.array([scale.seconds(p) for p in parts])
    rmspe = float(np.sqrt(np.mean((fitted / y - 1) ** 2))) if len(y) else math.nan
    return InGraph(scale.key, scale.compute, scale.memory, scale.kernel_s, scale.rows, scale.families, rmspe)


def as_compiled(timed: Sequence[tuple[Unit, float]], scale: InGraph) -> list[tuple[Unit, float]]:
    """``timed`` (the route's call first, then each unit with its swept seconds: ``calibration.timed_units``)
    weighted as ``scale``'s compiled graph pays them: compute units by its compute share, memory-bound ones by its
    memory share, and the per-kernel cost added to the call's (a fixed cost per launch, as a call is)."""
    if not timed:
        return []
    (call, call_s), units = timed[0], timed[1:]
    kernels = sum(u.count for u, _ in units if u.kind != "noop")
    return [
        (call, call_s + scale.kernel_s * kernels),
        *((u, t * (scale.compute if u.kind in COMPUTE_KINDS else scale.memory)) for u, t in units),
    ]


def applies(key: Key) -> bool:
    """Whether a route's unit sums are taken as a compiled graph pays them: graph compilers' fp32 routes."""
    return key[2] not in ("none", "") and key[4] == "fp32"


def row_parts(unit_fit: UnitFit | None, row: pd.Series) -> UnitParts | None:
    """A ``perfmodels.fit.training_rows`` row's ``UnitParts`` on its own route (None without units or a sweep)."""
    if unit_fit is None or not row.get("units"):
        return None
    key = tuple(row[k] for k in _GROUP)
    route = unit_fit.route(key)
    return None if route is None else unit_parts(route, decode_units(row["units"]), int(row["batch"]))


def fit_in_graphs(rows: pd.DataFrame, parts_of: Callable[[object], UnitParts | None]) -> dict[Key, InGraph]:
    """An ``InGraph`` for every route of ``rows`` (``training_rows``) that ``applies`` and whose rows have unit
    parts (``parts_of`` a row's index)."""
    if rows.empty:
        return {}
    compiled = rows[[applies(tuple(k)) for k in rows[_GROUP].itertuples(index=False)]]
    out: dict[Key, InGraph] = {}
    for key, group in compiled.groupby(_GROUP, sort=True):
        found = [
            (parts_of(i), float(y), str(f)) for i, y, f in zip(group.index, group["y"], group["family"], strict=True)
        ]
        kept = [(p, y, f) for p, y, f in found if p is not None]
        if kept:
            route_key: Key = (*(str(k) for k in key[:5]), int(key[5]))  # type: ignore[assignment]
            out[route_key] = fit_in_graph(
                route_key, [p for p, _, _ in kept], [y for _, y, _ in kept], [f for _, _, f in kept]
            )
    return out
