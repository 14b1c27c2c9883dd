"""``--engine tensorflow`` / ``tensorflow-xla``: an ONNX model trained in TensorFlow (what a TensorFlow training
plan's image runs by default)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest

from runtime import compile_model
from runtime.training import TrainConfig, TrainingError
from runtime.training.data import load_npz
from runtime.training.models import digits_cnn
from tests.runtime.training.test_runtime_train_cli import MLP, ROOT, _separable_npz

pytest.importorskip("tensorflow", reason="tensorflow: extra not installed")

from runtime.training.tf_trainer import TfTrainer


@pytest.mark.parametrize("xla", [False, True])
def test_trains_the_mlp_and_exports_the_trained_weights_into_the_same_model(tmp_path: Path, xla: bool) -> None:
    data = load_npz(_separable_npz(tmp_path / "data.npz"))
    assert data.x_test is not None and data.y_test is not None
    trainer = TfTrainer(str(MLP), TrainConfig(epochs=3, batch_size=32, lr=0.05, threads=1), jit_compile=xla)
    history = trainer.fit(data.x_train, data.y_train, validation=(data.x_test, data.y_test))
    assert [h.epoch for h in history] == [1, 2, 3]
    assert history[-1].loss < history[0].loss
    assert history[-1].val_accuracy is not None and history[-1].val_accuracy > 0.9
    exported = trainer.export()
    assert [n.op_type for n in exported.graph.node] == [n.op_type for n in onnx.load(MLP).graph.node]
    # the exported model, run by our own executor, scores as the trained TensorFlow graph did
    probabilities = compile_model(exported).run({"input": data.x_test})["probabilities"]
    accuracy = float((probabilities.argmax(axis=1) == data.y_test).mean())
    assert accuracy == pytest.approx(trainer.evaluate(data.x_test, data.y_test)["accuracy"])


def test_adam_trains_and_batch_norm_running_statistics_are_exported() -> None:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((64, 1, 8, 8)).astype(np.float32) * 3 + 2
    y = rng.integers(0, 10, 64)
    config = TrainConfig(epochs=2, batch_size=16, optimizer="adam", lr=1e-3, threads=1)
    trainer = TfTrainer(digits_cnn(0).SerializeToString(), config)
    history = trainer.fit(x, y)
    assert history[-1].loss < history[0].loss
    values = trainer.graph.values()
    assert not np.allclose(values["bn1.mean"], 0.0) and not np.allclose(values["bn1.var"], 1.0)


def test_what_it_does_not_train_is_refused_in_one_line() -> None:
    with pytest.raises(TrainingError, match="--engine tensorflow: --precision bf16: it trains fp32 only"):
        TfTrainer(str(MLP), TrainConfig(precision="bf16"))
    with pytest.raises(TrainingError, match="labels must be integer class ids"):
        TfTrainer(str(MLP), TrainConfig(epochs=1)).fit(np.zeros((4, 64), np.float32), np.zeros(4, np.float32))


def test_python_m_runtime_train_engine_tensorflow_resumes_from_its_checkpoint(tmp_path: Path) -> None:
    data = _separable_npz(tmp_path / "data.npz")
    out, checkpoints = tmp_path / "trained.onnx", tmp_path / "ck"
    common = ["--data", str(data), "-o", str(out), "--checkpoint", str(checkpoints), "--resume"]

    def train(epochs: int) -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, "-m", "runtime", "train", str(MLP), *common, "--epochs", str(epochs), "--threads", "1",
                "--engine", "tensorflow"]  # fmt: skip
        return subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, check=False, timeout=300)

    first = train(2)
    assert first.returncode == 0, first.stderr
    assert first.stdout.splitlines()[0].startswith("epoch 1/2  loss ")
    assert (checkpoints / "tf-checkpoint.npz").is_file() and out.is_file()
    second = train(3)
    assert second.returncode == 0, second.stderr
    assert second.stdout.splitlines()[0] == f"resumed from {checkpoints} at epoch 2"
    assert second.stdout.splitlines()[1].startswith("epoch 3/3  loss ")
    assert "test accuracy" in second.stdout


def test_a_checkpoint_of_another_optimizer_or_model_is_refused_in_one_line(tmp_path: Path) -> None:
    data = load_npz(_separable_npz(tmp_path / "data.npz", n=64))
    sgd = TrainConfig(epochs=1, batch_size=32, checkpoint_dir=str(tmp_path / "ck"))
    TfTrainer(str(MLP), sgd).fit(data.x_train, data.y_train)
    adam = TrainConfig(epochs=2, batch_size=32, optimizer="adam", lr=1e-3, checkpoint_dir=str(tmp_path / "ck"))
    with pytest.raises(TrainingError, match="was made with optimizer 'sgd', not 'adam'"):
        TfTrainer(str(MLP), adam, resume=True)
    other = TrainConfig(epochs=2, batch_size=16, checkpoint_dir=str(tmp_path / "ck"))
    with pytest.raises(TrainingError, match="does not fit this model: its tensors differ"):
        TfTrainer(digits_cnn(0).SerializeToString(), other, resume=True)


def test_what_tensorflow_fails_at_is_one_line(tmp_path: Path) -> None:
    """An op XLA cannot compile (or memory running out) fails the step with TensorFlow's error: the trainer says its
    first line, not TensorFlow's traceback."""
    import tensorflow as tf

    data = load_npz(_separable_npz(tmp_path / "data.npz", n=64))
    trainer = TfTrainer(str(MLP), TrainConfig(epochs=1, batch_size=32, threads=1), jit_compile=True)

    def unsupported(*_args: object) -> None:
        raise tf.errors.InvalidArgumentError(None, None, "Detected unsupported operations when compiling\nStack...")

    trainer._train = unsupported
    message = r"^--engine tensorflow-xla: TensorFlow failed: Detected unsupported operations when compiling$"
    with pytest.raises(TrainingError, match=message):
        trainer.fit(data.x_train, data.y_train)
