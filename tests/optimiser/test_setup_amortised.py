"""A route's one-off setup (a compiler's tuning search, its measured compile) is paid once per job: time-to-solution
and throughput plans amortise it over the job's samples, so an hour of tuning loses a short job and can win a long
one. Tuned TVM is a compiler of its own (``tvm-tuned``) beside untuned ``tvm``; its measured search replaces the
catalog's prior."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest
import yaml

from optimiser.planner import make_plan
from optimiser.spec import parse_spec
from perfmodels import Prediction, Route, Workload
from perfmodels.features import Device
from perfmodels.setup_time import compile_rates

EXAMPLES = Path(__file__).parents[2] / "examples"
BATCH = 32
#: Step seconds of the routes the stub model predicts: tuned TVM twice as fast as onnxruntime, untuned TVM slower.
STEPS = {"none": 0.010, "tvm": 0.040, "tvm-tuned": 0.005}


class StepModel:
    """Predicts the steps above (every other route far slower), the whole job as steps x step."""

    name = "stub"

    def predict(self, workload: Workload, route: Route, device: Device) -> Prediction:
        step = STEPS.get(route.compiler, 1.0)
        if route.framework != "onnxruntime" or route.precision != "fp32":
            step = 1.0
        samples = workload.total_samples
        return Prediction(step, BATCH / step, None if samples is None else samples / BATCH * step, "compute", "stub")


def _plan(tmp_path: Path, goal: str, job_seconds: float, compile_s: float = 0.0, trials: int | None = None,
          search: tuple[float, int] | None = None):
    shutil.copy2(EXAMPLES / "digits_mlp.onnx", tmp_path / "m.onnx")
    samples = int(job_seconds / STEPS["none"] * BATCH)  # the job's length on the untuned, uncompiled route
    doc = {
        "name": "t",
        "application": {"type": "inference", "model": {"onnx": str(tmp_path / "m.onnx")}, "framework": "onnxruntime",
                        "batch_size": BATCH, "precision": "fp32", "data": {"samples": samples}},
        "target": {"cpu": {"arch": "x86_64", "model": "xeon-8380"}},
        "optimisation": {"goal": goal, "allow": {"compilers": ["none", "tvm", "tvm-tuned"]},
                         **({} if trials is None else {"tuning_trials": trials})},
    }
    model = StepModel()
    if compile_s:
        inner = model.predict

        def predict(workload: Workload, route: Route, device: Device) -> Prediction:
            p = inner(workload, route, device)
            searched = {"search_s": search[0], "search_trials": search[1]} if search and route.tuning_trials else {}
            return p if route.compiler == "none" else Prediction(
                p.step_seconds, p.samples_per_second, p.total_seconds, p.bound, p.basis,
                {"compile_s": compile_s, **searched})

        model.predict = predict  # type: ignore[method-assign]
    return make_plan(parse_spec(yaml.safe_dump(doc)), model=model)


def _choice(plan) -> str:
    return plan.choice.route.compiler


def _candidate(plan, compiler: str):
    return next(c for c in plan.candidates if c.route.compiler == compiler)


@pytest.mark.parametrize("goal", ["time_to_solution", "throughput"])
def test_an_hour_of_tuning_loses_a_five_minute_job_and_wins_a_long_one(tmp_path: Path, goal: str) -> None:
    short = _plan(tmp_path, goal, job_seconds=300)
    assert _choice(short) == "none"
    tuned = _candidate(short, "tvm-tuned")
    assert tuned.prediction.detail["setup_s"] == 3600  # the catalog's one-hour search, paid before the job
    assert tuned.prediction.total_seconds == pytest.approx(3600 + 300 / 2)
    assert tuned.prediction.step_seconds == STEPS["tvm-tuned"]  # the step itself is not amortised
    if goal == "throughput":  # samples over the whole job, the search included; the steady rate kept beside it
        assert tuned.prediction.samples_per_second == pytest.approx(short.workload.total_samples / (3600 + 150))
        assert tuned.prediction.detail["steady_samples_per_second"] == pytest.approx(BATCH / 0.005)
    long = _plan(tmp_path, goal, job_seconds=100 * 3600)
    assert _choice(long) == "tvm-tuned"  # 50 h instead of 100 h, after an hour's search


def test_the_latency_goal_ranks_by_step_alone(tmp_path: Path) -> None:
    assert _choice(_plan(tmp_path, "latency", job_seconds=300)) == "tvm-tuned"


def test_a_measured_setup_is_paid_once_per_job_and_replaces_the_prior_search(tmp_path: Path) -> None:
    """Untuned TVM here is slower per step, so it never wins; what matters is that its compile counts, and that a
    tuned route's measured setup (its search and compile) stands instead of the catalog's hour."""
    plan = _plan(tmp_path, "time_to_solution", job_seconds=300, compile_s=120.0)
    untuned = _candidate(plan, "tvm")
    assert untuned.prediction.detail["setup_s"] == pytest.approx(120.0)
    assert untuned.prediction.total_seconds == pytest.approx(300 * 4 + 120)
    tuned = _candidate(plan, "tvm-tuned")
    assert tuned.prediction.detail["setup_s"] == pytest.approx(120.0)  # measured: not 3600 + 120
    assert tuned.prediction.total_seconds == pytest.approx(300 / 2 + 120)
    # two minutes of measured search pay for themselves over a 5-minute job (the band rules may still take none)
    assert tuned.prediction.total_seconds < _candidate(plan, "none").prediction.total_seconds


def _row(compiler: str, settings: dict[str, object], model: str = "m") -> dict[str, object]:
    return {"target": "host-2c", "framework": "onnxruntime", "compiler": compiler, "model": model,
            "mode": "inference", "settings": json.dumps(settings), "ops_by_class": json.dumps({"conv": 10})}


def test_a_tuned_routes_measured_setup_counts_its_search_and_its_compile() -> None:
    frame = pd.DataFrame([
        _row("tvm-tuned", {"compile_ms": 2000.0, "tune_s": 98.0, "tuning_trials": 32}),  # 100 s over 10 nodes
        _row("tvm-tuned", {"compile_ms": 1000.0, "tune_s": 29.0, "tuning_trials": 32}, model="n"),  # 3 s/node
        _row("tvm", {"compile_ms": 500.0}),  # untuned: its compile alone
    ])
    rates = compile_rates(frame)
    assert rates.per_node[("host-2c", "onnxruntime", "tvm-tuned")] == pytest.approx((10.0 + 3.0) / 2)
    assert rates.per_node[("host-2c", "onnxruntime", "tvm")] == pytest.approx(0.05)
    assert rates.models[("host-2c", "onnxruntime", "tvm-tuned")] == 2


def test_a_measured_search_grows_with_the_specs_trial_budget(tmp_path: Path) -> None:
    """100 s of setup measured, 90 s of it a 32-trial search: the catalog's 64 trials pay 10 + 2 x 90 s, a 128-trial
    spec 10 + 4 x 90 s."""
    measured = _plan(tmp_path, "time_to_solution", job_seconds=300, compile_s=100.0, search=(90.0, 32))
    assert _candidate(measured, "tvm-tuned").prediction.detail["setup_s"] == pytest.approx(10.0 + 2 * 90.0)
    longer = _plan(tmp_path, "time_to_solution", job_seconds=300, compile_s=100.0, search=(90.0, 32), trials=128)
    assert _candidate(longer, "tvm-tuned").prediction.detail["setup_s"] == pytest.approx(10.0 + 4 * 90.0)
    assert _candidate(longer, "tvm").prediction.detail["setup_s"] == pytest.approx(100.0)  # no search to scale
