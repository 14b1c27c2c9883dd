"""Kernel units: their sizes, their JSON form, and the unit-level fit on synthetic sweeps with known costs."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from analysis.units import (
    KINDS,
    UNFUSABLE,
    Unit,
    check_units,
    decode_units,
    encode_units,
    roofline_seconds,
    unfuse,
    unfused,
    unit_features,
    unit_flops,
    unit_weight_bytes,
)
from perfmodels.results_db import make_row, to_frame
from perfmodels.unitfit import UNIT_FAMILY, WHOLE_WEIGHT, combine, fit_units, sweep_rows, whole_weight

CONV = {
    "n": 1,
    "cin": 64,
    "cout": 128,
    "h": 56,
    "w": 56,
    "kh": 3,
    "kw": 3,
    "stride": 2,
    "group": 1,
    "oh": 28,
    "ow": 28,
    "act": 1,
    "residual": 0,
    "init_w": 1,
}


def test_conv_flops_count_multiply_adds_twice_plus_the_fused_bias_and_activation():
    outputs = 128 * 28 * 28
    assert unit_flops(Unit("conv", CONV)) == 2 * outputs * 64 * 9 + 2 * outputs
    assert unit_flops(Unit("conv", CONV), batch=8) == 8 * unit_flops(Unit("conv", CONV))


def test_each_kind_grows_with_the_batch_in_its_first_dimension():
    gemm = Unit("gemm", {"m": 1, "k": 512, "n": 256, "act": 0, "init_w": 1})
    assert gemm.at_batch(8)["m"] == 8 and gemm.at_batch(8)["k"] == 512
    noop = Unit("noop", {"nodes": 3})
    assert noop.at_batch(8) == noop  # the fixed cost does not grow


def test_units_round_trip_through_json_with_identical_ones_merged():
    a, b = Unit("conv", CONV), Unit("eltwise", {"elements": 100, "inputs": 1, "heavy": 1})
    text = encode_units([a, b, a])
    back = decode_units(text)
    assert [(u.kind, dict(u.dims), u.count) for u in back] == [("conv", CONV, 2), ("eltwise", dict(b.dims), 1)]
    assert decode_units("") == [] and decode_units(None) == []


@pytest.mark.parametrize("bad", ['[["conv", [1, 2], 1]]', '[["tensorcore", [1], 1]]'])
def test_malformed_units_are_refused_with_the_kind_named(bad):
    with pytest.raises(ValueError, match=r"conv|tensorcore"):
        decode_units(bad)


@pytest.mark.parametrize(
    ("items", "named"),
    [([["conv", [1, 2], 1]], "conv unit has 2"), ([["tensorcore", [1], 1]], "tensorcore"), ([["conv"]], "expected"),
     ({"conv": 1}, "expected a list")],
)
def test_check_units_names_what_a_results_row_cannot_be_read_as(items, named):
    with pytest.raises(ValueError, match=named):
        check_units(items)
    check_units(json.loads(encode_units([Unit("conv", CONV)])))
    check_units(None)


def test_a_unit_must_have_every_dimension_of_its_kind():
    with pytest.raises(ValueError, match="lacks"):
        Unit("gemm", {"m": 1, "k": 2})


def test_features_have_one_length_per_kind():
    for kind, dims in KINDS.items():
        lengths = {len(unit_features(Unit(kind, dict.fromkeys(dims, v)))) for v in (1, 3, 64)}
        assert len(lengths) == 1, kind


# --- fitting on synthetic sweeps -------------------------------------------------------------------------------------

TARGET = "test-cpu-2c"
PEAK, BANDWIDTH = 100e9, 10e9
CALL_S, NODE_S = 5e-6, 1e-6


def true_seconds(unit: Unit, efficiency: float) -> float:
    """A route's true unit time: its roofline time at ``efficiency`` plus one node's cost."""
    return roofline_seconds(unit, 1, PEAK, BANDWIDTH) / efficiency + NODE_S


def sweep_row(unit: Unit, seconds: float, framework: str = "fw", precision: str = "fp32", boundary: float = 0.0):
    return make_row(
        source="measured",
        target=TARGET,
        backend=framework,
        framework=framework,
        compiler="none",
        layout="NCHW",
        threads=1,
        precision=precision,
        mode="inference",
        model=f"unit_{unit.signature()}",
        family=UNIT_FAMILY,
        batch=1,
        scenario="kernel",
        metric="gflops",
        value=1.0,
        median_ms=(seconds + CALL_S) * 1e3,
        peak_gflops=PEAK / 1e9,
        bandwidth_gbs=BANDWIDTH / 1e9,
        units=encode_units([unit]),
        boundary_ms=boundary * 1e3,
        other_cpu=0.0,
    )


def sampled_gemms(count: int, seed: int = 0) -> list[Unit]:
    rng = np.random.default_rng(seed)
    return [
        Unit(
            "gemm",
            {
                "m": int(rng.integers(1, 256)),
                "k": int(rng.integers(16, 2048)),
                "n": int(rng.integers(16, 2048)),
                "act": 0,
                "init_w": 1,
            },
        )
        for _ in range(count)
    ]


def noop_rows(framework: str = "fw", precision: str = "fp32") -> list[dict[str, object]]:
    return [sweep_row(Unit("noop", {"nodes": n}), n * NODE_S, framework, precision) for n in (1, 2, 4, 8)]


def test_a_route_learns_its_fixed_costs_and_predicts_unseen_units_and_models():
    rows = noop_rows() + [sweep_row(u, true_seconds(u, 0.5)) for u in sampled_gemms(80)]
    unit_fit = fit_units(to_frame(rows))
    route = unit_fit.route((TARGET, "fw", "none", "NCHW", "fp32", 1))
    assert route is not None
    assert route.call_s == pytest.approx(CALL_S, rel=0.05) and route.node_s == pytest.approx(NODE_S, rel=0.05)
    unseen = sampled_gemms(20, seed=1)
    predicted = route.unit_seconds(unseen, 1)
    truth = np.array([true_seconds(u, 0.5) for u in unseen])
    assert np.sqrt(np.mean((predicted / truth - 1) ** 2)) < 0.2
    model = unseen[:5]
    assert unit_fit.seconds(route, model, 1) == pytest.approx(CALL_S + truth[:5].sum(), rel=0.15)
    assert math.isnan(unit_fit.seconds(route, [Unit("softmax", {"rows": 4, "cols": 64})], 1))  # kind not swept
    assert unit_fit.route((TARGET, "other", "none", "NCHW", "fp32", 1)) is None


def test_layout_conversions_measured_at_a_one_unit_models_boundary_are_not_learned_as_kernel_time():
    gemms = sampled_gemms(60)
    rows = noop_rows() + [sweep_row(u, true_seconds(u, 0.5) + 2e-4, boundary=2e-4) for u in gemms]
    route = fit_units(to_frame(rows)).route((TARGET, "fw", "none", "NCHW", "fp32", 1))
    assert route is not None
    predicted = route.unit_seconds(gemms, 1)
    truth = np.array([true_seconds(u, 0.5) for u in gemms])
    assert np.median(predicted / truth) == pytest.approx(1.0, abs=0.1)


def test_int8_routes_run_the_units_their_quantiser_leaves_alone_as_at_fp32():
    gemms = sampled_gemms(40)
    norms = [Unit("softmax", {"rows": r, "cols": c}) for r, c in zip(range(1, 41), range(16, 656, 16), strict=True)]
    rows = noop_rows() + noop_rows(precision="int8")
    rows += [sweep_row(u, true_seconds(u, 0.5)) for u in gemms + norms]
    rows += [sweep_row(u, true_seconds(u, 2.0), precision="int8") for u in gemms]  # int8 matrix products: 4x faster
    unit_fit = fit_units(to_frame(rows))
    int8 = unit_fit.route((TARGET, "fw", "none", "NCHW", "int8", 1))
    assert int8 is not None and "softmax" not in int8.kinds
    softmax = norms[10]
    stored = Unit("gemm", dict(gemms[3].dims))
    computed = Unit("gemm", {**gemms[3].dims, "init_w": 0})  # weights computed at run time: not quantised
    one = lambda u: unit_fit.seconds(int8, [u], 1) - int8.call_s  # noqa: E731
    assert one(softmax) == pytest.approx(true_seconds(softmax, 0.5), rel=0.2)
    assert one(stored) == pytest.approx(true_seconds(stored, 2.0), rel=0.2)
    assert one(computed) == pytest.approx(true_seconds(computed, 0.5), rel=0.2)

    # measured at int8 with computed weights too (a quantiser that converts them, at a cost): the int8 route's own
    computed_rows = [Unit("gemm", {**u.dims, "init_w": 0}) for u in sampled_gemms(40, seed=2)]
    rows += [sweep_row(u, true_seconds(u, 0.25), precision="int8") for u in computed_rows]
    int8 = fit_units(to_frame(rows)).route((TARGET, "fw", "none", "NCHW", "int8", 1))
    assert int8 is not None and int8.kinds["gemm"].computed_weights
    assert int8.unit_seconds([computed], 1)[0] == pytest.approx(true_seconds(computed, 0.25), rel=0.25)
    assert int8.unit_seconds([stored], 1)[0] == pytest.approx(true_seconds(stored, 2.0), rel=0.25)


def _rows_cols_units(kind: str, count: int, seed: int = 0) -> list[Unit]:
    rng = np.random.default_rng(seed)
    return [Unit(kind, {"rows": int(rng.integers(1, 2048)), "cols": int(rng.integers(16, 2048))}) for _ in range(count)]


def test_a_route_that_has_not_measured_skipnorm_predicts_it_as_an_add_then_a_layer_norm():
    norms, adds = _rows_cols_units("layernorm", 40), [
        Unit("eltwise", {"elements": int(e), "inputs": 2, "heavy": 0}) for e in np.geomspace(64, 4e6, 40)
    ]
    rows = noop_rows() + [sweep_row(u, true_seconds(u, 0.5)) for u in norms + adds]
    unit_fit = fit_units(to_frame(rows))
    route = unit_fit.route((TARGET, "fw", "none", "NCHW", "fp32", 1))
    assert route is not None and "skipnorm" not in route.kinds
    skip = Unit("skipnorm", {"rows": 512, "cols": 768})
    add = Unit("eltwise", {"elements": 512 * 768, "inputs": 2, "heavy": 0})
    norm = Unit("layernorm", {"rows": 512, "cols": 768})
    unfused = true_seconds(add, 0.5) + true_seconds(norm, 0.5)
    assert route.unit_seconds([skip], 2)[0] == pytest.approx(route.unit_seconds([add, norm], 2).sum())
    assert unit_fit.seconds(route, [skip], 1) - route.call_s == pytest.approx(unfused, rel=0.2)

    # measured, the fused kernel's own time (here: one pass, as fast as the norm alone)
    fused = _rows_cols_units("skipnorm", 30, seed=1)
    rows += [sweep_row(u, true_seconds(Unit("layernorm", dict(u.dims)), 0.5)) for u in fused]
    route = fit_units(to_frame(rows)).route((TARGET, "fw", "none", "NCHW", "fp32", 1))
    assert route is not None and "skipnorm" in route.kinds
    assert route.unit_seconds([skip], 1)[0] == pytest.approx(true_seconds(norm, 0.5), rel=0.25)

    # neither the kind nor one of its parts learned: no prediction
    only_norms = fit_units(to_frame(noop_rows() + [sweep_row(u, true_seconds(u, 0.5)) for u in norms]))
    bare = only_norms.route((TARGET, "fw", "none", "NCHW", "fp32", 1))
    assert bare is not None and math.isnan(only_norms.seconds(bare, [skip], 1))


def test_sweep_rows_keep_only_measured_one_unit_kernel_rows():
    unit = sampled_gemms(1)[0]
    good = sweep_row(unit, 1e-4)
    model_row = {**sweep_row(unit, 1e-4), "scenario": "SingleStream", "family": "mlp"}
    two_units = {**sweep_row(unit, 1e-4), "units": encode_units([unit, Unit("noop", {"nodes": 1})])}
    rows = sweep_rows(to_frame([good, model_row, two_units]))
    assert len(rows) == 1 and rows.iloc[0]["unit"].signature() == unit.signature()
    assert sweep_rows(pd.DataFrame()).empty


def test_the_combination_is_a_weighted_geometric_mean_or_whichever_exists():
    assert combine(4.0, 1.0) == pytest.approx(4.0**WHOLE_WEIGHT)
    # a whole-model estimate that is mostly learned overheads counts less: half overheads -> half the weight
    assert combine(16.0, 1.0, overhead_share=0.5) == pytest.approx(16.0 ** (WHOLE_WEIGHT / 2))
    assert combine(16.0, 1.0, overhead_share=1.0) == pytest.approx(1.0)
    assert whole_weight(math.nan) == whole_weight(-1.0) == WHOLE_WEIGHT and whole_weight(2.0) == 0.0
    assert 0.0 < WHOLE_WEIGHT < 0.5  # the unit sum, the better estimate alone, weighs more
    assert combine(4.0, math.nan) == 4.0 and combine(math.nan, 3.0) == 3.0
    assert combine(4.0, 1.0, "int8") == 1.0 and combine(4.0, math.nan, "int8") == 4.0


def test_a_route_that_has_not_measured_permute_predicts_it_as_a_move_of_as_many_elements():
    moves = [Unit("move", {"elements": int(e)}) for e in np.geomspace(64, 4e6, 40)]
    rows = noop_rows() + [sweep_row(u, true_seconds(u, 0.5)) for u in moves]
    unit_fit = fit_units(to_frame(rows))
    route = unit_fit.route((TARGET, "fw", "none", "NCHW", "fp32", 1))
    assert route is not None and "permute" not in route.kinds
    heads = Unit("permute", {"elements": 8192, "block": 64})
    move = Unit("move", {"elements": 8192})
    assert route.unit_seconds([heads], 8)[0] == pytest.approx(route.unit_seconds([move], 8)[0])


def _recurrent(batch: int = 1, steps: int = 20, gates: int = 4, directions: int = 2) -> Unit:
    dims = {"batch": batch, "steps": steps, "inputs": 64, "hidden": 96, "gates": gates, "directions": directions}
    return Unit("recurrent", dims)


def test_a_recurrent_unit_counts_what_its_parts_count():
    """One loop over the steps does the work of its unfused parts: a product per step and direction, the input
    projection and the gates."""
    layer = _recurrent()
    parts = unfused(layer)
    assert parts is not None and [p.count for p in parts] == [2, 40, 2]
    assert unit_flops(layer) == pytest.approx(sum(unit_flops(p) * p.count for p in parts), rel=0.05)
    assert unit_flops(layer, batch=4) == pytest.approx(4 * unit_flops(layer))
    assert unit_weight_bytes(layer) == 4 * 2 * 4 * 96 * (64 + 96 + 2)
    assert [(u.kind, u.count) for u in unfuse([Unit("noop", {"nodes": 2}), layer], ["recurrent"])] == [
        ("noop", 1), ("gemm", 2), ("gemm", 40), ("eltwise", 2)
    ]


def test_a_route_that_has_not_measured_recurrent_layers_prices_each_part_as_often_as_it_runs():
    """The per-step product runs once a step and direction: summed once (as a fused kind's parts were), a 20-step
    bidirectional LSTM was priced at a fortieth of its products."""
    gemms = sampled_gemms(40)
    adds = [Unit("eltwise", {"elements": int(e), "inputs": 2, "heavy": 1}) for e in np.geomspace(64, 4e6, 30)]
    rows = noop_rows() + [sweep_row(u, true_seconds(u, 0.5)) for u in gemms + adds]
    unit_fit = fit_units(to_frame(rows))
    route = unit_fit.route((TARGET, "fw", "none", "NCHW", "fp32", 1))
    assert route is not None and "recurrent" not in route.kinds
    layer = _recurrent()
    parts = unfused(layer)
    assert parts is not None
    each = route.unit_seconds(parts, 1)
    assert route.unit_seconds([layer], 1)[0] == pytest.approx(float(np.dot([p.count for p in parts], each)))

    # measured, the loop's own time (here: a third of its parts')
    layers = [_recurrent(b, s, g, d) for b in (1, 4) for s in (5, 20, 60) for g in (3, 4) for d in (1, 2)]
    rows += [sweep_row(u, sum(true_seconds(p, 0.5) * p.count for p in unfused(u) or []) / 3) for u in layers]
    route = fit_units(to_frame(rows)).route((TARGET, "fw", "none", "NCHW", "fp32", 1))
    assert route is not None and "recurrent" in route.kinds
    expected = sum(true_seconds(p, 0.5) * p.count for p in parts) / 3
    assert route.unit_seconds([layer], 1)[0] == pytest.approx(expected, rel=0.3)


def test_the_kinds_called_unfusable_are_those_unfused_splits():
    for kind, dims in KINDS.items():
        parts = unfused(Unit(kind, dict.fromkeys(dims, 2)))
        assert (parts is not None) == (kind in UNFUSABLE), kind
