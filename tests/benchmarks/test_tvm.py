"""TVM engine (untuned Relax): outputs match, compile time kept, rows carry the error, unrunnable models skipped."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from benchmarks.backends import BackendSkipped, get_backend
from benchmarks.models import get_model
from tests.benchmarks.compiled_backends import mlp_row, unrunnable_model

pytestmark = pytest.mark.skipif(importlib.util.find_spec("tvm") is None, reason="extra not installed")

@pytest.mark.parametrize("batch", [1, 4])
def test_untuned_tvm_matches_onnxruntime_and_keeps_compile_time(batch):
    model = get_model("mlp")
    feeds = model.feeds(batch=batch)
    session = get_backend("tvm").prepare(model.model(), threads=1)
    want = get_backend("onnxruntime").prepare(model.model()).run(feeds)[0]
    np.testing.assert_allclose(session.run(feeds)[0], want, rtol=1e-4, atol=1e-5)
    assert session.compile_ms > 0  # type: ignore[attr-defined]


def test_rows_carry_compile_time_and_max_error_and_unrunnable_models_are_skipped():
    with pytest.raises(BackendSkipped, match="tvm cannot compile"):
        get_backend("tvm").prepare(unrunnable_model())
    mlp_row("tvm", "onnxruntime", "tvm")


@pytest.mark.skipif(not hasattr(__import__("os"), "sched_getaffinity"), reason="affinity masks are Linux-only")
def test_sizing_tvm_threads_leaves_the_process_cores_alone():
    """TVM pins its calling thread to one core; result rows measured after it were keyed as a 1-core host."""
    import os

    from runtime.engine_tvm import set_threads

    before = os.sched_getaffinity(0)
    set_threads(1)
    assert os.sched_getaffinity(0) == before
