"""``appopt calibrate``'s measurements: hardware probes, then a few-shot covering set of kernel units per backend,
within a time budget, appended to the host store.

The units are the unit sweep's own samples (``benchmarks.unit_sweep``, seed 0, first round), so a calibrated unit
is one the shipped database measured on its host too, and the ratio of the two times says how this host differs.
The covering set is deterministic: per kind, the units of smallest, middle and largest FLOPs, ordered so that a
budget cut keeps every kind (each kind's middle unit first, then the small ones, then the large), and the no-op
chains (each engine's per-call and per-node overhead) before everything else.

Example::

    >>> [u.kind for u in covering_units()][:3]    # doctest: +SKIP
    ['noop', 'noop', 'conv']
"""

from __future__ import annotations

import time
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass
from pathlib import Path

from analysis.units import Unit, encode_units, unit_flops
from benchmarks.kernels import (
    HardwareFigures,
    KernelOutcome,
    measure_bandwidth,
    measure_gemm_peak,
    measure_hardware,
    run_kernel_suite,
)
from benchmarks.unit_sweep import SWEEP_ROUNDS, sample_units, sweep_settings, unit_kernels

#: Backends calibrated by default (the planner's CPU routes); ``--backends`` picks others.
CALIBRATE_BACKENDS = ("onnxruntime", "onnxruntime-extended", "appopt-runtime")
#: Below this budget nothing useful can be measured (the probes alone take a few seconds on 2 cores).
MIN_BUDGET_S = 10.0
#: Samples per kind the covering set chooses from (the sweep's first ``POOL_PER_KIND`` of each kind).
POOL_PER_KIND = 6


def covering_units(per_kind: int = 3) -> list[Unit]:
    """The sweep units to calibrate with, most informative first (see the module docstring)."""
    pool = sample_units(POOL_PER_KIND)
    noops = [u for u in pool if u.kind == "noop"]
    ranked: list[list[Unit]] = []
    for kind in (k for k in SWEEP_ROUNDS[0] if k != "noop"):
        units = sorted((u for u in pool if u.kind == kind), key=unit_flops)
        if not units:
            continue
        picks = [units[len(units) // 2], units[0], units[-1]]
        chosen: list[Unit] = []
        for unit in picks:
            if unit not in chosen:
                chosen.append(unit)
        ranked.append(chosen[:per_kind])
    ordered = [kind_units[rank] for rank in range(per_kind) for kind_units in ranked if rank < len(kind_units)]
    return noops + ordered


@dataclass(frozen=True)
class Probes:
    """This host's hardware figures, measured before the units."""

    gemm_gflops: dict[int, float]
    bandwidth_gbs: float

    def line(self) -> str:
        peaks = ", ".join(f"{t}t {g:.0f}" for t, g in sorted(self.gemm_gflops.items()))
        return f"GEMM peak GFLOP/s: {peaks}; memory bandwidth {self.bandwidth_gbs:.1f} GB/s"


def measure_probes(threads: int) -> Probes:
    """GEMM peak per thread count (1..threads) and memory bandwidth."""
    return Probes({t: measure_gemm_peak(t) for t in range(1, threads + 1)}, measure_bandwidth() / 1e9)  # GFLOP/s, GB/s


def units_left(backends: tuple[str, ...], already: set[tuple[str, str]]) -> int:
    """How many (backend, unit) pairs of the covering set the store does not hold yet."""
    return sum((backend, encode_units([u])) not in already for backend in backends for u in covering_units())


def calibrate(
    db: Path,
    budget_s: float,
    backends: tuple[str, ...] = CALIBRATE_BACKENDS,
    threads: int = 1,
    already: set[tuple[str, str]] | None = None,
    step: Callable[[str], None] = lambda _: None,
    units: list[Unit] | None = None,
) -> Iterator[KernelOutcome]:
    """Measure the covering units (or ``units``) on each backend at ``threads`` until ``budget_s`` runs out,
    appending rows to ``db``; ``already`` holds (backend, encoded unit) pairs the store has, which are skipped (a
    resumed run)."""
    deadline = time.monotonic() + budget_s
    units = covering_units() if units is None else units
    done = already or set()
    hardware: HardwareFigures | None = None  # measured once, for every backend's rows
    for index, backend in enumerate(backends):
        todo = [u for u in units if (backend, encode_units([u])) not in done]
        if not todo:
            continue
        if time.monotonic() >= deadline:
            break
        hardware = hardware or measure_hardware([threads])
        # the later backends' shares stay reserved; one that finishes early leaves its time to the next
        share = (deadline - time.monotonic()) / (len(backends) - index)
        own_deadline = deadline - share * (len(backends) - index - 1)
        suite: Generator[KernelOutcome, None, None] = run_kernel_suite(  # type: ignore[assignment]
            unit_kernels(todo), [backend], [threads], sweep_settings(), str(db), retries_under_load=0, hardware=hardware
        )
        for count, outcome in enumerate(suite, start=1):
            step(f"{backend}: {count}/{len(todo)} {outcome.kernel.name[:40]}")
            yield outcome
            if time.monotonic() >= own_deadline:
                suite.close()
                break


#: Seconds the quick probe measures for (``appopt plan`` on a host without a calibration): the hardware figures and
#: then units until it runs out; the plan's own second or two and the last unit's run come on top.
QUICK_PROBE_BUDGET_S = 10.0


def quick_units() -> list[Unit]:
    """The quick probe's units: the shortest and longest no-op chains (an engine's per-call and per-node cost), then
    each kind's middle unit of the covering set."""
    units = covering_units(per_kind=1)
    noops = sorted((u for u in units if u.kind == "noop"), key=lambda u: u.dims.get("nodes", 0))
    return [*noops[:1], *noops[-1:], *(u for u in units if u.kind != "noop")]


def installed_backends(backends: tuple[str, ...] = CALIBRATE_BACKENDS) -> tuple[str, ...]:
    """Those of ``backends`` that can run here."""
    from benchmarks.backends import get_backend

    return tuple(name for name in backends if get_backend(name).unavailable_reason() is None)


def quick_probe(
    db: Path, threads: int, budget_s: float = QUICK_PROBE_BUDGET_S, step: Callable[[str], None] = lambda _: None
) -> tuple[int, int]:
    """Measure ``quick_units`` on the installed calibration backends at ``threads`` within ``budget_s``, appending
    rows to ``db``: (units measured, units skipped or failed)."""
    measured = skipped = 0
    for outcome in calibrate(db, budget_s, installed_backends(), threads, step=step, units=quick_units()):
        measured += outcome.status == "ok"
        skipped += outcome.status != "ok"
    return measured, skipped
