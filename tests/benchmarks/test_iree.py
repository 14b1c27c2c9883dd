"""IREE engine (llvm-cpu): outputs match, compile time kept, rows carry the error, unrunnable models skipped."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
from onnx import TensorProto, helper

from benchmarks.backends import BackendSkipped, get_backend
from tests.benchmarks.compiled_backends import assert_mlp_matches_onnxruntime, mlp_row, unrunnable_model


def _installed() -> bool:
    try:
        return importlib.util.find_spec("iree.compiler") is not None and importlib.util.find_spec("iree.runtime") \
            is not None
    except ModuleNotFoundError:
        return False


pytestmark = pytest.mark.skipif(not _installed(), reason="extra not installed")


@pytest.mark.parametrize("batch", [1, 4])
def test_iree_matches_onnxruntime_and_keeps_compile_time(batch):
    assert_mlp_matches_onnxruntime("iree", batch)


def test_the_entry_function_is_named_after_the_graph_not_main():
    from runtime.engine_iree import IreeSession, compile_model

    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])],
        "my_graph",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])  # upgraded to 17 on import
    session = IreeSession(compile_model(model), threads=1)
    assert session.entry == "my_graph"
    x = np.array([[-1, 0, 2], [3, -4, 5]], dtype=np.float32)
    np.testing.assert_array_equal(session.run([x])[0], np.maximum(x, 0))


def test_rows_carry_compile_time_and_max_error_and_unrunnable_models_are_skipped():
    with pytest.raises(BackendSkipped, match=r"^iree cannot (import|compile) the model: "):
        get_backend("iree").prepare(unrunnable_model())
    row = mlp_row("iree", "onnxruntime", "iree")
    assert row["backend"] == "iree"
