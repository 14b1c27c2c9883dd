"""Regenerate the shipped result database (``benchmarks/results/default.csv.gz``) from scratch on this machine.

What it measures (see ``default_requests``), in about 75 minutes on 2 cores (``RECORD_BUDGET_S`` is the limit):

* SingleStream, fp32: every suite model (core, light model zoo, tiny) on our runtime, onnxruntime (level ALL =
  NCHWc, and level EXTENDED = NCHW), OpenVINO and PyTorch eager (where installed) at 1 and 2 threads, batch 1 and 8
  where the model allows; each model on every backend before the next model. These are the rows the performance
  models are fitted on.
* onnxruntime int8 (dynamic quantisation), batch 1, both thread counts; accuracy of every other backend against
  onnxruntime (1 thread, batch 1); MultiStream, Server and Offline on the core models; the kernel suite;
* the kernel-unit sweep (``benchmarks.unit_sweep``, every round, about an hour): sampled kernel units measured
  alone on every backend, the backends in turns, what the kernel-level performance models learn from.

Each measurement stops at ``min_queries`` and ``min_duration_s``, or at ``max_duration_s`` with at least three queries
for slow configurations. Other processes' CPU use is measured around every measurement (``other_cpu``); one that ran
under load is repeated once after a pause, and the fit uses wall time only for rows measured quietly. A side file
(``default.csv.record.json``) records how long the run took, how quiet the machine was before it and how many rows were
still measured under load. Then it adds the seeds' literature rows and replaces the database atomically.

Run it through the CLI (which supplies the model analyser and the catalog's literature figures)::

    appopt bench record-default                 # or: python -m cli.bench_cmds bench record-default
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchmarks.harness import ScenarioSettings
from benchmarks.kernels import kernel_suite, run_kernel_suite
from benchmarks.models import suite
from benchmarks.results.provenance import collect, load_average, wait_until_quiet
from benchmarks.runner import Analyser, BenchRequest, Outcome, run_benchmarks
from perfmodels.results_db import BUSY_OTHER_CPU, DEFAULT_DB, frame_rows, read_results, rewrite_rows, write_rows

#: Timing settings for the shipped database: fast configurations run ≥ 5 queries and ≥ 0.5 s, slow ones stop after
#: 2.5 s with at least 3 queries (a median of 3 on a quiet machine is within a few per cent).
RECORD_SETTINGS = ScenarioSettings(
    min_duration_s=0.5, min_queries=5, max_duration_s=2.5, warmup_queries=2, warmup_max_s=0.5
)
#: The whole recording (suite models, kernel suite, kernel-unit sweep) must finish within this many seconds on a
#: 2-core machine (checked by the CLI's report).
RECORD_BUDGET_S = 90 * 60
#: The backends whose SingleStream rows the performance models fit (an engine not installed is skipped).
MEASURED_BACKENDS = ("appopt-runtime", "onnxruntime", "onnxruntime-extended", "openvino", "torch")


def default_requests(
    settings: ScenarioSettings = RECORD_SETTINGS, threads: Sequence[int] = (1, 2), retries_under_load: int = 1
) -> list[BenchRequest]:
    """What ``record_default`` measures, in order (the fitted SingleStream rows first)."""
    core, zoo, tiny = suite("core"), suite("zoo"), suite("tiny")
    everything = core + zoo + tiny
    scenarios = replace(settings, min_queries=5, offline_samples=16, server_search_steps=4)
    return [
        BenchRequest(
            everything,
            MEASURED_BACKENDS,
            ("SingleStream",),
            threads,
            (1, 8),
            ("fp32",),
            settings,
            retries_under_load=retries_under_load,
        ),
        BenchRequest(
            everything,
            ("onnxruntime",),
            ("SingleStream",),
            threads,
            (1,),
            ("int8",),
            settings,
            retries_under_load=retries_under_load,
        ),
        BenchRequest(
            everything,
            ("appopt-runtime", "onnxruntime-extended", "torch"),
            ("accuracy",),
            (1,),
            (1,),
            ("fp32",),
            settings,
            reference="onnxruntime",
        ),
        BenchRequest(
            core,
            ("appopt-runtime", "onnxruntime"),
            ("MultiStream", "Offline", "Server"),
            (max(threads),),
            (1,),
            ("fp32",),
            scenarios,
            retries_under_load=retries_under_load,
        ),
    ]


def record_default(
    analyser: Analyser,
    literature: Iterable[dict[str, Any]],
    out: Path = DEFAULT_DB,
    settings: ScenarioSettings = RECORD_SETTINGS,
    threads: Sequence[int] = (1, 2),
    kernels: bool = True,
    progress: Callable[[str], None] = print,
    quiet_wait_s: float = 60.0,
    units: bool = True,
) -> Path:
    """Measure everything ``default_requests`` lists into a side shard, then replace ``out`` with shard + literature.

    Waits up to ``quiet_wait_s`` for other processes to go quiet first (and says so if they do not). The shard
    (``out`` with ``.partial.csv``) is appended row by row, so an interrupted run keeps what it measured; ``out``
    itself is only replaced once everything is done, together with its ``.record.json`` summary.
    """
    started, wall0 = datetime.now(UTC), time.perf_counter()
    shard = out.with_suffix(".partial.csv")
    shard.unlink(missing_ok=True)
    before = wait_until_quiet(BUSY_OTHER_CPU, window_s=3.0, timeout_s=quiet_wait_s)
    load_before = load_average()
    if before is not None and before > BUSY_OTHER_CPU:
        progress(f"warning: other processes use {before:.2f} cores; rows measured under load are flagged")
    for request in default_requests(settings, threads):
        for outcome in run_benchmarks(request, analyser, shard):
            progress(f"[{time.perf_counter() - wall0:6.0f} s] {_line(outcome)}")
    if kernels:
        for kernel_outcome in run_kernel_suite(
            kernel_suite("all"), ["onnxruntime", "appopt-runtime"], list(threads), settings, str(shard)
        ):
            progress(f"[{time.perf_counter() - wall0:6.0f} s] {kernel_outcome.describe()}")
    if units:
        from benchmarks.unit_sweep import run_unit_sweep, sample_units

        for unit_outcome in run_unit_sweep(sample_units(), str(shard), threads=tuple(threads)):
            progress(f"[{time.perf_counter() - wall0:6.0f} s] {unit_outcome.describe()}")
    measured = frame_rows(read_results(shard)) if shard.exists() else []
    rows = [*literature, *measured]
    summary = _summary(measured, started, time.perf_counter() - wall0, before, load_before, settings, threads)
    write_rows(out, rows)
    summary_path(out).write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    shard.unlink(missing_ok=True)
    _store_evaluation(out, progress)
    progress(
        f"wrote {len(rows)} rows to {out} in {summary['duration_s'] / 60:.1f} min; "
        f"{summary['rows_under_load']} of {len(measured)} measured under load"
    )
    return out


def _store_evaluation(db: Path, progress: Callable[[str], None]) -> None:
    """Evaluate the model fitted to the new database and store the figures next to it (plans show them)."""
    from perfmodels.evaluate import leave_one_architecture_out
    from perfmodels.fitted import write_evaluation_summary

    try:
        evaluation = leave_one_architecture_out(read_results(db))
    except ValueError as error:
        progress(f"no evaluation: {error}")
        return
    for line in evaluation.lines():
        progress(line)
    progress(f"wrote {write_evaluation_summary(db, evaluation)}")


def summary_path(db: Path) -> Path:
    """Where ``record_default`` writes its summary for ``db``: its name with the last suffix replaced, as for the
    evaluation beside it (``default.csv`` → ``default.record.json``; ``default.csv.gz`` → ``default.csv.record.json``).
    """
    return db.with_suffix(".record.json")


def _summary(
    measured: list[dict[str, Any]],
    started: datetime,
    duration_s: float,
    other_cpu_before: float | None,
    load_before: float | None,
    settings: ScenarioSettings,
    threads: Sequence[int],
) -> dict[str, Any]:
    under_load = [r for r in measured if (r.get("other_cpu") or 0.0) > BUSY_OTHER_CPU]
    loads = [float(r["load_avg"]) for r in measured if r.get("load_avg") is not None]
    prov = collect()
    return {
        "started": started.isoformat(timespec="seconds"),
        "duration_s": round(duration_s, 1),
        "budget_s": RECORD_BUDGET_S,
        "target": prov.target,
        "host": prov.host,
        "appopt_revision": prov.appopt_revision,
        "threads": list(threads),
        "settings": settings.as_dict(),
        "other_cpu_before": other_cpu_before,
        "load_avg_before": load_before,
        "load_avg_max": max(loads) if loads else None,
        "rows_measured": len(measured),
        "rows_under_load": len(under_load),
        "busy_other_cpu_threshold": BUSY_OTHER_CPU,
        "under_load": sorted(
            f"{r['model']}/{r['backend']}/{r['threads']}t/b{r['batch']}/{r['scenario']}" for r in under_load
        ),
    }


def _line(outcome: Outcome) -> str:
    return outcome.describe()


def refresh_features(analyser: Analyser, path: Path = DEFAULT_DB) -> int:
    """Recompute the model features (FLOPs by op class, node counts, bytes, params) of every suite-model row in
    ``path`` with ``analyser`` and rewrite the file atomically, holding the database's lock; returns how many rows
    changed.

    For when the model analyser learns something new (an op class, a shape it could not resolve) after the
    measurements were made: the measurements stay, the features follow the analyser the planner uses. Inference rows
    take their model from the inference suites (breadth and held-out included), ``mode=training`` rows from the
    training suite (``benchmarks.features.training_model``; the same name can mean another graph there). Rows of
    other models are left alone.
    """
    from benchmarks.features import training_model

    models = {m.name: m for m in suite("all,breadth,heldout")}
    features: dict[tuple[bool, str], dict[str, Any] | None] = {}
    changed = 0

    def features_of(training: bool, name: str) -> dict[str, Any] | None:
        if (training, name) not in features:
            model = training_model(name) if training else models[name].model() if name in models else None
            f = None if model is None else analyser(model)
            features[training, name] = (
                None
                if f is None
                else {
                    "flops_per_sample": f.flops_per_sample,
                    "flops_by_class": json.dumps(f.flops_by_class, sort_keys=True, separators=(",", ":")),
                    "ops_by_class": json.dumps(f.ops_by_class, sort_keys=True, separators=(",", ":")),
                    "activation_bytes_per_sample": f.activation_bytes_per_sample,
                    "params": f.params,
                    **({} if training else {"units": f.units or None}),  # training rows carry no kernel units
                }
            )
        return features[training, name]

    def refresh(rows: list[dict[str, Any]]) -> list[dict[str, Any]] | None:
        nonlocal changed
        for row in rows:
            if row.get("source") != "measured" or row.get("flops_per_sample") is None:
                continue
            new = features_of(row.get("mode") == "training", str(row.get("model")))
            if new is not None and any(row.get(k) != v for k, v in new.items()):
                row.update(new)
                changed += 1
        return rows if changed else None

    rewrite_rows(path, refresh)  # under the database's lock: rows appended meanwhile are kept
    return changed
