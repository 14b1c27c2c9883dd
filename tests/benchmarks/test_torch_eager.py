"""The PyTorch-eager stand-in: activations are dropped after their last use, constant Clip bounds are scalars."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

torch = pytest.importorskip("torch", reason="torch: extra not installed (the eager interpreter runs on it)")

from benchmarks.torch_eager import compile_torch  # noqa: E402


def graph():
    nodes = [
        helper.make_node("Relu", ["x"], ["a"]),
        helper.make_node("Clip", ["a", "lo", "hi"], ["b"]),
        helper.make_node("Add", ["a", "b"], ["c"]),
        helper.make_node("Mul", ["c", "c"], ["y"]),
    ]
    bounds = [numpy_helper.from_array(np.array(v, np.float32), n) for n, v in (("lo", 0.0), ("hi", 0.5))]
    return helper.make_model(
        helper.make_graph(
            nodes,
            "g",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
            bounds,
        ),
        opset_imports=[helper.make_opsetid("", 17)],
    )


def test_each_activation_is_dropped_after_the_step_that_reads_it_last():
    compiled = compile_torch(graph(), threads=1)
    assert compiled.last_uses == [["x"], [], ["a", "b"], ["c"]]


def test_results_match_numpy_with_constant_clip_bounds():
    x = np.array([[-1.0, 0.25, 2.0], [0.5, -0.1, 0.75]], np.float32)
    (y,) = compile_torch(graph(), threads=1).run({"x": x})
    a = np.maximum(x, 0)
    np.testing.assert_allclose(y, (a + np.clip(a, 0.0, 0.5)) ** 2, rtol=1e-6)
