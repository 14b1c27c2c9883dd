"""Bad models are refused with a clear RuntimeModelError before any kernel runs."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from runtime import ModelCheckError, RuntimeModelError, UnsupportedOpError, compile_model
from runtime.kernels.base import Kernel, register
from tests.runtime.graphs import I64, F, const, model, vi

SPY_DOMAIN = "test.appopt.checks"


@register
class Spy(Kernel):
    """Identity that records every call: a check that fires 'before any kernel runs' leaves ``calls`` empty."""

    op_type = "Spy"
    domain = SPY_DOMAIN
    calls: ClassVar[list[str]] = []

    def compute(self, x: Any) -> Any:
        Spy.calls.append(self.node.name)
        return x


@pytest.fixture(autouse=True)
def _reset_spy() -> None:
    Spy.calls.clear()


def spy(inp: str, out: str) -> onnx.NodeProto:
    return helper.make_node("Spy", [inp], [out], name=f"spy_{out}", domain=SPY_DOMAIN)


def spy_model(nodes: list[onnx.NodeProto], inputs: list[Any], outputs: list[Any], inits: Any = ()) -> Any:
    return model(nodes, inputs, outputs, inits, extra_opsets=[(SPY_DOMAIN, 1)])


def test_spy_runs_in_a_good_model() -> None:
    exe = compile_model(spy_model([spy("x", "y")], [vi("x", shape=[2])], [vi("y", shape=[2])]))
    exe.run({"x": np.ones(2, np.float32)})
    assert Spy.calls == ["spy_y"]


def test_malformed_protobuf_is_refused() -> None:
    with pytest.raises(RuntimeModelError, match="not a valid ONNX"):
        compile_model(b"\x08\x07garbage\xff\xff\xff")


def test_bytes_that_parse_but_hold_no_graph_are_refused() -> None:
    with pytest.raises(RuntimeModelError, match="no graph"):
        compile_model(b"")


def test_missing_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(RuntimeModelError, match="does not exist"):
        compile_model(tmp_path / "nope.onnx")


def test_cycle_is_refused_naming_nodes() -> None:
    nodes = [
        spy("x", "s"),
        helper.make_node("Add", ["s", "b"], ["a"], name="first"),
        helper.make_node("Relu", ["a"], ["b"], name="second"),
    ]
    with pytest.raises(ModelCheckError, match=r"cycle through .*first.*second"):
        compile_model(spy_model(nodes, [vi("x", shape=[2])], [vi("b", shape=[2])]))
    assert Spy.calls == []


def test_missing_input_is_refused_naming_node_and_name() -> None:
    nodes = [spy("x", "s"), helper.make_node("Add", ["s", "nowhere"], ["y"], name="add")]
    with pytest.raises(ModelCheckError, match=r"node 'add' \(Add\): input 'nowhere' is not produced"):
        compile_model(spy_model(nodes, [vi("x", shape=[2])], [vi("y", shape=[2])]))
    assert Spy.calls == []


def test_missing_initializer_is_refused() -> None:
    # W is declared (value_info) but no initializer or input provides it.
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["y"], name="mm")],
        "g",
        [vi("x", shape=[1, 2])],
        [vi("y", shape=[1, 2])],
        value_info=[vi("W", shape=[2, 2])],
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(ModelCheckError, match=r"node 'mm' \(MatMul\): input 'W'"):
        compile_model(m)


def test_output_defined_twice_is_refused() -> None:
    nodes = [helper.make_node("Relu", ["x"], ["y"], name="a"), helper.make_node("Neg", ["x"], ["y"], name="b")]
    with pytest.raises(ModelCheckError, match="also produced by"):
        compile_model(model(nodes, [vi("x", shape=[2])], [vi("y", shape=[2])]))


def test_graph_output_never_produced_is_refused() -> None:
    with pytest.raises(ModelCheckError, match="'ghost' is never produced"):
        compile_model(model([helper.make_node("Relu", ["x"], ["y"])], [vi("x", shape=[2])], [vi("ghost", shape=[2])]))


def test_dtype_mismatch_is_refused_naming_node() -> None:
    nodes = [spy("x", "s"), helper.make_node("Add", ["x", "k"], ["y"], name="add")]
    m = spy_model(nodes, [vi("x", shape=[2]), vi("k", I64, [2])], [vi("y", shape=[2]), vi("s", shape=[2])])
    with pytest.raises(ModelCheckError, match=r"add.*Add"):
        compile_model(m)
    assert Spy.calls == []


def test_declared_input_dtype_disagreeing_with_initializer_is_refused() -> None:
    m = model(
        [helper.make_node("Relu", ["w"], ["y"])],
        [vi("w", I64, [2])],
        [vi("y", I64, [2])],
        [const("w", [1.0, 2.0])],
    )
    with pytest.raises(ModelCheckError):
        compile_model(m)


def test_impossible_matmul_shapes_are_refused() -> None:
    m = model(
        [helper.make_node("MatMul", ["a", "b"], ["y"], name="mm")],
        [vi("a", shape=[2, 3]), vi("b", shape=[4, 5])],
        [vi("y")],
    )
    with pytest.raises(ModelCheckError, match="mm"):
        compile_model(m)


def test_impossible_reshape_is_refused() -> None:
    m = model(
        [helper.make_node("Reshape", ["x", "shape"], ["y"], name="rs")],
        [vi("x", shape=[2, 3])],
        [vi("y")],
        [const("shape", [4], np.int64)],
    )
    with pytest.raises(ModelCheckError, match="rs"):
        compile_model(m)


def _constant_of_shape(shape: list[int]) -> onnx.ModelProto:
    nodes = [spy("x", "s"), helper.make_node("ConstantOfShape", ["shape"], ["big"], name="cos")]
    nodes.append(helper.make_node("Add", ["s", "s"], ["y"]))
    return spy_model(
        nodes,
        [vi("x", shape=[1])],
        [vi("y", shape=[1]), vi("big")],
        [const("shape", shape, np.int64)],
    )


def test_absurd_allocation_is_refused_statically() -> None:
    with pytest.raises(ModelCheckError, match=r"node 'cos' \(ConstantOfShape\).*above the .* limit"):
        compile_model(_constant_of_shape([10**6, 10**6]))
    assert Spy.calls == []


def test_allocation_limit_is_configurable() -> None:
    exe = compile_model(_constant_of_shape([1000]))
    assert exe.run({"x": np.ones(1, np.float32)})["big"].shape == (1000,)
    with pytest.raises(ModelCheckError, match="above"):
        compile_model(_constant_of_shape([1000]), max_alloc_bytes=1000)


def test_absurd_allocation_from_runtime_values_is_refused_before_the_kernel() -> None:
    m = model(
        [helper.make_node("ConstantOfShape", ["shape"], ["big"], name="cos")],
        [vi("shape", I64, [2])],
        [vi("big")],
    )
    exe = compile_model(m)
    assert exe.run({"shape": np.array([2, 3])})["big"].shape == (2, 3)
    with pytest.raises(ModelCheckError, match="cos"):
        exe.run({"shape": np.array([10**6, 10**7])})


def _external_model(tmp_path: Path, location: str) -> Path:
    tensor = numpy_helper.from_array(np.array([1.0, 2.0, 3.0], dtype=np.float32), "w")
    tensor.ClearField("raw_data")
    tensor.data_location = TensorProto.EXTERNAL
    for key, value in (("location", location), ("offset", "0"), ("length", "12")):
        entry = tensor.external_data.add()
        entry.key, entry.value = key, value
    m = model([helper.make_node("Add", ["x", "w"], ["y"])], [vi("x", shape=[3])], [vi("y", shape=[3])], [tensor])
    path = tmp_path / "model" / "m.onnx"
    path.parent.mkdir()
    path.write_bytes(m.SerializeToString())
    return path


def test_external_data_inside_the_model_directory_loads(tmp_path: Path) -> None:
    path = _external_model(tmp_path, "weights.bin")
    (path.parent / "weights.bin").write_bytes(np.array([1.0, 2.0, 3.0], dtype=np.float32).tobytes())
    out = compile_model(path).run({"x": np.zeros(3, np.float32)})["y"]
    np.testing.assert_array_equal(out, [1.0, 2.0, 3.0])


@pytest.mark.parametrize("location", ["../secret.bin", "/etc/passwd", "sub/../../secret.bin"])
def test_external_data_escaping_the_model_directory_is_refused(tmp_path: Path, location: str) -> None:
    path = _external_model(tmp_path, location)
    (tmp_path / "secret.bin").write_bytes(b"\0" * 12)
    with pytest.raises(ModelCheckError, match="external data location"):
        compile_model(path)


def test_external_data_symlink_leaving_the_directory_is_refused(tmp_path: Path) -> None:
    path = _external_model(tmp_path, "link.bin")
    (tmp_path / "secret.bin").write_bytes(b"\0" * 12)
    (path.parent / "link.bin").symlink_to(tmp_path / "secret.bin")
    with pytest.raises(ModelCheckError, match="escapes"):
        compile_model(path)


def test_external_data_range_past_end_of_file_is_refused(tmp_path: Path) -> None:
    path = _external_model(tmp_path, "weights.bin")
    (path.parent / "weights.bin").write_bytes(b"\0" * 4)
    with pytest.raises(ModelCheckError, match="outside"):
        compile_model(path)


def test_op_without_kernel_or_function_is_unsupported_at_compile_time() -> None:
    m = model(
        [helper.make_node("Frobnicate", ["x"], ["y"], name="frob", domain="com.example")],
        [vi("x", shape=[2])],
        [vi("y", shape=[2])],
        extra_opsets=[("com.example", 1)],
    )
    with pytest.raises(UnsupportedOpError, match=r"node 'frob' \(Frobnicate\)"):
        compile_model(m)


def test_unknown_default_domain_op_is_unsupported() -> None:
    m = model([helper.make_node("Frobnicate", ["x"], ["y"], name="frob")], [vi("x", shape=[2])], [vi("y")])
    with pytest.raises(UnsupportedOpError, match="Frobnicate"):
        compile_model(m)


def test_unsorted_but_acyclic_graph_is_accepted() -> None:
    nodes = [helper.make_node("Neg", ["a"], ["y"]), helper.make_node("Relu", ["x"], ["a"])]
    exe = compile_model(model(nodes, [vi("x", shape=[2])], [vi("y", shape=[2])]))
    np.testing.assert_array_equal(exe.run({"x": np.array([-1.0, 2.0], np.float32)})["y"], [0.0, -2.0])


class TestFeeds:
    exe = compile_model(model([helper.make_node("Relu", ["x"], ["y"])], [vi("x", F, ["n", 2])], [vi("y")]))

    def test_wrong_dtype(self) -> None:
        with pytest.raises(RuntimeModelError, match="input 'x': expected float32, got float64"):
            self.exe.run({"x": np.zeros((1, 2))})

    def test_wrong_shape(self) -> None:
        with pytest.raises(RuntimeModelError, match="expected shape"):
            self.exe.run({"x": np.zeros((1, 3), np.float32)})
        with pytest.raises(RuntimeModelError, match="rank"):
            self.exe.run({"x": np.zeros(2, np.float32)})

    def test_missing_and_unknown(self) -> None:
        with pytest.raises(RuntimeModelError, match="missing input 'x'"):
            self.exe.run({})
        with pytest.raises(RuntimeModelError, match="unknown input 'z'"):
            self.exe.run({"x": np.zeros((1, 2), np.float32), "z": np.zeros(1)})

    def test_dynamic_dimension_accepts_any_size(self) -> None:
        assert self.exe.run({"x": np.zeros((5, 2), np.float32)})["y"].shape == (5, 2)


def test_old_opset_is_converted() -> None:
    # Opset 6 Add with the legacy broadcast attribute; the converter rewrites it to numpy broadcasting.
    node = helper.make_node("Add", ["a", "b"], ["y"], broadcast=1)
    m = model([node], [vi("a", shape=[2, 3]), vi("b", shape=[3])], [vi("y", shape=[2, 3])], opset=6)
    exe = compile_model(m)
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    b = np.array([1, 2, 3], dtype=np.float32)
    np.testing.assert_array_equal(exe.run({"a": a, "b": b})["y"], a + b)
    assert exe.stats["opset_conversion"] == "6 -> 7"


@pytest.mark.parametrize(
    ("op", "inputs", "shapes", "expected"),
    [
        ("ConstantOfShape", [np.array([3, 4])], [None], 12),
        ("Expand", [None, np.array([5, 1, 4])], [(2, 1), None], 40),
        ("Tile", [None, np.array([2, 3])], [(4, 5), None], 120),
        ("Range", [np.array(0.0), np.array(10.0), np.array(0.5)], [None] * 3, 20),
        ("Resize", [None, None, None, np.array([1, 3, 8, 8])], [(1, 3, 4, 4), None, None, None], 192),
        ("Resize", [None, None, np.array([1.0, 1.0, 2.0, 2.0], np.float32)], [(1, 3, 4, 4), None, None], 192),
        ("Expand", [None, None], [(2, 2), None], None),  # target shape unknown
    ],
)
def test_size_estimates_for_size_creating_ops(op: str, inputs: list[Any], shapes: list[Any], expected: Any) -> None:
    from runtime.shapes import estimate_output_elements

    assert estimate_output_elements(op, inputs, shapes, {}) == expected


def test_models_too_big_for_onnx_inference_are_inferred_without_their_weights(monkeypatch: pytest.MonkeyPatch) -> None:
    from runtime import shapes

    monkeypatch.setattr(shapes, "INFERENCE_SIZE_LIMIT", 1000)  # pretend 240 KB of weights is past protobuf's cap
    m = model(
        [helper.make_node("MatMul", ["x", "w"], ["y"])],
        [vi("x", shape=[2, 200])],
        [vi("y")],
        [const("w", np.ones((200, 300)))],
    )
    exe = compile_model(m)
    assert exe.stats["inference_note"].startswith("large initializers")
    assert exe.model.graph.values["y"].shape == (2, 300)
    assert exe.run({"x": np.ones((2, 200), np.float32)})["y"].shape == (2, 300)


@pytest.mark.parametrize(
    ("op", "attrs"),
    [
        ("ReduceSum", {"keepdims": 2}),
        ("ReduceMax", {"keepdims": -1}),
        ("ArgMax", {"keepdims": 9}),
        ("ArgMin", {"select_last_index": 3}),
        ("ReduceMean", {"noop_with_empty_axes": 7}),
    ],
)
def test_flag_attributes_other_than_0_or_1_are_refused(op: str, attrs: dict[str, Any]) -> None:
    node = helper.make_node(op, ["x"], ["y"], name="flag", **attrs)
    m = model([node], [vi("x", F, [2, 3])], [vi("y", I64 if op.startswith("Arg") else F, None)], opset=18)
    with pytest.raises(ModelCheckError, match=rf"^node 'flag' \({op}\): attribute \w+ must be 0 or 1, got -?\d+$"):
        compile_model(m)


def test_gemm_trans_flag_out_of_range_is_refused() -> None:
    node = helper.make_node("Gemm", ["a", "b"], ["y"], name="g", transA=2)
    m = model([node], [vi("a", F, [2, 2]), vi("b", F, [2, 2])], [vi("y", F, None)])
    with pytest.raises(ModelCheckError, match="attribute transA must be 0 or 1, got 2"):
        compile_model(m)


@pytest.mark.parametrize(
    ("op", "extra"),
    [("Pad", {"p": np.array([0, 2**40], np.int64)}), ("OneHot", {"d": np.array(2**40, np.int64)})],
)
def test_pad_and_one_hot_sizes_from_inputs_are_guarded_at_run_time(op: str, extra: dict[str, np.ndarray]) -> None:
    """Sizes that only a run's input values reveal are checked before the kernel allocates (not left to the OS)."""
    names = ["x", *extra] if op == "Pad" else ["x", *extra, "v"]
    x_type = F if op == "Pad" else I64
    inputs = [vi("x", x_type, [2])] + [vi(n, I64, list(a.shape)) for n, a in extra.items()]
    inits = [const("v", [0, 1])] if op == "OneHot" else []
    m = model([helper.make_node(op, names, ["y"], name="big")], inputs, [vi("y", F, None)], inits)
    exe = compile_model(m)
    with pytest.raises(ModelCheckError, match=r"node 'big' .*output would have \d+ elements, above"):
        exe.run({"x": np.zeros(2, np.float32 if op == "Pad" else np.int64), **extra})
