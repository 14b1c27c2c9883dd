"""RNN, GRU and LSTM: the ONNX backend cases, and onnxruntime over directions, layouts, sequence lengths,
initial states, peepholes, clipping and custom activations."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from tests.runtime.kernels.backend_cases import backend_cases_test
from tests.runtime.kernels.ort_compare import assert_matches_ort, one_node_model, rand, run_ours

SEQ, BATCH, INPUT, HIDDEN = 5, 3, 4, 6
GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}


test_backend_cases_pass = backend_cases_test(["RNN", "GRU", "LSTM"])


def recurrent_inputs(op: str, direction: str, layout: int, *, lens: bool, states: bool, peep: bool) -> dict:
    rng = np.random.default_rng(hash((op, direction, layout, lens, states, peep)) % 2**32)
    dirs = 2 if direction == "bidirectional" else 1
    g = GATES[op]
    x = rand(rng, *((SEQ, BATCH, INPUT) if layout == 0 else (BATCH, SEQ, INPUT)))
    state_shape = (dirs, BATCH, HIDDEN) if layout == 0 else (BATCH, dirs, HIDDEN)
    inputs: dict[str, np.ndarray | None] = {
        "X": x,
        "W": rand(rng, dirs, g * HIDDEN, INPUT) * 0.5,
        "R": rand(rng, dirs, g * HIDDEN, HIDDEN) * 0.5,
        "B": rand(rng, dirs, 2 * g * HIDDEN),
        "sequence_lens": np.array([SEQ, 2, 4], dtype=np.int32) if lens else None,
        "initial_h": rand(rng, *state_shape) if states else None,
    }
    if op == "LSTM":
        inputs["initial_c"] = rand(rng, *state_shape) if states else None
        inputs["P"] = rand(rng, dirs, 3 * HIDDEN) if peep else None
    return inputs


OUTPUTS = {"RNN": ("Y", "Y_h"), "GRU": ("Y", "Y_h"), "LSTM": ("Y", "Y_h", "Y_c")}


@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize(("lens", "states"), [(False, False), (True, True)])
def test_matches_onnxruntime_over_directions(op: str, direction: str, lens: bool, states: bool) -> None:
    inputs = recurrent_inputs(op, direction, 0, lens=lens, states=states, peep=states)
    assert_matches_ort(op, inputs, OUTPUTS[op], opset=14, direction=direction, hidden_size=HIDDEN)


@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
def test_batch_first_layout_is_the_transposed_sequence_first_result(op: str) -> None:
    """onnxruntime has no layout=1; our batch-first run must equal the sequence-first run, transposed."""
    seq_first = recurrent_inputs(op, "bidirectional", 0, lens=True, states=True, peep=False)
    batch_first = {
        k: None if v is None else (np.swapaxes(v, 0, 1) if k in ("X", "initial_h", "initial_c") else v)
        for k, v in seq_first.items()
    }
    attrs: dict[str, Any] = {"direction": "bidirectional", "hidden_size": HIDDEN}
    feeds0 = {k: v for k, v in seq_first.items() if v is not None}
    feeds1 = {k: v for k, v in batch_first.items() if v is not None}
    ref = run_ours(one_node_model(op, seq_first, OUTPUTS[op], 14, **attrs), feeds0)
    got = run_ours(one_node_model(op, batch_first, OUTPUTS[op], 14, layout=1, **attrs), feeds1)
    np.testing.assert_allclose(got[0], ref[0].transpose(2, 0, 1, 3), rtol=1e-6)
    for g, r in zip(got[1:], ref[1:], strict=True):
        np.testing.assert_allclose(g, r.transpose(1, 0, 2), rtol=1e-6)


@pytest.mark.parametrize("linear_before_reset", [0, 1])
def test_gru_linear_before_reset_matches_onnxruntime(linear_before_reset: int) -> None:
    inputs = recurrent_inputs("GRU", "forward", 0, lens=True, states=True, peep=False)
    assert_matches_ort(
        "GRU", inputs, OUTPUTS["GRU"], opset=14, hidden_size=HIDDEN, linear_before_reset=linear_before_reset
    )


@pytest.mark.parametrize(
    ("op", "attrs"),
    [
        ("LSTM", {"clip": 0.8}),
        ("LSTM", {"input_forget": 1}),
        (
            "LSTM",
            {"activations": ["HardSigmoid", "Tanh", "Softsign"], "activation_alpha": [0.3], "activation_beta": [0.4]},
        ),
        ("GRU", {"clip": 0.5, "activations": ["Sigmoid", "LeakyRelu"], "activation_alpha": [0.2]}),
        ("RNN", {"activations": ["Relu"]}),
        ("RNN", {"activations": ["Affine"], "activation_alpha": [0.5], "activation_beta": [0.1]}),
    ],
)
def test_clip_and_activations_match_onnxruntime(op: str, attrs: dict[str, Any]) -> None:
    inputs = recurrent_inputs(op, "forward", 0, lens=False, states=True, peep=op == "LSTM")
    assert_matches_ort(op, inputs, OUTPUTS[op], opset=14, hidden_size=HIDDEN, **attrs)


def test_only_final_state_requested() -> None:
    inputs = recurrent_inputs("LSTM", "reverse", 0, lens=True, states=False, peep=False)
    h, c = assert_matches_ort("LSTM", inputs, ("", "Y_h", "Y_c"), opset=14, direction="reverse", hidden_size=HIDDEN)
    assert h.shape == c.shape == (1, BATCH, HIDDEN)
