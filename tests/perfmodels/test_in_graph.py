"""A graph compiler's unit sums as its compiled graph pays them (``perfmodels.in_graph``)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from analysis.units import Unit, roofline_seconds
from perfmodels.evaluate import UnitLookup, _estimates
from perfmodels.fit import RouteKey
from perfmodels.in_graph import InGraph, UnitParts, applies, fit_in_graph, fit_in_graphs, unit_parts
from perfmodels.unitfit import KindModel, UnitRoute
from tests.perfmodels.doubles import NoRatios, WholeModelGroup

KEY = ("t", "onnxruntime", "openvino", "NCHWc", "fp32", 2)


class _AtRoofline:
    """A kind regressor that predicts every unit at its roofline time (log ratio 0)."""

    def predict(self, features: np.ndarray) -> np.ndarray:
        return np.zeros(len(features))


def _route() -> UnitRoute:
    kinds = {k: KindModel(k, 10, _AtRoofline()) for k in ("conv", "eltwise", "move")}
    return UnitRoute("t", RouteKey(*KEY[1:5]), 2, 300e9, 10e9, call_s=30e-6, node_s=0.5e-6, kinds=kinds)


def _conv() -> Unit:
    dims = {"n": 1, "cin": 64, "cout": 64, "h": 28, "w": 28, "kh": 3, "kw": 3, "stride": 1, "group": 1}
    return Unit("conv", {**dims, "oh": 28, "ow": 28, "act": 1, "residual": 0, "init_w": 1}, count=3)


def test_unit_parts_split_compute_kernels_from_memory_bound_ones():
    route = _route()
    conv, add = _conv(), Unit("eltwise", {"elements": 50_000, "inputs": 2, "heavy": 0}, count=2)
    concat = Unit("move", {"elements": 100_000})
    parts = unit_parts(route, [conv, add, concat], batch=1)
    assert parts is not None
    assert parts.compute == pytest.approx(3 * roofline_seconds(conv, 1, 300e9, 10e9))
    memory = 2 * roofline_seconds(add, 1, 300e9, 10e9) + roofline_seconds(concat, 1, 300e9, 10e9)
    assert parts.memory == pytest.approx(memory)
    assert parts.kernels == 6 and parts.call == 30e-6
    assert parts.total == pytest.approx(30e-6 + parts.compute + parts.memory)
    # a kind the route has not learned: no parts, as the plain unit sum is NaN
    assert unit_parts(route, [Unit("softmax", {"rows": 8, "cols": 8})], batch=1) is None


def _parts(n: int, seed: int = 0) -> list[UnitParts]:
    rng = np.random.default_rng(seed)
    return [
        UnitParts(30e-6, float(c), float(m), float(k))
        for c, m, k in zip(rng.uniform(1e-4, 1e-2, n), rng.uniform(1e-4, 2e-2, n), rng.integers(5, 300, n), strict=True)
    ]


def test_the_fit_recovers_how_much_of_each_part_the_graph_pays():
    parts = _parts(12)
    truth = InGraph(KEY, 0.9, 0.1, 8e-6, 12, ("a",))
    seconds = [truth.seconds(p) for p in parts]
    fitted = fit_in_graph(KEY, parts, seconds, ["a", "b", "c"] * 4)
    assert (fitted.compute, fitted.memory, fitted.kernel_s) == pytest.approx((0.9, 0.1, 8e-6), rel=1e-6)
    assert fitted.train_rmspe < 1e-9 and fitted.usable
    assert "0.90x its compute units + 0.10x its memory-bound units + 8.0 us/kernel" in fitted.describe()


def test_shares_stay_non_negative_and_too_few_families_are_not_used():
    parts = _parts(8, seed=1)
    # graphs that run faster than their compute units alone leave nothing for the memory-bound units
    seconds = [0.5 * p.compute + 30e-6 for p in parts]
    fitted = fit_in_graph(KEY, parts, seconds, ["a", "b"] * 4)
    assert fitted.memory >= 0 and fitted.kernel_s >= 0 and fitted.compute >= 0
    assert not fitted.usable  # two families


def test_only_graph_compilers_fp32_routes_are_fitted():
    assert applies(KEY)
    assert not applies(("t", "onnxruntime", "none", "NCHWc", "fp32", 2))
    assert not applies(("t", "onnxruntime", "openvino", "NCHWc", "int8", 2))
    rows = pd.DataFrame(
        {
            "target": "t",
            "framework": "onnxruntime",
            "compiler": ["openvino"] * 9 + ["none"] * 9,
            "layout": "NCHWc",
            "precision": "fp32",
            "threads": 2,
            "family": ["a", "b", "c"] * 6,
            "y": 1e-3,
        }
    )
    parts = _parts(18)
    fitted = fit_in_graphs(rows, lambda index: parts[int(str(index))])
    assert list(fitted) == [KEY]
    assert fitted[KEY].rows == 9


def test_held_out_estimates_take_a_compilers_units_as_its_graph_pays_them():
    row = pd.Series(
        {
            "x": np.zeros(3),
            "batch": 1,
            "threads": 2,
            **dict(zip(("target", "framework", "compiler", "layout", "precision"), KEY[:5], strict=True)),
        }
    )
    data = pd.DataFrame([row])
    parts = UnitParts(30e-6, 2e-3, 4e-3, 100.0)
    lookup = UnitLookup(None, data, own={0: parts.total})
    lookup._parts[0] = parts
    plain = _estimates(NoRatios(), WholeModelGroup(KEY), 0, row, lookup)  # type: ignore[arg-type]
    assert plain["units"] == pytest.approx(parts.total)
    scale = InGraph(KEY, 1.0, 0.05, 8e-6, 12, ("a", "b", "c"))
    compiled = _estimates(NoRatios(), WholeModelGroup(KEY), 0, row, lookup, {KEY: scale})  # type: ignore[arg-type]
    assert compiled["units"] == pytest.approx(30e-6 + 2e-3 + 0.05 * 4e-3 + 100 * 8e-6)
    # a fit from too few families is not used
    thin = InGraph(KEY, 1.0, 0.05, 8e-6, 12, ("a",))
    group, result = WholeModelGroup(KEY), NoRatios()
    assert _estimates(result, group, 0, row, lookup, {KEY: thin})["units"] == pytest.approx(parts.total)  # type: ignore[arg-type]
    assert not math.isnan(compiled["whole"])


def test_the_planner_takes_a_compilers_units_as_its_graph_pays_them_and_keeps_the_fit_in_its_cache():
    from perfmodels.features import Workload
    from perfmodels.fit import FitResult
    from perfmodels.fitted import FittedModel
    from perfmodels.unitfit import UnitFit

    unit_fit = UnitFit(None, keys=[KEY])
    unit_fit._fitted[KEY] = _route()
    units = (_conv(), Unit("move", {"elements": 100_000}, count=4))
    workload = Workload(
        flops_per_sample=1e9, activation_bytes_per_sample=1e6, params=1e6, mode="inference", batch_size=1, units=units
    )
    model = FittedModel(FitResult(()))
    model._units = unit_fit
    plain = model.units_seconds(workload, WholeModelGroup(KEY))  # type: ignore[arg-type]
    parts = unit_parts(_route(), units, 1)
    assert parts is not None and plain == pytest.approx(parts.total)
    scale = InGraph(KEY, 0.9, 0.1, 8e-6, 12, ("a", "b", "c"))
    model._in_graph = {KEY: scale}
    assert model.units_seconds(workload, WholeModelGroup(KEY)) == pytest.approx(scale.seconds(parts))  # type: ignore[arg-type]
    # a plan read from the cache has the same fit without the rows
    assert model.plan_data().in_graph == (scale,)


def test_a_compilers_calibration_mix_weighs_its_units_as_its_graph_pays_them():
    from perfmodels.calibration import CALL
    from perfmodels.in_graph import as_compiled

    conv, move = _conv(), Unit("move", {"elements": 100_000}, count=4)
    timed = [(CALL, 30e-6), (conv, 3e-3), (move, 1e-3)]
    scale = InGraph(KEY, 0.9, 0.1, 8e-6, 12, ("a", "b", "c"))
    paid = as_compiled(timed, scale)
    assert [u for u, _ in paid] == [CALL, conv, move]
    # the per-kernel cost joins the call's (3 convolutions and 4 copies launched); compute and memory-bound units
    # weigh as the graph pays them
    assert [t for _, t in paid] == pytest.approx([30e-6 + 7 * 8e-6, 0.9 * 3e-3, 0.1 * 1e-3])
    assert as_compiled([], scale) == []


def test_the_planner_carries_a_compilers_prediction_by_the_mix_its_graph_pays():
    """A calibration that makes copies 3x slower here and convolutions 1x: a compiled graph that fuses its copies
    (memory share 0) is carried by the convolutions' ratio, a framework's plain unit sum by the mix of both."""
    import math

    from perfmodels.calibration import Calibration, KindRatio, timed_units
    from perfmodels.fit import FitResult
    from perfmodels.fitted import FittedModel

    route_key = KEY[1:5]
    plain_key = ("onnxruntime", "none", "NCHWc", "fp32")
    ratios = {"conv": KindRatio(0.0, 4), "move": KindRatio(math.log(3.0), 4), "noop": KindRatio(0.0, 4)}
    cal = Calibration("here", "t", 12, {route_key: ratios, plain_key: ratios}, {route_key: [0.0], plain_key: [0.0]})
    model = FittedModel(FitResult(()))
    model._in_graph = {KEY: InGraph(KEY, 1.0, 0.0, 0.0, 12, ("a", "b", "c"))}
    timed = timed_units(_route(), (_conv(), Unit("move", {"elements": 1_000_000}, count=4)), 1)
    compiled = cal.factor(route_key, model._as_paid(KEY, timed))
    plain = cal.factor(plain_key, model._as_paid(("t", *plain_key, 2), timed))
    assert compiled == pytest.approx(1.0)
    assert plain is not None and plain > 1.2  # the copies' 3x counts where they are paid
