"""OpenVINO engine: fp32 forced (max error recorded), bf16 where the CPU has it, compile time, skips not crashes."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper

from benchmarks.backends import BackendSkipped, boundary_ms, get_backend
from benchmarks.models import get_model
from runtime.engine_openvino import cpu_has_bf16
from tests.benchmarks.compiled_backends import mlp_row, unrunnable_model

pytestmark = pytest.mark.skipif(importlib.util.find_spec("openvino") is None, reason="extra not installed")

def test_fp32_matches_onnxruntime_and_keeps_compile_time():
    model = get_model("mlp")
    feeds = model.feeds(batch=4)
    session = get_backend("openvino").prepare(model.model(), threads=1)
    want = get_backend("onnxruntime").prepare(model.model()).run(feeds)[0]
    np.testing.assert_allclose(session.run(feeds)[0], want, rtol=1e-4, atol=1e-5)
    assert session.compile_ms > 0  # type: ignore[attr-defined]


def test_boundary_time_is_the_reorders_at_a_one_kernel_models_edges():
    """A lone convolution pays OpenVINO's NCHW -> blocked reorder at its input and back at its output: the kernel
    sweep subtracts that time, as it does onnxruntime's (without it, OpenVINO's unit sums over-predicted whole
    models 2-3x on 1x1- and depthwise-heavy nets)."""
    weight = helper.make_tensor("w", TensorProto.FLOAT, [32, 64, 1, 1], np.ones(32 * 64, dtype=np.float32))
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["y"])],
        "conv",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64, 28, 28])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 32, 28, 28])],
        [weight],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    session = get_backend("openvino").prepare(model, threads=1)
    feeds = {"x": np.ones((1, 64, 28, 28), dtype=np.float32)}
    assert boundary_ms(session, feeds, runs=3) > 0
    relu = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])],
        "relu",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64])],
    )
    plain = get_backend("openvino").prepare(helper.make_model(relu, opset_imports=[helper.make_opsetid("", 17)]))
    assert boundary_ms(plain, {"x": np.ones((1, 64), dtype=np.float32)}, runs=3) == 0


def test_bf16_is_its_own_precision_where_the_cpu_has_it():
    model = get_model("mlp")
    backend = get_backend("openvino")
    if not cpu_has_bf16():
        with pytest.raises(BackendSkipped, match="not bf16"):
            backend.prepare(model.model(), precision="bf16")
        return
    feeds = model.feeds(batch=4)
    got = backend.prepare(model.model(), precision="bf16").run(feeds)[0]
    want = get_backend("onnxruntime").prepare(model.model()).run(feeds)[0]
    error = np.abs(got - want).max()
    assert 0 < error < 0.1 * np.abs(want).max()  # bf16 really ran: not bit-exact, still close


def test_rows_carry_compile_time_and_max_error_and_unrunnable_models_are_skipped():
    with pytest.raises(BackendSkipped, match="openvino cannot compile"):
        get_backend("openvino").prepare(unrunnable_model())
    assert "vs onnxruntime" in mlp_row("openvino", "onnxruntime", "openvino")["notes"]


def test_sessions_released_in_any_order_leave_signal_handling_intact():
    """Sessions released first-made-first (the garbage collector's order) once left the thread on a signal stack
    OpenVINO had unmapped: the next Python signal handler (a SIGALRM time limit in the conformance tests) killed the
    whole test run with SIGSEGV and no traceback. In a child process, so a regression fails this test alone."""
    code = textwrap.dedent(
        """
        import gc, signal, time
        from benchmarks.backends import get_backend
        from benchmarks.models import get_model
        model = get_model("mlp")
        first = get_backend("openvino").prepare(model.model(), threads=1)
        second = get_backend("openvino").prepare(model.model(), threads=1)
        del first
        gc.collect()
        del second
        gc.collect()
        fired = []
        signal.signal(signal.SIGALRM, lambda signum, frame: fired.append(signum))
        for _ in range(3):
            signal.setitimer(signal.ITIMER_REAL, 0.01)
            time.sleep(0.05)
        print("alarms", len(fired))
        """
    )
    root = Path(__file__).resolve().parents[2]
    env = dict(os.environ, PYTHONPATH=str(root))
    done = subprocess.run([sys.executable, "-X", "faulthandler", "-c", code], capture_output=True, text=True,
                          env=env, timeout=300)  # fmt: skip
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
    assert done.stdout.split()[-2:] == ["alarms", "3"]
