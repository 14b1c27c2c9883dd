"""``python -m runtime run --engine onnxruntime``: the runner an onnxruntime plan's image uses."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from runtime import RuntimeModelError
from runtime.engine_onnxruntime import OnnxRuntimeRunner
from runtime.tools import build_feeds, format_run, run_model

pytest.importorskip("onnxruntime", reason="onnxruntime: extra not installed (the peer compared with)")

ROOT = Path(__file__).resolve().parents[2]
MLP = ROOT / "examples" / "digits_mlp.onnx"


def test_onnxruntime_and_this_runtime_give_the_same_outputs_on_the_same_feeds() -> None:
    ours = run_model(MLP, random=True, engine="appopt", seed=3)
    peer = run_model(MLP, random=True, engine="onnxruntime", seed=3, repeat=3)
    assert peer.engine.startswith("onnxruntime (") and "CPUExecutionProvider" in peer.engine
    assert len(peer.latencies_s) == 3
    for a, b in zip(ours.outputs, peer.outputs, strict=True):
        assert (a.name, a.dtype, a.shape) == (b.name, b.dtype, b.shape)
        assert a.mean == pytest.approx(b.mean, rel=1e-5) and a.max == pytest.approx(b.max, rel=1e-4)
    assert "engine: onnxruntime (CPUExecutionProvider)" in format_run(peer)[0]


def test_the_runner_declares_the_models_inputs_for_random_feeds() -> None:
    runner = OnnxRuntimeRunner(MLP, threads=1)
    feeds, where = build_feeds(runner, {}, random=True)
    assert runner.input_names == ["input"] and feeds["input"].shape == (1, 64)
    assert where["input"] == "random float32[1, 64]"
    out = runner.run(feeds)
    assert list(out) == runner.output_names and np.isclose(out["probabilities"].sum(), 1.0, rtol=1e-5)


def test_engine_errors_are_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(RuntimeModelError,
                       match=r"--engine must be one of appopt, onnxruntime, openvino, tvm, iree, jax, not "):
        run_model(MLP, random=True, engine="nope")
    with pytest.raises(RuntimeModelError, match="--profile times this runtime's nodes"):
        run_model(MLP, random=True, engine="onnxruntime", profile=True)
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"not a model")
    with pytest.raises(RuntimeModelError, match=r"^onnxruntime cannot load .*bad\.onnx") as err:
        run_model(bad, random=True, engine="onnxruntime")
    assert "\n" not in str(err.value)
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # as in an image without it
    with pytest.raises(RuntimeModelError, match="the onnxruntime package is not installed"):
        run_model(MLP, random=True, engine="onnxruntime")


def test_the_images_entry_point_takes_the_flag() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "runtime", "run", str(MLP), "--engine", "onnxruntime", "--random", "--repeat", "2"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "engine: onnxruntime" in proc.stdout and "latency over 2 run(s)" in proc.stdout
