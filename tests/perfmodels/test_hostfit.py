"""This host's own fit (``calibrated:<host-key>``): few units per kind, known costs, held-out intervals, and plans on
a host the database never measured that rank routes by what the store measured."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from analysis.units import Unit
from perfmodels.hostfit import MIN_HOST_UNITS, host_fit
from perfmodels.results_db import HEADER_LINE, to_frame, write_rows
from tests.analysis.test_units import CALL_S, NODE_S, noop_rows, sampled_gemms, sweep_row, true_seconds

FW = ("fw", "none", "NCHW", "fp32")


def _rows(units: list[Unit], efficiency: float, framework: str = "fw") -> list[dict[str, object]]:
    return noop_rows(framework) + [sweep_row(u, true_seconds(u, efficiency), framework) for u in units]


def test_a_few_units_give_the_call_cost_and_the_kinds_efficiency() -> None:
    fit = host_fit(to_frame(_rows(sampled_gemms(8), 0.5)), "here-2c")
    assert fit is not None and fit.host == "here-2c" and fit.via == "calibration"
    route = fit.route(FW, 2)  # the nearest measured thread count (1)
    assert route is not None and route.units == 8
    assert route.model.call_s == pytest.approx(CALL_S, rel=0.05)
    assert route.model.node_s == pytest.approx(NODE_S, rel=0.05)
    unseen = sampled_gemms(20, seed=1)
    predicted = fit.predict(unseen, 1, FW, 1)
    truth = CALL_S + sum(true_seconds(u, 0.5) for u in unseen)
    assert predicted is not None and predicted.seconds == pytest.approx(truth, rel=0.15)
    assert max(abs(e) for e in route.heldout_errors) < 0.25  # leave-one-unit-out on a clean law
    low, high = route.interval_ratios()  # type: ignore[misc]
    assert low <= 1.0 <= high and high / low < 1.5
    assert fit.basis(predicted) == "calibrated:here-2c (host fit of 8 units of this route)"


def test_a_slower_host_is_predicted_slower_by_its_measured_factor() -> None:
    units = sampled_gemms(8)
    fast, slow = (host_fit(to_frame(_rows(units, e)), "h") for e in (0.5, 0.1))
    assert fast is not None and slow is not None
    unseen = sampled_gemms(10, seed=2)
    a, b = fast.predict(unseen, 1, FW, 1), slow.predict(unseen, 1, FW, 1)
    assert a is not None and b is not None and 3.0 < b.seconds / a.seconds < 5.5


def test_an_unmeasured_kind_takes_the_routes_pooled_line_and_the_basis_says_so() -> None:
    fit = host_fit(to_frame(_rows(sampled_gemms(8), 0.5)), "here-2c")
    assert fit is not None
    units = [*sampled_gemms(2, seed=3), Unit("eltwise", {"elements": 100_000, "inputs": 2, "heavy": 0})]
    predicted = fit.predict(units, 1, FW, 1)
    assert predicted is not None and predicted.pooled_kinds == ("eltwise",)
    assert predicted.by_kind["eltwise"] > 0 and "eltwise from all its units" in fit.basis(predicted)


def test_too_few_units_or_one_chain_length_give_no_route() -> None:
    assert host_fit(to_frame(_rows(sampled_gemms(MIN_HOST_UNITS - 1), 0.5)), "h") is None
    one_length = noop_rows()[:1] + [sweep_row(u, true_seconds(u, 0.5)) for u in sampled_gemms(8)]
    assert host_fit(to_frame(one_length), "h") is None


def _plan_on_unseen_host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ort: float, ours: float) -> object:
    """A plan of the README's job on this host with an empty database and a store where onnxruntime's units run at
    efficiency ``ort`` and our runtime's at ``ours``."""
    from optimiser.planner import make_plan
    from optimiser.spec import load_spec
    from perfmodels.fitted import load_default_model
    from perfmodels.hoststore import host_store_path
    from perfmodels.targets import local_target_key, usable_cores

    db = tmp_path / f"empty-{ort}-{ours}.csv"
    db.write_text(HEADER_LINE, encoding="utf-8")
    monkeypatch.setenv("APPOPT_RESULTS_DB", str(db))
    monkeypatch.setenv("APPOPT_CACHE_DIR", str(tmp_path / "cache"))
    rows = []
    for framework, layout, efficiency in (("onnxruntime", "NCHWc", ort), ("appopt-runtime", "NCHW", ours)):
        for row in _rows(sampled_gemms(10), efficiency, framework):
            rows.append({**row, "target": local_target_key(), "layout": layout, "threads": usable_cores()})
    store = host_store_path()
    store.parent.mkdir(parents=True, exist_ok=True)
    store.unlink(missing_ok=True)
    write_rows(store, rows)
    spec = Path(__file__).parents[2] / "examples" / "onnx-mlp-local.yaml"
    return make_plan(load_spec(spec), model=load_default_model())


@pytest.mark.parametrize(("ort", "ours"), [(0.5, 0.05), (0.05, 0.5)])
def test_a_plan_after_calibration_ranks_routes_by_their_measured_speeds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ort: float, ours: float
) -> None:
    from optimiser.report import render_markdown

    plan = _plan_on_unseen_host(tmp_path, monkeypatch, ort, ours)
    by_framework = {}
    for c in plan.candidates:  # type: ignore[attr-defined]
        if c.route.compiler == "none":
            by_framework.setdefault(c.route.framework, c)
    a, b = by_framework["onnxruntime"].prediction, by_framework["appopt-runtime"].prediction
    assert a.basis.startswith("calibrated:") and b.basis.startswith("calibrated:")
    assert "p10_step_s" in a.detail and a.detail["p10_step_s"] <= a.step_seconds <= a.detail["p90_step_s"]
    faster = "onnxruntime" if ort > ours else "appopt-runtime"
    slower = "appopt-runtime" if faster == "onnxruntime" else "onnxruntime"
    ranked = [c.route.framework for c in plan.candidates]  # type: ignore[attr-defined]
    assert ranked.index(faster) < ranked.index(slower)
    ratio = by_framework[slower].prediction.step_seconds / by_framework[faster].prediction.step_seconds
    assert ratio > 2.0  # the MLP's gemms run 10x apart; its call costs are equal
    text = render_markdown(plan)  # type: ignore[arg-type]
    assert "this host's own measurements from `appopt calibrate`" in text
    assert "| p10-p90 |" in text and np.isfinite(a.detail["heldout_rmspe"])


#: Schema v3's header (v4 added the LoadGen columns).
_OLD_HEADER = HEADER_LINE.replace(",driver,verdict,verdict_reason,log_dir,flags", "")


@pytest.mark.parametrize("content", ["garbage\n", _OLD_HEADER])
def test_a_damaged_or_foreign_store_on_an_unseen_host_is_one_line_and_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, content: str
) -> None:
    """Where the host fit is the only model (the database never saw this host), a store that is not this schema's
    results database stops the plan with one line naming it, and is left as it was."""
    from typer.testing import CliRunner

    from cli.main import app
    from perfmodels.hoststore import host_store_path

    db = tmp_path / "empty.csv"
    db.write_text(HEADER_LINE, encoding="utf-8")
    monkeypatch.setenv("APPOPT_RESULTS_DB", str(db))
    monkeypatch.setenv("APPOPT_CACHE_DIR", str(tmp_path / "cache"))
    store = host_store_path()
    store.parent.mkdir(parents=True, exist_ok=True)
    store.write_text(content, encoding="utf-8")
    spec = Path(__file__).parents[2] / "examples" / "onnx-mlp-local.yaml"
    result = CliRunner().invoke(app, ["plan", str(spec), "-o", str(tmp_path / "out")])
    out = result.stdout + result.stderr
    assert result.exit_code != 0 and "Traceback" not in out
    errors = [line for line in out.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and str(store) in errors[0]
    assert store.read_text(encoding="utf-8") == content


def test_whole_models_in_the_store_scale_their_route_by_what_a_model_costs_beyond_its_units() -> None:
    """A model measured whole at 1.5x its units' sum (``appopt bench run --db STORE``): the route's predictions take
    the factor, and the basis names it."""
    from analysis.units import encode_units
    from perfmodels.results_db import make_row

    units = sampled_gemms(8)
    bare = host_fit(to_frame(_rows(units, 0.5)), "h")
    assert bare is not None
    model = sampled_gemms(3, seed=4)
    unit_sum = bare.predict(model, 1, FW, 1)
    assert unit_sum is not None
    whole = make_row(
        source="measured", target="h", backend="fw", framework="fw", compiler="none", layout="NCHW", threads=1,
        precision="fp32", mode="inference", model="m", family="f", batch=1, scenario="SingleStream",
        metric="latency", value=1.0, median_ms=1.5 * unit_sum.seconds * 1e3, units=encode_units(model),
    )
    fit = host_fit(to_frame([*_rows(units, 0.5), whole]), "h")
    assert fit is not None
    scaled = fit.predict(sampled_gemms(5, seed=5), 1, FW, 1)
    plain = bare.predict(sampled_gemms(5, seed=5), 1, FW, 1)
    assert scaled is not None and plain is not None
    assert scaled.seconds == pytest.approx(1.5 * plain.seconds, rel=1e-6)
    assert "scaled by 1 whole model(s) x1.50" in fit.basis(scaled)


def test_a_route_that_measured_several_kinds_learns_each() -> None:
    """Kinds whose units have features of different lengths (a matrix product's and an element-wise unit's)."""
    eltwise = [Unit("eltwise", {"elements": 4096 * 4**i, "inputs": 2, "heavy": 0}) for i in range(5)]
    fit = host_fit(to_frame(_rows([*sampled_gemms(6), *eltwise], 0.5)), "h")
    assert fit is not None
    route = fit.route(FW, 1)
    assert route is not None and route.units == 11 and {"gemm", "eltwise"} <= set(route.model.kinds)
    assert route.model.kinds["eltwise"].rows == 5 and len(route.heldout_errors) == 11
