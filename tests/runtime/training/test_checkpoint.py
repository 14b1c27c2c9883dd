"""Checkpoints: atomic writes, exact resume (end of epoch and mid-epoch, after SIGKILL), refusal of foreign ones."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import runtime.training.checkpoint as checkpoint_module
from runtime.training import TrainConfig, Trainer, TrainingError
from runtime.training.checkpoint import CHECKPOINT_FILE, load_checkpoint, save_checkpoint
from runtime.training.models import digits_cnn
from tests.runtime.training.helpers import digits, mlp

REPO = Path(__file__).resolve().parents[3]


def _assert_same_state(a: Trainer, b: Trainer) -> None:
    for name in a.params:
        np.testing.assert_allclose(a.params[name], b.params[name], rtol=1e-6, atol=1e-7, err_msg=name)
    for name in a.buffers:
        np.testing.assert_allclose(a.buffers[name], b.buffers[name], rtol=1e-6, atol=1e-7, err_msg=name)
    assert a.optimizer.steps == b.optimizer.steps


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_resume_at_an_epoch_boundary_matches_an_uninterrupted_run(tmp_path: Path, precision: str) -> None:
    data = digits()
    x, y = data.x_train[:96], data.y_train[:96]

    def config(epochs: int, directory: Path | None) -> TrainConfig:
        return TrainConfig(
            epochs=epochs,
            batch_size=32,
            lr=0.05,
            precision=precision,
            threads=1,
            checkpoint_dir=None if directory is None else str(directory),
        )

    straight = Trainer(digits_cnn(0), config(2, None))
    straight.fit(x, y)
    first = Trainer(digits_cnn(0), config(1, tmp_path))
    first.fit(x, y)
    resumed = Trainer(digits_cnn(0), config(2, tmp_path), resume=True)
    assert resumed.resumed_from == tmp_path and resumed.epoch == 1 and len(resumed.history) == 1
    resumed.fit(x, y)
    _assert_same_state(straight, resumed)
    if precision == "fp16":
        assert straight.scaler is not None and resumed.scaler is not None
        assert straight.scaler.scale == resumed.scaler.scale and straight.scaler.skipped == resumed.scaler.skipped
    assert [h.epoch for h in resumed.history] == [1, 2]


_CHILD = """
import sys
from runtime.training import TrainConfig, Trainer
from tests.runtime.training.helpers import digits, mlp
data = digits()
config = TrainConfig(epochs=4, batch_size=16, lr=0.01, optimizer="adam", threads=1, checkpoint_dir=sys.argv[1],
                     checkpoint_every_steps=1)
Trainer(mlp(), config, resume=True).fit(data.x_train, data.y_train)
"""


def test_sigkill_mid_epoch_then_resume_matches_an_uninterrupted_run(tmp_path: Path) -> None:
    data = digits()
    env = {**os.environ, "PYTHONPATH": str(REPO), "OPENBLAS_NUM_THREADS": "1"}
    child = subprocess.Popen([sys.executable, "-c", _CHILD, str(tmp_path)], env=env, cwd=REPO)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and child.poll() is None:
            if (tmp_path / CHECKPOINT_FILE).exists() and load_checkpoint(tmp_path)[1]["optimizer_steps"] >= 130:
                break
            time.sleep(0.02)
        assert child.poll() is None, "the child finished before it could be killed"
        child.send_signal(signal.SIGKILL)
        child.wait(30)
    finally:
        if child.poll() is None:
            child.kill()
    _, header = load_checkpoint(tmp_path)  # whatever moment the kill hit, the checkpoint is whole
    assert header["epoch"] >= 1 and 0 < header["optimizer_steps"] < 4 * 90
    config = TrainConfig(epochs=4, batch_size=16, lr=0.01, optimizer="adam", threads=1, checkpoint_dir=str(tmp_path))
    resumed = Trainer(mlp(), config, resume=True)
    assert resumed.optimizer.steps == header["optimizer_steps"]
    resumed.fit(data.x_train, data.y_train)
    straight = Trainer(mlp(), TrainConfig(epochs=4, batch_size=16, lr=0.01, optimizer="adam", threads=1))
    straight.fit(data.x_train, data.y_train)
    _assert_same_state(straight, resumed)


def test_a_failed_save_leaves_the_previous_checkpoint(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    save_checkpoint(tmp_path, {"w": np.ones(3)}, {"step": 1})

    def crash(src: str, dst: str) -> None:
        raise OSError("disk vanished")

    monkeypatch.setattr(checkpoint_module.os, "replace", crash)
    with pytest.raises(OSError, match="disk vanished"):
        save_checkpoint(tmp_path, {"w": np.zeros(3)}, {"step": 2})
    monkeypatch.undo()
    arrays, header = load_checkpoint(tmp_path)
    assert header["step"] == 1 and np.array_equal(arrays["w"], np.ones(3))
    assert sorted(p.name for p in tmp_path.iterdir()) == [CHECKPOINT_FILE]


def test_a_torn_or_missing_checkpoint_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(TrainingError, match="no checkpoint"):
        load_checkpoint(tmp_path)
    save_checkpoint(tmp_path, {"w": np.ones(3)}, {})
    data = (tmp_path / CHECKPOINT_FILE).read_bytes()
    (tmp_path / CHECKPOINT_FILE).write_bytes(data[: len(data) // 2])
    with pytest.raises(TrainingError, match="unreadable"):
        load_checkpoint(tmp_path)


def test_resume_refuses_another_runs_checkpoint(tmp_path: Path) -> None:
    data = digits()
    Trainer(mlp(), TrainConfig(epochs=1, checkpoint_dir=str(tmp_path))).fit(data.x_train[:32], data.y_train[:32])
    with pytest.raises(TrainingError, match=r"another training run.*optimizer"):
        Trainer(mlp(), TrainConfig(epochs=2, optimizer="adam", checkpoint_dir=str(tmp_path)), resume=True)
    with pytest.raises(TrainingError, match=r"another training run.*parameters differ"):
        Trainer(mlp((64, 16, 10)), TrainConfig(epochs=2, checkpoint_dir=str(tmp_path)), resume=True)


def test_mid_epoch_resume_needs_the_same_batch_size(tmp_path: Path) -> None:
    data = digits()
    trainer = Trainer(mlp(), TrainConfig(epochs=1, batch_size=8, checkpoint_dir=str(tmp_path)))
    trainer.train_step({"input": data.x_train[:8]}, data.y_train[:8])
    trainer.batch_in_epoch = 1
    trainer.save_checkpoint()
    with pytest.raises(TrainingError, match="same batch size"):
        Trainer(mlp(), TrainConfig(epochs=1, batch_size=16, checkpoint_dir=str(tmp_path)), resume=True)


def test_resume_without_a_checkpoint_starts_fresh(tmp_path: Path) -> None:
    trainer = Trainer(mlp(), TrainConfig(checkpoint_dir=str(tmp_path / "new")), resume=True)
    assert trainer.resumed_from is None and trainer.epoch == 0
