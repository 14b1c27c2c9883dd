"""Nodes a model dispatches for no work (``noop`` units: shape arithmetic, views, a Loop body's nodes) priced per
route: a node's cost from the no-op chains where the runtime runs them, nothing where it folds them first."""

from __future__ import annotations

import numpy as np
import pytest

from analysis.units import Unit
from perfmodels.fit import RouteKey
from perfmodels.unitfit import FOLDS_SHAPE_ARITHMETIC, KindModel, UnitRoute


class _AtRoofline:
    def predict(self, features: np.ndarray) -> np.ndarray:
        return np.zeros(len(features))


def _route(framework: str) -> UnitRoute:
    kinds = {"eltwise": KindModel("eltwise", 10, _AtRoofline())}
    key = RouteKey(framework, "none", "NCHW", "fp32")
    return UnitRoute("t", key, 2, 300e9, 10e9, call_s=6e-6, node_s=0.4e-6, kinds=kinds)


def test_dispatched_nodes_cost_a_node_each_on_a_runtime_that_runs_them():
    route = _route("onnxruntime")
    add = Unit("eltwise", {"elements": 4096, "inputs": 2, "heavy": 0})
    times = route.unit_seconds([add, Unit("noop", {"nodes": 150})], 1)
    assert times[0] == pytest.approx(route.unit_seconds([add], 1)[0]) and times[1] == pytest.approx(150 * 0.4e-6)
    # nodes are per query, not per sample: a batch does not multiply them
    assert route.unit_seconds([Unit("noop", {"nodes": 150})], 8)[0] == pytest.approx(150 * 0.4e-6)


def test_a_runtime_that_folds_shape_arithmetic_pays_nothing_for_it():
    assert "appopt-runtime" in FOLDS_SHAPE_ARITHMETIC
    route = _route("appopt-runtime")
    assert route.unit_seconds([Unit("noop", {"nodes": 150})], 1)[0] == 0.0
