"""TVM engine (untuned Relax): outputs match, compile time kept, rows carry the error, unrunnable models skipped."""

from __future__ import annotations

import importlib.util
import json

import numpy as np
import pytest
from onnx import TensorProto, helper

from benchmarks.backends import BackendSkipped, get_backend
from benchmarks.harness import ScenarioSettings
from benchmarks.models import get_model, suite
from benchmarks.runner import BenchRequest, run_benchmarks

pytestmark = pytest.mark.skipif(importlib.util.find_spec("tvm") is None, reason="extra not installed")

TINY = ScenarioSettings(min_duration_s=0.0, min_queries=3, warmup_queries=1)


@pytest.mark.parametrize("batch", [1, 4])
def test_untuned_tvm_matches_onnxruntime_and_keeps_compile_time(batch):
    model = get_model("mlp")
    feeds = model.feeds(batch=batch)
    session = get_backend("tvm").prepare(model.model(), threads=1)
    want = get_backend("onnxruntime").prepare(model.model()).run(feeds)[0]
    np.testing.assert_allclose(session.run(feeds)[0], want, rtol=1e-4, atol=1e-5)
    assert session.compile_ms > 0  # type: ignore[attr-defined]


def test_rows_carry_compile_time_and_max_error_and_unrunnable_models_are_skipped():
    bad = helper.make_model(
        helper.make_graph(
            [helper.make_node("NoSuchOp", ["x"], ["y"], domain="com.example")],
            "g",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
        )
    )
    with pytest.raises(BackendSkipped, match="tvm cannot compile"):
        get_backend("tvm").prepare(bad)
    request = BenchRequest(models=suite("mlp"), backends=("tvm",), settings=TINY)
    (outcome,) = list(run_benchmarks(request, None))
    assert outcome.status == "ok" and outcome.row is not None
    row = outcome.row
    assert row["compiler"] == "tvm" and row["framework"] == "onnxruntime"
    assert json.loads(row["settings"])["compile_ms"] > 0
    assert 0 <= row["max_abs_error"] < 1e-4
