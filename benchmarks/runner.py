"""Run the model suite through backends and scenarios, and turn each measurement into a database row.

The work is a list of ``Job``s (model × backend × threads × precision); each job prepares one session and runs every
requested batch and scenario on it. MLCommons LoadGen drives the scenarios where it is installed
(``benchmarks.loadgen_driver``; its logs go next to the shard, in ``<shard>.logs/``), the home-made
``benchmarks.harness`` where not; each row names its ``driver``, LoadGen's ``verdict``, and ``flags`` (``busy`` when
other processes used more than ``BUSY_OTHER_CPU`` cores during the run). Campaigns split the same list into slices.
Model features (FLOPs, bytes, params) come from an ``analyser`` the caller passes in: the CLI wires
``benchmarks.features.model_features`` in, tests a stand-in.

Example::

    >>> request = BenchRequest(models=suite("quick"), backends=("onnxruntime",), scenarios=("SingleStream",))
    >>> for outcome in run_benchmarks(request, analyser=my_analyser, db_path="shard.csv"):  # doctest: +SKIP
    ...     print(outcome.describe())
"""

from __future__ import annotations

import functools
import json
import math
import tempfile
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

import numpy as np
import onnx

from benchmarks.backends import Backend, BackendSkipped, Session, get_backend
from benchmarks.harness import (
    AccuracyResult,
    Scenario,
    ScenarioResult,
    ScenarioSettings,
    check_accuracy,
    run_scenario,
    samples_per_query,
)
from benchmarks.loadgen_driver import Driver, DriverChoice, query_plan, resolve_driver, run_accuracy, run_loadgen
from benchmarks.models import SuiteModel
from benchmarks.results.provenance import Interference, collect, interference, load_average
from perfmodels.results_db import BUSY_OTHER_CPU, append_rows, make_row, validate_row

#: Feeds cycled through by a scenario (distinct seeded samples, prepared before timing).
SAMPLE_SETS = 3


@dataclass(frozen=True)
class ModelFeatures:
    """What performance models need to know about a model, per sample (batch 1)."""

    flops_per_sample: float
    activation_bytes_per_sample: float
    params: float
    flops_by_class: dict[str, float] = field(default_factory=dict)
    ops_by_class: dict[str, int] = field(default_factory=dict)
    #: The model's kernel units (``analysis.units.encode_units``), or "" when the analyser gives none.
    units: str = ""


Analyser = Callable[[onnx.ModelProto], ModelFeatures]
RunScenario = Scenario | Literal["accuracy"]


@dataclass(frozen=True)
class BenchRequest:
    models: Sequence[SuiteModel]
    backends: Sequence[str] = ("appopt-runtime", "onnxruntime", "torch")
    scenarios: Sequence[RunScenario] = ("SingleStream",)
    threads: Sequence[int] = (1,)
    batches: Sequence[int] = (1,)
    precisions: Sequence[str] = ("fp32",)
    settings: ScenarioSettings = field(default_factory=ScenarioSettings)
    #: Backend whose outputs the accuracy scenario compares against.
    reference: str = "onnxruntime"
    #: Re-measure a scenario up to this many times while other processes used more than ``BUSY_OTHER_CPU`` cores
    #: during it (the last attempt's row is kept either way; its ``other_cpu`` says how busy the machine was).
    retries_under_load: int = 0
    #: Seconds to wait before such a retry (lets a short burst of other work pass).
    retry_wait_s: float = 2.0
    #: Scenario driver: ``auto`` = LoadGen where installed, else the home-made harness.
    driver: DriverChoice = "auto"
    #: Where LoadGen logs go (one directory per run); None: ``<db>.logs/`` next to the database, else a temp dir.
    log_root: Path | None = None


@dataclass(frozen=True)
class Job:
    """One session's worth of work: a model on a backend at a thread count and precision."""

    model: SuiteModel
    backend: str
    threads: int
    precision: str

    @property
    def label(self) -> str:
        return f"{self.model.name}/{self.backend}/{self.threads}t/{self.precision}"


@dataclass(frozen=True)
class Outcome:
    """One (job, batch, scenario) measurement, or why it was skipped or failed."""

    job: Job
    batch: int
    scenario: str
    status: Literal["ok", "skipped", "failed"]
    reason: str = ""
    row: dict[str, Any] | None = None

    @property
    def warnings(self) -> list[str]:
        """What the terminal should warn about: a busy machine during the run."""
        row = self.row or {}
        if "busy" in str(row.get("flags") or "").split():
            return [
                f"{self.job.label} b{self.batch} {self.scenario}: measured on a busy machine (other processes used "
                f"{row.get('other_cpu') or 0.0:.2f} cores); the fit leaves this row out"
            ]
        return []

    def describe(self) -> str:
        head = f"{self.job.label} b{self.batch} {self.scenario}"
        if self.row is None:
            return f"{head}: {self.status}: {self.reason}"
        text = f"{head}: {self.row['metric']} = {self.row['value']:.4g} {self.row['unit']}"
        if self.row.get("verdict"):
            text += f" [{self.row['driver']} {self.row['verdict']}]"
        if self.row.get("accuracy") is None and self.scenario == "accuracy":
            text += " [unchecked]"
        return text + (" [busy]" if self.warnings else "")


def outcome_label(job: Job, batch: int, scenario: str) -> str:
    """What a progress display shows for one measurement."""
    return f"{job.label} b{batch} {scenario}"


def planned_labels(request: BenchRequest, jobs: Sequence[Job] | None = None) -> list[str]:
    """Every measurement's label in the order ``run_benchmarks`` yields their outcomes."""
    return [
        outcome_label(job, batch, scenario)
        for job in (plan_jobs(request) if jobs is None else jobs)
        for batch in request.batches
        for scenario in request.scenarios
    ]


def plan_jobs(request: BenchRequest) -> list[Job]:
    """Every job of the request, model-major (one model's weights live at a time)."""
    return [
        Job(model, backend, threads, precision)
        for model in request.models
        for backend in request.backends
        for threads in request.threads
        for precision in request.precisions
    ]


def count_measurements(request: BenchRequest) -> int:
    return len(plan_jobs(request)) * len(request.batches) * len(request.scenarios)


@functools.lru_cache(maxsize=8)
def gemm_peak_gflops(threads: int) -> float:
    """This machine's measured float32 GEMM rate (cached per thread count); see ``benchmarks.kernels``."""
    from benchmarks.kernels import measure_gemm_peak

    return measure_gemm_peak(threads)


@functools.lru_cache(maxsize=1)
def memory_bandwidth_gbs() -> float:
    """This machine's measured copy bandwidth (cached); see ``benchmarks.kernels``."""
    from benchmarks.kernels import measure_bandwidth

    return measure_bandwidth() / 1e9


@functools.lru_cache(maxsize=1)
def cache_bandwidth_gbs() -> float:
    """This machine's measured bandwidth for data that stays in the caches (cached); see ``benchmarks.kernels``."""
    from benchmarks.kernels import measure_cache_bandwidth

    return measure_cache_bandwidth() / 1e9


def _sut(model: SuiteModel, session: Session, samples: int, seed: int) -> Callable[[int], object]:
    """A SUT running ``samples`` samples per query: one call at that batch, or one call per sample (fixed batch)."""
    per_call = samples if model.supports_batch(samples) else 1
    calls = samples // per_call
    feeds = [model.feeds(per_call, seed + s) for s in range(SAMPLE_SETS)]

    def run_query(i: int) -> object:
        out: object = None
        for c in range(calls):
            out = session.run(feeds[(i + c) % SAMPLE_SETS])
        return out

    return run_query


def _query_samples(scenario: RunScenario, batch: int, settings: ScenarioSettings) -> int:
    return batch if scenario == "accuracy" else samples_per_query(scenario, replace(settings, samples_per_query=batch))


@dataclass(frozen=True)
class RunContext:
    """What every measurement of one ``run_benchmarks`` call shares: the driver and where its logs go."""

    driver: Driver = "harness"
    log_root: Path | None = None
    #: The directory row ``log_dir`` paths are relative to (the database's), when the logs are under it.
    db_dir: Path | None = None

    def new_log_dir(self, label: str, row_id: str) -> Path:
        root = self.log_root or Path(tempfile.gettempdir())
        return root / f"{label.replace('/', '-').replace(' ', '-')}-{row_id[:12]}"

    def row_path(self, log_dir: str) -> str:
        """``log_dir`` as the row records it: relative to the database's directory where it lies below it."""
        if not log_dir or self.db_dir is None:
            return log_dir
        path = Path(log_dir).resolve()
        return str(path.relative_to(self.db_dir)) if path.is_relative_to(self.db_dir) else str(path)


def run_context(request: BenchRequest, db_path: str | Path | None) -> RunContext:
    """The driver (``request.driver`` resolved) and the log root: ``request.log_root``, else ``<db>.logs/``."""
    driver = resolve_driver(request.driver)
    db_dir = Path(db_path).resolve().parent if db_path is not None else None
    log_root = request.log_root
    if log_root is None and db_path is not None:
        log_root = Path(db_path).with_suffix(".logs")
    if log_root is None and driver == "loadgen":
        log_root = Path(tempfile.mkdtemp(prefix="appopt-loadgen-"))  # no database to keep them next to
    return RunContext(driver, log_root, db_dir)


def run_job(
    job: Job,
    request: BenchRequest,
    analyser: Analyser | None,
    reference_cache: dict[tuple[str, str], Any] | None = None,
    context: RunContext | None = None,
) -> Iterator[Outcome]:
    """Prepare the job's session and run every batch × scenario on it."""
    context = context or RunContext()
    backend = get_backend(job.backend)
    try:
        session = backend.prepare(job.model.model(), threads=job.threads, precision=job.precision)
    except BackendSkipped as skipped:
        for batch in request.batches:
            for scenario in request.scenarios:
                yield Outcome(job, batch, scenario, "skipped", str(skipped))
        return
    except Exception as error:  # a backend crashing on one model must not end the whole run
        for batch in request.batches:
            for scenario in request.scenarios:
                yield Outcome(job, batch, scenario, "failed", f"prepare: {type(error).__name__}: {str(error)[:200]}")
        return
    features = analyser(job.model.model()) if analyser else None
    figures = _session_figures(job, request, backend, session, reference_cache)
    for batch in request.batches:
        for scenario in request.scenarios:
            samples = _query_samples(scenario, batch, request.settings)
            if not job.model.supports_batch(batch):
                yield Outcome(
                    job, batch, scenario, "skipped", f"{job.model.name} runs only at batch {job.model.fixed_batch}"
                )
                continue
            row_id = uuid.uuid4().hex
            log_dir = context.new_log_dir(outcome_label(job, batch, scenario), row_id)
            try:
                batch_figures = {**figures, **_batch_figures(session, batch)}
                if scenario == "accuracy" and context.driver == "loadgen":
                    reference = _reference_session(job, request, reference_cache)
                    check = run_accuracy(
                        job.model,
                        session,
                        reference,
                        _reference_name(job, request),
                        job.precision,
                        batch,
                        request.settings,
                        log_dir,
                        SAMPLE_SETS,
                    )
                    row = _loadgen_accuracy_row(job, backend, batch, features, check, context, row_id)
                elif scenario == "accuracy":
                    reference = _reference_session(job, request, reference_cache)
                    accuracy = _accuracy(job.model, session, reference, batch, request.settings.seed)
                    row = _accuracy_row(job, backend, batch, request, features, accuracy)
                else:
                    settings = replace(request.settings, samples_per_query=batch)
                    if context.driver == "loadgen":
                        result, probe = _measure_loadgen(scenario, job, session, batch, settings, request, log_dir)
                    else:
                        sut = _sut(job.model, session, samples, request.settings.seed)
                        result, probe = _measure(scenario, sut, settings, request)
                    row = _scenario_row(job, backend, batch, features, result, probe, context, row_id)
                    row = _with_figures(row, batch_figures)
            except BackendSkipped as skipped:
                yield Outcome(job, batch, scenario, "skipped", str(skipped))
                continue
            except Exception as error:  # a kernel failing mid-run is a result to report, not a crash of the run
                yield Outcome(job, batch, scenario, "failed", f"{type(error).__name__}: {str(error)[:200]}")
                continue
            yield Outcome(job, batch, scenario, "ok", row=row)


def _session_figures(
    job: Job, request: BenchRequest, backend: Backend, session: Session, cache: dict[tuple[str, str], Any] | None
) -> dict[str, Any]:
    """What a compiled session adds to each of its timing rows: its compile time (``compile_ms``, from sessions that
    keep one), a tuned session's search (``tune_s``, trials, cached) and, for ``records_error`` backends, the max abs
    error against the reference at batch 1."""
    figures: dict[str, Any] = {}
    compile_ms = getattr(session, "compile_ms", None)
    if compile_ms is not None:
        figures["compile_ms"] = float(compile_ms)
    tune_s = getattr(session, "tune_s", None)
    if tune_s is not None:  # a tuned session's search (tvm-tuned): seconds, budget, and whether it came cached
        figures["tune_s"] = float(tune_s)
        figures["tuning_trials"] = int(getattr(session, "tuning_trials", 0) or 0)
        figures["tuning_cached"] = bool(getattr(session, "tuning_cached", False))
    if backend.records_error:
        try:
            reference = _reference_session(job, request, cache)
            accuracy = _accuracy(job.model, session, reference, 1, request.settings.seed)
            figures["max_abs_error"] = accuracy.max_abs_error
            figures["reference"] = _reference_name(job, request)
        except Exception as error:  # an unavailable reference leaves the error unrecorded, said in the notes
            figures["error_unchecked"] = f"{type(error).__name__}: {str(error)[:120]}"
    return figures


def _batch_figures(session: Session, batch: int) -> dict[str, Any]:
    """What a session specialised per batch size (``tvm-tuned``) did for ``batch``: its search and compile, run now
    when not yet, before the batch is measured (the session-wide figures are its first batch's)."""
    per_batch = getattr(session, "batch_figures", None)
    return dict(per_batch(batch)) if per_batch is not None else {}


def _with_figures(row: dict[str, Any], figures: dict[str, Any]) -> dict[str, Any]:
    """``row`` with the session's figures: compile time in its settings and notes, the max abs error in its column."""
    if not figures:
        return row
    notes = [row["notes"]] if row.get("notes") else []
    settings = json.loads(row["settings"]) if row.get("settings") else {}
    if "compile_ms" in figures:
        settings["compile_ms"] = figures["compile_ms"]
        notes.append(f"compile {figures['compile_ms']:.0f} ms")
    if "tune_s" in figures:
        for key in ("tune_s", "tuning_trials", "tuning_cached"):
            settings[key] = figures[key]
        cached = ", records cached" if figures["tuning_cached"] else ""
        notes.append(f"tuned {figures['tune_s']:.0f} s over {figures['tuning_trials']} trials{cached}")
    if "max_abs_error" in figures:
        notes.append(f"max abs error {figures['max_abs_error']:.3g} vs {figures['reference']}")
    if "error_unchecked" in figures:
        notes.append(f"error unchecked: {figures['error_unchecked']}")
    updated = {**row, "settings": json.dumps(settings, sort_keys=True, default=float), "notes": "; ".join(notes)}
    if "max_abs_error" in figures:
        updated["max_abs_error"] = figures["max_abs_error"]
    validate_row(updated)
    return updated


def _measure(
    scenario: Scenario, sut: Callable[[int], object], settings: ScenarioSettings, request: BenchRequest
) -> tuple[ScenarioResult, Interference]:
    """Run the scenario, watching other processes' CPU use; re-run it (``retries_under_load``) if they were busy."""
    import time

    for attempt in range(request.retries_under_load + 1):
        if attempt:
            time.sleep(request.retry_wait_s)
        with interference() as probe:
            result = run_scenario(scenario, sut, settings)
        if probe.other_cpu is None or probe.other_cpu <= BUSY_OTHER_CPU:
            break
    return result, probe


def _measure_loadgen(
    scenario: Scenario,
    job: Job,
    session: Session,
    batch: int,
    settings: ScenarioSettings,
    request: BenchRequest,
    log_dir: Path,
) -> tuple[ScenarioResult, Interference]:
    """``_measure`` with LoadGen driving the scenario (the logs of the last attempt stay in ``log_dir``)."""
    import time

    plan = query_plan(job.model, scenario, batch, settings.multistream_samples_per_query)
    for attempt in range(request.retries_under_load + 1):
        if attempt:
            time.sleep(request.retry_wait_s)
        with interference() as probe:
            result = run_loadgen(scenario, job.model, session, plan, settings, log_dir, SAMPLE_SETS)
        if probe.other_cpu is None or probe.other_cpu <= BUSY_OTHER_CPU:
            break
    return result, probe


def _reference_name(job: Job, request: BenchRequest) -> str:
    return request.reference if request.reference != job.backend else "onnx-reference"


def _reference_session(job: Job, request: BenchRequest, cache: dict[tuple[str, str], Any] | None) -> Session:
    name = _reference_name(job, request)
    key = (job.model.name, name)
    if cache is not None and key in cache:
        return cache[key]
    session = get_backend(name).prepare(job.model.model(), threads=job.threads)
    if cache is not None:
        cache.clear()  # one model's reference at a time
        cache[key] = session
    return session


def _accuracy(model: SuiteModel, session: Session, reference: Session, batch: int, seed: int) -> AccuracyResult:
    per_call = batch if model.supports_batch(batch) else 1
    samples = [model.feeds(per_call, seed + s) for s in range(SAMPLE_SETS)]
    return check_accuracy(session.run, reference.run, samples)


def _base_row(job: Job, backend: Backend, batch: int, features: ModelFeatures | None) -> dict[str, Any]:
    prov = collect()
    versions = backend.versions()
    main_package = next(iter(versions.values()), "")
    row: dict[str, Any] = {
        "source": "measured",
        "target": prov.target,
        **prov.as_dict(),  # host, CPU model and flags, cores, accelerator, BLAS, revision
        "backend": backend.name,
        "framework": backend.route.framework,
        "compiler": backend.route.compiler,
        "library": backend.route.library,
        "layout": backend.route.layout,
        "backend_version": main_package,
        "library_versions": versions,
        "threads": job.threads,
        "precision": job.precision,
        "mode": "inference",
        "model": job.model.name,
        "family": job.model.family,
        "batch": batch,
        "peak_gflops": gemm_peak_gflops(job.threads),
        "bandwidth_gbs": memory_bandwidth_gbs(),
        "cache_bandwidth_gbs": cache_bandwidth_gbs(),
        "load_avg": load_average(),
    }
    if features is not None:
        row.update(
            flops_per_sample=features.flops_per_sample,
            flops_by_class=features.flops_by_class,
            ops_by_class=features.ops_by_class,
            activation_bytes_per_sample=features.activation_bytes_per_sample,
            params=features.params,
            units=features.units or None,
        )
    return row


def _scenario_row(
    job: Job,
    backend: Backend,
    batch: int,
    features: ModelFeatures | None,
    result: ScenarioResult,
    probe: Interference | None = None,
    context: RunContext | None = None,
    row_id: str | None = None,
) -> dict[str, Any]:
    settings = {**result.settings.as_dict(), **result.extra}
    finite = [v for v in result.latencies_ms if math.isfinite(v)] or [
        v for v in result.reported_ms.values() if math.isfinite(v)
    ]
    other_cpu = None if probe is None else probe.other_cpu
    busy = other_cpu is not None and other_cpu > BUSY_OTHER_CPU
    return make_row(
        **_base_row(job, backend, batch, features),
        **({"row_id": row_id} if row_id else {}),
        other_cpu=other_cpu,
        flags="busy" if busy else None,
        driver=result.driver,
        verdict=result.verdict or None,
        verdict_reason=result.verdict_reason or None,
        log_dir=(context or RunContext()).row_path(result.log_dir) or None,
        scenario=result.scenario,
        settings=json.dumps(settings, sort_keys=True, default=float),
        metric=result.metric,
        value=result.value,
        unit=result.unit,
        median_ms=result.median_ms if finite else None,
        cpu_ms=result.median_cpu_ms if result.cpu_ms else None,
        p90_ms=result.p90_ms if finite else None,
        p99_ms=result.p99_ms if finite else None,
        samples_per_s=result.samples_per_second if result.duration_s > 0 and result.queries else None,
        queries=result.queries,
        duration_s=result.duration_s,
        notes=f"{result.samples_per_query} sample(s) per query",
    )


def _loadgen_accuracy_row(
    job: Job,
    backend: Backend,
    batch: int,
    features: ModelFeatures | None,
    check: Any,
    context: RunContext,
    row_id: str,
) -> dict[str, Any]:
    return make_row(
        **_base_row(job, backend, batch, features),
        row_id=row_id,
        driver="loadgen",
        log_dir=context.row_path(check.log_dir) or None,
        scenario="accuracy",
        settings=check.settings,
        metric=check.metric,
        value=check.value,
        unit="",
        queries=check.outputs,
        accuracy=check.accuracy or None,
        max_abs_error=check.value if check.metric == "max_abs_error" else None,
        notes=check.notes,
    )


def _accuracy_row(
    job: Job,
    backend: Backend,
    batch: int,
    request: BenchRequest,
    features: ModelFeatures | None,
    accuracy: AccuracyResult,
) -> dict[str, Any]:
    reference = request.reference if request.reference != job.backend else "onnx-reference"
    return make_row(
        **_base_row(job, backend, batch, features),
        scenario="accuracy",
        settings={"reference": reference, "rtol": accuracy.rtol, "atol": accuracy.atol, "seed": request.settings.seed},
        metric="max_abs_error",
        value=accuracy.max_abs_error,
        unit="",
        queries=accuracy.samples,
        driver="harness",
        accuracy="pass" if accuracy.ok else "fail",
        max_abs_error=accuracy.max_abs_error,
        notes=f"vs {reference}: max rel {accuracy.max_rel_error:.3g}"
        + (f"; {accuracy.detail}" if accuracy.detail else ""),
    )


def run_benchmarks(
    request: BenchRequest,
    analyser: Analyser | None = None,
    db_path: str | Path | None = None,
    jobs: Sequence[Job] | None = None,
) -> Iterator[Outcome]:
    """Run ``jobs`` (default: all of the request's), appending each measured row to ``db_path`` as it completes."""
    reference_cache: dict[tuple[str, str], Any] = {}
    context = run_context(request, db_path)
    for job in plan_jobs(request) if jobs is None else jobs:
        for outcome in run_job(job, request, analyser, reference_cache, context):
            if outcome.row is not None and db_path is not None:
                append_rows(db_path, [outcome.row])
            yield outcome


def feeds_digest(feeds: dict[str, np.ndarray]) -> str:
    """A short fingerprint of seeded inputs (tests use it to check determinism)."""
    import hashlib

    h = hashlib.sha256()
    for name in sorted(feeds):
        h.update(name.encode())
        h.update(np.ascontiguousarray(feeds[name]).tobytes())
    return h.hexdigest()[:16]
