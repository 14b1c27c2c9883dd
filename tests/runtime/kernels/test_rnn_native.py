"""The compiled recurrent loop (runtime/native/recurrent.c via runtime.kernels.rnn_native) against the NumPy
reference over directions, layouts, sequence lengths, initial states, peepholes, clip, linear_before_reset and
hidden sizes that are not a multiple of the vector width; and against onnxruntime at a size past the small cases."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from runtime import native
from runtime.kernels import NodeContext, resolve, rnn_native
from runtime.kernels.rnn import _Recurrent
from tests.runtime.kernels.ort_compare import assert_matches_ort, rand

pytestmark = pytest.mark.skipif(native.lib() is None, reason=f"compiled kernels unavailable: {native.status()}")

GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}


def _kernel(op: str, **attrs: Any) -> _Recurrent:
    node = NodeContext(name=f"test_{op}", op_type=op, opset=14, n_inputs=8, n_outputs=3)
    kernel = resolve(op, "", 14)(node, attrs)
    assert isinstance(kernel, _Recurrent)
    return kernel


def _inputs(
    op: str, dirs: int, layout: int, seq: int, batch: int, inp: int, hidden: int, *, extras: bool, seed: int
) -> list[Any]:
    rng = np.random.default_rng(seed)
    g = GATES[op]
    x = rand(rng, *((seq, batch, inp) if layout == 0 else (batch, seq, inp)))
    state = (dirs, batch, hidden) if layout == 0 else (batch, dirs, hidden)
    lens = rng.integers(0, seq + 1, size=batch).astype(np.int32)
    out: list[Any] = [
        x,
        rand(rng, dirs, g * hidden, inp) * 0.4,
        rand(rng, dirs, g * hidden, hidden) * min(0.4, 1.5 / hidden**0.5),  # not chaotic: rounding stays small
        rand(rng, dirs, 2 * g * hidden) if extras else None,
        lens if extras else None,
        rand(rng, *state) if extras else None,
    ]
    if op == "LSTM":
        out += [rand(rng, *state) if extras else None, rand(rng, dirs, 3 * hidden) if extras else None]
    return out


CASES = [
    (op, direction, layout, extras, hidden)
    for op, direction, layout, extras, hidden in itertools.product(
        ["RNN", "GRU", "LSTM"], ["forward", "reverse", "bidirectional"], [0, 1], [False, True], [5, 37, 90]
    )
]


@pytest.fixture(params=[1, 2], ids=["1thread", "2threads"])
def threads(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[int]:
    """The compiled pool's threads: at 2, a step's hidden units are split between tasks (from 32 units: the work
    threshold is lowered so these small layers split too)."""
    monkeypatch.setattr(rnn_native, "SERIAL_WORK", 0)
    previous = native.get_threads()
    native.set_threads(request.param)
    yield request.param
    native.set_threads(previous)


@pytest.mark.parametrize(("op", "direction", "layout", "extras", "hidden"), CASES)
def test_compiled_loop_matches_the_numpy_reference(
    op: str, direction: str, layout: int, extras: bool, hidden: int, threads: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    dirs = 2 if direction == "bidirectional" else 1
    attrs: dict[str, Any] = {"direction": direction, "layout": layout, "hidden_size": hidden}
    if op == "GRU":
        attrs["linear_before_reset"] = hidden % 2
    if extras:
        attrs["clip"] = 1.5
    kernel = _kernel(op, **attrs)
    inputs = _inputs(op, dirs, layout, 7, 3, 9, hidden, extras=extras, seed=hidden + layout)
    calls: list[bool] = []
    real_run = rnn_native.run

    def counting_run(*args: Any) -> Any:
        calls.append(True)
        return real_run(*args)

    monkeypatch.setattr(rnn_native, "run", counting_run)
    got = kernel.compute(*inputs)
    want = kernel.compute_numpy(*inputs)
    assert calls, "the compiled loop was not taken"
    assert len(got) == len(want) == (3 if op == "LSTM" else 2)
    for g, w in zip(got, want, strict=True):
        assert g.shape == w.shape and g.dtype == w.dtype == np.float32
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=2e-5)


@pytest.mark.parametrize("op", ["GRU", "LSTM"])
def test_input_forget_and_no_bias_match_the_numpy_reference(op: str) -> None:
    attrs: dict[str, Any] = {"hidden_size": 20, "input_forget": 1} if op == "LSTM" else {"hidden_size": 20}
    kernel = _kernel(op, **attrs)
    inputs = _inputs(op, 1, 0, 6, 2, 4, 20, extras=False, seed=3)
    for g, w in zip(kernel.compute(*inputs), kernel.compute_numpy(*inputs), strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=2e-5)


def test_relu_rnn_runs_compiled_and_exotic_activations_do_not() -> None:
    assert _kernel("RNN", activations=["Relu"]).native_acts == [[2]]
    assert _kernel("LSTM", direction="bidirectional").native_acts == [[0, 1, 1], [0, 1, 1]]
    assert _kernel("LSTM", activations=["HardSigmoid", "Tanh", "Tanh"]).native_acts is None
    assert _kernel("GRU", activations=["Sigmoid", "LeakyRelu"], activation_alpha=[0.2]).native_acts is None


def test_weights_are_packed_once_per_weight_array() -> None:
    kernel = _kernel("LSTM", hidden_size=8)
    inputs = _inputs("LSTM", 1, 0, 3, 2, 4, 8, extras=True, seed=5)
    kernel.compute(*inputs)
    first = kernel._packed.value
    kernel.compute(*inputs)
    assert kernel._packed.value is first
    inputs[2] = inputs[2] * 2
    kernel.compute(*inputs)
    assert kernel._packed.value is not first


@pytest.mark.parametrize(
    ("op", "attrs"),
    [
        ("LSTM", {"direction": "bidirectional"}),
        ("GRU", {"direction": "bidirectional", "linear_before_reset": 1}),
        ("GRU", {"direction": "reverse", "linear_before_reset": 0}),
        ("RNN", {"direction": "forward"}),
    ],
)
def test_larger_layers_match_onnxruntime(op: str, attrs: dict[str, Any], threads: int) -> None:
    """Past the small backend-style cases: 72 hidden units (four vectors and a tail; split between tasks at two
    threads), batch 5, 12 steps."""
    dirs = 2 if attrs["direction"] == "bidirectional" else 1
    names = ["X", "W", "R", "B", "sequence_lens", "initial_h", "initial_c", "P"]
    values = _inputs(op, dirs, 0, 12, 5, 16, 72, extras=True, seed=11)
    inputs = dict(zip(names, values, strict=False))
    outputs = ("Y", "Y_h", "Y_c") if op == "LSTM" else ("Y", "Y_h")
    assert_matches_ort(op, inputs, outputs, opset=14, hidden_size=72, **attrs)
