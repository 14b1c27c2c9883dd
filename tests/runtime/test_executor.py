"""Executor behaviour: the public contract, freeing values, threads, function inlining and expansion."""

from __future__ import annotations

import math
import weakref
from typing import Any, ClassVar

import numpy as np
import onnx
import pytest
from onnx import AttributeProto, helper

from runtime import ModelCheckError, RuntimeModelError, compile_model
from runtime.kernels.base import REGISTRY, Kernel, register
from tests.runtime.graphs import F, const, model, vi

DOMAIN = "test.appopt.executor"


@register
class MakeFresh(Kernel):
    """Returns a new array and remembers a weak reference to it."""

    op_type = "MakeFresh"
    domain = DOMAIN
    refs: ClassVar[list[weakref.ref[np.ndarray]]] = []

    def compute(self, x: np.ndarray) -> np.ndarray:
        out = np.array(x, copy=True)
        MakeFresh.refs.append(weakref.ref(out))
        return out


@register
class Probe(Kernel):
    """Identity that records, when it runs, whether the last MakeFresh array is still alive and the BLAS threads."""

    op_type = "Probe"
    domain = DOMAIN
    seen: ClassVar[list[dict[str, Any]]] = []

    def compute(self, x: np.ndarray) -> np.ndarray:
        from threadpoolctl import threadpool_info

        alive = bool(MakeFresh.refs) and MakeFresh.refs[-1]() is not None
        Probe.seen.append({"alive": alive, "threads": [i["num_threads"] for i in threadpool_info()]})
        return x


def _chain(keep_first_as_output: bool) -> onnx.ModelProto:
    nodes = [
        helper.make_node("MakeFresh", ["x"], ["a"], domain=DOMAIN),
        helper.make_node("Neg", ["a"], ["b"]),
        helper.make_node("Probe", ["b"], ["y"], domain=DOMAIN),
    ]
    outputs = [vi("y", shape=[3])] + ([vi("a", shape=[3])] if keep_first_as_output else [])
    return model(nodes, [vi("x", shape=[3])], outputs, extra_opsets=[(DOMAIN, 1)])


def test_public_contract() -> None:
    exe = compile_model(model([helper.make_node("Relu", ["x"], ["y"])], [vi("x", shape=[2])], [vi("y", shape=[2])]))
    assert exe.input_names == ["x"] and exe.output_names == ["y"]
    out = exe.run({"x": np.array([-1.0, 1.0], np.float32)})
    assert list(out) == ["y"]
    np.testing.assert_array_equal(out["y"], [0.0, 1.0])


def test_accepts_path_bytes_and_proto(tmp_path: Any) -> None:
    m = model([helper.make_node("Neg", ["x"], ["y"])], [vi("x", shape=[1])], [vi("y", shape=[1])])
    path = tmp_path / "m.onnx"
    onnx.save(m, path)
    x = {"x": np.array([2.0], np.float32)}
    for source in (m, m.SerializeToString(), str(path), path):
        assert compile_model(source).run(x)["y"][0] == -2.0


def test_value_is_freed_after_its_last_reader() -> None:
    Probe.seen.clear()
    compile_model(_chain(keep_first_as_output=False)).run({"x": np.ones(3, np.float32)})
    assert Probe.seen[-1]["alive"] is False


def test_graph_outputs_are_not_freed() -> None:
    Probe.seen.clear()
    out = compile_model(_chain(keep_first_as_output=True)).run({"x": np.ones(3, np.float32)})
    assert Probe.seen[-1]["alive"] is True
    np.testing.assert_array_equal(out["a"], np.ones(3))


def test_threads_cap_blas_pools_during_run_only() -> None:
    from threadpoolctl import threadpool_info

    before = [i["num_threads"] for i in threadpool_info()]
    assert before, "numpy should load a BLAS library threadpoolctl can see"
    Probe.seen.clear()
    exe = compile_model(_chain(False), threads=1)
    exe.run({"x": np.ones(3, np.float32)})
    assert Probe.seen[-1]["threads"] == [1] * len(before)
    assert exe.threads_applied == "threadpoolctl"
    assert [i["num_threads"] for i in threadpool_info()] == before


def test_numpy_scalar_kernel_outputs_become_arrays() -> None:
    m = model([helper.make_node("ReduceSum", ["x"], ["y"], keepdims=0)], [vi("x", shape=[3])], [vi("y", shape=[])])
    y = compile_model(m).run({"x": np.ones(3, np.float32)})["y"]
    assert isinstance(y, np.ndarray) and y.shape == () and y.dtype == np.float32


def test_initializer_backed_inputs_can_be_overridden() -> None:
    m = model(
        [helper.make_node("Add", ["x", "w"], ["y"])],
        [vi("x", shape=[2]), vi("w", shape=[2])],
        [vi("y", shape=[2])],
        [const("w", [10.0, 20.0])],
    )
    exe = compile_model(m)
    assert exe.input_names == ["x"] and exe.optional_input_names == ["w"]
    x = np.zeros(2, np.float32)
    np.testing.assert_array_equal(exe.run({"x": x})["y"], [10.0, 20.0])
    np.testing.assert_array_equal(exe.run({"x": x, "w": np.ones(2, np.float32)})["y"], [1.0, 1.0])


# -- functions ------------------------------------------------------------------------------------------------
def _scaled_relu_function() -> onnx.FunctionProto:
    alpha = helper.make_node("Constant", [], ["alpha"])
    alpha.attribute.append(helper.make_attribute_ref("value_float", AttributeProto.FLOAT, ref_attr_name="alpha"))
    fn = helper.make_function(
        "custom",
        "ScaledRelu",
        ["X"],
        ["Y"],
        [alpha, helper.make_node("Mul", ["X", "alpha"], ["scaled"]), helper.make_node("Relu", ["scaled"], ["Y"])],
        opset_imports=[helper.make_opsetid("", 17)],
        attributes=[],
    )
    fn.attribute_proto.append(helper.make_attribute("alpha", 2.0))
    return fn


def test_model_local_functions_are_inlined_with_attribute_references_and_defaults() -> None:
    nodes = [
        helper.make_node("ScaledRelu", ["x"], ["a"], domain="custom", alpha=3.0),
        helper.make_node("ScaledRelu", ["x"], ["b"], domain="custom"),
    ]
    m = model(
        nodes,
        [vi("x", shape=[3])],
        [vi("a", shape=[3]), vi("b", shape=[3])],
        extra_opsets=[("custom", 1)],
        functions=[_scaled_relu_function()],
    )
    exe = compile_model(m)
    out = exe.run({"x": np.array([-1.0, 0.5, 2.0], np.float32)})
    np.testing.assert_allclose(out["a"], [0.0, 1.5, 6.0])
    np.testing.assert_allclose(out["b"], [0.0, 1.0, 4.0])
    assert exe.stats["inlined_local_functions"] == {"custom.ScaledRelu": 2}
    assert all(n.domain != "custom" for n in exe.model.graph.nodes)


def test_nested_local_functions_are_inlined() -> None:
    outer = helper.make_function(
        "custom",
        "TwiceScaled",
        ["X"],
        ["Y"],
        [
            helper.make_node("ScaledRelu", ["X"], ["t"], domain="custom"),
            helper.make_node("ScaledRelu", ["t"], ["Y"], domain="custom", alpha=5.0),
        ],
        opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("custom", 1)],
    )
    m = model(
        [helper.make_node("TwiceScaled", ["x"], ["y"], domain="custom")],
        [vi("x", shape=[2])],
        [vi("y", shape=[2])],
        extra_opsets=[("custom", 1)],
        functions=[outer, _scaled_relu_function()],
    )
    out = compile_model(m).run({"x": np.array([-1.0, 1.0], np.float32)})["y"]
    np.testing.assert_allclose(out, [0.0, 10.0])


def test_recursive_local_function_is_refused() -> None:
    loop_fn = helper.make_function(
        "custom",
        "Forever",
        ["X"],
        ["Y"],
        [helper.make_node("Forever", ["X"], ["Y"], domain="custom")],
        opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("custom", 1)],
    )
    m = model(
        [helper.make_node("Forever", ["x"], ["y"], domain="custom")],
        [vi("x", shape=[2])],
        [vi("y", shape=[2])],
        extra_opsets=[("custom", 1)],
        functions=[loop_fn],
    )
    with pytest.raises(RuntimeModelError):
        compile_model(m)


def test_ops_without_kernels_expand_into_their_schema_function(monkeypatch: pytest.MonkeyPatch) -> None:
    """Celu has a plain function body, Gelu a context-dependent one; both run without their kernels."""
    monkeypatch.delitem(REGISTRY, ("", "Celu"))
    monkeypatch.delitem(REGISTRY, ("", "Gelu"))
    m = model(
        [helper.make_node("Celu", ["x"], ["c"], alpha=0.5), helper.make_node("Gelu", ["x"], ["g"])],
        [vi("x", shape=[4])],
        [vi("c", shape=[4]), vi("g", shape=[4])],
        opset=20,
    )
    exe = compile_model(m)
    x = np.array([-2.0, -0.5, 0.0, 1.5], np.float32)
    out = exe.run({"x": x})
    np.testing.assert_allclose(out["c"], np.maximum(0, x) + np.minimum(0, 0.5 * (np.exp(x / 0.5) - 1)), rtol=1e-6)
    erf = np.vectorize(math.erf)
    np.testing.assert_allclose(out["g"], 0.5 * x * (1 + erf(x / math.sqrt(2))), rtol=1e-6, atol=1e-7)
    assert exe.stats["expanded_schema_functions"] == {"Celu": 1, "Gelu": 1}
    assert {n.op_type for n in exe.model.graph.nodes}.isdisjoint({"Celu", "Gelu"})


def test_a_failing_kernel_names_its_node() -> None:
    m = model(
        [helper.make_node("Reshape", ["x", "s"], ["y"], name="reshape_me")],
        [vi("x", shape=[6]), vi("s", onnx.TensorProto.INT64, [1])],
        [vi("y")],
    )
    exe = compile_model(m)
    with pytest.raises(RuntimeModelError, match=r"node 'reshape_me' \(Reshape\)"):
        exe.run({"x": np.zeros(6, np.float32), "s": np.array([4])})


def test_compile_stats_are_reported() -> None:
    exe = compile_model(model([helper.make_node("Relu", ["x"], ["y"])], [vi("x", F, [1])], [vi("y", F, [1])]))
    assert set(exe.stats) >= {"passes", "nodes", "compile_seconds", "expanded_schema_functions"}
    assert exe.stats["nodes"] == 1


def test_garbage_attribute_is_a_check_error() -> None:
    node = helper.make_node("Concat", ["x", "x"], ["y"], name="cat", axis=7)
    with pytest.raises(ModelCheckError, match="cat"):
        compile_model(model([node], [vi("x", shape=[2])], [vi("y")]))
