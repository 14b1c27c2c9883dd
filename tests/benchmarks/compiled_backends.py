"""What the tests of every compiling backend (OpenVINO, TVM, torch.compile) share: a model no engine can compile,
and the row a short run of the MLP must give (compile time and error against the reference in it)."""

from __future__ import annotations

import json
from typing import Any

import onnx
from onnx import TensorProto, helper

from benchmarks.harness import ScenarioSettings
from benchmarks.models import suite
from benchmarks.runner import BenchRequest, run_benchmarks

TINY = ScenarioSettings(min_duration_s=0.0, min_queries=3, warmup_queries=1)


def unrunnable_model() -> onnx.ModelProto:
    """One node of an op in a domain no engine knows."""
    return helper.make_model(
        helper.make_graph(
            [helper.make_node("NoSuchOp", ["x"], ["y"], domain="com.example")],
            "g",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
        )
    )


def mlp_row(backend: str, framework: str, compiler: str) -> dict[str, Any]:
    """The row of a short SingleStream run of the MLP on ``backend``: measured, with its catalog route, a compile
    time and an error against the reference backend below 1e-4."""
    request = BenchRequest(models=suite("mlp"), backends=(backend,), settings=TINY)
    (outcome,) = list(run_benchmarks(request, None))
    assert outcome.status == "ok" and outcome.row is not None, outcome
    row = outcome.row
    assert (row["framework"], row["compiler"]) == (framework, compiler)
    assert json.loads(row["settings"])["compile_ms"] > 0
    assert 0 <= row["max_abs_error"] < 1e-4
    return row
