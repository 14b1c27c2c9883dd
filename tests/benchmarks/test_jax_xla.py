"""JAX/XLA engine: outputs match, compile time kept, rows carry the error, unrunnable models skipped with the op."""

from __future__ import annotations

import importlib.util

import pytest
from onnx import TensorProto, helper

from benchmarks.backends import BackendSkipped, get_backend
from benchmarks.models import get_model, suite
from tests.benchmarks.compiled_backends import assert_mlp_matches_onnxruntime, mlp_row

pytestmark = pytest.mark.skipif(importlib.util.find_spec("jax") is None, reason="extra not installed")

@pytest.mark.parametrize("batch", [1, 4])
def test_jax_xla_matches_onnxruntime_and_keeps_compile_time(batch: int) -> None:
    assert_mlp_matches_onnxruntime("jax-xla", batch)


def test_rows_carry_compile_time_and_max_error_and_unrunnable_models_are_skipped() -> None:
    bad = helper.make_model(
        helper.make_graph(
            [helper.make_node("NoSuchOp", ["x"], ["y"], name="n0")],
            "g",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
        )
    )
    with pytest.raises(BackendSkipped, match="NoSuchOp node n0: op not supported"):
        get_backend("jax-xla").prepare(bad)
    assert mlp_row("jax-xla", "onnxruntime", "xla")["backend"] == "jax-xla"


def test_more_threads_than_cpus_is_a_skip_with_the_reason() -> None:
    from runtime.engine_jax import allowed_cpus

    with pytest.raises(BackendSkipped, match="threads must be 1 to"):
        get_backend("jax-xla").prepare(get_model("mlp").model(), threads=len(allowed_cpus()) + 1)


@pytest.mark.slow
def test_every_op_of_the_suite_has_a_jax_translation() -> None:
    """Builds every suite model (breadth too where torch is installed): a new op in the suite fails here first."""
    from runtime.jax_ops import load_ops

    table = load_ops()
    missing = {(node.op_type, m.name) for m in [*suite("all"), *suite("breadth")] for node in m.model().graph.node
               if node.op_type not in table}
    assert not missing
