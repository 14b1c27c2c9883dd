"""Transfer through calibration: per-kind ratios, the route that stands for another, held-out intervals, and a plan
made after a real calibration."""

from __future__ import annotations

import math
from pathlib import Path

import onnx
import pytest

from perfmodels.calibration import Calibration

ORT = ("onnxruntime", "none", "NCHWc", "fp32")
ORT_NCHW = ("onnxruntime", "none", "NCHW", "fp32")


def _calibration(errors: tuple[float, ...] = ()) -> Calibration:
    return Calibration(
        host="here-2c",
        source="there-2c",
        units=3,
        ratios={ORT: {"conv": 2.0, "gemm": 0.5}},
        log_ratios={ORT: [math.log(2.0), math.log(2.0), math.log(0.5)]},
        heldout_errors=errors,
    )


def test_factor_weights_each_kinds_ratio_by_its_share_of_the_shipped_time() -> None:
    cal = _calibration()
    assert cal.factor(ORT, {"conv": 3e-3, "gemm": 1e-3}) == pytest.approx((3e-3 * 2.0 + 1e-3 * 0.5) / 4e-3)
    overall = math.exp((2 * math.log(2.0) + math.log(0.5)) / 3)
    assert cal.factor(ORT, {"pool": 1e-3}) == pytest.approx(overall)  # an uncalibrated kind: the route's ratio
    assert cal.factor(ORT, {}) == pytest.approx(overall)


def test_an_uncalibrated_route_borrows_its_frameworks_and_another_framework_gets_none() -> None:
    cal = _calibration()
    assert cal.route_for(ORT_NCHW) == ORT
    assert cal.factor(("appopt-runtime", "none", "NCHW", "fp32"), {"conv": 1.0}) is None
    assert cal.basis == "transferred:there-2c via calibration (3 units)"


def test_interval_is_the_heldout_error_quantiles_and_needs_five() -> None:
    assert _calibration((0.1, 0.2)).interval(1.0) is None
    low, high = _calibration((-0.5, -0.2, 0.0, 0.1, 0.3, 1.0)).interval(2.0)  # type: ignore[misc]
    assert 2.0 * 0.5 < low < 2.0 < high < 2.0 * 2.0


@pytest.mark.slow
def test_a_plan_after_a_real_calibration_ranks_nchwc_before_nchw_and_names_its_basis(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """MobileNet-v1 (depthwise) runs about 3x faster in onnxruntime's NCHWc layout than in NCHW (shipped database,
    tiny_mobilenetv1: 0.19 vs 0.58 ms): a gap no host's calibration should reverse."""
    from typer.testing import CliRunner

    from benchmarks.models.tiny import mobilenet_v1
    from cli.main import app
    from optimiser.planner import make_plan
    from optimiser.spec import load_spec

    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    result = CliRunner().invoke(
        app, ["calibrate", "--budget", "16", "--backends", "onnxruntime", "--backends", "onnxruntime-extended"]
    )
    assert result.exit_code == 0, result.stdout + result.stderr
    onnx.save(mobilenet_v1(), tmp_path / "m.onnx")
    spec = Path(__file__).parents[2] / "examples" / "onnx-mlp-local.yaml"
    (tmp_path / "spec.yaml").write_text(spec.read_text().replace("digits_mlp.onnx", "m.onnx"), encoding="utf-8")
    plan = make_plan(load_spec(tmp_path / "spec.yaml"))
    ort = {
        c.route.layout: c.prediction
        for c in plan.candidates
        if c.route.framework == "onnxruntime" and c.route.compiler == "none"
    }
    assert ort["NCHWc"].basis.startswith("transferred:") and "via calibration" in ort["NCHWc"].basis
    assert ort["NCHWc"].step_seconds < ort["NCHW"].step_seconds
    assert "p10_step_s" in ort["NCHWc"].detail


def test_no_op_chains_calibrate_the_per_call_cost() -> None:
    """A host whose engine calls cost 3x the shipped host's: its no-op chains give the ``noop`` ratio, which scales
    the call's share of a prediction (``FittedModel._calibrated``); before, no-op rows were measured and ignored."""
    from analysis.units import Unit
    from perfmodels.calibration import calibration_from
    from perfmodels.results_db import to_frame
    from perfmodels.unitfit import fit_units
    from tests.analysis.test_units import CALL_S, NODE_S, TARGET, noop_rows, sampled_gemms, sweep_row, true_seconds

    shipped = fit_units(to_frame(noop_rows() + [sweep_row(u, true_seconds(u, 0.5)) for u in sampled_gemms(40)]))
    here = [
        {**sweep_row(Unit("noop", {"nodes": n}), 3 * (n * NODE_S + CALL_S) - CALL_S), "target": "here-2c"}
        for n in (1, 8)
    ]
    cal = calibration_from(to_frame(here), shipped, TARGET, "here-2c", via="quick probe")
    assert cal is not None and cal.units == 2
    assert cal.ratios[("fw", "none", "NCHW", "fp32")]["noop"] == pytest.approx(3.0, rel=0.1)
    assert cal.basis == f"transferred:{TARGET} via quick probe (2 units)"
