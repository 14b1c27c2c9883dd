"""Transfer through calibration: per-kind ratios, the route that stands for another, held-out intervals, and a plan
made after a real calibration."""

from __future__ import annotations

import math
from pathlib import Path

import onnx
import pytest

from analysis.units import Unit
from perfmodels.calibration import Calibration, KindRatio, kind_ratio

ORT = ("onnxruntime", "none", "NCHWc", "fp32")
ORT_NCHW = ("onnxruntime", "none", "NCHW", "fp32")


def _calibration(errors: tuple[float, ...] = ()) -> Calibration:
    return Calibration(
        host="here-2c",
        source="there-2c",
        units=3,
        ratios={ORT: {"conv": KindRatio(math.log(2.0), 2), "gemm": KindRatio(math.log(0.5), 1)}},
        log_ratios={ORT: [math.log(2.0), math.log(2.0), math.log(0.5)]},
        heldout_errors=errors,
    )


CONV = Unit("conv", {"n": 1, "cin": 8, "cout": 8, "h": 16, "w": 16, "kh": 3, "kw": 3, "stride": 1, "group": 1,
                     "oh": 16, "ow": 16, "act": 0, "residual": 0, "init_w": 1})
GEMM = Unit("gemm", {"m": 8, "k": 64, "n": 64, "act": 0, "init_w": 1})
POOL = Unit("pool", {"n": 1, "c": 8, "h": 16, "w": 16, "kh": 2, "kw": 2, "stride": 2, "oh": 8, "ow": 8, "avg": 0})


def test_factor_weights_each_kinds_ratio_by_its_share_of_the_shipped_time() -> None:
    cal = _calibration()
    assert cal.factor(ORT, [(CONV, 3e-3), (GEMM, 1e-3)]) == pytest.approx((3e-3 * 2.0 + 1e-3 * 0.5) / 4e-3)
    overall = 2.0  # the median unit's ratio: one unit far off does not move it
    assert cal.factor(ORT, [(POOL, 1e-3)]) == pytest.approx(overall)  # an uncalibrated kind: the route's ratio
    assert cal.factor(ORT, []) == pytest.approx(overall)


def test_without_anchors_the_call_counts_at_no_more_than_the_routes_ratio_and_with_them_as_measured() -> None:
    """A quick probe's route (no anchors): its no-op chains' ratio (6x here, as OpenVINO's one-node calls read on
    this machine) counts at no more than the route's ratio over its units (2x); a call slower than that is the
    one-node models' alone. A route with anchors keeps the chains' ratio: its anchors set the level. A call
    faster than the units stays as measured."""
    from dataclasses import replace

    from perfmodels.calibration import CALL, Anchor

    cal = _calibration()
    slow_call = replace(cal, ratios={ORT: {**cal.ratios[ORT], "noop": KindRatio(math.log(6.0), 2)}})
    timed = [(CONV, 3e-3), (CALL, 1e-3)]
    assert slow_call.factor(ORT, timed) == pytest.approx((3e-3 * 2.0 + 1e-3 * 2.0) / 4e-3)
    anchored = replace(slow_call, anchors={ORT: Anchor(0.0, ("a", "b"))})
    assert anchored.factor(ORT, timed) == pytest.approx((3e-3 * 2.0 + 1e-3 * 6.0) / 4e-3)
    fast_call = replace(cal, ratios={ORT: {**cal.ratios[ORT], "noop": KindRatio(math.log(1.2), 2)}})
    assert fast_call.factor(ORT, timed) == pytest.approx((3e-3 * 2.0 + 1e-3 * 1.2) / 4e-3)


def test_an_uncalibrated_route_borrows_its_frameworks_and_another_framework_gets_none() -> None:
    cal = _calibration()
    assert cal.route_for(ORT_NCHW) == ORT
    assert cal.factor(("appopt-runtime", "none", "NCHW", "fp32"), [(CONV, 1.0)]) is None
    assert cal.basis == "transferred:there-2c via calibration (3 units)"


def test_interval_is_the_heldout_error_quantiles_and_needs_five() -> None:
    assert _calibration((0.1, 0.2)).interval(1.0) is None
    low, high = _calibration((-0.5, -0.2, 0.0, 0.1, 0.3, 1.0)).interval(2.0)  # type: ignore[misc]
    assert 2.0 * 0.5 < low < 2.0 < high < 2.0 * 2.0


def test_the_interval_carries_the_shipped_predictions_own_band_too() -> None:
    """Two independent errors: the transfer's (held-out ratios) and the shipped model's (its p10-p90), their log
    distances added in quadrature; the shipped band alone where the calibration has too few held-out errors."""
    own = _calibration((-0.2, -0.1, 0.0, 0.1, 0.2, 0.25))
    low, high = own.interval(1.0)  # type: ignore[misc]
    wide_low, wide_high = own.interval(1.0, (0.5, 1.5))  # type: ignore[misc]
    assert wide_low == pytest.approx(math.exp(-math.hypot(math.log(low), math.log(0.5))))
    assert wide_high == pytest.approx(math.exp(math.hypot(math.log(high), math.log(1.5))))
    assert _calibration(()).interval(2.0, (0.5, 1.5)) == pytest.approx((1.0, 3.0))


def test_a_kinds_ratio_follows_its_units_size_within_the_range_measured() -> None:
    """Two threads against one: a large matrix product runs twice as fast, a tiny one not at all (thread wake-ups).
    Each unit of a model takes the ratio of its size, not the kind's average; beyond the sizes measured the ratio
    stays at the nearest end."""
    sizes = [8, 32, 128, 512, 2048]
    gemms = [Unit("gemm", {"m": m, "k": m, "n": m, "act": 0, "init_w": 1}) for m in sizes]
    logs = [math.log(r) for r in (1.0, 1.0, 0.8, 0.6, 0.5)]
    ratio = kind_ratio(list(zip(gemms, logs, strict=True)), toward=math.log(0.7))
    assert ratio.slope < 0 and ratio.units == 5
    tiny, huge = (Unit("gemm", {"m": m, "k": m, "n": m, "act": 0, "init_w": 1}) for m in (2, 8192))
    assert math.exp(ratio.log_at(huge)) == pytest.approx(0.5)  # clipped to the largest unit's
    assert math.exp(ratio.log_at(tiny)) == pytest.approx(1.0)
    level = kind_ratio(list(zip(gemms[:1], logs[:1], strict=True)), toward=0.0)
    assert level.slope == 0.0  # one unit (and no route line): a level, not a line


def _gemm(m: int) -> Unit:
    return Unit("gemm", {"m": m, "k": m, "n": m, "act": 0, "init_w": 1})


def test_two_units_of_a_kind_far_apart_give_a_line_between_them() -> None:
    """The quick probe measures two depthwise-separable units, a small one that one thread runs as fast as two
    (0.94) and a large one that two threads run 2.4x faster. A model of small such units takes the small one's
    ratio (shrunk toward the route's), not the pair's mean: before, a kind needed three units for a line, and the
    transfer carried tiny MobileNet-v1 from 2 threads to 1 at 1.6x where it measured 0.92x."""
    small, large = _gemm(16), _gemm(256)
    ratio = kind_ratio([(small, math.log(0.94)), (large, math.log(2.41))], toward=math.log(1.5))
    assert ratio.slope > 0 and ratio.units == 2
    at_small, at_large = math.exp(ratio.log_at(small)), math.exp(ratio.log_at(large))
    assert 0.94 <= at_small < 1.2 < 1.9 < at_large <= 2.41  # each end near its own unit, within their range
    mean = math.exp((math.log(0.94) + math.log(2.41)) / 2)
    assert abs(math.log(at_small / 0.94)) < abs(math.log(mean / 0.94))


def test_a_kind_with_one_unit_takes_the_routes_slope_measured_within_kinds() -> None:
    """Matrix products and convolutions both run 2x faster at two threads when large and 1x when small; one
    element-wise unit was measured, at a middle size. A small element-wise unit of a model takes the route's slope
    from there (not the middle unit's ratio), clipped to the ratios the route measured."""
    from perfmodels.calibration import kind_ratios, pooled_slope, route_line

    gemms = [(_gemm(m), math.log(r)) for m, r in ((8, 1.0), (32, 1.2), (128, 1.6), (512, 2.0))]
    convs = [(Unit("conv", {**CONV.dims, "cin": c, "cout": c}), math.log(r)) for c, r in ((4, 1.0), (64, 1.8))]
    middle = Unit("eltwise", {"elements": 2**16, "inputs": 2, "heavy": 0})
    pairs = [*gemms, *convs, (middle, math.log(1.5))]
    ratios, _ = kind_ratios(pairs)
    line = route_line(pairs, pooled_slope({"gemm": gemms, "conv": convs}))
    assert ratios["eltwise"].slope == pytest.approx(line.slope) and line.slope > 0
    tiny, huge = (Unit("eltwise", {"elements": n, "inputs": 2, "heavy": 0}) for n in (2**6, 2**30))
    assert math.exp(ratios["eltwise"].log_at(tiny)) < 1.3
    assert math.exp(ratios["eltwise"].log_at(huge)) == pytest.approx(2.0)  # the route's largest ratio


def test_kinds_at_different_levels_give_no_slope_when_flat_within() -> None:
    """Across kinds, large units here are matrix products at 2x and small ones element-wise at 1x, but within each
    kind the ratio does not change with size: the pooled slope is 0, so a kind's level is not read as size."""
    from perfmodels.calibration import pooled_slope

    gemms = [(_gemm(m), math.log(2.0)) for m in (256, 512, 1024)]
    elts = [(Unit("eltwise", {"elements": n, "inputs": 2, "heavy": 0}), 0.0) for n in (2**8, 2**10, 2**12)]
    assert pooled_slope({"gemm": gemms, "eltwise": elts}) == pytest.approx(0.0)


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
    assert cal.ratios[("fw", "none", "NCHW", "fp32")]["noop"].ratio == pytest.approx(3.0, rel=0.1)
    assert cal.basis == f"transferred:{TARGET} via quick probe (2 units)"


def _shipped_and_store(
    here_ratio: float, threads_here: int = 1, extra: list[dict[str, object]] | None = None, compiler: str = "none"
) -> tuple[object, object]:
    """Shipped unit models of 40 gemms (efficiency 0.5) on TARGET at 1 thread, and a store on ``here-2c`` whose
    calibration units (8 gemms and the no-op chains) ran ``here_ratio`` times as long, at ``threads_here``; all
    measured through ``compiler``."""
    from perfmodels.results_db import to_frame
    from perfmodels.unitfit import fit_units
    from tests.analysis.test_units import noop_rows, sampled_gemms, sweep_row, true_seconds

    def through(rows: list[dict[str, object]]) -> list[dict[str, object]]:
        return [{**r, "compiler": compiler} for r in rows]

    shipped_rows = noop_rows() + [sweep_row(u, true_seconds(u, 0.5)) for u in sampled_gemms(40)]
    shipped = fit_units(to_frame(through(shipped_rows)))
    rows = noop_rows() + [sweep_row(u, true_seconds(u, 0.5)) for u in sampled_gemms(8, seed=7)]
    here = []
    for row in through(rows):
        here.append({**row, "target": "here-2c", "threads": threads_here, "median_ms": row["median_ms"] * here_ratio})
    return shipped, to_frame(here + (extra or []))


def _whole(
    model: str, target: str, ms: float, units: str, threads: int = 1, compiler: str = "none"
) -> dict[str, object]:
    from perfmodels.results_db import make_row

    return make_row(
        source="measured", target=target, backend="fw", framework="fw", compiler=compiler, layout="NCHW",
        threads=threads, precision="fp32", mode="inference", model=model, family="f", batch=1,
        scenario="SingleStream", metric="latency", value=1.0, median_ms=ms, units=units,
    )


FW = ("fw", "none", "NCHW", "fp32")


def test_whole_model_anchors_set_the_routes_factor_exactly_on_themselves() -> None:
    """Units ran 2x as long here, but the anchor model 3x: units measured alone missed what the model pays around
    them. The anchor's ratio is the route's factor for a model of its kind mix; without the shipped rows to compare
    with, the units' 2x stands."""
    from analysis.units import encode_units
    from perfmodels.calibration import calibration_from, source_route, timed_units
    from perfmodels.results_db import to_frame
    from tests.analysis.test_units import TARGET, sampled_gemms

    model = encode_units(sampled_gemms(3, seed=11))
    shipped, store = _shipped_and_store(2.0, extra=[_whole("a", "here-2c", 3.0, model)])
    there = to_frame([_whole("a", TARGET, 1.0, model), _whole("a", "elsewhere-4c", 9.0, model)])
    plain = calibration_from(store, shipped, TARGET, "here-2c")  # type: ignore[arg-type]
    cal = calibration_from(store, shipped, TARGET, "here-2c", shipped_rows=lambda: there)  # type: ignore[arg-type]
    assert plain is not None and cal is not None and not plain.anchors
    assert cal.anchors[FW].models == ("a",) and cal.anchors[FW].offset == pytest.approx(math.log(3.0 / 2.0), abs=0.05)
    route = source_route(shipped, TARGET, FW, 1)  # type: ignore[arg-type]
    assert route is not None
    mix = timed_units(route, sampled_gemms(3, seed=11), 1)
    assert plain.factor(FW, mix) == pytest.approx(2.0, rel=0.05)
    assert cal.factor(FW, mix) == pytest.approx(3.0, rel=1e-6)
    assert cal.basis == f"transferred:{TARGET} via calibration (12 units, 1 anchor models)"


def test_a_kind_measured_once_far_off_is_shrunk_toward_its_routes_ratio() -> None:
    """One unit of a kind ran 50x its shipped time (a burst of load): the kind's ratio moves a third of the way in
    log (two units' worth of the route's ratio against its one), and the route's ratio is the median of all."""
    from perfmodels.calibration import kind_ratios

    ratios, errors = kind_ratios([(GEMM, 0.0)] * 9 + [(CONV, math.log(50.0))])
    assert ratios["gemm"].ratio == pytest.approx(1.0)
    assert ratios["conv"].ratio == pytest.approx(50.0 ** (1 / 3), rel=1e-6)
    assert len(errors) == 10 and errors[-1] == pytest.approx(49.0)  # held out, it is predicted by the route's
    cal = Calibration("h", "s", 10, {ORT: ratios}, {ORT: [0.0] * 9 + [math.log(50.0)]})
    assert cal.overall(ORT) == pytest.approx(1.0)


def test_a_store_at_another_thread_count_compares_with_the_nearest_the_source_swept() -> None:
    """The shipped host swept 1 thread; a host calibrated at 2 threads is compared with it (before: no unit of the
    store found a shipped model, so nothing was carried over)."""
    from perfmodels.calibration import calibration_from
    from tests.analysis.test_units import TARGET

    shipped, store = _shipped_and_store(0.5, threads_here=2)
    cal = calibration_from(store, shipped, TARGET, "here-2c")  # type: ignore[arg-type]
    assert cal is not None and cal.units == 12
    assert cal.overall(FW) == pytest.approx(0.5, rel=0.05)


def test_five_anchors_or_more_give_the_interval_from_their_leave_one_model_out_errors() -> None:
    from analysis.units import encode_units
    from perfmodels.calibration import calibration_from
    from perfmodels.results_db import to_frame
    from tests.analysis.test_units import TARGET, sampled_gemms

    here, there = [], []
    for i, ratio in enumerate((2.0, 2.2, 1.8, 2.5, 1.6, 2.0)):
        units = encode_units(sampled_gemms(2, seed=20 + i))
        here.append(_whole(f"m{i}", "here-2c", ratio, units))
        there.append(_whole(f"m{i}", TARGET, 1.0, units))
    shipped, store = _shipped_and_store(1.0, extra=here)
    cal = calibration_from(store, shipped, TARGET, "here-2c", shipped_rows=lambda: to_frame(there))  # type: ignore[arg-type]
    assert cal is not None and len(cal.anchors[FW].models) == 6 and len(cal.heldout_errors) == 6
    low, high = cal.interval(1.0)  # type: ignore[misc]
    assert 0.7 < low < 1.0 < high < 1.4


@pytest.mark.slow
def test_a_real_calibration_of_a_minute_measures_the_anchors_and_plans_carry_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``appopt calibrate --budget 60`` on one backend: its share is enough for the anchor models, measured whole
    with their kernel units before the units; a plan then carries the shipped fits with them (the basis counts
    them), and a second run resumes without measuring them again."""
    from typer.testing import CliRunner

    from benchmarks.calibrate import ANCHOR_MODELS
    from cli.main import app
    from optimiser.planner import make_plan
    from optimiser.spec import load_spec
    from perfmodels.hoststore import host_store_path, read_store

    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("APPOPT_CACHE_DIR", str(tmp_path / "cache"))
    result = CliRunner().invoke(app, ["calibrate", "--budget", "60", "--backends", "onnxruntime"])
    assert result.exit_code == 0, result.stdout + result.stderr
    assert f"and {len(ANCHOR_MODELS)} whole model(s)" in result.stdout
    store = read_store(host_store_path())
    assert store is not None
    whole = store[store["scenario"] == "SingleStream"]
    assert set(whole["model"]) == set(ANCHOR_MODELS) and whole["units"].notna().all()
    assert (store["scenario"] == "kernel").sum() >= 4
    plan = make_plan(load_spec(Path(__file__).parents[2] / "examples" / "onnx-mlp-local.yaml"))
    ort = [c.prediction for c in plan.candidates if c.route.framework == "onnxruntime"]
    assert any(f"{len(ANCHOR_MODELS)} anchor models" in p.basis for p in ort), [p.basis for p in ort]
    again = CliRunner().invoke(app, ["calibrate", "--budget", "60", "--backends", "onnxruntime"])
    assert again.exit_code == 0, again.stdout + again.stderr
    after = read_store(host_store_path())
    assert after is not None and (after["scenario"] == "SingleStream").sum() == len(whole)


def test_a_unit_the_source_measured_is_compared_with_that_measurement_not_its_model() -> None:
    """The calibration's units are the sweep's own: where the shipped rows hold the same unit on the source, its
    ratio is measured over measured (here every unit ran exactly 2x, whatever the source's unit model says of it);
    without the shipped rows, the unit model's prediction stands in and its errors scatter the ratios."""
    import numpy as np

    from perfmodels.calibration import calibration_from
    from perfmodels.results_db import to_frame
    from perfmodels.unitfit import fit_units
    from tests.analysis.test_units import TARGET, noop_rows, sampled_gemms, sweep_row, true_seconds

    rng = np.random.default_rng(3)
    noisy = [sweep_row(u, true_seconds(u, 0.5) * float(rng.uniform(0.6, 1.6))) for u in sampled_gemms(8, seed=7)]
    smooth = noop_rows() + [sweep_row(u, true_seconds(u, 0.5)) for u in sampled_gemms(40)]
    shipped = fit_units(to_frame(smooth))  # a unit model smoother than the 8 rows it did not learn from
    shipped_frame = to_frame(smooth + noisy)
    here = to_frame([{**r, "target": "here-2c", "median_ms": 2 * r["median_ms"]} for r in noop_rows() + noisy])
    measured = calibration_from(here, shipped, TARGET, "here-2c", shipped_rows=lambda: shipped_frame)
    modelled = calibration_from(here, shipped, TARGET, "here-2c")
    assert measured is not None and modelled is not None
    assert np.allclose(measured.log_ratios[FW], math.log(2.0))
    assert np.ptp(modelled.log_ratios[FW]) > 0.3


def test_a_units_ratio_is_of_its_own_work_each_hosts_call_taken_off() -> None:
    """Here a call costs 3x the source's and a matrix product's work 2x: the gemm kind's ratio is 2 (a model pays
    the call once, as the ``noop`` part of its mix, not once per unit), the call's 3 (its four chains shrunk toward
    the route's median by two units' worth)."""
    from perfmodels.calibration import calibration_from
    from perfmodels.results_db import to_frame
    from perfmodels.unitfit import fit_units
    from tests.analysis.test_units import CALL_S, NODE_S, TARGET, noop_rows, sweep_row, true_seconds

    # small enough that a call costs more than their work: a ratio of whole times would be the call's
    gemms = [Unit("gemm", {"m": m, "k": k, "n": 64, "act": 0, "init_w": 1}) for m in (1, 2, 4) for k in (16, 64, 128)]
    source = noop_rows() + [sweep_row(u, true_seconds(u, 0.5)) for u in gemms]
    here = [
        {**sweep_row(Unit("noop", {"nodes": n}), 0.0), "median_ms": 3 * (CALL_S + n * NODE_S) * 1e3}
        for n in (1, 2, 4, 8)
    ] + [{**sweep_row(u, 0.0), "median_ms": (3 * CALL_S + 2 * true_seconds(u, 0.5)) * 1e3} for u in gemms]
    here = [{**row, "target": "here-2c"} for row in here]
    cal = calibration_from(
        to_frame(here), fit_units(to_frame(source)), TARGET, "here-2c", shipped_rows=lambda: to_frame(source)
    )
    assert cal is not None
    assert cal.ratios[FW]["gemm"].ratio == pytest.approx(2.0, rel=0.02)
    assert cal.ratios[FW]["noop"].ratio == pytest.approx(math.exp((4 * math.log(3.0) + 2 * math.log(2.0)) / 6))


def test_anchors_weigh_their_units_as_the_predictions_they_correct_pay_them() -> None:
    """``paid`` (a graph compiler's units as its compiled graph pays them) weighs the anchors' unit mix too, so an
    anchor's factor on its own paid mix is exactly its measured ratio."""
    from analysis.units import encode_units
    from perfmodels.calibration import calibration_from, source_route, timed_units
    from perfmodels.results_db import to_frame
    from tests.analysis.test_units import TARGET, sampled_gemms

    model = encode_units(sampled_gemms(3, seed=11))
    shipped, store = _shipped_and_store(2.0, extra=[_whole("a", "here-2c", 3.0, model)])
    there = to_frame([_whole("a", TARGET, 1.0, model)])
    keys = []

    def paid(key: tuple[str, str, str, str, str, int], timed: list[tuple[Unit, float]]) -> list[tuple[Unit, float]]:
        keys.append(key)
        return [(u, t * (50.0 if u.kind == "noop" else 1.0)) for u, t in timed]  # the call weighs 50x

    cal = calibration_from(store, shipped, TARGET, "here-2c", shipped_rows=lambda: there, paid=paid)  # type: ignore[arg-type]
    route = source_route(shipped, TARGET, FW, 1)  # type: ignore[arg-type]
    assert cal is not None and route is not None and keys == [route.key]
    mix = paid(route.key, timed_units(route, sampled_gemms(3, seed=11), 1))
    assert cal.factor(FW, mix) == pytest.approx(3.0, rel=1e-6)


def test_anchors_the_unit_mix_mispredicts_set_the_factor_by_their_own_mean_ratio() -> None:
    """OpenVINO on a slower machine (docs/decisions.md, 2026-11-27): its units alone ran 2-6x the shipped host's,
    its whole models 1.8-2.5x, and the anchors' offset over the mix (tiny models' mixes 4-5x, ResNet-18's 2.4x)
    took 0.55x off every model. Each anchor predicted from the others by its mix errs far more than by their
    plain mean, so the route's factor is their mean ratio, whatever a model's mix."""
    from perfmodels.calibration import Anchor, anchor_errors, flat_beats_mix

    logs = [(math.log(r), math.log(m)) for r, m in ((2.49, 4.41), (2.03, 4.73), (1.94, 3.92), (1.78, 2.37))]
    by_mix, flat = anchor_errors(logs)
    assert flat_beats_mix(by_mix, flat)
    level = sum(r for r, _ in logs) / 4
    anchor = Anchor(sum(r - m for r, m in logs) / 4, ("a", "b", "c", "d"), level, flat=True)
    assert anchor.factor(2.0) == anchor.factor(5.0) == pytest.approx(math.exp(level))
    assert Anchor(math.log(0.5), ("a",), level).factor(2.0) == pytest.approx(1.0)
    # a training step's kernels are far larger than the anchors': it asks for the mix whatever the anchors chose
    assert anchor.factor(2.0, flat=False) == pytest.approx(math.exp(anchor.offset) * 2.0)


def test_a_near_draw_or_too_few_anchors_keep_the_unit_mix() -> None:
    """The units are hundreds of measurements, the anchors a few: the mean alone must beat the mix by more than an
    RMS of n errors is uncertain (1/sqrt(2n)); the thread-count proxy's onnxruntime NCHW (0.099 against 0.125 over
    four anchors) keeps its mix."""
    from perfmodels.calibration import flat_beats_mix

    assert not flat_beats_mix([0.125] * 4, [0.099] * 4)
    assert flat_beats_mix([0.125] * 4, [0.07] * 4)
    assert not flat_beats_mix([0.5, 0.5], [0.0, 0.0])  # two anchors: each predicted by one other


@pytest.mark.parametrize(
    ("compiler", "level", "flat"), [("none", 0.5, False), ("openvino", 0.5, True), ("openvino", 1.0, False)]
)
def test_a_graph_compilers_route_takes_its_anchors_level_where_they_sit_far_from_its_units(
    compiler: str, level: float, flat: bool
) -> None:
    """Four anchors at ``level`` times their source times, about as spread around it as around their unit mix (a
    near draw), the units as on the source. An eager route keeps its mix. A graph compiler's whose anchors sit 2x
    off their mix takes their level: its units are measured one compiled graph each, and how that differs from its
    whole models changes from host to host (OpenVINO on an AMD EPYC: its units 0.9-1.6x the Xeon's, its whole
    models 0.34-0.60x). Where its anchors agree with its mix, it keeps the mix."""
    from analysis.units import encode_units
    from perfmodels.calibration import calibration_from
    from perfmodels.results_db import to_frame
    from tests.analysis.test_units import TARGET, sampled_gemms

    here, there = [], []
    for i, spread in enumerate((1.0, 1.25, 0.8, 1.1)):
        units = encode_units(sampled_gemms(2, seed=40 + i))
        here.append(_whole(f"m{i}", "here-2c", level * spread, units, compiler=compiler))
        there.append(_whole(f"m{i}", TARGET, 1.0, units, compiler=compiler))
    shipped_units, store = _shipped_and_store(1.0, extra=here, compiler=compiler)
    cal = calibration_from(store, shipped_units, TARGET, "here-2c", shipped_rows=lambda: to_frame(there))  # type: ignore[arg-type]
    key = ("fw", compiler, "NCHW", "fp32")
    assert cal is not None and len(cal.anchors[key].models) == 4
    assert cal.anchors[key].flat is flat
