"""torch.compile (inductor) engine: the ONNX graph traced whole by Dynamo, outputs vs eager, compile time, skips."""

from __future__ import annotations

import importlib.util
import shutil

import numpy as np
import pytest

from benchmarks.backends import BackendSkipped, get_backend
from benchmarks.engines.torch_compile import example_feeds
from benchmarks.models import get_model
from tests.benchmarks.compiled_backends import mlp_row, unrunnable_model

pytestmark = pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="extra not installed")

def test_static_shapes_read_reshape_constants_once_and_change_no_output():
    from benchmarks.torch_eager import TorchGraph

    model = get_model("tiny_lenet5")
    feeds = model.feeds(batch=2)
    eager, static = TorchGraph(model.model(), 1), TorchGraph(model.model(), 1, static_shapes=True)
    np.testing.assert_array_equal(eager.run(feeds)[0], static.run(feeds)[0])
    assert {k: v.shape for k, v in example_feeds(model.model()).items()} == {"input": (1, 1, 28, 28)}


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("g++") is None, reason="inductor's CPU backend needs g++ (scripts/ci-setup)")
@pytest.mark.parametrize("name", ["mlp", "tiny_lenet5"])
def test_compiled_graph_matches_eager_at_two_batches_and_keeps_compile_time(name):
    model = get_model(name)
    session = get_backend("torch-compile").prepare(model.model(), threads=1)
    assert session.compile_ms > 0  # type: ignore[attr-defined]
    eager = get_backend("torch").prepare(model.model(), threads=1)
    for batch in (1, 4):  # another batch recompiles (static shapes), still whole-graph
        feeds = model.feeds(batch=batch)
        np.testing.assert_allclose(session.run(feeds)[0], eager.run(feeds)[0], rtol=1e-4, atol=1e-5)


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("g++") is None, reason="inductor's CPU backend needs g++ (scripts/ci-setup)")
def test_rows_carry_compile_time_and_max_error_and_unrunnable_models_are_skipped():
    with pytest.raises(BackendSkipped, match=r"torch\.compile: op NoSuchOp"):
        get_backend("torch-compile").prepare(unrunnable_model())
    assert mlp_row("torch-compile", "pytorch", "inductor")["backend"] == "torch-compile"
