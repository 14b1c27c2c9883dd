"""Recording the shipped database: what it covers, how quiet the machine was, and refreshing features."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

import benchmarks.record as record
from benchmarks.harness import ScenarioSettings
from benchmarks.models import suite
from benchmarks.record import RECORD_SETTINGS, default_requests, refresh_features
from benchmarks.results.provenance import interference, wait_until_quiet
from benchmarks.runner import ModelFeatures, plan_jobs
from perfmodels.results_db import BUSY_OTHER_CPU, append_rows, make_row, read_results


def features(model) -> ModelFeatures:
    return ModelFeatures(2e6, 1e3, 10.0, {"gemv": 2e6}, {"gemv": 3})


def test_the_recording_covers_every_suite_model_backend_thread_count_and_batch():
    fitted = default_requests()[0]
    assert fitted.scenarios == ("SingleStream",) and fitted.precisions == ("fp32",)
    assert set(fitted.backends) == {"appopt-runtime", "onnxruntime", "onnxruntime-extended", "torch"}
    assert set(fitted.threads) == {1, 2} and set(fitted.batches) == {1, 8}
    assert {m.name for m in fitted.models} == {m.name for m in suite("all")}
    assert fitted.retries_under_load >= 1
    jobs = {(j.model.name, j.backend, j.threads) for r in default_requests() for j in plan_jobs(r)}
    assert ("zoo_vgg19", "onnxruntime", 2) in jobs and ("tiny_lenet5", "torch", 1) in jobs
    # slow configurations are capped so the whole recording fits its budget
    assert RECORD_SETTINGS.max_duration_s is not None and RECORD_SETTINGS.max_duration_s <= 3.0


def test_interference_sees_another_process_busy_and_a_quiet_block_as_quiet():
    busy = subprocess.Popen([sys.executable, "-c", "import time\nt = time.time()\nwhile time.time() - t < 3: pass"])
    try:
        time.sleep(0.3)
        with interference() as probe:
            time.sleep(1.0)
    finally:
        busy.kill()
        busy.wait()
    if probe.other_cpu is None:
        pytest.skip("no /proc/stat here")
    assert probe.other_cpu > 0.5  # the child kept (most of) a core busy while we slept
    with interference() as short:
        pass
    assert short.other_cpu is None  # too short for clock-tick accounting


def test_wait_until_quiet_returns_the_last_reading():
    reading = wait_until_quiet(threshold=100.0, window_s=0.3)
    assert reading is None or 0.0 <= reading < 100.0


def test_record_default_writes_rows_with_their_quietness_and_a_summary(tmp_path, monkeypatch):
    real_suite = suite
    monkeypatch.setattr(record, "suite", lambda which: real_suite("tiny_lenet5") if which == "tiny" else [])
    literature = [
        make_row(
            source="literature",
            citation="A paper, 2024",
            target="any",
            backend="tvm",
            model="resnet50",
            scenario="speedup",
            metric="speedup",
            value=1.5,
        )
    ]
    settings = ScenarioSettings(min_duration_s=0.0, min_queries=3, warmup_queries=1, max_duration_s=1.0)
    lines: list[str] = []
    out = record.record_default(
        features,
        literature,
        tmp_path / "db.csv",
        settings,
        threads=(1,),
        kernels=False,
        progress=lines.append,
        quiet_wait_s=0.0,
        units=False,
    )
    frame = read_results(out)
    single = frame[frame["scenario"] == "SingleStream"]
    assert set(single["backend"]) >= {"appopt-runtime", "onnxruntime"}
    assert single["load_avg"].notna().all() and single["cache_bandwidth_gbs"].notna().all()
    assert (frame["source"] == "literature").sum() == 1
    summary = json.loads(record.summary_path(out).read_text())
    assert summary["rows_measured"] == len(frame) - 1 and summary["duration_s"] > 0
    assert (
        summary["rows_under_load"] == sum(1 for v in frame["other_cpu"].dropna() if v > BUSY_OTHER_CPU)
        and summary["budget_s"] == record.RECORD_BUDGET_S
    )
    assert any("wrote" in line and "min" in line for line in lines)
    assert (tmp_path / "db.evaluation.json").is_file() or any("no evaluation" in line for line in lines)
    assert not (tmp_path / "db.partial.csv").exists()


def test_refresh_features_rewrites_suite_rows_and_leaves_the_measurements(tmp_path):
    db = tmp_path / "db.csv"
    measured = make_row(
        source="measured",
        target="t-2c",
        backend="onnxruntime",
        model="mlp",
        scenario="SingleStream",
        metric="p90_latency_ms",
        value=0.3,
        median_ms=0.25,
        flops_per_sample=1.0,
        flops_by_class={"gemm": 1.0},
        ops_by_class={"gemm": 1},
    )
    kernel = make_row(
        source="measured",
        target="t-2c",
        backend="onnxruntime",
        model="gemm_1x1",
        scenario="kernel",
        metric="gflops",
        value=1.0,
        flops_per_sample=2.0,
    )
    append_rows(db, [measured, kernel])
    assert refresh_features(features, db) == 1
    frame = read_results(db).set_index("model")
    assert json.loads(frame.loc["mlp", "flops_by_class"]) == {"gemv": 2e6}
    assert frame.loc["mlp", "median_ms"] == 0.25 and frame.loc["gemm_1x1", "flops_per_sample"] == 2.0
    assert refresh_features(features, db) == 0  # nothing left to change


def test_summary_path_sits_next_to_the_database():
    assert record.summary_path(Path("x/default.csv")) == Path("x/default.record.json")
