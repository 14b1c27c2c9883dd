"""What the tests of every compiling backend (OpenVINO, TVM, IREE, XLA, torch.compile) share: the MLP's outputs
against onnxruntime's, a model no engine can compile, and the row a short run of the MLP must give (compile time and
error against the reference in it)."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper

from benchmarks.backends import get_backend
from benchmarks.harness import ScenarioSettings
from benchmarks.models import get_model, suite
from benchmarks.runner import BenchRequest, run_benchmarks

TINY = ScenarioSettings(min_duration_s=0.0, min_queries=3, warmup_queries=1)


def assert_mlp_matches_onnxruntime(backend: str, batch: int) -> None:
    """``backend`` runs the MLP at ``batch`` as onnxruntime does, and keeps the time its compile took."""
    model = get_model("mlp")
    feeds = model.feeds(batch=batch)
    session = get_backend(backend).prepare(model.model(), threads=1)
    want = get_backend("onnxruntime").prepare(model.model()).run(feeds)[0]
    np.testing.assert_allclose(session.run(feeds)[0], want, rtol=1e-4, atol=1e-5)
    assert session.compile_ms > 0  # type: ignore[attr-defined]


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
