"""PyTorch's batch-first recurrent exports (transposes around a sequence-first layer) become layers with
``layout = 1`` that read and write batch-first in place; answers match the unrewritten graph."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from runtime import compile_model, native
from tests.runtime.graphs import const, model, vi
from tests.runtime.passes.conftest import compare

rng = np.random.default_rng(11)
SEQ, INPUT, HIDDEN = 7, 6, 20


def _weights(prefix: str, gates: int, dirs: int, width: int) -> list[onnx.TensorProto]:
    return [
        const(f"{prefix}W", rng.uniform(-0.3, 0.3, (dirs, gates * HIDDEN, width))),
        const(f"{prefix}R", rng.uniform(-0.3, 0.3, (dirs, gates * HIDDEN, HIDDEN))),
        const(f"{prefix}B", rng.uniform(-0.3, 0.3, (dirs, 2 * gates * HIDDEN))),
    ]


def _layer(op: str, x: str, prefix: str, bidirectional: bool, state: str, out: str) -> list[onnx.NodeProto]:
    """One batch_first layer as torch.onnx writes it: Transpose in, the layer, Squeeze (one direction) or
    Transpose + Reshape (two) to (seq, batch, dirs * H)."""
    states = [state, f"{state}c"] if op == "LSTM" else [state]
    attrs = {"hidden_size": HIDDEN, "direction": "bidirectional" if bidirectional else "forward"}
    if op == "GRU":
        attrs["linear_before_reset"] = 1
    nodes = [
        helper.make_node(op, [x, f"{prefix}W", f"{prefix}R", f"{prefix}B", "", *states], [f"{out}_y"], **attrs),
    ]
    if bidirectional:
        nodes.append(helper.make_node("Transpose", [f"{out}_y"], [f"{out}_t"], perm=[0, 2, 1, 3]))
        nodes.append(helper.make_node("Reshape", [f"{out}_t", "flat"], [out]))
    else:
        nodes.append(helper.make_node("Squeeze", [f"{out}_y", "one"], [out]))
    return nodes


def _stacked(op: str, bidirectional: bool) -> onnx.ModelProto:
    """Two stacked batch-first layers, then back to batch-first and a mean over the sequence; initial states are
    graph inputs (dirs, batch, H)."""
    dirs, gates = (2 if bidirectional else 1), {"GRU": 3, "LSTM": 4, "RNN": 1}[op]
    nodes = [helper.make_node("Transpose", ["x"], ["xs"], perm=[1, 0, 2])]
    nodes += _layer(op, "xs", "a", bidirectional, "h0", "s1")
    nodes += _layer(op, "s1", "b", bidirectional, "h1", "s2")
    nodes.append(helper.make_node("Transpose", ["s2"], ["bf"], perm=[1, 0, 2]))
    nodes.append(helper.make_node("ReduceMean", ["bf"], ["out"], axes=[1], keepdims=0))
    inits = [*_weights("a", gates, dirs, INPUT), *_weights("b", gates, dirs, dirs * HIDDEN)]
    inits += [const("flat", [0, 0, -1], np.int64), const("one", [1], np.int64)]
    states = ["h0", "h1"] + (["h0c", "h1c"] if op == "LSTM" else [])
    graph_inputs = [vi("x", TensorProto.FLOAT, ["n", SEQ, INPUT])]
    graph_inputs += [vi(s, TensorProto.FLOAT, [dirs, "n", HIDDEN]) for s in states]
    return model(nodes, graph_inputs, [vi("out")], inits, opset=17)


def _feeds(m: onnx.ModelProto, batch: int) -> dict[str, np.ndarray]:
    feeds = {"x": rng.standard_normal((batch, SEQ, INPUT)).astype(np.float32)}
    for i in m.graph.input[1:]:
        feeds[i.name] = rng.standard_normal((i.type.tensor_type.shape.dim[0].dim_value, batch, HIDDEN)).astype(
            np.float32
        )
    return feeds


@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
@pytest.mark.parametrize("bidirectional", [False, True])
@pytest.mark.parametrize("batch", [1, 3])
def test_batch_first_layers_take_layout_1(op: str, bidirectional: bool, batch: int) -> None:
    m = _stacked(op, bidirectional)
    exe = compare(m, _feeds(m, batch), passes=["recurrent_outputs", "recurrent_layout", "dead_node_elimination"])
    layers = [n for n in exe.model.graph.nodes if n.op_type == op]
    assert [n.attrs.get("layout") for n in layers] == [1, 1]
    assert layers[1].inputs[0] == next(n.outputs[0] for n in exe.model.graph.nodes if n.op_type == "Reshape")
    ops = [n.op_type for n in exe.model.graph.nodes]
    assert ops.count("Transpose") == (4 if op == "LSTM" else 2)  # the initial states' views only


def test_a_layer_whose_sequence_is_a_graph_output_keeps_it() -> None:
    m = _stacked("GRU", True)
    m.graph.output.append(vi("s1"))
    exe = compare(m, _feeds(m, 2), passes=["recurrent_outputs", "recurrent_layout", "dead_node_elimination"])
    assert [n.attrs.get("layout") for n in exe.model.graph.nodes if n.op_type == "GRU"] == [1, 1]
    assert any(n.op_type == "Transpose" and n.outputs == ["s1"] for n in exe.model.graph.nodes)


@pytest.mark.skipif(native.lib() is None, reason=f"compiled kernels unavailable: {native.status()}")
def test_batch_first_layers_bind_past_batch_1() -> None:
    m = _stacked("LSTM", True)
    exe = compile_model(m)
    plain = compile_model(m, passes=[])
    for _ in range(3):
        feeds = _feeds(m, 4)
        np.testing.assert_allclose(exe.run(dict(feeds))["out"], plain.run(dict(feeds))["out"], rtol=1e-5, atol=1e-6)
    static = next(iter(exe.plan._static.values()))  # type: ignore[union-attr]
    _, steps, _, _ = static._state()
    assert [entry[0] for entry in steps if entry[2].node.op_type == "LSTM"] == ["bound", "bound"]


@pytest.mark.skipif(native.lib() is None, reason=f"compiled kernels unavailable: {native.status()}")
@pytest.mark.parametrize("name", ["lstm_tagger", "gru_lm", "bilstm_classifier", "seq2seq_gru"])
def test_pytorch_exports_bind_every_recurrent_layer_and_match_onnxruntime(name: str) -> None:
    """The breadth suite's PyTorch exports at batch 3: every recurrent layer a prebound call, outputs as
    onnxruntime's."""
    pytest.importorskip("torch", reason="extra not installed (torch exports the breadth models)")
    ort = pytest.importorskip("onnxruntime", reason="onnxruntime: extra not installed")
    from benchmarks.models import get_model

    suite_model = get_model(name)
    proto, feeds = suite_model.model(), suite_model.feeds(3)
    exe = compile_model(proto)
    exe.run(dict(feeds))
    ours = exe.run(dict(feeds))
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    for got, want in zip([ours[n] for n in exe.output_names], session.run(None, feeds), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    static = next(iter(exe.plan._static.values()))  # type: ignore[union-attr]
    _, steps, _, _ = static._state()
    kinds = [entry[0] for entry in steps if entry[2].node.op_type in ("LSTM", "GRU")]
    assert kinds and set(kinds) == {"bound"}
