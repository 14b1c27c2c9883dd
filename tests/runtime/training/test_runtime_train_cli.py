"""``python -m runtime train``: what a training image runs (arrays from .npz, checkpoints, resume, one-line errors)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest

from runtime import compile_model

ROOT = Path(__file__).resolve().parents[3]
MLP = ROOT / "examples" / "digits_mlp.onnx"


def _separable_npz(path: Path, n: int = 400) -> Path:
    """Ten classes a linear model separates: class k lights up inputs 6k..6k+5 (plus noise)."""
    rng = np.random.default_rng(0)
    y = rng.integers(0, 10, size=n)
    x = rng.normal(0, 0.1, size=(n, 64)).astype(np.float32)
    for k in range(10):
        x[y == k, 6 * k : 6 * k + 6] += 1.0
    np.savez(path, x=x, y=y.astype(np.int64))
    return path


def _train(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "runtime", "train", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )


def test_trains_writes_the_model_and_resumes_from_its_checkpoint(tmp_path: Path) -> None:
    data = _separable_npz(tmp_path / "data.npz")
    out, checkpoints = tmp_path / "trained.onnx", tmp_path / "ck"
    common = [str(MLP), "--data", str(data), "-o", str(out), "--checkpoint", str(checkpoints), "--resume"]
    first = _train(tmp_path, *common, "--epochs", "2", "--optimizer", "adam", "--lr", "0.01")
    assert first.returncode == 0, first.stderr
    assert first.stdout.splitlines()[0].startswith("epoch 1/2  loss ")
    assert "wrote" in first.stdout and out.exists()
    # a second run of the same job (a preempted batch job starting again) continues where the first stopped
    second = _train(tmp_path, *common, "--epochs", "4", "--optimizer", "adam", "--lr", "0.01")
    assert second.returncode == 0, second.stderr
    assert second.stdout.splitlines()[0] == f"resumed from {checkpoints} at epoch 2"
    assert [line.split()[1] for line in second.stdout.splitlines()[1:3]] == ["3/4", "4/4"]
    accuracy = float(second.stdout.strip().rsplit("test accuracy ", 1)[1].rstrip("%)"))
    assert accuracy > 90.0
    trained = compile_model(onnx.load(out))  # the written model runs as an ordinary inference model
    assert trained.run({"input": np.zeros((1, 64), np.float32)})["probabilities"].shape == (1, 10)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--data", "missing.npz"], "error: data file 'missing.npz' does not exist"),
        (["--data", "DATA", "--resume"], "error: --resume needs --checkpoint DIR"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path: Path, args: list[str], message: str) -> None:
    data = _separable_npz(tmp_path / "data.npz")
    args = [str(data) if a == "DATA" else a for a in args]
    done = _train(tmp_path, str(MLP), *args, "-o", str(tmp_path / "t.onnx"), "--epochs", "1")
    assert done.returncode == 2
    assert done.stderr.strip() == message
    assert not (tmp_path / "t.onnx").exists()
