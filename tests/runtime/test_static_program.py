"""Planned runs call stretches of prebound compiled kernels in one ``ap_run_program`` call, and answer as the
step-by-step run does; profiling still times every node."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper

from runtime import compile_model, native
from runtime.static_plan import _merge_compiled
from tests.runtime.graphs import model, vi

pytestmark = pytest.mark.skipif(native.lib() is None, reason=f"compiled kernels unavailable: {native.status()}")


def _softmax_chain(nodes: int, width: int = 16) -> onnx.ModelProto:
    made = [helper.make_node("Softmax", [f"t{i}" if i else "x"], [f"t{i + 1}"], axis=-1) for i in range(nodes)]
    made.append(helper.make_node("Mul", [f"t{nodes}", f"t{nodes}"], ["y"]))
    return model(made, [vi("x", shape=[2, width])], [vi("y", shape=[2, width])])


def test_a_chain_of_compiled_steps_runs_as_one_call() -> None:
    exe = compile_model(_softmax_chain(30), passes=[])
    x = np.random.default_rng(0).standard_normal((2, 16)).astype(np.float32) * 5
    first = exe.run({"x": x})["y"]
    static = next(iter(exe.plan._static.values()))  # type: ignore[union-attr]
    _, steps, merged, _ = static._state()
    bound = [entry for entry in steps if entry[0] == "bound"]
    assert len(bound) >= 30
    assert len(merged) < len(steps) - 25  # the Softmax stretch became one entry
    again = exe.run({"x": x})["y"]
    want = x
    for _ in range(30):
        e = np.exp(want - want.max(axis=-1, keepdims=True))
        want = e / e.sum(axis=-1, keepdims=True)
    np.testing.assert_allclose(first, want * want, rtol=1e-5)
    np.testing.assert_array_equal(again, first)
    with exe.profiling() as profile:
        profiled = exe.run({"x": x})["y"]
    np.testing.assert_array_equal(profiled, first)
    assert sum(n.calls for n in profile.nodes.values() if n.op_type == "Softmax") == 30


def test_steps_that_are_not_pure_compiled_calls_stay_apart() -> None:
    def python_step() -> None:
        pass

    entries = [("bound", python_step, None, None), ("run", None, None, None)]
    assert _merge_compiled(entries) == entries  # type: ignore[arg-type]
