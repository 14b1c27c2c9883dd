"""p10-p90 intervals: from held-out residuals, shown in plan.json, and overlaps named as within the model's error."""

from __future__ import annotations

import math
from types import SimpleNamespace
from typing import Any

import pandas as pd
import pytest

from optimiser.intervals import interval, overlapping_intervals
from perfmodels.fitted import HeldOutFigures
from perfmodels.prediction import Prediction


def _prediction(step: float, low: float | None = None, high: float | None = None) -> Prediction:
    detail = {} if low is None else {"p10_step_s": low, "p90_step_s": high}
    return Prediction(step, 1 / step, None, "compute", "transferred:x via calibration (9 units)", detail)  # type: ignore[arg-type]


def _plan(*predictions: Prediction) -> Any:
    candidates = [SimpleNamespace(prediction=p) for p in predictions]
    return SimpleNamespace(
        candidates=candidates,
        spec=SimpleNamespace(optimisation=SimpleNamespace(top=5)),
        band=1,
        objective=lambda c: c.prediction.step_seconds,
    )


def test_only_overlapping_neighbours_are_named() -> None:
    plan = _plan(_prediction(1e-3, 0.8e-3, 1.3e-3), _prediction(1.2e-3, 1.0e-3, 1.5e-3), _prediction(5e-3, 4e-3, 6e-3))
    lines = overlapping_intervals(plan)
    assert len(lines) == 1 and lines[0].startswith("#1-#2: p10-p90 of") and "within the model's error" in lines[0]
    assert "ordered #1 over #2: by the better predicted figure" in lines[0]  # why the overlap was ordered so
    assert overlapping_intervals(_plan(_prediction(1e-3), _prediction(1e-3))) == []  # no interval: nothing said
    assert interval(_prediction(1e-3)) is None


def test_heldout_quantiles_give_each_prediction_its_interval() -> None:
    rows = pd.DataFrame({"family": ["a"] * 10, "y": [float(i) for i in range(1, 11)], "predicted": [5.5] * 10})
    evaluation = SimpleNamespace(
        predictions=rows,
        fitted=SimpleNamespace(
            rmspe=0.1, within_10pct=0.5, spearman=1.0, mean_regret=1.0, max_regret=1.0, predictions=10
        ),
    )
    figures = HeldOutFigures.from_evaluation(evaluation)  # type: ignore[arg-type]
    assert figures.p10_ratio == pytest.approx(1.9 / 5.5) and figures.p90_ratio == pytest.approx(9.1 / 5.5)
    detail = figures.as_detail(2.0)
    assert detail["p10_step_s"] == pytest.approx(2.0 * 1.9 / 5.5) and detail["p90_step_s"] > 2.0
    old = HeldOutFigures(0.1, 0.5, 1.0, 1.0, 1.0, 10, 1)  # a summary written before quantiles were stored
    assert math.isnan(old.p10_ratio) and "p10_step_s" not in old.as_detail(2.0)
