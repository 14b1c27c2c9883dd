"""MLPerf-Inference-like scenarios over any system under test (SUT).

A SUT is a callable ``sut(query_index) -> None`` that processes one query (its samples already prepared); the harness
only times it. The four scenarios follow MLPerf Inference's definitions, scaled down:

* SingleStream: one query in flight at a time; metric: 90th-percentile latency.
* MultiStream: queries of ``samples_per_query`` (8) samples, one in flight; metric: 99th-percentile latency.
* Server: queries arrive as a seeded Poisson process at a target QPS and wait if the SUT is busy; latency counts from
  arrival. Metric: the highest QPS whose p99 latency meets a bound (found by bisection), or the p99 at a given QPS.
* Offline: all samples issued at once; metric: samples per second. The batch is issued again until the run has
  lasted ``min_duration_s``.

Every run warms up first, then issues at least ``min_queries`` queries and runs at least ``min_duration_s`` (small
defaults so tests stay fast; MLPerf's are 1024 queries / 600 s).

This home-made harness is the fallback driver: where MLCommons LoadGen is installed, ``benchmarks.loadgen_driver``
runs the scenarios instead and the rows say which driver measured them (``ScenarioResult.driver``).

Example::

    >>> result = run_scenario("SingleStream", sut, settings=ScenarioSettings(min_queries=20))  # doctest: +SKIP
    >>> result.metric, result.value   # doctest: +SKIP
    ('p90_latency_ms', 3.2)
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Literal

import numpy as np

Scenario = Literal["SingleStream", "MultiStream", "Server", "Offline"]
SCENARIOS: tuple[Scenario, ...] = ("SingleStream", "MultiStream", "Server", "Offline")
#: A system under test: process query number ``i`` (the caller maps it to prepared samples).
SUT = Callable[[int], object]
Clock = Callable[[], float]


@dataclass(frozen=True)
class ScenarioSettings:
    """Run lengths and scenario parameters (MLPerf's names where it has them)."""

    min_duration_s: float = 0.5
    min_queries: int = 10
    #: Hard cap so a fast SUT with a long minimum duration still ends.
    max_queries: int = 100_000
    #: Cap on a slow SUT: stop once this many seconds have passed and at least ``MIN_TIMED_QUERIES`` queries ran,
    #: even below ``min_queries`` (None: no cap). Keeps a full suite run within a time budget.
    max_duration_s: float | None = None
    warmup_queries: int = 2
    #: Stop warming up early once this many seconds have passed (at least one warm-up query always runs).
    warmup_max_s: float | None = None
    seed: int = 0
    #: Samples per query: 1 for SingleStream/Server by default, 8 for MultiStream (MLPerf's figure).
    samples_per_query: int = 1
    multistream_samples_per_query: int = 8
    #: Server: fixed QPS to test; None searches for the highest QPS meeting the bound.
    server_target_qps: float | None = None
    #: Server: p99 latency bound in ms; None uses ``server_bound_factor`` × the unloaded median latency.
    server_latency_bound_ms: float | None = None
    server_bound_factor: float = 4.0
    server_search_steps: int = 6
    #: Offline: samples issued at once (rounded up to whole queries of ``samples_per_query``).
    offline_samples: int = 64

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


@dataclass(frozen=True)
class ScenarioResult:
    """What one scenario measured; latencies are per query, in milliseconds."""

    scenario: Scenario
    metric: str
    value: float
    unit: str
    latencies_ms: tuple[float, ...]
    queries: int
    samples_per_query: int
    duration_s: float
    settings: ScenarioSettings
    #: Scenario-specific figures (Server: the bound and each probed QPS with its p99).
    extra: dict[str, float] = field(default_factory=dict)
    #: Process CPU time per query (ms, all threads): robust to other processes competing for the cores.
    cpu_ms: tuple[float, ...] = ()
    #: Which scenario driver measured it: "harness" (this module) or "loadgen" (MLCommons LoadGen).
    driver: str = "harness"
    #: LoadGen's judgement of the run, "VALID" or "INVALID" ("" where no driver judged it), and why not valid.
    verdict: str = ""
    verdict_reason: str = ""
    #: Directory holding the driver's logs of this run ("" when it kept none).
    log_dir: str = ""
    #: Latency percentiles the driver reported (50, 90, 99 -> ms) where it keeps no per-query latencies.
    reported_ms: dict[int, float] = field(default_factory=dict)

    @property
    def median_cpu_ms(self) -> float:
        return float(np.median(self.cpu_ms)) if self.cpu_ms else math.nan

    @property
    def samples(self) -> int:
        return self.queries * self.samples_per_query

    def percentile_ms(self, q: float) -> float:
        if self.latencies_ms:
            return float(np.percentile(self.latencies_ms, q))
        reported = self.reported_ms.get(int(q)) if float(q).is_integer() else None
        return math.nan if reported is None else reported

    @property
    def median_ms(self) -> float:
        return self.percentile_ms(50)

    @property
    def p90_ms(self) -> float:
        return self.percentile_ms(90)

    @property
    def p99_ms(self) -> float:
        return self.percentile_ms(99)

    @property
    def samples_per_second(self) -> float:
        return self.samples / self.duration_s if self.duration_s > 0 else math.nan


def poisson_arrivals(qps: float, count: int, seed: int) -> np.ndarray:
    """Arrival times (s, from 0) of ``count`` queries of a Poisson process at rate ``qps``; seeded, so repeatable."""
    if qps <= 0:
        raise ValueError(f"qps must be positive, got {qps}")
    gaps = np.random.default_rng(seed).exponential(1.0 / qps, size=count)
    return np.cumsum(gaps) - gaps[0]


#: A capped measurement still times at least this many queries (a median of three is robust to one outlier).
MIN_TIMED_QUERIES = 3


def _warm_up(sut: SUT, settings: ScenarioSettings, clock: Clock = time.perf_counter) -> None:
    started = clock()
    for i in range(settings.warmup_queries):
        sut(i)
        if settings.warmup_max_s is not None and clock() - started >= settings.warmup_max_s:
            break


def _keep_going(i: int, elapsed: float, settings: ScenarioSettings) -> bool:
    """Whether a back-to-back run should issue query ``i`` after ``elapsed`` seconds."""
    if i >= settings.max_queries:
        return False
    capped = settings.max_duration_s is not None and elapsed >= settings.max_duration_s
    if capped and i >= MIN_TIMED_QUERIES:
        return False
    return i < settings.min_queries or elapsed < settings.min_duration_s


def _run_back_to_back(
    sut: SUT, settings: ScenarioSettings, clock: Clock, cpu_clock: Clock = time.process_time
) -> tuple[list[float], float, list[float]]:
    """Issue queries one after another until both minimums are met; (latencies ms, wall s, CPU time per query ms)."""
    latencies: list[float] = []
    cpu: list[float] = []
    started = clock()
    i = 0
    while _keep_going(i, clock() - started, settings):
        c0, t0 = cpu_clock(), clock()
        sut(i)
        latencies.append((clock() - t0) * 1e3)
        cpu.append((cpu_clock() - c0) * 1e3)
        i += 1
    return latencies, clock() - started, cpu


def single_stream(sut: SUT, settings: ScenarioSettings, clock: Clock = time.perf_counter) -> ScenarioResult:
    result = _queries_back_to_back(sut, settings, clock, "SingleStream", "p90_latency_ms", settings.samples_per_query)
    return replace(result, value=result.p90_ms)


def multi_stream(sut: SUT, settings: ScenarioSettings, clock: Clock = time.perf_counter) -> ScenarioResult:
    """The SUT must process ``settings.multistream_samples_per_query`` samples per query (the caller prepares them)."""
    samples = settings.multistream_samples_per_query
    result = _queries_back_to_back(sut, settings, clock, "MultiStream", "p99_latency_ms", samples)
    return replace(result, value=result.p99_ms)


def _queries_back_to_back(
    sut: SUT, settings: ScenarioSettings, clock: Clock, scenario: Scenario, metric: str, samples_per_query: int
) -> ScenarioResult:
    """Warm up, then time queries back to back (SingleStream, MultiStream); ``value`` is left for the caller."""
    _warm_up(sut, settings, clock)
    latencies, wall, cpu = _run_back_to_back(sut, settings, clock)
    return ScenarioResult(
        scenario,
        metric,
        0.0,
        "ms",
        tuple(latencies),
        len(latencies),
        samples_per_query,
        wall,
        settings,
        cpu_ms=tuple(cpu),
    )


def offline(sut: SUT, settings: ScenarioSettings, clock: Clock = time.perf_counter) -> ScenarioResult:
    """All samples issued at once, processed in queries of ``samples_per_query``; throughput over the whole run.

    The batch of ``offline_samples`` is issued again until the run has lasted ``min_duration_s`` (MLPerf's Offline
    sizes its one query to fill the minimum duration); ``max_duration_s`` and ``max_queries`` end it earlier.
    """
    _warm_up(sut, settings, clock)
    per_batch = max(1, math.ceil(settings.offline_samples / settings.samples_per_query))
    latencies: list[float] = []
    started = clock()
    i = 0
    while True:
        for _ in range(per_batch):
            t0 = clock()
            sut(i)
            latencies.append((clock() - t0) * 1e3)
            i += 1
        elapsed = clock() - started
        capped = settings.max_duration_s is not None and elapsed >= settings.max_duration_s
        if elapsed >= settings.min_duration_s or capped or i + per_batch > settings.max_queries:
            break
    wall = clock() - started
    queries = i
    samples = queries * settings.samples_per_query
    return ScenarioResult(
        "Offline",
        "samples_per_s",
        samples / wall if wall > 0 else math.nan,
        "samples/s",
        tuple(latencies),
        queries,
        settings.samples_per_query,
        wall,
        settings,
    )


def server_at(
    sut: SUT,
    qps: float,
    settings: ScenarioSettings,
    seed: int,
    clock: Clock = time.perf_counter,
    sleep: Callable[[float], None] = time.sleep,
) -> list[float]:
    """Latencies (ms, from arrival) of queries arriving at ``qps``, served one at a time in arrival order."""
    count = max(settings.min_queries, math.ceil(settings.min_duration_s * qps))
    count = min(count, settings.max_queries)
    arrivals = poisson_arrivals(qps, count, seed)
    latencies: list[float] = []
    start = clock()
    for i, arrival in enumerate(arrivals):
        wait = start + arrival - clock()
        if wait > 0:
            sleep(wait)
        sut(i)
        latencies.append((clock() - (start + arrival)) * 1e3)
    return latencies


def server(
    sut: SUT,
    settings: ScenarioSettings,
    clock: Clock = time.perf_counter,
    sleep: Callable[[float], None] = time.sleep,
) -> ScenarioResult:
    """Highest Poisson QPS whose p99 latency meets the bound (or the p99 at ``server_target_qps``)."""
    _warm_up(sut, settings, clock)
    unloaded, _, _ = _run_back_to_back(
        sut, replace(settings, min_duration_s=0.0, min_queries=max(5, settings.warmup_queries)), clock
    )
    median = float(np.median(unloaded))
    bound = settings.server_latency_bound_ms or settings.server_bound_factor * median
    extra: dict[str, float] = {"latency_bound_ms": bound, "unloaded_median_ms": median}
    started = clock()
    if settings.server_target_qps is not None:
        latencies = server_at(sut, settings.server_target_qps, settings, settings.seed, clock, sleep)
        p99 = float(np.percentile(latencies, 99))
        extra.update(qps=settings.server_target_qps, meets_bound=float(p99 <= bound))
        return ScenarioResult(
            "Server",
            "p99_latency_ms",
            p99,
            "ms",
            tuple(latencies),
            len(latencies),
            settings.samples_per_query,
            clock() - started,
            settings,
            extra,
        )
    # One server can serve at most 1/median queries per second; bisect between a tenth of that and all of it.
    capacity = 1e3 / max(median, 1e-6)
    low, high = 0.0, capacity
    best: list[float] = []
    for step in range(settings.server_search_steps):
        qps = capacity * 0.1 if step == 0 else (low + high) / 2
        latencies = server_at(sut, qps, settings, settings.seed + step, clock, sleep)
        p99 = float(np.percentile(latencies, 99))
        extra[f"probe{step}_qps"] = qps
        extra[f"probe{step}_p99_ms"] = p99
        if p99 <= bound:
            low, best = qps, latencies
        else:
            high = qps
        if step == 0 and p99 > bound:
            break
    extra["qps"] = low
    return ScenarioResult(
        "Server",
        "max_qps",
        low,
        "queries/s",
        tuple(best),
        len(best),
        settings.samples_per_query,
        clock() - started,
        settings,
        extra,
    )


def run_scenario(
    scenario: Scenario, sut: SUT, settings: ScenarioSettings | None = None, clock: Clock = time.perf_counter
) -> ScenarioResult:
    """Run one scenario over ``sut``."""
    settings = settings or ScenarioSettings()
    if scenario == "SingleStream":
        return single_stream(sut, settings, clock)
    if scenario == "MultiStream":
        return multi_stream(sut, settings, clock)
    if scenario == "Server":
        return server(sut, settings, clock)
    if scenario == "Offline":
        return offline(sut, settings, clock)
    raise ValueError(f"unknown scenario {scenario!r}; known: {', '.join(SCENARIOS)}")


def samples_per_query(scenario: Scenario, settings: ScenarioSettings) -> int:
    """How many samples each query of ``scenario`` carries."""
    return settings.multistream_samples_per_query if scenario == "MultiStream" else settings.samples_per_query


# --- accuracy mode -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class AccuracyResult:
    """Outputs of the SUT against a reference backend over the same seeded samples."""

    ok: bool
    max_abs_error: float
    max_rel_error: float
    samples: int
    rtol: float
    atol: float
    detail: str = ""


def compare_outputs(
    got: Sequence[Sequence[np.ndarray]],
    want: Sequence[Sequence[np.ndarray]],
    rtol: float = 1e-3,
    atol: float = 1e-4,
) -> AccuracyResult:
    """Element-wise |got - want| ≤ atol + rtol·|want| over every output of every sample."""
    max_abs = max_rel = 0.0
    problems: list[str] = []
    for index, (outs, refs) in enumerate(zip(got, want, strict=True)):
        if len(outs) != len(refs):
            problems.append(f"sample {index}: {len(outs)} outputs, reference has {len(refs)}")
            continue
        for k, (a, b) in enumerate(zip(outs, refs, strict=True)):
            a64, b64 = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
            if a64.shape != b64.shape:
                problems.append(f"sample {index} output {k}: shape {a64.shape} vs {b64.shape}")
                continue
            if not np.all(np.isfinite(a64) == np.isfinite(b64)):
                problems.append(f"sample {index} output {k}: non-finite values differ")
                continue
            diff = np.abs(a64 - b64)
            diff = np.where(np.isfinite(diff), diff, 0.0)
            max_abs = max(max_abs, float(diff.max(initial=0.0)))
            rel = diff / np.maximum(np.abs(b64), 1e-12)
            max_rel = max(max_rel, float(np.where(np.isfinite(rel), rel, 0.0).max(initial=0.0)))
            if not np.all(diff <= atol + rtol * np.abs(np.where(np.isfinite(b64), b64, 0.0))):
                problems.append(f"sample {index} output {k}: max |error| {float(diff.max()):.3g}")
    return AccuracyResult(not problems, max_abs, max_rel, len(got), rtol, atol, "; ".join(problems[:3]))


def check_accuracy(
    run: Callable[[Mapping[str, np.ndarray]], list[np.ndarray]],
    reference: Callable[[Mapping[str, np.ndarray]], list[np.ndarray]],
    samples: Sequence[Mapping[str, np.ndarray]],
    rtol: float = 1e-3,
    atol: float = 1e-4,
) -> AccuracyResult:
    """Run every sample through the SUT and the reference and compare (MLPerf's accuracy mode, tolerance-based)."""
    got = [run(s) for s in samples]
    want = [reference(s) for s in samples]
    return compare_outputs(got, want, rtol, atol)


__all__ = [
    "SCENARIOS",
    "AccuracyResult",
    "Scenario",
    "ScenarioResult",
    "ScenarioSettings",
    "check_accuracy",
    "compare_outputs",
    "poisson_arrivals",
    "run_scenario",
    "samples_per_query",
    "server_at",
]
