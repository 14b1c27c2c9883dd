"""If / Loop / Scan / SequenceMap, including outer-scope reads, zero trips and runaway loops."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from runtime import KernelError, compile_model
from runtime.kernels import control_flow
from tests.runtime.graphs import I64, F, const, model, vi

B = TensorProto.BOOL


def _ort(m: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    m = onnx.ModelProto.FromString(m.SerializeToString())
    m.ir_version = 8  # onnxruntime may lag behind onnx's newest IR version
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def _if_model() -> onnx.ModelProto:
    # Both branches read the outer-scope values x and k.
    then_g = helper.make_graph([helper.make_node("Add", ["x", "k"], ["t"])], "then", [], [vi("t", shape=[2])])
    else_g = helper.make_graph([helper.make_node("Sub", ["x", "k"], ["e"])], "else", [], [vi("e", shape=[2])])
    nodes = [
        helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
        helper.make_node("Greater", ["s", "zero"], ["c"]),
        helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g),
    ]
    return model(nodes, [vi("x", shape=[2])], [vi("y", shape=[2])], [const("k", [10.0, 20.0]), const("zero", 0.0)])


def test_if_takes_the_right_branch_and_reads_outer_scope() -> None:
    exe = compile_model(_if_model())
    np.testing.assert_array_equal(exe.run({"x": np.array([1.0, 2.0], np.float32)})["y"], [11.0, 22.0])
    np.testing.assert_array_equal(exe.run({"x": np.array([-1.0, -2.0], np.float32)})["y"], [-11.0, -22.0])


def _loop_model(with_cond_stop: bool = False) -> onnx.ModelProto:
    """for i < M: acc += x * i (carried); scan output collects acc each step; optional stop when acc > 5."""
    body_nodes = [
        helper.make_node("Cast", ["i"], ["fi"], to=TensorProto.FLOAT),
        helper.make_node("Mul", ["x", "fi"], ["xi"]),  # x comes from the outer scope
        helper.make_node("Add", ["acc_in", "xi"], ["acc_out"]),
        helper.make_node("Identity", ["acc_out"], ["scan_out"]),
    ]
    if with_cond_stop:
        body_nodes += [
            helper.make_node("ReduceSum", ["acc_out"], ["tot"], keepdims=0),
            helper.make_node("Less", ["tot", "five"], ["cond_out"]),
        ]
    else:
        body_nodes.append(helper.make_node("Identity", ["cond_in"], ["cond_out"]))
    body = helper.make_graph(
        body_nodes,
        "body",
        [vi("i", I64, []), vi("cond_in", B, []), vi("acc_in", shape=[2])],
        [vi("cond_out", B, []), vi("acc_out", shape=[2]), vi("scan_out", shape=[2])],
    )
    return model(
        [helper.make_node("Loop", ["M", "cond", "acc0"], ["acc", "scans"], body=body)],
        [vi("M", I64, []), vi("cond", B, []), vi("x", shape=[2])],
        [vi("acc", shape=[2]), vi("scans", shape=[None, 2])],
        [const("acc0", [0.0, 0.0]), const("five", 5.0)],
    )


def test_loop_carries_values_and_stacks_scan_outputs() -> None:
    exe = compile_model(_loop_model())
    x = np.array([1.0, 2.0], np.float32)
    out = exe.run({"M": np.array(4), "cond": np.array(True), "x": x})
    np.testing.assert_array_equal(out["acc"], x * (0 + 1 + 2 + 3))
    np.testing.assert_array_equal(out["scans"], np.stack([x * 0, x * 1, x * 3, x * 6]))


def test_loop_with_zero_trips_returns_initial_values_and_empty_scans() -> None:
    out = compile_model(_loop_model()).run({"M": np.array(0), "cond": np.array(True), "x": np.ones(2, np.float32)})
    np.testing.assert_array_equal(out["acc"], [0.0, 0.0])
    assert out["scans"].shape == (0, 2) and out["scans"].dtype == np.float32


def test_loop_stops_when_the_body_condition_turns_false() -> None:
    m = _loop_model(with_cond_stop=True)
    feeds = {"M": np.array(100), "cond": np.array(True), "x": np.array([1.0, 1.0], np.float32)}
    ours = compile_model(m).run(feeds)
    ref = _ort(m, feeds)
    np.testing.assert_array_equal(ours["acc"], ref[0])
    np.testing.assert_array_equal(ours["scans"], ref[1])


def test_runaway_loop_is_stopped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(control_flow, "MAX_LOOP_ITERATIONS", 50)
    exe = compile_model(_forever_loop())
    with pytest.raises(KernelError, match="more than 50 iterations"):
        exe.run({"cond": np.array(True)})


def _forever_loop() -> onnx.ModelProto:
    body = helper.make_graph(
        [helper.make_node("Identity", ["c"], ["c_out"]), helper.make_node("Add", ["v", "one"], ["v_out"])],
        "body",
        [vi("i", I64, []), vi("c", B, []), vi("v", shape=[])],
        [vi("c_out", B, []), vi("v_out", shape=[])],
    )
    return model(
        [helper.make_node("Loop", ["", "cond", "v0"], ["v_final"], body=body)],
        [vi("cond", B, [])],
        [vi("v_final", shape=[])],
        [const("v0", 0.0), const("one", 1.0)],
    )


def test_nested_subgraphs_read_values_two_scopes_up() -> None:
    # Loop body contains an If whose branches read `bias` from the main graph.
    then_g = helper.make_graph([helper.make_node("Add", ["v", "bias"], ["r"])], "t", [], [vi("r", shape=[])])
    else_g = helper.make_graph([helper.make_node("Sub", ["v", "bias"], ["r2"])], "e", [], [vi("r2", shape=[])])
    body = helper.make_graph(
        [
            helper.make_node("Identity", ["c"], ["c_out"]),
            helper.make_node("If", ["c"], ["v_out"], then_branch=then_g, else_branch=else_g),
        ],
        "body",
        [vi("i", I64, []), vi("c", B, []), vi("v", shape=[])],
        [vi("c_out", B, []), vi("v_out", shape=[])],
    )
    m = model(
        [helper.make_node("Loop", ["M", "", "v0"], ["v_final"], body=body)],
        [vi("M", I64, []), vi("bias", shape=[])],
        [vi("v_final", shape=[])],
        [const("v0", 1.0)],
    )
    out = compile_model(m).run({"M": np.array(3), "bias": np.array(2.5, np.float32)})
    assert float(out["v_final"]) == pytest.approx(1.0 + 3 * 2.5)


def _scan_model() -> onnx.ModelProto:
    """Running sum over axis 1 of x (reverse direction), outputs stacked along axis 1."""
    body = helper.make_graph(
        [helper.make_node("Add", ["s_in", "x_t"], ["s_out"]), helper.make_node("Identity", ["s_out"], ["y_t"])],
        "body",
        [vi("s_in", shape=[3]), vi("x_t", shape=[3])],
        [vi("s_out", shape=[3]), vi("y_t", shape=[3])],
    )
    node = helper.make_node(
        "Scan",
        ["s0", "x"],
        ["s_final", "ys"],
        body=body,
        num_scan_inputs=1,
        scan_input_axes=[1],
        scan_input_directions=[1],
        scan_output_axes=[1],
    )
    return model([node], [vi("s0", shape=[3]), vi("x", shape=[3, 4])], [vi("s_final", shape=[3]), vi("ys")])


def test_scan_with_axes_and_directions_matches_onnxruntime() -> None:
    m = _scan_model()
    rng = np.random.default_rng(0)
    feeds = {"s0": rng.random(3, dtype=np.float32), "x": rng.random((3, 4), dtype=np.float32)}
    ours = compile_model(m).run(feeds)
    ref = _ort(m, feeds)
    np.testing.assert_allclose(ours["s_final"], ref[0], rtol=1e-6)
    np.testing.assert_allclose(ours["ys"], ref[1], rtol=1e-6)
    assert ours["ys"].shape == (3, 4)


def test_scan_opset8_handles_batches_and_sequence_lengths() -> None:
    body = helper.make_graph(
        [helper.make_node("Add", ["s_in", "x_t"], ["s_out"]), helper.make_node("Identity", ["s_out"], ["y_t"])],
        "body",
        [vi("s_in", shape=[2]), vi("x_t", shape=[2])],
        [vi("s_out", shape=[2]), vi("y_t", shape=[2])],
    )
    node = helper.make_node("Scan", ["lens", "s0", "x"], ["s_final", "ys"], body=body, num_scan_inputs=1)
    m = model(
        [node],
        [vi("lens", I64, [2]), vi("s0", shape=[2, 2]), vi("x", shape=[2, 3, 2])],
        [vi("s_final", shape=[2, 2]), vi("ys", shape=[2, 3, 2])],
        opset=8,
    )
    x = np.arange(12, dtype=np.float32).reshape(2, 3, 2)
    s0 = np.zeros((2, 2), np.float32)
    out = compile_model(m).run({"lens": np.array([3, 2], np.int64), "s0": s0, "x": x})
    np.testing.assert_array_equal(out["s_final"], [x[0].sum(0), x[1, :2].sum(0)])
    expected_ys = np.stack([np.cumsum(x[0], 0), np.concatenate([np.cumsum(x[1, :2], 0), np.zeros((1, 2))])])
    np.testing.assert_array_equal(out["ys"], expected_ys)


def test_sequence_map_applies_its_body_to_each_element() -> None:
    body = helper.make_graph(
        [helper.make_node("Shape", ["t"], ["shp"])], "body", [vi("t", shape=None)], [vi("shp", I64, [None])]
    )
    seq_type = helper.make_tensor_sequence_value_info
    m = model(
        [helper.make_node("SequenceMap", ["seq"], ["shapes"], body=body)],
        [seq_type("seq", F, None)],
        [seq_type("shapes", I64, None)],
    )
    seq = [np.zeros((2, 3), np.float32), np.zeros((4,), np.float32)]
    out = compile_model(m).run({"seq": seq})["shapes"]
    assert [list(s) for s in out] == [[2, 3], [4]]
