"""Recording the shipped database: what it covers, how quiet the machine was, and refreshing features."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest

import benchmarks.record as record
from benchmarks.harness import ScenarioSettings
from benchmarks.kernels import gemm_kernel, run_kernel_suite
from benchmarks.models import suite
from benchmarks.record import RECORD_SETTINGS, default_requests, refresh_features
from benchmarks.results import provenance
from benchmarks.results.provenance import ProbeWindow, interference, wait_until_quiet
from benchmarks.runner import ModelFeatures, plan_jobs
from perfmodels.results_db import BUSY_OTHER_CPU, append_rows, make_row, read_results
from tests.rows import measured_row


def features(model) -> ModelFeatures:
    return ModelFeatures(2e6, 1e3, 10.0, {"gemv": 2e6}, {"gemv": 3})


def test_the_recording_covers_every_suite_model_backend_thread_count_and_batch():
    fitted = default_requests()[0]
    assert fitted.scenarios == ("SingleStream",) and fitted.precisions == ("fp32",)
    assert set(fitted.backends) == {"appopt-runtime", "onnxruntime", "onnxruntime-extended", "openvino", "torch"}
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


@contextlib.contextmanager
def _another_process_busy() -> Iterator[subprocess.Popen[bytes]]:
    """Another process keeping a core busy until the block ends (or it is killed sooner)."""
    busy = subprocess.Popen([sys.executable, "-c", "import time\nt = time.time()\nwhile time.time() - t < 60: pass"])
    time.sleep(0.3)
    try:
        yield busy
    finally:
        busy.kill()
        busy.wait()


def _probed_rows(db: Path) -> pd.DataFrame:
    rows = read_results(db)
    if rows["other_cpu"].isna().all():
        pytest.skip("no /proc/stat here")
    return rows


def test_a_probe_window_judges_a_run_of_blocks_too_short_to_judge_alone():
    with _another_process_busy():
        window = ProbeWindow()
        with interference() as short:
            time.sleep(0.05)
        while not window.ready():
            time.sleep(0.05)
        reading = window.read()
    if reading is None:
        pytest.skip("no /proc/stat here")
    assert short.other_cpu is None and reading > 0.5


_SHORT = ScenarioSettings(min_duration_s=0.1, min_queries=3, max_duration_s=0.3, warmup_queries=1, warmup_max_s=0.1)


@pytest.mark.slow
def test_kernels_measured_while_another_process_was_busy_are_measured_again_once_it_is_quiet(tmp_path, monkeypatch):
    kernels, db, waits = [gemm_kernel(n, n, n) for n in (96, 128, 160)], tmp_path / "kernels.csv", []
    real_wait = provenance.wait_until_quiet
    before = _others_cpu()  # what processes outside this test use (a shared CI runner is rarely idle)
    with _another_process_busy() as busy:

        def quieten(*args, **kwargs):  # the busy process ends while the suite waits for quiet
            busy.kill()
            busy.wait()
            waits.append(kwargs)
            return real_wait(*args, **kwargs)

        monkeypatch.setattr(provenance, "wait_until_quiet", quieten)
        outcomes = list(run_kernel_suite(kernels, ["appopt-runtime"], [1], _SHORT, str(db), quiet_wait_s=20.0))
    rows = _probed_rows(db)
    assert len(waits) == 1  # the first stretch was judged busy and measured again
    assert sorted(o.kernel.name for o in outcomes) == sorted(k.name for k in kernels) == sorted(rows["model"])
    # measured again without the busy process: its core is no longer counted (on an idle machine: judged quiet)
    assert (rows["other_cpu"].astype(float) <= max(BUSY_OTHER_CPU, before + 0.5)).all()


def _others_cpu() -> float:
    """Cores other processes used over one probe window."""
    window = ProbeWindow()
    while not window.ready():
        time.sleep(0.05)
    reading = window.read()
    if reading is None:
        pytest.skip("no /proc/stat here")
    return reading


@pytest.mark.slow
def test_kernels_still_busy_after_their_retries_are_recorded_with_the_load_they_saw(tmp_path):
    db, kernels = tmp_path / "kernels.csv", [gemm_kernel(128, 128, 128)] * 3
    with _another_process_busy():
        list(run_kernel_suite(kernels, ["appopt-runtime"], [1], _SHORT, str(db), retries_under_load=0))
    rows = _probed_rows(db)
    assert len(rows) == 3 and (rows["other_cpu"].astype(float) > BUSY_OTHER_CPU).all()


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
    measured = measured_row(
        value=0.3, median_ms=0.25, flops_per_sample=1.0, flops_by_class={"gemm": 1.0}, ops_by_class={"gemm": 1}
    )
    kernel = measured_row(model="gemm_1x1", scenario="kernel", metric="gflops", flops_per_sample=2.0)
    append_rows(db, [measured, kernel])
    assert refresh_features(features, db) == 1
    frame = read_results(db).set_index("model")
    assert json.loads(frame.loc["mlp", "flops_by_class"]) == {"gemv": 2e6}
    assert frame.loc["mlp", "median_ms"] == 0.25 and frame.loc["gemm_1x1", "flops_per_sample"] == 2.0
    assert refresh_features(features, db) == 0  # nothing left to change


def test_refresh_features_takes_training_rows_from_the_training_suite_not_the_same_named_inference_model(
    tmp_path, monkeypatch
):
    """``resnet50`` names a 224x224 inference graph and a 32x32 training export: each row keeps its own."""
    import onnx

    import benchmarks.features

    exported = onnx.ModelProto(doc_string="training export")
    monkeypatch.setattr(benchmarks.features, "training_model", lambda name: exported if name == "resnet50" else None)

    def analyser(model: onnx.ModelProto) -> ModelFeatures:
        flops = 1.0 if model is exported else 9.0
        return ModelFeatures(flops, 1e3, 10.0, {"conv": flops}, {"conv": 1}, units='[["noop",[1],1]]')

    db = tmp_path / "db.csv"
    training = dict(mode="training", scenario="training", metric="ms_per_step", flops_per_sample=5.0)
    append_rows(
        db,
        [
            measured_row(model="resnet50", value=7.0, mode="inference", flops_per_sample=5.0),
            measured_row(model="resnet50", value=3.0, **training),
            measured_row(model="digits_mlp", value=2.0, **training),  # not exported here: left alone
        ],
    )
    assert refresh_features(analyser, db) == 2
    frame = read_results(db)
    by_mode = frame.set_index(["mode", "model"])
    assert by_mode.loc[("training", "resnet50"), "flops_per_sample"] == 1.0
    assert by_mode.loc[("inference", "resnet50"), "flops_per_sample"] == 9.0
    assert by_mode.loc[("training", "digits_mlp"), "flops_per_sample"] == 5.0
    assert pd.isna(by_mode.loc[("training", "resnet50"), "units"])  # training rows carry no kernel units
    assert sorted(frame["value"]) == [2.0, 3.0, 7.0]


def test_summary_path_sits_next_to_the_database():
    assert record.summary_path(Path("x/default.csv")) == Path("x/default.record.json")
