"""The whole-model fit's weight rises only for routes whose unit sums erred clearly more, judged without the
held-out family's own rows."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from perfmodels.evaluate import route_errors, route_errors_without_family
from perfmodels.unitfit import UNITS_WORSE_BY, WHOLE_WEIGHT, combine, inverse_variance_weight, whole_weight


def test_units_that_err_alike_keep_the_tuned_weight():
    assert inverse_variance_weight((0.3, 0.3)) == 0.0
    assert inverse_variance_weight((UNITS_WORSE_BY * 0.2, 0.2)) == 0.0
    assert inverse_variance_weight((math.nan, 0.2)) == 0.0
    assert whole_weight(0.0, errors=(0.3, 0.3)) == WHOLE_WEIGHT


def test_units_that_erred_far_more_give_the_whole_model_the_inverse_variance_weight():
    weight = whole_weight(0.0, errors=(0.5, 0.1))
    assert weight == pytest.approx(0.25 / 0.26)
    assert combine(1.0, 4.0, errors=(0.5, 0.1)) == pytest.approx(math.exp((1 - weight) * math.log(4.0)))
    assert combine(1.0, 4.0) > combine(1.0, 4.0, errors=(0.5, 0.1))


def _predictions() -> pd.DataFrame:
    rows = []
    for route, units_factor in (("onnxruntime", 1.0), ("openvino", 2.0)):
        for family, bad in (("a", 1.0), ("b", 1.0), ("c", 8.0)):
            rows.append(
                {
                    "target": "h",
                    "framework": "onnxruntime",
                    "compiler": route,
                    "layout": "NCHWc",
                    "precision": "fp32",
                    "threads": 1,
                    "family": family,
                    "y": 1.0,
                    "whole": 1.1,
                    "units": units_factor * bad,
                }
            )
    return pd.DataFrame(rows)


def test_a_held_out_familys_weights_come_from_its_routes_other_families_only():
    predictions = _predictions()
    held_out = route_errors_without_family(predictions)
    c_row = predictions.index[(predictions["compiler"] == "openvino") & (predictions["family"] == "c")][0]
    a_row = predictions.index[(predictions["compiler"] == "openvino") & (predictions["family"] == "a")][0]
    # family c's own 8x error is not in its figure; family a's figure includes c's
    assert held_out.loc[c_row, "units_error"] == pytest.approx(math.log(2.0))
    assert held_out.loc[a_row, "units_error"] > held_out.loc[c_row, "units_error"]
    overall = route_errors(predictions)
    assert set(overall) == {("h", "onnxruntime", c, "NCHWc", "fp32", 1) for c in ("onnxruntime", "openvino")}
