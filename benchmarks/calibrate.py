"""``appopt calibrate``'s measurements: hardware probes, then a few-shot covering set of kernel units per backend,
within a time budget, appended to the host store.

The units are the unit sweep's own samples (``benchmarks.unit_sweep``, seed 0, first round), so a calibrated unit
is one the shipped database measured on its host too, and the ratio of the two times says how this host differs.
The covering set is deterministic: per kind, the pool's units ranked middle, smallest and largest FLOPs, then the
quartiles and the rest, ordered so that a budget cut keeps every kind (each kind's first-ranked unit, then each
kind's second, …), and the no-op chains (each engine's per-call and per-node overhead) before everything else. A
host fit (``perfmodels.hostfit``) learns each kind from these few sizes. Before the units, where each backend's share
of the budget allows, a few suite models are measured whole (``ANCHOR_MODELS``): what a model costs around its
units, which units measured alone cannot say (``perfmodels.calibration``). The backends take turns, a model or a
few units each, so that a machine whose speed drifts during the run shifts every route alike.

Example::

    >>> [u.kind for u in covering_units()][:3]    # doctest: +SKIP
    ['noop', 'noop', 'conv']
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from analysis.units import Unit, encode_units, unit_flops
from benchmarks.harness import ScenarioSettings
from benchmarks.kernels import (
    CACHE_COPY_BYTES,
    HardwareFigures,
    Kernel,
    KernelOutcome,
    measure_bandwidth,
    measure_gemm_peak,
    measure_hardware,
    run_kernel_suite,
)
from benchmarks.unit_sweep import SWEEP_ROUNDS, sample_rounds, sweep_settings, unit_kernels

if TYPE_CHECKING:
    from benchmarks.runner import Outcome  # (imported where used: the quick probe measures no whole model)

#: The engines of the planner's CPU routes for an ONNX model: those the quick probe measures (installed), and the
#: thread-count proxies' stores (``optimiser.transfer_proxy``) hold.
CALIBRATE_BACKENDS = ("onnxruntime", "onnxruntime-extended", "appopt-runtime", "openvino")
#: Frameworks ``appopt calibrate`` measures too, where installed: the routes of training plans and of named
#: architectures, which an ONNX model's plan never ranks. Unmeasured, such a route kept the recording host's fit on
#: a calibrated host, and its training steps borrowed the ONNX engines' ratios: on an AMD EPYC host PyTorch's steps
#: were predicted at 35% RMSPE so, 17% by its own units, whose products ran 1.24x the Xeon's where the engines' ran
#: 0.63-0.75x (docs/decisions.md, 2026-11-28, an AMD EPYC pair). About 30 s of the budget.
FRAMEWORK_BACKENDS = ("torch",)
#: Suite models measured whole on each backend (batch 1), before the units: quick to build, one of each kind of
#: model (a CNN, a transformer, an MLP) and a CNN of medium size (about 2 GFLOPs, 10-35 ms a query). The ratio of
#: their times here over the shipped host's sets each route's overall factor (``perfmodels.calibration``). The
#: three small ones cost little more than the call; only a whole model of some size shows how a compiled graph
#: runs its kernels beyond what each measured alone says (docs/decisions.md, 2026-11-26, transfer's worst choices).
ANCHOR_MODELS = ("tiny_resnet8", "tiny_bert", "mlp", "resnet18")
#: A backend's share of the budget below which no anchor is measured (``anchor_models``).
ANCHOR_MIN_SHARE_S = 40.0
#: An anchor's run: a median over at least 20 queries and 0.3 s (at most 1 s), after a warm-up of at most 0.3 s.
ANCHOR_SETTINGS = ScenarioSettings(
    min_duration_s=0.3, min_queries=20, max_duration_s=1.0, warmup_queries=5, warmup_max_s=0.3
)
#: Below this budget nothing useful can be measured (the probes alone take a few seconds on 2 cores).
MIN_BUDGET_S = 10.0
#: Samples per sampler the covering set chooses from (the sweep's first ``POOL_PER_KIND`` of each).
POOL_PER_KIND = 6
#: Samplers left out: units whose weights are computed in the graph matter to int8 routes only, which a
#: calibration does not measure.
SKIPPED_SAMPLERS = ("conv_computed", "gemm_computed")


def _pools() -> dict[str, list[Unit]]:
    """Each sampler's first ``POOL_PER_KIND`` units of the full sweep (``sample_rounds``: the very units the shipped
    database measured), by sampler name (``conv_large`` and ``conv_stem`` are convolutions of other sizes)."""
    pools: dict[str, list[Unit]] = {}
    for sizes, units in zip(SWEEP_ROUNDS, sample_rounds(), strict=True):
        start = 0
        for name, count in sizes.items():
            pools[name] = units[start : start + count][: 4 if name == "noop" else POOL_PER_KIND]
            start += count
    return pools


def covering_units(per_kind: int = POOL_PER_KIND) -> list[Unit]:
    """The sweep units to calibrate with, most informative first (see the module docstring)."""
    pools = _pools()
    noops = pools.pop("noop")
    ranked: list[list[Unit]] = []
    for name in (n for n in pools if n not in SKIPPED_SAMPLERS):
        units = sorted(pools[name], key=unit_flops)
        if not units:
            continue
        n = len(units)
        # the middle, the ends, the quartiles, then the rest: each rank spreads a sampler's sizes further
        picks = [units[i] for i in (n // 2, 0, n - 1, n // 4, (3 * n) // 4, *range(n))]
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


def anchor_models(backends: tuple[str, ...], budget_s: float) -> tuple[str, ...]:
    """The anchors a run of ``budget_s`` over ``backends`` measures: ``ANCHOR_MODELS`` when each backend's share
    is at least ``ANCHOR_MIN_SHARE_S``, else none (a short run keeps its time for the units)."""
    return ANCHOR_MODELS if backends and budget_s / len(backends) >= ANCHOR_MIN_SHARE_S else ()


def anchors_left(backends: tuple[str, ...], already: set[tuple[str, str]], budget_s: float) -> int:
    """How many (backend, anchor model) pairs that a run of ``budget_s`` would measure the store lacks."""
    return sum((b, m) not in already for b in backends for m in anchor_models(backends, budget_s))


class UnitClock:
    """A wall-clock budget measured unit by unit: the next unit starts only when it is expected to end before the
    deadline (its cost taken as the dearest of the last few units, ``FIRST_UNIT_S`` before any)."""

    #: Seconds a first unit is expected to take (the harness runs one for 0.1-1 s after a warm-up of up to 0.3 s).
    FIRST_UNIT_S = 0.8

    def __init__(self, deadline: float) -> None:
        self.deadline = deadline
        self._last: float | None = None
        self._recent: list[float] = []
        #: Whether a unit was refused for lack of time.
        self.spent = False

    def next_fits(self, deadline: float | None = None) -> bool:
        """Called before each unit: whether it fits before ``deadline`` (default: the clock's own)."""
        now = time.monotonic()
        if self._last is not None:
            self._recent = [*self._recent[-2:], now - self._last]
        self._last = now
        expected = max(self._recent, default=self.FIRST_UNIT_S)
        fits = now + expected <= min(self.deadline, deadline if deadline is not None else math.inf)
        self.spent = self.spent or not fits
        return fits

    def restart(self) -> None:
        """A new backend: its first unit pays the backend's loading, so the gap before it is no unit's cost."""
        self._last = None


def _kernels(units: list[Unit], built: dict[str, Kernel]) -> list[Kernel]:
    """``units`` as kernels, reusing those ``built`` for an earlier backend (and keeping the new ones there)."""
    for unit in units:
        key = encode_units([unit])
        if key not in built:
            built[key] = unit_kernels([unit])[0]
    return [built[encode_units([unit])] for unit in units]


def calibrate(
    db: Path,
    budget_s: float,
    backends: tuple[str, ...] = CALIBRATE_BACKENDS,
    threads: int = 1,
    already: set[tuple[str, str]] | None = None,
    step: Callable[[str], None] = lambda _: None,
    units: list[Unit] | None = None,
    clock: UnitClock | None = None,
    settings: ScenarioSettings | None = None,
    hardware_probe: Callable[[list[int]], HardwareFigures] | None = None,
    anchors: Sequence[str] = (),
) -> Iterator[KernelOutcome | Outcome]:
    """Measure the covering units (or ``units``) on each backend at ``threads`` until ``budget_s`` runs out by the
    wall clock (``clock``, when given, holds the deadline and says afterwards whether it cut the run short),
    appending rows to ``db``; ``already`` holds (backend, encoded unit) and (backend, anchor model) pairs the
    store has, which are skipped (a resumed run). A unit is started only when it is expected to end within the
    budget. ``anchors`` (suite model names, ``anchor_models``) are measured whole first, within half the budget,
    and, once every unit is measured, once more with the backends in the reverse order where the budget allows
    (``closing_anchors``).

    The backends take turns, a model or ``CHUNK`` units each (``_in_turns``): a machine whose speed drifts while
    it is measured (a cloud VM's neighbours, its turbo) then shifts every route alike, where measuring one backend
    after another put each route's units in a phase of its own, and the plan ranks routes by their ratio."""
    clock = clock or UnitClock(time.monotonic() + budget_s)
    deadline = clock.deadline
    units = covering_units() if units is None else units
    done = already or set()
    todo = {b: [u for u in units if (b, encode_units([u])) not in done] for b in backends}
    models = {b: [m for m in anchors if (b, m) not in done] for b in backends}
    active = [b for b in backends if todo[b] or models[b]]
    if not active:
        return
    if time.monotonic() >= deadline:
        clock.spent = True
        return
    # the full figures take seconds that a short run cannot spare; measured once, for every backend's rows
    probe = hardware_probe or (measure_hardware if deadline - time.monotonic() > 60 else quick_hardware)
    hardware = probe([threads])
    # the anchors first: a route's overall factor, worth more than its last units
    anchor_deadline = time.monotonic() + (deadline - time.monotonic()) * ANCHOR_BUDGET_SHARE
    for backend, name in _in_turns({b: models[b] for b in active}, 1):
        yield from measure_anchors(db, backend, threads, name, clock, anchor_deadline, step)
    built: dict[str, Kernel] = {}  # each unit's kernel, made once for every backend (seconds for a few dozen)
    counts = dict.fromkeys(active, 0)
    # a few units at a time: their models are made just before they are measured (a large unit's weights take a
    # second to make), and the clock is asked before each unit
    for backend, chunk in _in_turns({b: todo[b] for b in active}, CHUNK):
        if not clock.next_fits(deadline):
            return
        clock.restart()  # the first unit of a turn pays its backend's sessions: the gap before it is no unit's cost
        suite = run_kernel_suite(
            _kernels(chunk, built),
            [backend],
            [threads],
            settings or sweep_settings(),
            str(db),
            retries_under_load=0,
            hardware=hardware,
            until=functools.partial(clock.next_fits, deadline),
        )
        for outcome in suite:  # (its rows are in the store before they are yielded)
            counts[backend] += 1
            step(f"{backend}: {counts[backend]}/{len(todo[backend])} {outcome.kernel.name[:40]}")
            yield outcome
    for backend, name in closing_anchors({b: models[b] for b in active}):
        yield from measure_anchors(db, backend, threads, name, clock, deadline, step)


def closing_anchors(models: dict[str, list[str]]) -> Iterator[tuple[str, list[str]]]:
    """The anchors' second pass, after the units: the models this run set out to measure (not those a resumed
    run found in the store), a model at a time, the backends in the reverse order. An anchor is one run of 0.3-1 s,
    and the first pass measured it before minutes of units: on a machine whose speed drifts, a route's anchors and
    its units then sat in different phases, and one phase's burst moved the route's whole factor (the same anchor's
    ratio moved 30% from one calibration of a machine to the next; docs/decisions.md, 2026-11-28, the anchors
    measured twice). Both passes' rows are kept and each model's ratio is their mean."""
    return _in_turns(dict(reversed(list(models.items()))), 1)


_T = TypeVar("_T")


def _in_turns(work: dict[str, list[_T]], size: int) -> Iterator[tuple[str, list[_T]]]:
    """``(backend, its next `size` items)`` round by round, the backends in order, until every list is done."""
    for start in range(0, max((len(items) for items in work.values()), default=0), size):
        for backend, items in work.items():
            if start < len(items):
                yield backend, items[start : start + size]


#: Of what is left of the budget when the anchors start, the share they may take (the units have the rest).
ANCHOR_BUDGET_SHARE = 0.5
#: Units measured per suite run (``calibrate``): made together, just before they are measured.
CHUNK = 6


def measure_anchors(
    db: Path,
    backend: str,
    threads: int,
    models: Sequence[str],
    clock: UnitClock,
    deadline: float,
    step: Callable[[str], None] = lambda _: None,
) -> Iterator[Outcome]:
    """Measure ``models`` whole (SingleStream, batch 1, fp32, with their kernel units) on ``backend`` while the
    clock expects each to end before ``deadline``, appending their rows to ``db``."""
    from benchmarks.features import model_features
    from benchmarks.models import get_model
    from benchmarks.runner import BenchRequest, run_benchmarks

    clock.restart()
    for name in models:
        if not clock.next_fits(deadline):
            return
        request = BenchRequest(
            models=[get_model(name)], backends=(backend,), threads=(threads,), settings=ANCHOR_SETTINGS
        )
        for outcome in run_benchmarks(request, model_features, db):
            step(f"{backend}: anchor {name}")
            yield outcome


#: Seconds the quick probe of ``appopt plan`` (a host without a calibration) may take by the wall clock, its
#: backends' loading and the hardware figures included: a unit is started only when it is expected to end in time.
QUICK_PROBE_BUDGET_S = 10.0


#: The quick probe's runs: a unit's median over at least 5 queries and 0.05 s (at most 0.3 s), after a warm-up of at
#: most 0.1 s; about half a sweep unit's time, so that each backend's share of the budget covers every kind.
QUICK_SETTINGS = ScenarioSettings(
    min_duration_s=0.05, min_queries=5, max_duration_s=0.3, warmup_queries=2, warmup_max_s=0.1
)


def quick_hardware(threads: list[int]) -> HardwareFigures:
    """The hardware figures in a fraction of ``measure_hardware``'s time (6 s on a loaded 2-core machine, most of a
    quick probe's budget): a 512³ GEMM, best of 3, and a 64 MiB copy, best of 2."""
    bandwidth = measure_bandwidth(64 * 2**20, repeats=2) / 1e9
    cache_bandwidth = measure_bandwidth(CACHE_COPY_BYTES, repeats=5) / 1e9
    return HardwareFigures(bandwidth, cache_bandwidth, {t: measure_gemm_peak(t, 512, 3) for t in threads})


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


def default_backends() -> tuple[str, ...]:
    """What ``appopt calibrate`` measures without ``--backends``: the ONNX engines, then the frameworks, those
    installed."""
    return installed_backends((*CALIBRATE_BACKENDS, *FRAMEWORK_BACKENDS))


@dataclass(frozen=True)
class ProbeCount:
    """What a quick probe did: units measured, skipped or failed, and whether its budget ran out first."""

    measured: int
    skipped: int
    budget_spent: bool = False

    def cut_note(self, budget_s: float) -> str:
        """`` (budget of N s spent: what was measured is kept)`` when the budget ended the probe, else ``""``."""
        if not self.budget_spent:
            return ""
        return f" (budget of {budget_s:g} s spent{': what was measured is kept' if self.measured else ''})"


def quick_probe(
    db: Path, threads: int, budget_s: float = QUICK_PROBE_BUDGET_S, step: Callable[[str], None] = lambda _: None
) -> ProbeCount:
    """Measure ``quick_units`` on the installed calibration backends at ``threads`` within ``budget_s`` of wall
    clock (finding the backends included), appending rows to ``db``."""
    clock = UnitClock(time.monotonic() + budget_s)
    measured = skipped = 0
    units, backends = quick_units(), installed_backends()
    run = calibrate(
        db, budget_s, backends, threads, step=step, units=units, clock=clock, settings=QUICK_SETTINGS,
        hardware_probe=quick_hardware,
    )
    for outcome in run:
        measured += outcome.status == "ok"
        skipped += outcome.status != "ok"
    return ProbeCount(measured, skipped, clock.spent)
