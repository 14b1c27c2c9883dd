"""Measured compile time per graph node of each compiling route, and a workload's compile seconds from it."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from perfmodels.features import Workload
from perfmodels.setup_time import compile_rates


def _row(model: str, compile_ms: float | None, nodes: int, compiler: str = "openvino", mode: str = "inference"):
    settings = {"threads": 1} if compile_ms is None else {"compile_ms": compile_ms}
    return {"target": "host-2c", "framework": "onnxruntime", "compiler": compiler, "model": model, "mode": mode,
            "settings": json.dumps(settings),
            "ops_by_class": json.dumps({"conv": nodes // 2, "other": nodes - nodes // 2})}


def _workload(nodes: int) -> Workload:
    return Workload(1.0, 1.0, 1.0, "inference", 1, ops_by_class={"gemm": nodes})


def test_the_rate_is_the_median_over_models_of_seconds_per_node():
    frame = pd.DataFrame([
        _row("a", 100.0, 10), _row("a", 300.0, 10),  # model a: median 200 ms over 10 nodes = 0.02 s/node
        _row("b", 50.0, 10),  # 0.005 s/node
        _row("c", 400.0, 10),  # 0.04 s/node
        _row("d", None, 10),  # no compile time kept: not counted
        _row("e", 9e9, 10, mode="training"),  # training rows are another figure
    ])
    rates = compile_rates(frame)
    assert rates.per_node == {("host-2c", "onnxruntime", "openvino"): pytest.approx(0.02)}
    assert rates.models == {("host-2c", "onnxruntime", "openvino"): 3}
    assert rates.seconds("host-2c", "onnxruntime", "openvino", _workload(50)) == pytest.approx(1.0)
    assert rates.seconds("host-2c", "onnxruntime", "tvm", _workload(50)) is None  # never measured
    assert rates.seconds("host-2c", "onnxruntime", "openvino", _workload(0)) is None  # no graph to scale by


def test_a_database_without_compile_times_has_no_rates():
    assert compile_rates(pd.DataFrame([_row("a", None, 10)])).per_node == {}
    assert compile_rates(None).per_node == {}


def _tuned(model: str, compile_ms: float, tune_s: float, trials: int, nodes: int) -> dict[str, object]:
    row = _row(model, compile_ms, nodes, compiler="tvm-tuned")
    row["settings"] = json.dumps({"compile_ms": compile_ms, "tune_s": tune_s, "tuning_trials": trials})
    return row


def test_a_tuned_route_keeps_its_search_and_trial_budget_apart_from_the_compile():
    frame = pd.DataFrame([_tuned("a", 1000.0, 99.0, 32, 10), _tuned("b", 1000.0, 199.0, 32, 10),
                          _tuned("c", 1000.0, 49.0, 64, 10), _row("d", 500.0, 10)])
    rates = compile_rates(frame)
    key = ("host-2c", "onnxruntime", "tvm-tuned")
    assert rates.per_node[key] == pytest.approx(10.0)  # median of 10, 20 and 5 s per node, compile included
    assert rates.search_per_node[key] == pytest.approx(9.9) and rates.trials[key] == 32
    assert rates.search("host-2c", "onnxruntime", "tvm-tuned", _workload(10)) == (pytest.approx(99.0), 32)
    assert rates.search("host-2c", "onnxruntime", "openvino", _workload(10)) is None  # compiles, never searches
