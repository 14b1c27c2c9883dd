"""CPU training predictions carry a p10-p90 interval from the held-out residuals stored with the evaluation summary
(``perfmodels.training_intervals``): fitted, carried by the roofline, carried through a calibration; plans show it
and say when two training routes overlap."""

from __future__ import annotations

import json
from dataclasses import asdict, replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from perfmodels.digests import file_digest
from perfmodels.features import Device, Workload
from perfmodels.fitted import HeldOutFigures, evaluation_path, fit_model, read_evaluation
from perfmodels.results_db import read_results
from perfmodels.roofline import RooflinePrior
from perfmodels.targets import local_target_key
from perfmodels.training_fit import training_prediction
from perfmodels.training_intervals import MIN_PREDICTIONS, Band, TrainingResiduals, with_interval
from tests.perfmodels.test_training_calibrated import TORCH, _host
from tests.perfmodels.test_training_transfer import _example, _plan, _training_db

WORKLOAD = Workload(4e9, 1e8, 2.5e7, "training", 64, ops_by_class={"gemm": 160})


def _residuals(fitted: tuple[float, float], roofline: tuple[float, float], calibration: tuple[float, float]):
    return TrainingResiduals(
        by_route={"torch|fp32": Band(*fitted, 27, "its route", 0.15)},
        overall=Band(0.9, 1.1, 100, "every route"),
        transfer={
            "roofline": Band(*roofline, 40, "the transfer proxy (roofline, both directions)"),
            "calibration": Band(*calibration, 40, "the transfer proxy (calibration, both directions)"),
        },
    )


def _store(db: Path, residuals: TrainingResiduals | None) -> None:
    """An evaluation summary next to ``db`` keyed by its digest, with (or, as before, without) training bands."""
    payload = {"db_sha256": file_digest(db), "fitted": asdict(HeldOutFigures(0.2, 0.5, 0.9, 1.0, 1.1, 50, 4))}
    if residuals is not None:
        payload["training_residuals"] = residuals.as_json()
    evaluation_path(db).write_text(json.dumps(payload), encoding="utf-8")


def _model(tmp_path: Path, residuals: TrainingResiduals | None):
    db = _training_db(tmp_path / "t.csv")
    _store(db, residuals)
    return fit_model(read_results(db), source="t.csv", db=db)


def _interval(p) -> tuple[float, float]:
    return p.detail["p10_step_s"] / p.step_seconds, p.detail["p90_step_s"] / p.step_seconds


def test_bands_per_route_else_framework_else_overall() -> None:
    rows = [("torch", "pytorch", "fp32", 1.0 + k / 10) for k in range(MIN_PREDICTIONS)]  # ratios 1.0 .. 1.9
    rows += [("torch-compile", "pytorch", "fp32", 2.0)] * 3  # too few for a route band of its own
    rows += [("numpy", "numpy", "fp32", 0.5)] * 3
    frame = pd.DataFrame(rows, columns=["backend", "framework", "precision", "measured"]).assign(predicted=1.0)
    bands = TrainingResiduals.from_predictions(frame, {"roofline": [(1.0, 0.8), (2.0, 3.0), (0.0, 1.0)]})
    route = bands.fitted("torch", "fp32", "pytorch")
    assert route is not None and route.of == "its route" and route.predictions == MIN_PREDICTIONS
    assert (route.p10_ratio, route.p90_ratio) == pytest.approx((1.09, 1.81))
    measured = np.array([1.0 + k / 10 for k in range(MIN_PREDICTIONS)])
    assert route.rmspe == pytest.approx(float(np.sqrt(np.mean((1.0 / measured - 1.0) ** 2))))
    framework = bands.fitted("torch-compile", "fp32", "pytorch")
    assert framework is not None and framework.of == "its framework" and framework.predictions == 13
    overall = bands.fitted("numpy", "fp32", "numpy")
    assert overall is not None and overall.of == "every route" and overall.predictions == 16
    assert bands.transfer["roofline"].predictions == 2  # (a zero prediction has no ratio)
    assert "calibration" not in bands.transfer
    assert TrainingResiduals.from_json(json.loads(json.dumps(bands.as_json()))) == bands


def test_each_cpu_training_basis_carries_its_stored_interval(tmp_path: Path) -> None:
    model = _model(tmp_path, _residuals((0.8, 1.3), (0.6, 1.7), (0.7, 1.5)))
    fitted = model.predict(WORKLOAD, TORCH, Device("local", "cpu", {"fp32": 1e11}, 2e10))
    assert fitted.basis.startswith(f"fitted-training:{local_target_key()}")
    assert fitted.basis.endswith("; p10-p90 from 27 held-out steps of its route")
    assert _interval(fitted) == pytest.approx((0.8, 1.3)) and fitted.detail["heldout_rmspe"] == 0.15
    moved = model.predict(WORKLOAD, TORCH, Device("xeon-8380", "cpu", {"fp32": 2.6e12}, 2.0e11))
    assert moved.basis.startswith("transferred-training:") and " -> xeon-8380" in moved.basis
    assert _interval(moved) == pytest.approx((0.6, 1.7))
    assert "the transfer proxy (roofline, both directions)" in moved.basis
    prior, host = RooflinePrior(), _host(190.0, 28.0)
    device = Device("unseen-host", "cpu", {"fp32": 190e9}, 14e9)
    carried = training_prediction(
        model.training(), WORKLOAD, TORCH, device, prior.predict(WORKLOAD, TORCH, device), lambda _t: 2,
        lambda measured: prior.predict(WORKLOAD, TORCH, measured), lambda: host, model._training_residuals(),
    )  # fmt: skip
    assert " via calibration " in carried.basis and _interval(carried) == pytest.approx((0.7, 1.5))


def test_the_interval_comes_from_the_stored_figures(tmp_path: Path) -> None:
    local = Device("local", "cpu", {"fp32": 1e11}, 2e10)
    narrow = _model(tmp_path / "a", _residuals((0.8, 1.3), (0.6, 1.7), (0.7, 1.5))).predict(WORKLOAD, TORCH, local)
    wide = _model(tmp_path / "b", _residuals((0.5, 2.0), (0.6, 1.7), (0.7, 1.5))).predict(WORKLOAD, TORCH, local)
    assert narrow.step_seconds == pytest.approx(wide.step_seconds)
    assert _interval(narrow) == pytest.approx((0.8, 1.3)) and _interval(wide) == pytest.approx((0.5, 2.0))


def test_an_old_summary_without_training_bands_still_plans_without_an_interval(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = _model(tmp_path, None)
    stored = read_evaluation(tmp_path / "t.csv")
    assert stored is not None and stored.training is None
    fitted = model.predict(WORKLOAD, TORCH, Device("local", "cpu", {"fp32": 1e11}, 2e10))
    assert fitted.basis.startswith("fitted-training:") and "p10_step_s" not in fitted.detail
    plan, report = _plan(_example(tmp_path, cpu_only=True, local=True), tmp_path / "t.csv", monkeypatch)
    assert plan["candidates"] and "Within the model's error" not in report


def test_a_damaged_training_block_drops_only_the_training_bands(tmp_path: Path) -> None:
    db = _training_db(tmp_path / "t.csv")
    _store(db, None)
    payload = json.loads(evaluation_path(db).read_text())
    evaluation_path(db).write_text(json.dumps({**payload, "training_residuals": {"by_route": {"x": {"p10": 1}}}}))
    stored = read_evaluation(db)
    assert stored is not None and stored.training is None and "" in stored.figures


def test_overlapping_training_routes_are_said_to_be_within_the_models_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = _training_db(tmp_path / "t.csv")
    wide = Band(0.3, 3.0, 30, "every route", 0.6)
    _store(db, TrainingResiduals(overall=wide))
    plan, report = _plan(_example(tmp_path, cpu_only=True, local=True), db, monkeypatch)
    banded = [c for c in plan["candidates"] if c["predicted"]["basis"].startswith("fitted-training:")]
    assert len(banded) >= 2 and all(c["predicted"]["interval_s"] for c in banded)
    assert "## Within the model's error" in report
    assert "overlap: within the model's error (held-out residuals of fitted-training:" in report
    assert "Its training interval is measured / predicted at the 10th and 90th percentile" in report
    assert "within the model's error (±60%, held-out RMSPE" in report  # the planner's band is the bands' RMSPE


def test_with_interval_leaves_a_prediction_without_a_band_unchanged() -> None:
    prior = RooflinePrior().predict(WORKLOAD, TORCH, Device("local", "cpu", {"fp32": 1e11}, 2e10))
    assert with_interval(prior, None) is prior


def test_no_training_rows_store_no_bands_and_say_why(tmp_path: Path) -> None:
    from optimiser.training_transfer_proxy import training_bands

    db = _training_db(tmp_path / "t.csv")
    frame = read_results(db)
    bands, notes = training_bands(db, frame[frame["mode"] != "training"])
    assert bands is None and notes == [notes[0]] and notes[0].startswith("no training intervals: no measured training")


def test_the_proxy_pools_each_prediction_under_the_carrying_its_basis_names() -> None:
    from optimiser.training_transfer_proxy import carried_by

    prior = RooflinePrior().predict(WORKLOAD, TORCH, Device("local", "cpu", {"fp32": 1e11}, 2e10))
    named = {
        "transferred-training:h-1c via calibration (torch fp32 flops model, 16 rows; x0.5)": "calibration",
        "transferred-training:h-1c -> unseen-host (torch fp32, 16 rows; x1.2 of the roofline prior)": "roofline",
        f"{prior.basis} (no training rows for numpy on this host)": None,
    }
    assert {b: carried_by(replace(prior, basis=b)) for b in named} == named
