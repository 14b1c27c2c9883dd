"""Whole models: onnx's nine light model-zoo CNNs, and transformer / recurrent graphs against onnxruntime.

Light models: inputs are made exactly as onnx's backend runner does for them (``Runner.generate_dummy_data`` with
``random=False``: ``arange(n).reshape(shape) / n`` as float32), expected outputs are the shipped
``*_output_0.pb``; tolerance is onnx's for model tests, rtol=1e-3, atol=1e-7. The light models' weights come from
ConstantOfShape (constant), so their final outputs vary little; every intermediate value of three of them is also
compared with onnxruntime (rtol=1e-3, atol=1e-4).

Built graphs are compared with onnxruntime on random inputs at rtol=1e-4, atol=1e-5.
"""

from __future__ import annotations

import glob
import os
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper, shape_inference

from runtime import compile_model
from tests.runtime.graphs import I64, F, const, model, vi

LIGHT_DIR = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")
LIGHT_MODELS = sorted(glob.glob(os.path.join(LIGHT_DIR, "light_*.onnx")))


def _ort_run(m: onnx.ModelProto, feeds: dict[str, Any]) -> dict[str, np.ndarray]:
    m = onnx.ModelProto.FromString(m.SerializeToString())
    m.ir_version = min(m.ir_version, 8)  # onnxruntime may lag behind onnx's newest IR version
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(None, feeds), strict=True))


def _dummy_feeds(m: onnx.ModelProto) -> dict[str, np.ndarray]:
    """onnx.backend.test.runner.Runner.generate_dummy_data(x, seed=0, random=False) for each true input."""
    inits = {t.name for t in m.graph.initializer}
    feeds = {}
    for x in m.graph.input:
        if x.name in inits:
            continue
        shape = tuple(d.dim_value if d.HasField("dim_value") else 1 for d in x.type.tensor_type.shape.dim)
        n = int(np.prod(shape))
        feeds[x.name] = (np.arange(n).reshape(shape) / n).astype(np.float32)
    return feeds


def test_all_nine_light_models_are_present() -> None:
    assert len(LIGHT_MODELS) == 9


@pytest.mark.slow
@pytest.mark.parametrize("path", LIGHT_MODELS, ids=lambda p: os.path.basename(p)[6:-5])
def test_light_model_matches_its_expected_output(path: str) -> None:
    m = onnx.load(path)
    exe = compile_model(path)
    out = exe.run(_dummy_feeds(m))
    expected = numpy_helper.to_array(onnx.load_tensor(path[: -len(".onnx")] + "_output_0.pb"))
    got = out[exe.output_names[0]]
    assert got.dtype == expected.dtype
    np.testing.assert_allclose(got, expected, rtol=1e-3, atol=1e-7)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["squeezenet", "shufflenet", "inception_v1"])
def test_light_model_intermediates_match_onnxruntime(name: str) -> None:
    m = shape_inference.infer_shapes(onnx.load(os.path.join(LIGHT_DIR, f"light_{name}.onnx")))
    declared = {o.name for o in m.graph.output}
    typed = {vi_.name: vi_ for vi_ in m.graph.value_info}
    for node in m.graph.node:
        for out in node.output:
            if out in typed and out not in declared:
                m.graph.output.append(typed[out])
    rng = np.random.default_rng(0)
    feeds = {k: rng.random(v.shape, dtype=np.float32) for k, v in _dummy_feeds(m).items()}
    ours = compile_model(m).run(feeds)
    ref = _ort_run(m, feeds)
    assert len(ref) > 50
    for name_, value in ref.items():
        np.testing.assert_allclose(ours[name_], value, rtol=1e-3, atol=1e-4, err_msg=name_)


# -- transformer block ------------------------------------------------------------------------------------------
def transformer_block(gelu: str, batch: int = 2, seq: int = 6, vocab: int = 40, dim: int = 16, heads: int = 2) -> Any:
    rng = np.random.default_rng(7)
    dh = dim // heads

    def w(name: str, *shape: int, scale: float = 0.2) -> onnx.TensorProto:
        return const(name, rng.standard_normal(shape) * scale)

    mask = np.triu(np.full((seq, seq), -1e9, np.float32), k=1)
    inits = [
        w("tok_emb", vocab, dim, scale=1.0),
        w("pos_emb", seq, dim, scale=1.0),
        const("pos_ids", np.arange(seq), np.int64),
        const("g1", np.ones(dim)),
        const("b1", np.zeros(dim)),
        const("g2", rng.random(dim) + 0.5),
        const("b2", rng.standard_normal(dim) * 0.1),
        const("heads_shape", [0, 0, heads, dh], np.int64),
        const("merge_shape", [0, 0, dim], np.int64),
        const("scale", 1.0 / np.sqrt(dh)),
        const("mask", mask),
        const("sqrt_half", np.sqrt(0.5)),
        const("one", 1.0),
        const("half", 0.5),
    ]
    for p in ("q", "k", "v", "o"):
        inits += [w(f"W{p}", dim, dim), w(f"b{p}", dim, scale=0.05)]
    inits += [w("W1", dim, 4 * dim), w("c1", 4 * dim, scale=0.05), w("W2", 4 * dim, dim), w("c2", dim, scale=0.05)]
    N = helper.make_node
    nodes = [
        N("Gather", ["tok_emb", "ids"], ["tok"]),
        N("Gather", ["pos_emb", "pos_ids"], ["pos"]),
        N("Add", ["tok", "pos"], ["h0"]),
        N("LayerNormalization", ["h0", "g1", "b1"], ["n1"], axis=-1, epsilon=1e-5),
    ]
    for p in ("q", "k", "v"):
        nodes += [
            N("MatMul", ["n1", f"W{p}"], [f"{p}_mm"]),
            N("Add", [f"{p}_mm", f"b{p}"], [f"{p}_lin"]),
            N("Reshape", [f"{p}_lin", "heads_shape"], [f"{p}_4d"]),
        ]
    nodes += [
        N("Transpose", ["q_4d"], ["qh"], perm=[0, 2, 1, 3]),
        N("Transpose", ["k_4d"], ["kt"], perm=[0, 2, 3, 1]),
        N("Transpose", ["v_4d"], ["vh"], perm=[0, 2, 1, 3]),
        N("MatMul", ["qh", "kt"], ["scores"]),
        N("Mul", ["scores", "scale"], ["scaled"]),
        N("Add", ["scaled", "mask"], ["masked"]),
        N("Softmax", ["masked"], ["probs"], axis=-1),
        N("MatMul", ["probs", "vh"], ["ctx"]),
        N("Transpose", ["ctx"], ["ctx_t"], perm=[0, 2, 1, 3]),
        N("Reshape", ["ctx_t", "merge_shape"], ["ctx_m"]),
        N("MatMul", ["ctx_m", "Wo"], ["o_mm"]),
        N("Add", ["o_mm", "bo"], ["attn"]),
        N("Add", ["h0", "attn"], ["h1"]),
        N("LayerNormalization", ["h1", "g2", "b2"], ["n2"], axis=-1, epsilon=1e-5),
        N("MatMul", ["n2", "W1"], ["f1"]),
        N("Add", ["f1", "c1"], ["f1b"]),
    ]
    if gelu == "op":
        nodes.append(N("Gelu", ["f1b"], ["act"]))
    else:  # 0.5 * x * (1 + erf(x / sqrt(2)))
        nodes += [
            N("Mul", ["f1b", "sqrt_half"], ["gx"]),
            N("Erf", ["gx"], ["gerf"]),
            N("Add", ["gerf", "one"], ["g1p"]),
            N("Mul", ["f1b", "g1p"], ["gm"]),
            N("Mul", ["gm", "half"], ["act"]),
        ]
    nodes += [N("MatMul", ["act", "W2"], ["f2"]), N("Add", ["f2", "c2"], ["f2b"]), N("Add", ["h1", "f2b"], ["out"])]
    m = model(nodes, [vi("ids", I64, [batch, seq])], [vi("out", F, [batch, seq, dim])], inits, opset=20)
    ids = rng.integers(0, vocab, size=(batch, seq)).astype(np.int64)
    return m, {"ids": ids}


@pytest.mark.parametrize("gelu", ["op", "erf"])
def test_transformer_block_matches_onnxruntime(gelu: str) -> None:
    m, feeds = transformer_block(gelu)
    ours = compile_model(m).run(feeds)["out"]
    ref = _ort_run(m, feeds)["out"]
    assert ours.shape == (2, 6, 16) and ours.dtype == np.float32
    np.testing.assert_allclose(ours, ref, rtol=1e-4, atol=1e-5)


# -- recurrent --------------------------------------------------------------------------------------------------
def _rnn_model(op: str, direction: str, **attrs: Any) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    rng = np.random.default_rng(3)
    seq, batch, inp, hidden = 5, 3, 4, 6
    dirs = 2 if direction == "bidirectional" else 1
    gates = {"LSTM": 4, "GRU": 3}[op]
    inits = [
        const("W", rng.standard_normal((dirs, gates * hidden, inp)) * 0.5),
        const("R", rng.standard_normal((dirs, gates * hidden, hidden)) * 0.5),
        const("B", rng.standard_normal((dirs, 2 * gates * hidden)) * 0.1),
    ]
    inputs = ["X", "W", "R", "B", "lens", "h0"]
    outputs = ["Y", "Y_h"]
    declared_outputs = [vi("Y", F, [seq, dirs, batch, hidden]), vi("Y_h", F, [dirs, batch, hidden])]
    if op == "LSTM":
        inputs.append("c0")
        outputs.append("Y_c")
        declared_outputs.append(vi("Y_c", F, [dirs, batch, hidden]))
    node = helper.make_node(op, inputs, outputs, hidden_size=hidden, direction=direction, **attrs)
    graph_inputs = [
        vi("X", F, [seq, batch, inp]),
        vi("lens", TensorProto.INT32, [batch]),
        vi("h0", F, [dirs, batch, hidden]),
    ]
    feeds = {
        "X": rng.standard_normal((seq, batch, inp)).astype(np.float32),
        "lens": np.array([5, 3, 4], np.int32),
        "h0": (rng.standard_normal((dirs, batch, hidden)) * 0.1).astype(np.float32),
    }
    if op == "LSTM":
        graph_inputs.append(vi("c0", F, [dirs, batch, hidden]))
        feeds["c0"] = (rng.standard_normal((dirs, batch, hidden)) * 0.1).astype(np.float32)
    return model([node], graph_inputs, declared_outputs, inits, opset=14), feeds


@pytest.mark.parametrize(
    ("op", "direction", "attrs"),
    [
        ("LSTM", "bidirectional", {}),
        ("LSTM", "forward", {}),
        ("GRU", "forward", {"linear_before_reset": 1}),
        ("GRU", "bidirectional", {"linear_before_reset": 0}),
    ],
)
def test_recurrent_layers_match_onnxruntime(op: str, direction: str, attrs: dict[str, Any]) -> None:
    m, feeds = _rnn_model(op, direction, **attrs)
    ours = compile_model(m).run(feeds)
    ref = _ort_run(m, feeds)
    for name, value in ref.items():
        np.testing.assert_allclose(ours[name], value, rtol=1e-4, atol=1e-5, err_msg=name)
