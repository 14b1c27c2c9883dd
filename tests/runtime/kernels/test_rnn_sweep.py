"""RNN, GRU and LSTM against onnxruntime over the sizes real models use: hidden 8 to 256, input sizes, sequences
of 1 to 64 steps, batch 1 to 8, one and two stacked layers (the second reading the first's Y reshaped, as
PyTorch exports stacked and bidirectional layers), every direction, with and without initial states and
sequence lengths, GRU's linear_before_reset 0 and 1; at 1 and 2 threads (two threads run a bidirectional layer's
directions concurrently, and split a large step's hidden units)."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from runtime import compile_model
from tests.runtime.kernels.ort_compare import run_ort

GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}

# (op, direction, hidden, input, seq, batch, states, lens, linear_before_reset, layers)
CASES = [
    ("LSTM", "forward", 8, 3, 1, 1, False, False, 0, 1),
    ("LSTM", "bidirectional", 96, 64, 32, 1, False, False, 0, 1),
    ("LSTM", "bidirectional", 96, 64, 32, 8, False, False, 0, 1),
    ("LSTM", "forward", 128, 64, 20, 8, False, False, 0, 2),
    ("LSTM", "reverse", 40, 17, 9, 3, True, True, 0, 1),
    ("LSTM", "bidirectional", 33, 20, 64, 2, True, True, 0, 2),
    ("LSTM", "forward", 256, 32, 6, 2, True, False, 0, 1),
    ("GRU", "forward", 256, 128, 16, 1, False, False, 1, 1),
    ("GRU", "forward", 256, 128, 16, 8, False, False, 1, 1),
    ("GRU", "forward", 128, 96, 12, 4, True, False, 1, 1),
    ("GRU", "bidirectional", 64, 24, 10, 5, True, True, 0, 2),
    ("GRU", "reverse", 16, 16, 64, 1, False, True, 0, 1),
    ("GRU", "bidirectional", 200, 50, 5, 8, True, False, 1, 1),
    ("GRU", "forward", 8, 1, 3, 7, False, False, 0, 2),
    ("RNN", "forward", 64, 32, 40, 1, True, False, 0, 2),
    ("RNN", "bidirectional", 120, 10, 7, 6, True, True, 0, 1),
    ("RNN", "reverse", 256, 256, 2, 8, False, False, 0, 1),
]


def _weights(rng: np.random.Generator, op: str, dirs: int, inp: int, hidden: int) -> dict[str, np.ndarray]:
    """PyTorch's default initialisation scale, U(-1/sqrt(H), 1/sqrt(H)), which keeps the recurrence stable."""
    g, k = GATES[op], 1.0 / hidden**0.5

    def uniform(*shape: int) -> np.ndarray:
        return rng.uniform(-k, k, size=shape).astype(np.float32)

    return {
        "W": uniform(dirs, g * hidden, inp),
        "R": uniform(dirs, g * hidden, hidden),
        "B": uniform(dirs, 2 * g * hidden),
    }


def _model(case: tuple[Any, ...], seed: int) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """The layers as one model: weights as initializers, X, initial states and lengths as graph inputs."""
    op, direction, hidden, inp, seq, batch, states, lens, lbr, layers = case
    rng = np.random.default_rng(seed)
    dirs = 2 if direction == "bidirectional" else 1
    feeds: dict[str, np.ndarray] = {"X": rng.standard_normal((seq, batch, inp)).astype(np.float32)}
    inputs = [helper.make_tensor_value_info("X", TensorProto.FLOAT, [seq, batch, inp])]
    if lens:
        feeds["lens"] = rng.integers(1, seq + 1, size=batch).astype(np.int32)
        feeds["lens"][0] = seq
        inputs.append(helper.make_tensor_value_info("lens", TensorProto.INT32, [batch]))
    nodes, inits, outputs = [], [], []
    x, width = "X", inp
    state_names = ["h0", "c0"] if op == "LSTM" else ["h0"]
    for layer in range(layers):
        names = []
        for key, value in _weights(rng, op, dirs, width, hidden).items():
            inits.append(numpy_helper.from_array(value, f"{key}{layer}"))
            names.append(f"{key}{layer}")
        names.append("lens" if lens else "")
        for state in state_names:
            if states:
                feeds[f"{state}_{layer}"] = rng.standard_normal((dirs, batch, hidden)).astype(np.float32) * 0.5
                inputs.append(
                    helper.make_tensor_value_info(f"{state}_{layer}", TensorProto.FLOAT, [dirs, batch, hidden])
                )
            names.append(f"{state}_{layer}" if states else "")
        while not names[-1]:
            names.pop()
        outs = [f"Y{layer}", f"Yh{layer}"] + ([f"Yc{layer}"] if op == "LSTM" else [])
        attrs: dict[str, Any] = {"direction": direction, "hidden_size": hidden}
        if op == "GRU":
            attrs["linear_before_reset"] = lbr
        nodes.append(helper.make_node(op, [x, *names], outs, name=f"{op.lower()}{layer}", **attrs))
        outputs += outs[1:]
        # (seq, dirs, batch, hidden) -> (seq, batch, dirs * hidden), PyTorch's export of a stacked layer's input
        nodes.append(helper.make_node("Transpose", [f"Y{layer}"], [f"T{layer}"], perm=[0, 2, 1, 3]))
        inits.append(numpy_helper.from_array(np.array([0, 0, -1], dtype=np.int64), f"shape{layer}"))
        nodes.append(helper.make_node("Reshape", [f"T{layer}", f"shape{layer}"], [f"X{layer + 1}"]))
        x, width = f"X{layer + 1}", dirs * hidden
    outputs.append(x)
    graph = helper.make_graph(
        nodes, "recurrent", inputs, [helper.make_empty_tensor_value_info(name) for name in outputs], inits
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    model.ir_version = 8
    return onnx.shape_inference.infer_shapes(model, strict_mode=True), feeds


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(str(v) for v in c))
def test_layers_match_onnxruntime(case: tuple[Any, ...], threads: int) -> None:
    model, feeds = _model(case, seed=len(CASES) + CASES.index(case))
    exe = compile_model(model, threads=threads)
    exe.run(dict(feeds))
    ours = exe.run(dict(feeds))  # the second run takes the memory-planned program recorded by the first
    theirs = dict(zip([o.name for o in model.graph.output], run_ort(model, feeds), strict=True))
    for name, want in theirs.items():
        got = ours[name]
        assert got.shape == want.shape and got.dtype == want.dtype, name
        np.testing.assert_allclose(got, want, rtol=2e-4, atol=2e-5, err_msg=f"{case} output {name}")
