"""MLCommons LoadGen as the scenario driver: any benchmark ``Session`` becomes a LoadGen system under test (SUT).

LoadGen (``pip install mlcommons-loadgen``, ``import mlperf_loadgen``) issues the queries, times them and judges the
run by MLPerf's rules: SingleStream reports the 90th-percentile latency and MultiStream the 99th over 8 samples per
query (both with early stopping), Server finds the highest Poisson QPS whose 99th percentile meets a bound, Offline
issues one query large enough to fill the minimum duration. Its verdict (VALID / INVALID and why) goes into the row.

Settings come from LoadGen's built-in ``mlperf.conf`` plus a ``user.conf`` written for each run with our scaled-down
durations and query counts (``ScenarioSettings``) and the expected latency or QPS measured while warming up (LoadGen
sizes its query schedule from them). MLPerf's 600 s minimum would take hours per suite on this machine, so short runs
come out INVALID where early stopping needs more queries; the row says so, and the fit leaves such rows out.

The QSL holds the suite model's seeded inputs, prepared when LoadGen loads them. One LoadGen sample is one query of
the row's batch for SingleStream, Server and accuracy, and one model input for MultiStream and Offline, whose queries
the SUT runs in calls of 8 (MultiStream) or of the batch (Offline) where the model takes that batch.

Each run's ``user.conf``, ``mlperf_log_summary.txt`` and ``mlperf_log_detail.txt`` stay in its log directory (next
to the result shard); ``appopt bench show RUN`` prints the summary.

Example::

    >>> plan = query_plan(model, "SingleStream", batch=1)                                  # doctest: +SKIP
    >>> result = run_loadgen("SingleStream", model, session, plan, settings, Path("logs/run1"))  # doctest: +SKIP
    >>> result.verdict, result.value                                                        # doctest: +SKIP
    ('INVALID', 0.41)
"""

from __future__ import annotations

import importlib
import json
import math
import queue
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import ModuleType
from typing import Any, Literal

import numpy as np

from benchmarks.backends import Session
from benchmarks.harness import AccuracyResult, Scenario, ScenarioResult, ScenarioSettings, compare_outputs
from benchmarks.models import SuiteModel
from perfmodels.results_db import EARLY_STOPPING, LATENCY_BOUND, MIN_DURATION, MIN_QUERIES

Driver = Literal["loadgen", "harness"]
DriverChoice = Literal["auto", "loadgen", "harness"]
#: The log files kept from each run (LoadGen also writes an empty trace, and an accuracy log only in accuracy mode).
KEPT_LOGS = ("user.conf", "mlperf_log_summary.txt", "mlperf_log_detail.txt")
SUMMARY = "mlperf_log_summary.txt"
DETAIL = "mlperf_log_detail.txt"


class DriverUnavailable(RuntimeError):
    """LoadGen was asked for by name but cannot be imported here."""


def load_loadgen() -> ModuleType | None:
    """The ``mlperf_loadgen`` module, or None when it is not installed."""
    try:
        return importlib.import_module("mlperf_loadgen")
    except ImportError:
        return None


def resolve_driver(choice: DriverChoice) -> Driver:
    """``auto``: LoadGen where it is installed, else the home-made harness; ``loadgen`` insists on it."""
    if choice == "harness":
        return "harness"
    if load_loadgen() is None:
        if choice == "loadgen":
            raise DriverUnavailable("LoadGen is not installed (pip install 'appopt[loadgen]', i.e. mlcommons-loadgen)")
        return "harness"
    return "loadgen"


def loadgen_version() -> str:
    import importlib.metadata

    try:
        return importlib.metadata.version("mlcommons-loadgen")
    except importlib.metadata.PackageNotFoundError:
        return ""


# --- the QSL and the SUT ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class QueryPlan:
    """How LoadGen's samples map onto model inputs and ``session.run`` calls."""

    #: Model inputs one LoadGen sample stands for.
    inputs_per_sample: int
    #: Model inputs one ``session.run`` call takes.
    inputs_per_call: int

    @property
    def grouped(self) -> bool:
        """Whether the SUT stacks several samples of a query into one call (MultiStream and Offline batches)."""
        return self.inputs_per_sample == 1 and self.inputs_per_call > 1


def query_plan(
    model: SuiteModel, scenario: Scenario | Literal["accuracy"], batch: int, ms_samples: int = 8
) -> QueryPlan:
    """SingleStream, Server, accuracy: a sample is a query of ``batch`` inputs; MultiStream and Offline: a sample is
    one input, run in calls of ``ms_samples`` or ``batch`` where the model takes that batch (else one at a time)."""
    if scenario in ("MultiStream", "Offline"):
        group = ms_samples if scenario == "MultiStream" else batch
        return QueryPlan(1, group if model.supports_batch(group) else 1)
    return QueryPlan(batch, batch if model.supports_batch(batch) else 1)


class SuiteQSL:
    """The query sample library: the suite model's seeded inputs, prepared when LoadGen loads them.

    Sample ``i`` is a list of feeds, one per ``session.run`` call it needs, seeded from ``seed + i``.
    """

    def __init__(self, model: SuiteModel, plan: QueryPlan, count: int, seed: int) -> None:
        self.model, self.plan, self.count, self.seed = model, plan, count, seed
        self.feeds: dict[int, list[dict[str, np.ndarray]]] = {}

    def _prepare(self, index: int) -> list[dict[str, np.ndarray]]:
        if self.plan.grouped:
            return [self.model.feeds(1, self.seed + index)]
        calls = self.plan.inputs_per_sample // self.plan.inputs_per_call
        return [self.model.feeds(self.plan.inputs_per_call, self.seed + index * calls + k) for k in range(calls)]

    def load(self, indices: Sequence[int]) -> None:
        for index in indices:
            if index not in self.feeds:
                self.feeds[index] = self._prepare(int(index))

    def unload(self, indices: Sequence[int]) -> None:
        for index in indices:
            self.feeds.pop(int(index), None)


class SessionSUT:
    """Turns a prepared backend ``Session`` into LoadGen's SUT callbacks.

    ``issue_query`` runs the samples (on a worker thread for Server, so arrivals queue as at a real server; inline
    otherwise) and reports them complete. With ``keep_outputs`` (accuracy mode) each sample's outputs are kept for
    the check and their first output's bytes go to LoadGen's accuracy log.
    """

    def __init__(self, session: Session, qsl: SuiteQSL, keep_outputs: bool = False, threaded: bool = False) -> None:
        self.session, self.qsl, self.keep_outputs, self.threaded = session, qsl, keep_outputs, threaded
        self.outputs: dict[int, list[np.ndarray]] = {}
        self.cpu_ms: list[float] = []
        #: perf_counter() when the first query arrived and when the last one completed (the run's span).
        self.first_issue: float | None = None
        self.last_complete: float | None = None
        self._lg: Any = None
        self._queue: queue.Queue[Any] = queue.Queue()
        self._worker: threading.Thread | None = None

    def process(self, indices: Sequence[int]) -> list[list[np.ndarray]]:
        """Run the samples ``indices`` (one query's worth); the outputs of each sample."""
        feeds = self.qsl.feeds
        if not self.qsl.plan.grouped:
            results = []
            for index in indices:
                out: list[np.ndarray] = []
                for feed in feeds[index]:
                    out.extend(self.session.run(feed))
                results.append(out)
            return results
        size = self.qsl.plan.inputs_per_call
        results = []
        for start in range(0, len(indices), size):
            chunk = indices[start : start + size]
            if len(chunk) == size:
                names = feeds[chunk[0]][0].keys()
                stacked = {n: np.concatenate([feeds[i][0][n] for i in chunk]) for n in names}
                outs = self.session.run(stacked)
                results.extend([o[k : k + 1] for o in outs] for k in range(len(chunk)))
            else:  # a last, partial group runs one sample at a time (feeds are prepared at batch 1)
                results.extend(self.session.run(feeds[i][0]) for i in chunk)
        return results

    def _complete(self, samples: Sequence[Any]) -> None:
        lg = self._lg
        c0 = time.process_time()
        outputs = self.process([s.index for s in samples])
        self.cpu_ms.append((time.process_time() - c0) * 1e3)
        keep: list[np.ndarray] = []
        responses = []
        for sample, out in zip(samples, outputs, strict=True):
            if self.keep_outputs:
                self.outputs[int(sample.index)] = out
                data = np.ascontiguousarray(out[0]) if out else np.zeros(0, dtype=np.uint8)
                keep.append(data)
                responses.append(lg.QuerySampleResponse(sample.id, data.ctypes.data, data.nbytes))
            else:
                responses.append(lg.QuerySampleResponse(sample.id, 0, 0))
        lg.QuerySamplesComplete(responses)
        self.last_complete = time.perf_counter()

    @property
    def span_s(self) -> float:
        """Seconds from the first query's arrival to the last one's completion (0 before any)."""
        if self.first_issue is None or self.last_complete is None:
            return 0.0
        return max(0.0, self.last_complete - self.first_issue)

    def issue_query(self, samples: Sequence[Any]) -> None:
        if self.first_issue is None:
            self.first_issue = time.perf_counter()
        if self.threaded:
            self._queue.put(list(samples))
        else:
            self._complete(samples)

    def flush_queries(self) -> None:
        """Nothing is batched up across queries, so there is nothing to flush."""

    def _serve(self) -> None:
        while (samples := self._queue.get()) is not None:
            self._complete(samples)

    def start(self, lg: Any) -> None:
        self._lg = lg
        if self.threaded:
            self._worker = threading.Thread(target=self._serve, name="loadgen-sut", daemon=True)
            self._worker.start()

    def stop(self) -> None:
        if self._worker is not None:
            self._queue.put(None)
            self._worker.join()
            self._worker = None


# --- settings ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Calibration:
    """What warming up measured: the median time of one query of this scenario (ms) and per sample (ms)."""

    query_ms: float
    sample_ms: float


def calibrate(sut: SessionSUT, scenario: Scenario, settings: ScenarioSettings) -> Calibration:
    """Warm the session up on the QSL's samples and time it (LoadGen sizes its schedule from the estimate)."""
    count = sut.qsl.count
    per_query = settings.multistream_samples_per_query if scenario == "MultiStream" else 1
    if scenario == "Offline":
        per_query = max(1, sut.qsl.plan.inputs_per_call)
    times: list[float] = []
    started = time.perf_counter()
    for q in range(max(1, settings.warmup_queries)):
        indices = [(q * per_query + k) % count for k in range(per_query)]
        t0 = time.perf_counter()
        sut.process(indices)
        times.append((time.perf_counter() - t0) * 1e3)
        if settings.warmup_max_s is not None and time.perf_counter() - started >= settings.warmup_max_s:
            break
    if len(times) > 1:
        times = times[1:]  # the first call pays one-off costs (allocations, caches)
    query_ms = max(float(np.median(times)), 1e-3)
    return Calibration(query_ms, query_ms / per_query)


def user_conf(scenario: Scenario, settings: ScenarioSettings, calibration: Calibration) -> str:
    """Our scaled-down ``user.conf`` for one run: durations and query counts for this machine, and the expected
    latency or QPS LoadGen sizes its query schedule from. Everything else comes from the built-in ``mlperf.conf``."""
    s = scenario
    lines = [
        "# appopt's scaled-down settings for this machine; LoadGen's built-in mlperf.conf supplies the rest",
        "# (MLPerf's own minimum duration is 600000 ms).",
        f"*.{s}.min_duration = {round(settings.min_duration_s * 1e3)}",
        f"*.{s}.min_query_count = {settings.min_queries}",
    ]
    if settings.max_duration_s is not None:
        lines.append(f"*.{s}.max_duration = {max(1, round(settings.max_duration_s * 1e3))}")
    if s == "SingleStream":
        lines.append(f"*.{s}.target_latency = {calibration.query_ms:.6g}")
    elif s == "MultiStream":
        lines.append(f"*.{s}.samples_per_query = {settings.multistream_samples_per_query}")
        lines.append(f"*.{s}.target_latency = {calibration.query_ms:.6g}")
    elif s == "Offline":
        lines.append(f"*.{s}.target_qps = {1e3 / calibration.sample_ms:.6g}")
    elif s == "Server":
        lines.append(f"*.{s}.target_qps = {server_qps(settings, calibration):.6g}")
        lines.append(f"# *.{s}.target_latency = {server_bound_ms(settings, calibration):.6g} (ms; set in ns directly)")
    return "\n".join(lines) + "\n"


def server_bound_ms(settings: ScenarioSettings, calibration: Calibration) -> float:
    """The Server p99 bound: the one given, else ``server_bound_factor`` × the unloaded query time."""
    return settings.server_latency_bound_ms or settings.server_bound_factor * calibration.query_ms


def server_qps(settings: ScenarioSettings, calibration: Calibration) -> float:
    """The QPS to test, or where the peak search starts: half of what one server can serve back to back."""
    return settings.server_target_qps or 0.5 * 1e3 / calibration.query_ms


# --- the logs ---------------------------------------------------------------------------------------------------


def read_detail(path: Path) -> dict[str, list[Any]]:
    """Every ``:::MLLOG`` key of a LoadGen detail log with its values in order."""
    values: dict[str, list[Any]] = {}
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        if not line.startswith(":::MLLOG "):
            continue
        try:
            entry = json.loads(line[len(":::MLLOG ") :])
        except json.JSONDecodeError:
            continue
        values.setdefault(str(entry.get("key")), []).append(entry.get("value"))
    return values


def _last(detail: Mapping[str, list[Any]], key: str, default: Any = None) -> Any:
    return detail[key][-1] if detail.get(key) else default


def verdict_of(detail: Mapping[str, list[Any]]) -> tuple[str, str]:
    """LoadGen's VALID / INVALID (empty when it gave none, as in accuracy mode) and, if INVALID, why."""
    verdict = str(_last(detail, "result_validity", "") or "")
    if verdict != "INVALID":
        return verdict, ""
    reasons = []
    checks = (
        ("result_perf_constraints_met", LATENCY_BOUND),
        ("result_min_duration_met", MIN_DURATION),
        ("result_min_queries_met", MIN_QUERIES),
        ("early_stopping_met", EARLY_STOPPING),
    )
    reasons += [text for key, text in checks if _last(detail, key, True) is False]
    early = " ".join(str(_last(detail, "early_stopping_result", "") or "").split())
    if _last(detail, "early_stopping_met", True) is False and early:
        reasons.append(f"({early})")
    hint = str(_last(detail, "result_invalid_reason", "") or "").strip()
    if hint:
        reasons.append(hint)
    reasons += [str(e) for e in detail.get("error_runtime", [])]
    return verdict, "; ".join(reasons)[:400] or "LoadGen gave no reason"


def _keep_logs(log_dir: Path, accuracy: bool) -> None:
    """Drop what LoadGen wrote that we do not keep (its empty trace; its accuracy log outside accuracy mode)."""
    for path in log_dir.glob("mlperf_log_*"):
        if path.name not in KEPT_LOGS and not (accuracy and path.name == "mlperf_log_accuracy.json"):
            path.unlink()


# --- running ----------------------------------------------------------------------------------------------------


@dataclass
class LoadgenRun:
    """One LoadGen test's outcome: its detail log parsed, and the settings it ran with."""

    detail: dict[str, list[Any]]
    settings: dict[str, Any] = field(default_factory=dict)


def _start(
    scenario: Scenario,
    sut: SessionSUT,
    settings: ScenarioSettings,
    log_dir: Path,
    model_name: str,
    mode: Literal["performance", "accuracy"],
    calibration: Calibration,
) -> LoadgenRun:
    lg = load_loadgen()
    if lg is None:
        raise DriverUnavailable("LoadGen is not installed")
    log_dir.mkdir(parents=True, exist_ok=True)
    conf = log_dir / "user.conf"
    conf.write_text(user_conf(scenario, settings, calibration), encoding="utf-8")
    test = lg.TestSettings()
    if test.FromConfig(str(conf), model_name, scenario, 1) != 0:
        raise RuntimeError(f"LoadGen could not read {conf}")
    test.scenario = getattr(lg.TestScenario, scenario)
    # Not FindPeakPerformance: its boundary search doubles the QPS until a run fails, and a run too short to fail
    # (a small min_duration) drives it to an infinite QPS and a crash. ``_server_search`` bisects instead.
    test.mode = lg.TestMode.AccuracyOnly if mode == "accuracy" else lg.TestMode.PerformanceOnly
    if scenario == "Server":
        test.server_target_latency_ns = round(server_bound_ms(settings, calibration) * 1e6)
    if settings.seed:  # mlperf.conf's seeds, shifted by ours (seed 0 keeps MLPerf's own)
        for key in ("qsl_rng_seed", "sample_index_rng_seed", "schedule_rng_seed"):
            setattr(test, key, (getattr(test, key) + settings.seed) % 2**64)
    log = lg.LogSettings()
    log.log_output.outdir = str(log_dir)
    log.log_output.copy_summary_to_stdout = False
    log.enable_trace = False
    sut.start(lg)
    sut_handle = lg.ConstructSUT(sut.issue_query, sut.flush_queries)
    qsl_handle = lg.ConstructQSL(sut.qsl.count, sut.qsl.count, sut.qsl.load, sut.qsl.unload)
    try:
        lg.StartTestWithLogSettings(sut_handle, qsl_handle, test, log)
    finally:
        sut.stop()
        lg.DestroyQSL(qsl_handle)
        lg.DestroySUT(sut_handle)
    _keep_logs(log_dir, mode == "accuracy")
    detail = read_detail(log_dir / DETAIL)
    effective = {
        k.removeprefix("effective_"): _last(detail, k)
        for k in (
            "effective_test_mode",
            "effective_min_duration_ms",
            "effective_max_duration_ms",
            "effective_min_query_count",
            "effective_samples_per_query",
            "effective_target_qps",
            "effective_target_latency_ns",
            "effective_target_latency_percentile",
            "effective_performance_sample_count",
        )
        if detail.get(k)
    }
    # LoadGen's own errors, e.g. that a user.conf overriding mlperf.conf is "not valid for official submission"
    errors = sorted({str(v) for k, vs in detail.items() if k.startswith("error_") for v in vs})
    return LoadgenRun(
        detail, {"loadgen": effective, "loadgen_version": loadgen_version(), "loadgen_errors": "; ".join(errors)}
    )


def _server_search(
    sut: SessionSUT,
    settings: ScenarioSettings,
    log_dir: Path,
    model_name: str,
    calibration: Calibration,
    probes: dict[str, float],
) -> tuple[LoadgenRun, float]:
    """The highest Poisson QPS whose p99 LoadGen finds within the bound: ``server_search_steps`` LoadGen runs
    bisecting between a tenth of one server's back-to-back capacity and all of it (the harness's search). Each
    probe's logs stay in ``log_dir/probeK``; the chosen run's (the best passing one, else the first) are copied
    into ``log_dir``. Returns that run and its QPS (0 when none met the bound)."""
    import shutil

    capacity = 1e3 / calibration.query_ms
    low, high = 0.0, capacity
    chosen: tuple[LoadgenRun, Path] | None = None
    for step in range(max(1, settings.server_search_steps)):
        qps = capacity * 0.1 if step == 0 else (low + high) / 2
        probe_dir = log_dir / f"probe{step}"
        run = _start(
            "Server", sut, replace(settings, server_target_qps=qps), probe_dir, model_name, "performance", calibration
        )
        met = _last(run.detail, "result_perf_constraints_met") is True
        probes[f"probe{step}_qps"] = qps
        probes[f"probe{step}_p99_ms"] = float(_last(run.detail, "result_99.00_percentile_latency_ns", 0) or 0) / 1e6
        if met:
            low, chosen = qps, (run, probe_dir)
        else:
            high = qps
        if chosen is None and step == 0:
            chosen = (run, probe_dir)
        if step == 0 and not met:
            break
    assert chosen is not None
    run, source = chosen
    for name in KEPT_LOGS:
        shutil.copyfile(source / name, log_dir / name)
    return run, low


def run_loadgen(
    scenario: Scenario,
    model: SuiteModel,
    session: Session,
    plan: QueryPlan,
    settings: ScenarioSettings,
    log_dir: Path,
    samples: int = 3,
) -> ScenarioResult:
    """One scenario through LoadGen over ``session``; a ``ScenarioResult`` with LoadGen's figures and verdict."""
    qsl = SuiteQSL(model, plan, samples, settings.seed)
    qsl.load(range(samples))  # prepared before timing; LoadGen's own load call then finds them ready
    sut = SessionSUT(session, qsl, threaded=scenario == "Server")
    calibration = calibrate(sut, scenario, settings)
    probes: dict[str, float] = {}
    if scenario == "Server" and settings.server_target_qps is None:
        run, peak = _server_search(sut, settings, log_dir, model.name, calibration, probes)
    else:
        run, peak = _start(scenario, sut, settings, log_dir, model.name, "performance", calibration), None
    detail = run.detail
    ns = {q: _last(detail, f"result_{q:.2f}_percentile_latency_ns") for q in (50, 90, 99)}
    reported = {q: float(v) / 1e6 for q, v in ns.items() if v is not None}
    queries = int(_last(detail, "result_query_count", 0) or 0)
    per_query = (
        settings.multistream_samples_per_query
        if scenario == "MultiStream"
        else int(_last(detail, "effective_samples_per_query", 1) or 1)
        if scenario == "Offline"
        else 1
    )
    model_samples_per_query = per_query * plan.inputs_per_sample
    extra: dict[str, float] = {"calibrated_query_ms": calibration.query_ms}
    if scenario == "SingleStream":
        metric, unit, value = "p90_latency_ms", "ms", reported.get(90, math.nan)
        rate = _last(detail, "result_qps_with_loadgen_overhead")
    elif scenario == "MultiStream":
        metric, unit, value = "p99_latency_ms", "ms", reported.get(99, math.nan)
        rate = _last(detail, "result_qps_with_loadgen_overhead")
    elif scenario == "Offline":
        rate = _last(detail, "result_samples_per_second")
        metric, unit = "samples_per_s", "samples/s"
        value = float(rate) * plan.inputs_per_sample if rate else math.nan
        rate = float(rate) / per_query if rate else None  # queries per second (one query of all the samples)
    else:
        bound = server_bound_ms(settings, calibration)
        extra.update(latency_bound_ms=bound, unloaded_median_ms=calibration.query_ms)
        rate = _last(detail, "result_completed_samples_per_sec")
        constraints = _last(detail, "result_perf_constraints_met")
        if settings.server_target_qps is not None:
            metric, unit, value = "p99_latency_ms", "ms", reported.get(99, math.nan)
            extra.update(qps=settings.server_target_qps, meets_bound=float(bool(constraints)))
        else:
            metric, unit, value = "max_qps", "queries/s", peak or 0.0
            extra.update(qps=value, **probes)
    duration = queries / float(rate) if rate and queries else sut.span_s
    verdict, reason = verdict_of(detail)
    early = _last(detail, f"early_stopping_latency_{'ss' if scenario == 'SingleStream' else 'ms'}")
    if scenario in ("SingleStream", "MultiStream") and early:
        extra["early_stopping_estimate_ms"] = float(early) / 1e6
    return ScenarioResult(
        scenario,
        metric,
        float(value),
        unit,
        (),
        queries,
        model_samples_per_query,
        duration,
        settings,
        {**extra, **_flatten(run.settings)},
        cpu_ms=tuple(sut.cpu_ms),
        driver="loadgen",
        verdict=verdict,
        verdict_reason=reason,
        log_dir=str(log_dir),
        reported_ms=reported,
    )


def _flatten(settings: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in settings.items():
        if isinstance(value, Mapping):
            out.update({f"{key}_{k}": v for k, v in value.items()})
        else:
            out[key] = value
    return out


# --- accuracy ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class AccuracyCheck:
    """An accuracy run's result: ``accuracy`` is pass, fail, or "" when there was nothing to check it against."""

    accuracy: Literal["pass", "fail", ""]
    metric: str
    value: float
    notes: str
    settings: dict[str, Any]
    log_dir: str
    outputs: int


def top1_agreement(got: Sequence[Sequence[np.ndarray]], want: Sequence[Sequence[np.ndarray]]) -> float | None:
    """The share of inputs whose top-1 class matches the reference's, where every sample's first output is a
    ``[batch, classes]`` score matrix (a classifier); None for any other output (no task metric to apply)."""
    agree = total = 0
    for outs, refs in zip(got, want, strict=True):
        if not outs or not refs:
            return None
        a, b = np.asarray(outs[0]), np.asarray(refs[0])
        if a.ndim != 2 or a.shape != b.shape or a.shape[1] < 2:
            return None
        agree += int(np.sum(a.argmax(axis=1) == b.argmax(axis=1)))
        total += a.shape[0]
    return agree / total if total else None


#: Lower precisions pass when this share of top-1 classes agrees with the fp32 reference (MLPerf: 99% of fp32).
TOP1_AGREEMENT = 0.99


def run_accuracy(
    model: SuiteModel,
    session: Session,
    reference: Session,
    reference_name: str,
    precision: str,
    batch: int,
    settings: ScenarioSettings,
    log_dir: Path,
    samples: int = 3,
    rtol: float = 1e-3,
    atol: float = 1e-4,
) -> AccuracyCheck:
    """LoadGen's AccuracyOnly run over every QSL sample, then the outputs checked: an fp32 route element-wise
    against the fp32 reference; a lower precision by top-1 agreement where the model is a classifier, else
    unchecked (no task metric for its outputs)."""
    plan = query_plan(model, "accuracy", batch)
    qsl = SuiteQSL(model, plan, samples, settings.seed)
    qsl.load(range(samples))
    sut = SessionSUT(session, qsl, keep_outputs=True)
    _start("SingleStream", sut, settings, log_dir, model.name, "accuracy", Calibration(1.0, 1.0))
    indices = sorted(sut.outputs)
    if indices != list(range(samples)):
        raise RuntimeError(f"LoadGen's accuracy run returned samples {indices}, expected 0..{samples - 1}")
    got = [sut.outputs[i] for i in indices]
    qsl.load(indices)  # LoadGen unloaded them when its run ended
    ref_sut = SessionSUT(reference, qsl)
    want = [ref_sut.process([i])[0] for i in indices]
    base = {"reference": reference_name, "seed": settings.seed, "samples": samples, "loadgen_mode": "AccuracyOnly"}
    if precision == "fp32":
        result: AccuracyResult = compare_outputs(got, want, rtol, atol)
        notes = f"vs {reference_name}: max rel {result.max_rel_error:.3g}" + (
            f"; {result.detail}" if result.detail else ""
        )
        return AccuracyCheck(
            "pass" if result.ok else "fail",
            "max_abs_error",
            result.max_abs_error,
            notes,
            {**base, "rtol": rtol, "atol": atol},
            str(log_dir),
            len(got),
        )
    agreement = top1_agreement(got, want)
    if agreement is None:
        return AccuracyCheck(
            "",
            "max_abs_error",
            compare_outputs(got, want, math.inf, math.inf).max_abs_error,
            f"unchecked: {precision} has no task metric for {model.name}'s outputs (not a classifier); "
            f"max |error| vs {reference_name} fp32 recorded for information",
            base,
            str(log_dir),
            len(got),
        )
    return AccuracyCheck(
        "pass" if agreement >= TOP1_AGREEMENT else "fail",
        "top1_agreement",
        agreement,
        f"{precision} vs {reference_name} fp32: top-1 agreement {agreement:.3f} (pass at {TOP1_AGREEMENT})",
        {**base, "min_top1_agreement": TOP1_AGREEMENT},
        str(log_dir),
        len(got),
    )


# --- showing a run ----------------------------------------------------------------------------------------------


class RunNotFound(ValueError):
    """``bench show``: no run's logs under that name."""


def find_log_dir(run: str, db: Path | None = None) -> Path:
    """A run's log directory: ``run`` itself when it holds a LoadGen summary, else the log directory of the row in
    ``db`` whose ``row_id`` starts with ``run`` (relative log paths are relative to the database's directory)."""
    direct = Path(run)
    if (direct / SUMMARY).is_file():
        return direct
    if direct.name == SUMMARY and direct.is_file():
        return direct.parent
    if db is None:
        raise RunNotFound(f"{run}: not a log directory (no {SUMMARY}); give --db to look it up as a row id")
    import pandas as pd

    from perfmodels.results_db import read_results

    frame = read_results(db)
    if len(run) < 4:
        raise RunNotFound(f"{run}: give at least 4 characters of a row id")
    matches = frame[frame["row_id"].astype(str).str.startswith(run)]
    if matches.empty:
        raise RunNotFound(f"{run}: no row of {db} has that row id")
    if len(matches) > 1:
        raise RunNotFound(f"{run}: {len(matches)} rows of {db} match; give more of the row id")
    log = matches["log_dir"].iloc[0]
    if pd.isna(log) or str(log) == "":
        driver = matches["driver"].iloc[0]
        raise RunNotFound(f"{run}: row measured by the {driver or 'harness'} driver, which keeps no LoadGen logs")
    path = Path(str(log))
    path = path if path.is_absolute() else db.parent / path
    if not (path / SUMMARY).is_file():
        raise RunNotFound(f"{run}: its logs are gone ({path / SUMMARY} does not exist)")
    return path


def show_summary(run: str, db: Path | None = None) -> str:
    """The LoadGen summary of a run (``bench show``), headed by where it lives."""
    log_dir = find_log_dir(run, db)
    return f"# {log_dir / SUMMARY}\n" + (log_dir / SUMMARY).read_text(encoding="utf-8", errors="replace")


__all__ = [
    "KEPT_LOGS",
    "AccuracyCheck",
    "Driver",
    "DriverChoice",
    "DriverUnavailable",
    "QueryPlan",
    "RunNotFound",
    "SessionSUT",
    "SuiteQSL",
    "find_log_dir",
    "load_loadgen",
    "query_plan",
    "resolve_driver",
    "run_accuracy",
    "run_loadgen",
    "show_summary",
    "top1_agreement",
    "user_conf",
    "verdict_of",
]
