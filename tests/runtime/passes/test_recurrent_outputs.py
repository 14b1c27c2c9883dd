"""Recurrent layers keep only the outputs something reads; a layer left with Y alone runs as a prebound compiled
call (with the one before it merged into one program), and answers as the unrewritten graph does."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from runtime import compile_model, native
from tests.runtime.graphs import const, model, vi
from tests.runtime.passes.conftest import compare

rng = np.random.default_rng(7)
SEQ, BATCH, INPUT, HIDDEN = 6, 3, 5, 20


def _weights(prefix: str, gates: int, dirs: int, width: int) -> list[onnx.TensorProto]:
    return [
        const(f"{prefix}W", rng.uniform(-0.3, 0.3, (dirs, gates * HIDDEN, width))),
        const(f"{prefix}R", rng.uniform(-0.3, 0.3, (dirs, gates * HIDDEN, HIDDEN))),
        const(f"{prefix}B", rng.uniform(-0.3, 0.3, (dirs, 2 * gates * HIDDEN))),
    ]


def _stack(outputs: list[str]) -> onnx.ModelProto:
    """A bidirectional LSTM whose Y feeds a GRU (through PyTorch's transpose and reshape), whose final state is
    ``h``; ``outputs`` are the graph outputs."""
    nodes = [
        helper.make_node(
            "LSTM", ["x", "lW", "lR", "lB"], ["y1", "h1", "c1"], hidden_size=HIDDEN, direction="bidirectional"
        ),
        helper.make_node("Transpose", ["y1"], ["t1"], perm=[0, 2, 1, 3]),
        helper.make_node("Reshape", ["t1", "shape"], ["x2"]),
        helper.make_node("GRU", ["x2", "gW", "gR", "gB"], ["y2", "h"], hidden_size=HIDDEN, linear_before_reset=1),
    ]
    inits = [*_weights("l", 4, 2, INPUT), *_weights("g", 3, 1, 2 * HIDDEN), const("shape", [0, 0, -1], np.int64)]
    return model(nodes, [vi("x", TensorProto.FLOAT, [SEQ, "n", INPUT])], [vi(o) for o in outputs], inits)


def _x(batch: int = BATCH) -> dict[str, np.ndarray]:
    return {"x": rng.standard_normal((SEQ, batch, INPUT)).astype(np.float32)}


def _outputs(exe, op: str) -> list[str]:  # type: ignore[no-untyped-def]
    return next(list(n.outputs) for n in exe.model.graph.nodes if n.op_type == op)


def test_unread_outputs_are_left_out_and_a_final_state_comes_from_y() -> None:
    exe = compare(_stack(["h"]), _x(), passes=["recurrent_outputs"], rtol=1e-5)
    assert _outputs(exe, "LSTM") == ["y1"]  # Y_h and Y_c were unread: trailing, dropped
    (y,) = _outputs(exe, "GRU")  # forward, every step run: Y_h is Y's last step
    gather = next(n for n in exe.model.graph.nodes if n.op_type == "Gather")
    assert gather.inputs[0] == y and gather.outputs == ["h"]


@pytest.mark.parametrize(
    ("direction", "lens", "kept"),
    [("bidirectional", False, True), ("forward", True, True), ("reverse", False, False)],
)
def test_a_final_state_stays_where_y_would_not_give_it(direction: str, lens: bool, kept: bool) -> None:
    """Two directions end at different steps, and with sequence lengths each batch entry ends at its own: Y_h
    stays the layer's output there; reverse ends at step 0."""
    dirs = 2 if direction == "bidirectional" else 1
    inputs = ["x", "gW", "gR", "gB", "lens" if lens else ""]
    nodes = [
        helper.make_node("GRU", inputs, ["", "h"], hidden_size=HIDDEN, direction=direction, linear_before_reset=1),
    ]
    graph_inputs = [vi("x", TensorProto.FLOAT, [SEQ, "n", INPUT])]
    feeds = _x()
    if lens:
        graph_inputs.append(vi("lens", TensorProto.INT32, ["n"]))
        feeds["lens"] = np.array([SEQ, 2, 4], dtype=np.int32)
    m = model(nodes, graph_inputs, [vi("h")], _weights("g", 3, dirs, INPUT))
    exe = compare(m, feeds, passes=["recurrent_outputs"], rtol=1e-5)
    assert (_outputs(exe, "GRU") == ["", "h"]) is kept
    assert ("Gather" in [n.op_type for n in exe.model.graph.nodes]) is not kept


def test_graph_outputs_are_kept() -> None:
    exe = compare(_stack(["h", "c1", "y2"]), _x(), passes=["recurrent_outputs"], rtol=1e-5)
    assert _outputs(exe, "LSTM") == ["y1", "", "c1"]
    assert _outputs(exe, "GRU") == ["y2", "h"]


@pytest.mark.skipif(native.lib() is None, reason=f"compiled kernels unavailable: {native.status()}")
@pytest.mark.parametrize("batch", [1, 5])
def test_an_encoder_state_and_a_batch_first_input_bind(batch: int) -> None:
    """PyTorch's seq2seq export: batch-first inputs transposed into each GRU, the encoder's final state starting
    the decoder. Both layers become prebound calls (the transposed input read in place), and agree."""
    nodes = [
        helper.make_node("Transpose", ["src"], ["xs"], perm=[1, 0, 2]),
        helper.make_node("GRU", ["xs", "eW", "eR", "eB"], ["", "h"], hidden_size=HIDDEN, linear_before_reset=1),
        helper.make_node("Transpose", ["tgt"], ["xt"], perm=[1, 0, 2]),
        helper.make_node("GRU", ["xt", "dW", "dR", "dB", "", "h"], ["y"], hidden_size=HIDDEN, linear_before_reset=1),
    ]
    inits = [*_weights("e", 3, 1, INPUT), *_weights("d", 3, 1, INPUT)]
    graph_inputs = [vi("src", TensorProto.FLOAT, ["n", SEQ, INPUT]), vi("tgt", TensorProto.FLOAT, ["n", 4, INPUT])]
    m = model(nodes, graph_inputs, [vi("y")], inits)
    exe, plain = compile_model(m), compile_model(m, passes=[])
    for _ in range(3):  # recorded, then planned with fresh inputs
        feeds = {
            "src": rng.standard_normal((batch, SEQ, INPUT)).astype(np.float32),
            "tgt": rng.standard_normal((batch, 4, INPUT)).astype(np.float32),
        }
        np.testing.assert_allclose(exe.run(dict(feeds))["y"], plain.run(dict(feeds))["y"], rtol=1e-5, atol=1e-6)
    static = next(iter(exe.plan._static.values()))  # type: ignore[union-attr]
    _, steps, _, _ = static._state()
    assert [entry[0] for entry in steps if entry[2].node.op_type == "GRU"] == ["bound", "bound"]
    assert not static.may_use_blas


@pytest.mark.skipif(native.lib() is None, reason=f"compiled kernels unavailable: {native.status()}")
@pytest.mark.parametrize("batch", [1, 4])
def test_a_layer_with_y_alone_runs_as_a_bound_compiled_call(batch: int) -> None:
    m = _stack(["y2"])
    exe = compile_model(m)
    plain = compile_model(m, passes=[])
    feeds = _x(batch)
    want = plain.run(dict(feeds))["y2"]
    first = exe.run(dict(feeds))["y2"]
    np.testing.assert_allclose(first, want, rtol=1e-5, atol=1e-6)
    static = next(iter(exe.plan._static.values()))  # type: ignore[union-attr]
    _, steps, _, _ = static._state()
    kinds = {entry[2].node.op_type: entry[0] for entry in steps}
    # past batch 1 the GRU reads the LSTM's Y through recurrent_layout's transposed view, in place
    assert kinds["LSTM"] == "bound" and kinds["GRU"] == "bound"
    assert not static.may_use_blas  # the projections run on the compiled GEMM, not BLAS
    for _ in range(2):  # planned runs read the staged input where it is: new values, new answers
        feeds = _x(batch)
        np.testing.assert_allclose(exe.run(dict(feeds))["y2"], plain.run(dict(feeds))["y2"], rtol=1e-5, atol=1e-6)
