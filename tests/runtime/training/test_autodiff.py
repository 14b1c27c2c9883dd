"""The reverse-mode machinery: what is differentiated, what is not, and that a wrong rule is caught."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import runtime.autodiff.registry as registry
from runtime import compile_model
from runtime.autodiff import differentiate
from runtime.autodiff.context import GradContext
from runtime.autodiff.gradcheck import check_gradients, typed_model
from runtime.errors import ModelCheckError
from runtime.ir import Node
from tests.runtime.training.helpers import D, op_model, rand


def _chain() -> object:
    """y = Reshape(Relu(x @ W), Shape(x)) + 0 * unused; ``frozen`` feeds nothing."""
    nodes = [
        helper.make_node("MatMul", ["x", "W"], ["m"]),
        helper.make_node("Relu", ["m"], ["r"]),
        helper.make_node("Shape", ["x"], ["s"]),  # no gradient flows through a shape
        helper.make_node("Reshape", ["r", "s"], ["y"]),
        helper.make_node("Identity", ["frozen"], ["unused"]),
    ]
    graph = helper.make_graph(
        nodes,
        "chain",
        [helper.make_tensor_value_info("x", D, [3, 3])],
        [helper.make_tensor_value_info("y", D, [3, 3]), helper.make_tensor_value_info("unused", D, [2])],
        [numpy_helper.from_array(rand(3, 3, seed=1), "W"), numpy_helper.from_array(rand(2), "frozen")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_gradient_outputs_inputs_and_unreachable_weights() -> None:
    program = differentiate(typed_model(_chain()), "y", ["W", "frozen", "x"])  # type: ignore[arg-type]
    assert program.unreachable == ["frozen"] and set(program.gradients) == {"W", "x"}
    graph = program.model.graph
    assert graph.output_names[0] == "y" and {"W__grad", "x__grad"} <= set(graph.output_names)
    assert "W" in graph.input_names and "loss_grad" in graph.input_names
    assert [n.op_type for n in graph.nodes if "s" in n.inputs] == ["Reshape"]  # no gradient towards the shape
    exe = compile_model(program.to_onnx(), passes=())
    x = np.eye(3)
    out = exe.run({"x": x, "loss_grad": np.ones((3, 3))})
    w = numpy_helper.to_array(_chain().graph.initializer[0])  # type: ignore[attr-defined]
    mask = (x @ w) > 0
    np.testing.assert_allclose(out["W__grad"], x.T @ mask.astype(float))


def test_bad_targets_are_named() -> None:
    model = typed_model(_chain())  # type: ignore[arg-type]
    with pytest.raises(ModelCheckError, match="loss 'nope' is not produced"):
        differentiate(model, "nope", ["W"])
    with pytest.raises(ModelCheckError, match="'m': a computed value"):
        differentiate(model, "y", ["m"])


def test_a_wrong_rule_is_caught_by_the_finite_difference_check(monkeypatch: pytest.MonkeyPatch) -> None:
    fed = {"x": rand(3, 4)}
    proto = op_model("Sigmoid", fed)
    assert check_gradients(proto, fed, "y", ["x"]).max_error < 1e-7

    def wrong(ctx: GradContext, node: Node, grads: list[str | None]) -> list[str | None]:
        return [grads[0]]  # treats Sigmoid as the identity

    monkeypatch.setitem(registry.GRAD_RULES, ("", "Sigmoid"), wrong)
    assert check_gradients(proto, fed, "y", ["x"]).max_error > 0.1


def test_float32_gradients_stay_float32() -> None:
    fed = {"x": rand(2, 3).astype(np.float32)}
    proto = op_model("Gemm", fed, {"w": rand(3, 4, seed=1).astype(np.float32)}, out_types=[TensorProto.FLOAT])
    report = check_gradients(proto, fed, "y", ["x", "w"], eps=1e-2)
    assert report.analytic["w"].dtype == np.float32 and report.max_error < 1e-2
