"""TVM MetaSchedule-tuned route: a small trial budget on an MLP, records cached per model and host, the search's
time recorded as its own figure, a bad budget refused in one line."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

from benchmarks.backends import BackendSkipped, get_backend
from benchmarks.engines.tvm_tuning import (
    TRIALS_ENV,
    TUNING_FILE,
    cached_search,
    trial_budget,
    tuning_root,
    with_batch,
    work_dir_for,
)
from benchmarks.harness import ScenarioSettings
from benchmarks.models import get_model, suite
from benchmarks.runner import BenchRequest, run_benchmarks
from runtime.engine_tvm_tuning import SEARCH_POLICY

NEEDS = ("tvm", "xgboost", "psutil")
installed = all(importlib.util.find_spec(m) is not None for m in NEEDS)
TINY = ScenarioSettings(min_duration_s=0.0, min_queries=3, warmup_queries=1)


def test_the_trial_budget_is_a_positive_whole_number():
    assert trial_budget({}) == 64 and trial_budget({TRIALS_ENV: " 3 "}) == 3
    for bad in ("0", "-2", "many", "2.5"):
        with pytest.raises(BackendSkipped, match=f"^{TRIALS_ENV}: the trial budget must be a whole number"):
            trial_budget({TRIALS_ENV: bad})


def test_the_cli_flag_sets_the_budget_over_the_environment(monkeypatch: pytest.MonkeyPatch):
    from typer.testing import CliRunner

    from benchmarks.engines.tvm_tuning import TvmTunedBackend
    from cli.main import app

    seen: list[int] = []

    def prepare(self: TvmTunedBackend, model: object, threads: int, precision: str) -> None:
        seen.append(trial_budget())
        raise BackendSkipped("stopped after reading the budget")

    monkeypatch.setattr(TvmTunedBackend, "unavailable_reason", lambda self: None)
    monkeypatch.setattr(TvmTunedBackend, "_prepare", prepare)
    monkeypatch.setenv(TRIALS_ENV, "7")  # the default source, restored after the test
    argv = ["bench", "run", "--suite", "mlp", "--backend", "tvm-tuned", "--driver", "harness"]
    assert CliRunner().invoke(app, argv).exit_code == 0 and seen == [7]
    result = CliRunner().invoke(app, [*argv, "--tvm-trials", "3"])
    assert result.exit_code == 0, result.output
    assert seen == [7, 3] and "stopped after reading the budget" in result.output
    bad = CliRunner().invoke(app, [*argv, "--tvm-trials", "0"])
    assert bad.exit_code != 0 and "--tvm-trials" in bad.output


def test_each_batch_size_is_its_own_static_model_and_records(tmp_path: Path):
    model = get_model("mlp").model()
    dims = [d for d in model.graph.input[0].type.tensor_type.shape.dim]
    assert not dims[0].HasField("dim_value")  # the suite's MLP has a symbolic batch
    one, eight = with_batch(model, 1), with_batch(model, 8)
    assert one.graph.input[0].type.tensor_type.shape.dim[0].dim_value == 1
    assert eight.graph.input[0].type.tensor_type.shape.dim[0].dim_value == 8
    assert [d.dim_value for d in one.graph.input[0].type.tensor_type.shape.dim[1:]] == [d.dim_value for d in dims[1:]]
    assert not model.graph.input[0].type.tensor_type.shape.dim[0].HasField("dim_value")  # the original untouched
    assert work_dir_for(one, "h", 4, tmp_path) != work_dir_for(eight, "h", 4, tmp_path)
    assert work_dir_for(one, "h", 4, tmp_path) != work_dir_for(one, "other-host", 4, tmp_path)
    assert work_dir_for(one, "h", 4, tmp_path).name.endswith("-4t")
    assert with_batch(eight, 2).graph.input[0].type.tensor_type.shape.dim[0].dim_value == 8  # a fixed batch stays
    (tmp_path / TUNING_FILE).write_text("{not json")
    assert cached_search(tmp_path) is None  # an unreadable or interrupted search is searched again
    (tmp_path / TUNING_FILE).write_text(json.dumps({"tune_s": 9.0, "trials": 4}))
    assert cached_search(tmp_path) is None  # the first policy's records (a round of min(64, trials) on one task)
    (tmp_path / TUNING_FILE).write_text(json.dumps({"tune_s": 9.0, "trials": 4, "policy": SEARCH_POLICY}))
    assert cached_search(tmp_path) == {"tune_s": 9.0, "trials": 4, "policy": SEARCH_POLICY}


@pytest.mark.slow
@pytest.mark.skipif(not installed, reason="extra not installed")
def test_a_tuned_mlp_matches_onnxruntime_and_its_records_are_reused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setenv(TRIALS_ENV, "2")
    model = get_model("mlp")
    feeds = model.feeds(batch=1)  # each batch size is its own search
    first = get_backend("tvm-tuned").prepare(model.model(), threads=1)
    assert first.tuning_cached is False and first.tuning_trials == 2 and first.tune_s > 0  # type: ignore[attr-defined]
    (meta,) = tuning_root().glob(f"*/*-2t/{TUNING_FILE}")  # batch 1 only so far
    search = json.loads(meta.read_text())
    assert search["tune_s"] == pytest.approx(first.tune_s)  # type: ignore[attr-defined]
    assert search["policy"] == SEARCH_POLICY and search["tasks"] >= 2 and search["trials_per_round"] == 1
    assert (meta.parent / "database_tuning_record.json").stat().st_size > 0
    want = get_backend("onnxruntime").prepare(model.model()).run(feeds)[0]
    np.testing.assert_allclose(first.run(feeds)[0], want, rtol=1e-4, atol=1e-5)

    request = BenchRequest(models=suite("mlp"), backends=("tvm-tuned",), settings=TINY)
    (outcome,) = list(run_benchmarks(request, None))  # same model, host and budget: compiled from the records
    assert outcome.status == "ok" and outcome.row is not None, outcome
    settings = json.loads(outcome.row["settings"])
    assert settings["tuning_cached"] is True and settings["tuning_trials"] == 2
    assert settings["tune_s"] == pytest.approx(first.tune_s)  # type: ignore[attr-defined]
    assert settings["compile_ms"] > 0 and 0 <= outcome.row["max_abs_error"] < 1e-4
    assert outcome.row["compiler"] == "tvm-tuned" and outcome.row["backend"] == "tvm-tuned"  # a route of its own
