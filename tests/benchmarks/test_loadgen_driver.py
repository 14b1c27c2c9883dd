"""LoadGen as the scenario driver: every scenario on a tiny model with tiny durations (a few seconds in all), the
verdicts and logs each row keeps, ``bench show``, the harness fallback when LoadGen cannot be imported, busy flags."""

from __future__ import annotations

import contextlib
import json
import sys
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from benchmarks import loadgen_driver, runner
from benchmarks.harness import ScenarioSettings
from benchmarks.loadgen_driver import DriverUnavailable, resolve_driver, top1_agreement, verdict_of
from benchmarks.models import suite
from benchmarks.results.provenance import Interference
from benchmarks.runner import BenchRequest, run_benchmarks
from perfmodels.results_db import read_results

lg = pytest.importorskip("mlperf_loadgen", reason="extra not installed (loadgen)")

#: Short enough for a test: 50 ms per run, a few queries, a 1 s cap; Server bisects in 2 LoadGen runs.
SHORT = ScenarioSettings(
    min_duration_s=0.05,
    min_queries=5,
    max_duration_s=1.0,
    warmup_queries=2,
    server_search_steps=2,
    server_latency_bound_ms=50.0,
)
SCENARIOS = ("SingleStream", "MultiStream", "Server", "Offline")


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    """One LoadGen run of every scenario and of accuracy mode on LeNet-5 (onnxruntime), into a shard."""
    db = tmp_path_factory.mktemp("lg") / "shard.csv"
    request = BenchRequest(
        models=suite("tiny_lenet5"),
        backends=("onnxruntime",),
        scenarios=(*SCENARIOS, "accuracy"),
        settings=SHORT,
        driver="loadgen",
    )
    outcomes = list(run_benchmarks(request, None, db))
    return db, outcomes, read_results(db)


def test_every_scenario_runs_through_loadgen_with_its_verdict_and_logs(measured):
    db, outcomes, frame = measured
    assert [o.status for o in outcomes] == ["ok"] * 5, [o.describe() for o in outcomes]
    rows = frame.set_index("scenario")
    assert set(rows["driver"]) == {"loadgen"}
    for scenario in SCENARIOS:
        row = rows.loc[scenario]
        assert row["verdict"] in ("VALID", "INVALID")
        assert (row["verdict"] == "INVALID") == (not pd.isna(row["verdict_reason"]))
        log_dir = db.parent / row["log_dir"]  # recorded relative to the shard's directory
        assert log_dir.parent == db.with_suffix(".logs")
        for name in ("mlperf_log_summary.txt", "mlperf_log_detail.txt", "user.conf"):
            assert (log_dir / name).is_file(), (scenario, name)
        summary = (log_dir / "mlperf_log_summary.txt").read_text()
        assert f"Scenario : {scenario}" in summary and f"Result is : {row['verdict']}" in summary
        settings = json.loads(row["settings"])
        assert settings["loadgen_min_duration_ms"] == 50
        assert settings["loadgen_min_query_count"] == (1 if scenario == "Offline" else 5)  # Offline: one query
        assert f"*.{scenario}.min_duration = 50" in (log_dir / "user.conf").read_text()
        assert settings["loadgen_version"]
        assert row["value"] > 0 and row["median_ms"] > 0
    assert rows.loc["SingleStream", "metric"] == "p90_latency_ms"
    assert rows.loc["MultiStream", "metric"] == "p99_latency_ms"
    assert rows.loc["Server", "metric"] == "max_qps"
    assert rows.loc["Offline", "metric"] == "samples_per_s"
    assert json.loads(rows.loc["MultiStream", "settings"])["loadgen_samples_per_query"] == 8
    assert (db.parent / rows.loc["Server", "log_dir"] / "probe0" / "mlperf_log_detail.txt").is_file()


def test_the_progress_bar_names_each_measurement_in_the_order_they_run(measured):
    _, outcomes, _ = measured
    request = BenchRequest(models=suite("tiny_lenet5"), backends=("onnxruntime",), scenarios=(*SCENARIOS, "accuracy"))
    labels = runner.planned_labels(request)
    assert labels == [runner.outcome_label(o.job, o.batch, o.scenario) for o in outcomes]
    assert labels[0] == "tiny_lenet5/onnxruntime/1t/fp32 b1 SingleStream"


def test_accuracy_mode_is_loadgens_accuracy_only_run_checked_against_the_reference(measured):
    db, _, frame = measured
    row = frame.set_index("scenario").loc["accuracy"]
    assert row["driver"] == "loadgen" and row["accuracy"] == "pass"  # fp32 against onnx's reference evaluator
    assert json.loads(row["settings"])["loadgen_mode"] == "AccuracyOnly"
    assert (db.parent / row["log_dir"] / "mlperf_log_accuracy.json").is_file()


def test_an_invalid_run_says_why(tmp_path):
    # the run must last 10 s but is cut at 0.1 s: LoadGen judges it INVALID for its duration
    settings = ScenarioSettings(min_duration_s=10.0, min_queries=5, max_duration_s=0.1, warmup_queries=1)
    request = BenchRequest(
        models=suite("tiny_lenet5"), backends=("onnxruntime",), settings=settings, driver="loadgen", log_root=tmp_path
    )
    (outcome,) = run_benchmarks(request, None)
    assert outcome.row is not None
    assert (Path(outcome.row["log_dir"]) / "mlperf_log_summary.txt").is_file()  # absolute: no database to be near
    assert outcome.row["verdict"] == "INVALID"
    assert "min duration not met" in outcome.row["verdict_reason"]
    assert "[loadgen INVALID]" in outcome.describe()


def test_verdict_parsing_names_every_unmet_check():
    detail = {
        "result_validity": ["INVALID"],
        "result_min_duration_met": [True],
        "result_min_queries_met": [False],
        "early_stopping_met": [False],
        "early_stopping_result": [" * Only processed 9 queries.  * Need 64."],
        "error_runtime": ["Ending early"],
    }
    verdict, reason = verdict_of(detail)
    assert verdict == "INVALID"
    assert reason.startswith("min query count not met; early stopping not met; (* Only processed 9 queries.")
    assert reason.endswith("Ending early") and "min duration" not in reason
    assert verdict_of({"result_validity": ["VALID"]}) == ("VALID", "")
    assert verdict_of({}) == ("", "")  # accuracy mode gives no verdict


def test_lower_precisions_are_checked_by_top1_agreement_only_where_outputs_are_class_scores():
    import numpy as np

    scores = [[np.array([[0.1, 0.9], [0.8, 0.2]])]]
    assert top1_agreement(scores, [[np.array([[0.2, 0.7], [0.6, 0.1]])]]) == 1.0
    assert top1_agreement(scores, [[np.array([[0.9, 0.1], [0.6, 0.1]])]]) == 0.5
    assert top1_agreement([[np.ones((1, 4, 8))]], [[np.ones((1, 4, 8))]]) is None  # not a classifier: unchecked


def test_bench_show_prints_a_runs_summary_by_row_id_or_directory(measured):
    from cli import bench_cmds

    db, _, frame = measured
    app = _app(bench_cmds)
    row = frame.set_index("scenario").loc["Offline"]
    by_id = CliRunner().invoke(app, ["bench", "show", row["row_id"][:10], "--db", str(db)])
    assert by_id.exit_code == 0, by_id.output
    assert "MLPerf Results Summary" in by_id.output and "Scenario : Offline" in by_id.output
    by_dir = CliRunner().invoke(app, ["bench", "show", str(db.parent / row["log_dir"])])
    assert by_dir.exit_code == 0 and "Samples per second" in by_dir.output
    missing = CliRunner().invoke(app, ["bench", "show", "ffffffff", "--db", str(db)])
    assert missing.exit_code == 1 and "no row" in missing.output and "Traceback" not in missing.output


def _app(bench_cmds):
    import typer

    main = typer.Typer()

    @main.callback()
    def _root() -> None:
        """appopt"""

    bench_cmds.register(main)
    return main


@pytest.fixture
def without_loadgen(monkeypatch):
    monkeypatch.setitem(sys.modules, "mlperf_loadgen", None)  # import mlperf_loadgen now raises ImportError


def test_the_harness_is_the_fallback_when_loadgen_cannot_be_imported(without_loadgen, tmp_path):
    assert loadgen_driver.load_loadgen() is None
    assert resolve_driver("auto") == "harness"
    with pytest.raises(DriverUnavailable, match="not installed"):
        resolve_driver("loadgen")
    settings = ScenarioSettings(min_duration_s=0.0, min_queries=3, warmup_queries=1)
    request = BenchRequest(models=suite("tiny_lenet5"), backends=("onnxruntime",), settings=settings)
    db = tmp_path / "shard.csv"
    (outcome,) = run_benchmarks(request, None, db)
    row = read_results(db).iloc[0]
    assert row["driver"] == "harness" and outcome.row is not None
    assert outcome.row["verdict"] is None and outcome.row["log_dir"] is None
    assert not db.with_suffix(".logs").exists()


def test_bench_run_names_the_driver_and_refuses_loadgen_when_missing(without_loadgen, tmp_path):
    from cli import bench_cmds

    result = CliRunner().invoke(
        _app(bench_cmds), ["bench", "run", "--suite", "tiny_lenet5", "--backend", "onnxruntime", "--driver", "loadgen"]
    )
    assert result.exit_code == 1 and "--driver: LoadGen is not installed" in result.output
    assert "Traceback" not in result.output
    spec = tmp_path / "c.yaml"
    spec.write_text("name: c\nmodels: [tiny_lenet5]\nbackends: [onnxruntime]\ndriver: loadgen\n")
    shard = tmp_path / "s.csv"
    sliced = CliRunner().invoke(
        _app(bench_cmds), ["bench", "run-slice", str(spec), "--slice", "0", "--shard", str(shard)]
    )
    assert sliced.exit_code == 1 and "driver: LoadGen is not installed" in sliced.output
    assert not shard.exists()


def test_a_run_on_a_busy_machine_is_flagged_and_warned_about(monkeypatch, tmp_path):
    from cli import bench_cmds

    @contextlib.contextmanager
    def busy():
        yield Interference(other_cpu=1.0, wall_s=1.0)

    monkeypatch.setattr(runner, "interference", busy)
    db = tmp_path / "db.csv"
    result = CliRunner().invoke(
        _app(bench_cmds),
        [
            "bench", "run", "--suite", "tiny_lenet5", "--backend", "onnxruntime", "--min-duration", "0.05",
            "--min-queries", "5", "--db", str(db),
        ],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "warning: tiny_lenet5/onnxruntime/1t/fp32 b1 SingleStream: measured on a busy machine" in result.output
    assert "1.00 cores" in result.output
    assert "ok (VALID, busy)" in result.output or "ok (INVALID, busy)" in result.output  # the table says so too
    assert f"LoadGen logs in {tmp_path / 'db.logs'}" in result.output
    row = read_results(db).iloc[0]
    assert row["flags"] == "busy" and row["other_cpu"] == 1.0 and row["driver"] == "loadgen"


def test_campaign_slices_use_loadgen_and_keep_their_logs_next_to_the_shard(tmp_path):
    from benchmarks.campaign import load_campaign
    from cli import bench_cmds

    spec = tmp_path / "c.yaml"
    spec.write_text(
        "name: c\nmodels: [tiny_lenet5]\nbackends: [onnxruntime]\nscenarios: [Offline]\n"
        "settings: {min_duration_s: 0.05, min_queries: 5}\n"
    )
    assert load_campaign(spec).request().driver == "auto"
    shard = tmp_path / "shards" / "s0.csv"
    result = CliRunner().invoke(
        _app(bench_cmds), ["bench", "run-slice", str(spec), "--slice", "0", "--shard", str(shard)]
    )
    assert result.exit_code == 0, result.output
    row = read_results(shard).iloc[0]
    assert row["driver"] == "loadgen"
    assert (shard.parent / row["log_dir"] / "mlperf_log_summary.txt").is_file()
    assert Path(shard.parent / row["log_dir"]).parent == tmp_path / "shards" / "s0.logs"
