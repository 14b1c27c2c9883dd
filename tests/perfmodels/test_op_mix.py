"""A whole-model fit's coverage of a model's op mix (``perfmodels.op_mix``), and the weight it gets by it."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from analysis.units import Unit, encode_units
from perfmodels.evaluate import _combined, _estimates
from perfmodels.fit import FEATURES
from perfmodels.op_mix import EXERCISED_SHARE, coverage, exercised, exercised_by_route, flop_shares, unit_shares
from perfmodels.unitfit import WHOLE_WEIGHT, combine
from tests.perfmodels.doubles import NoRatios, WholeModelGroup

KEY = ("t", "fw", "none", "NCHW", "fp32", 1)


def _x(**flops: float) -> np.ndarray:
    x = np.zeros(len(FEATURES))
    for name, value in flops.items():
        x[FEATURES.index(f"{name}_flops")] = value
    x[FEATURES.index("queries")] = 1.0
    return x


CNN = _x(conv=9e8, other=1e8)
BERT = _x(gemm=98e7, norm=1e7, other=1e7)


def test_the_rows_exercise_the_classes_they_spend_flops_in():
    assert flop_shares(BERT) == pytest.approx([0.0, 0.0, 0.98, 0.0, 0.01, 0.01])
    assert flop_shares(_x(norm=1.0, lrn=1.0)) == pytest.approx([0, 0, 0, 0, 1.0, 0])  # LRN counts as normalisation
    # the six classes, then the unit kinds exercised apart (a recurrent layer's FLOPs: none here)
    assert exercised(np.vstack([CNN, _x(conv=1.0, gemv=1.0)])) == pytest.approx((0.9, 0, 0, 0.5, 0, 0.1, 0))
    assert exercised(np.zeros((0, len(FEATURES)))) == (0.0,) * 7


def test_coverage_is_the_share_of_flops_in_classes_the_rows_exercised():
    convs = exercised(np.vstack([CNN]))
    assert coverage(BERT, convs) == pytest.approx(0.01)  # only its elementwise FLOPs were ever seen
    assert coverage(BERT, exercised(np.vstack([CNN, BERT]))) == pytest.approx(1.0)
    assert coverage(CNN, convs) == pytest.approx(1.0)
    assert coverage(BERT, None) == 1.0
    # a class some row spends a sliver in is still a pull, not a measurement
    sliver = _x(conv=1.0, gemm=EXERCISED_SHARE / 2)
    assert coverage(BERT, exercised(np.vstack([CNN, sliver]))) == pytest.approx(0.01)


LSTM = Unit("recurrent", {"batch": 1, "steps": 20, "inputs": 64, "hidden": 128, "gates": 4, "directions": 2})
HEAD = Unit("gemm", {"m": 1, "k": 256, "n": 20, "act": 0, "init_w": 1})


def test_a_recurrent_layer_is_not_covered_by_rows_that_ran_only_matrix_products():
    """An LSTM's FLOPs count as ``gemm`` in the whole-model features, so BERT's rows looked like they covered an LSTM
    tagger fully; its loop over the steps is nothing they ran (onnxruntime's were predicted 33-40% under)."""
    tagger = _x(gemm=1e7)
    share = float(unit_shares([LSTM, HEAD])[0])
    assert 0.99 < share < 1.0
    bert_rows = exercised(np.vstack([BERT]), [encode_units([HEAD])])
    assert coverage(tagger, bert_rows) == pytest.approx(1.0)  # without the model's units: the classes alone
    assert coverage(tagger, bert_rows, [LSTM, HEAD]) == pytest.approx(1.0 - share)
    rnn_rows = exercised(np.vstack([BERT]), [encode_units([LSTM, HEAD]), ""])
    assert rnn_rows[-1] == pytest.approx(share)
    assert coverage(tagger, rnn_rows, [LSTM, HEAD]) == pytest.approx(1.0)
    # a class the rows never ran already leaves its kinds' FLOPs out, once
    assert coverage(tagger, exercised(np.vstack([CNN])), [LSTM, HEAD]) == pytest.approx(0.0)
    assert coverage(tagger, exercised(np.vstack([CNN]))[:6], [LSTM, HEAD]) == pytest.approx(0.0)  # an old cache


def test_exercised_by_route_keys_each_routes_rows():
    rows = pd.DataFrame(
        [
            {"target": "t", "framework": "fw", "compiler": "none", "layout": "NCHW", "precision": "fp32",
             "threads": 1, "x": CNN},
            {"target": "t", "framework": "fw", "compiler": "jit", "layout": "NCHW", "precision": "fp32",
             "threads": 1, "x": BERT},
        ]
    )
    seen = exercised_by_route(rows)
    assert set(seen) == {KEY, ("t", "fw", "jit", "NCHW", "fp32", 1)}
    assert seen[KEY][2] == 0.0 and seen[("t", "fw", "jit", "NCHW", "fp32", 1)][2] == pytest.approx(0.98)
    assert exercised_by_route(rows.iloc[:0]) == {}


def test_combine_leans_on_the_units_as_far_as_the_fit_never_saw_the_models_classes():
    whole, units = 2.0, 1.0
    assert combine(whole, units, coverage=0.0) == pytest.approx(units)
    assert combine(whole, units, coverage=1.0) == pytest.approx(combine(whole, units))
    assert combine(whole, units) == pytest.approx(math.exp(WHOLE_WEIGHT * math.log(whole)))
    assert combine(whole, units, coverage=0.5) == pytest.approx(math.exp(WHOLE_WEIGHT / 2 * math.log(whole)))
    assert combine(whole, math.nan, coverage=0.0) == whole  # without units the fit still answers


def test_held_out_rows_carry_their_coverage_and_the_combination_uses_it():
    from perfmodels.evaluate import UnitLookup

    row = pd.Series({"x": BERT, "batch": 1, "threads": 1, **dict(zip(
        ("target", "framework", "compiler", "layout", "precision"), KEY[:5], strict=True))})
    lookup = UnitLookup(None, pd.DataFrame([row]), own={0: 1e-3})
    held_out = _estimates(NoRatios(), WholeModelGroup(KEY), 0, row, lookup, None, {KEY: exercised(np.vstack([CNN]))})  # type: ignore[arg-type]
    assert held_out["coverage"] == pytest.approx(0.01)
    assert _estimates(NoRatios(), WholeModelGroup(KEY), 0, row, lookup)["coverage"] == 1.0  # type: ignore[arg-type]
    rows = pd.DataFrame(
        [
            {**held_out, "precision": "fp32"},
            {**held_out, "precision": "fp32", "coverage": 1.0},
        ]
    )
    unseen, seen = _combined(rows, None)
    assert unseen == pytest.approx(combine(2e-3, 1e-3, coverage=0.01))
    assert seen == pytest.approx(combine(2e-3, 1e-3))
    assert unseen < seen


def test_a_ratio_routes_framework_estimate_uses_the_frameworks_coverage():
    row = {
        "precision": "fp32", "whole": 4e-3, "units": math.nan, "overhead_share": 0.0, "coverage": 0.0,
        "base_whole": 2e-3, "base_units": 1e-3, "base_overhead_share": 0.0, "ratio": 0.5, "base_layout": "NCHW",
    }
    unseen, seen = _combined(pd.DataFrame([{**row, "base_coverage": 0.0}, {**row, "base_coverage": 1.0}]), None)
    assert unseen == pytest.approx(math.sqrt(4e-3 * 1e-3 * 0.5))  # the framework's unit sum alone, times the ratio
    assert seen == pytest.approx(math.sqrt(4e-3 * combine(2e-3, 1e-3) * 0.5))


def test_the_planner_keeps_each_routes_exercised_classes_in_its_cache():
    from perfmodels.fit import FitResult
    from perfmodels.fitted import FittedModel

    rows = pd.DataFrame([{"target": "t", "framework": "fw", "compiler": "none", "layout": "NCHW",
                          "precision": "fp32", "threads": 1, "x": CNN}])
    model = FittedModel(FitResult((), rows))
    assert model.exercised() == {KEY: exercised(np.vstack([CNN]))}
    assert dict(model.plan_data().exercised) == model.exercised()
    assert FittedModel(FitResult(())).exercised() == {}  # a cached model without rows: nothing known against
