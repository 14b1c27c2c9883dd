"""The training suite and its trainer plugins: same initial weights and batches give the same steps everywhere."""

from __future__ import annotations

import importlib.util

import numpy as np
import onnx
import pytest

from benchmarks.trainers import TRAINER_NAMES, SharedModel, get_trainer
from benchmarks.training_suite import TASK_NAMES, digits_data, get_task, synthetic_images, synthetic_tokens

needs_torch = pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="extra not installed")


def test_seeded_synthetic_data_repeats_and_bundled_digits_load():
    a, b = synthetic_images(3, 64), synthetic_images(3, 64)
    assert np.array_equal(a.x_train, b.x_train) and np.array_equal(a.y_test, b.y_test)
    assert not np.array_equal(a.x_train, synthetic_images(4, 64).x_train)
    tokens = synthetic_tokens(0, 32)
    assert tokens.x_train.dtype == np.int64 and set(np.unique(tokens.y_train)) <= {0, 1, 2, 3}
    # the class marker is in every sequence: the task is learnable
    assert all(label in row for row, label in zip(tokens.x_train, tokens.y_train, strict=True))
    digits = digits_data(0)
    assert digits.x_train.shape[1] == 64 and len(digits.y_train) + len(digits.y_test) == 1797


def test_unknown_task_and_trainer_are_refused_with_the_known_names():
    with pytest.raises(KeyError, match="digits_mlp"):
        get_task("nope")
    with pytest.raises(KeyError, match="appopt-runtime"):
        get_trainer("nope")
    assert {"appopt-runtime", "appopt-runtime-amp", "torch", "torch-compile", "keras", "keras-xla"} <= set(
        TRAINER_NAMES
    )
    assert {"digits_mlp", "digits_cnn", "resnet8", "transformer_tiny", "resnet50", "mobilenet_v2", "bert_like"} <= set(
        TASK_NAMES
    )
    full_size = {"resnet50_224", "mobilenet_v2_224", "bert_like_128"}
    assert full_size | {"vgg_small", "densenet_tiny", "vit_tiny", "gru_tiny"} <= set(TASK_NAMES)


def test_keras_without_tensorflow_says_extra_not_installed(monkeypatch):
    find_spec = importlib.util.find_spec
    absent = {"tensorflow"}
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name in absent else find_spec(name, *a))
    assert get_trainer("keras").unavailable() == "tensorflow: extra not installed"
    assert get_trainer("keras-xla").compiler == "xla"


@needs_torch
def test_export_gives_batch_norm_its_own_running_statistics():
    task = get_task("digits_cnn")
    shared = SharedModel(task.build(0), task.data(0).x_train[:2])
    proto = onnx.load_from_string(shared.onnx_bytes())
    names = {t.name for t in proto.graph.initializer}
    assert {"1.running_mean", "1.running_var", "1.weight"} <= names
    assert not [n for n in proto.graph.node if n.op_type == "Identity"]


@needs_torch
@pytest.mark.parametrize(
    "name", ["digits_mlp", "digits_cnn", "transformer_tiny", "gru_tiny", "vit_tiny", "densenet_tiny"]
)
def test_runtime_and_torch_take_the_same_steps_from_the_same_weights(name):
    task = get_task(name)
    data = task.data(0)
    shared = SharedModel(task.build(0), data.x_train[:2])
    losses = {}
    for trainer in ("appopt-runtime", "torch"):
        session = get_trainer(trainer).session(shared, task.lr, 1, 16, 0)
        losses[trainer] = [session.step(data.x_train[i : i + 16], data.y_train[i : i + 16]) for i in (0, 16, 32)]
        assert session.optimizer_state_bytes() > 0
    assert losses["appopt-runtime"] == pytest.approx(losses["torch"], rel=1e-3)
    # the shared module itself is never trained in place
    again = get_trainer("torch").session(shared, task.lr, 1, 16, 0)
    assert again.step(data.x_train[:16], data.y_train[:16]) == pytest.approx(losses["torch"][0], rel=1e-6)


@needs_torch
@pytest.mark.parametrize(
    ("full", "reduced", "sample_shape"),
    [("resnet50_224", "resnet50", (3, 224, 224)), ("mobilenet_v2_224", "mobilenet_v2", (3, 224, 224)),
     ("bert_like_128", "bert_like", (128,))],
)  # fmt: skip
def test_full_size_tasks_train_the_reduced_tasks_models_on_full_size_inputs(full, reduced, sample_shape):
    """The full-size tasks are the same architectures (BERT-like gains only position embeddings) on the inputs plans
    meet, so their rows teach the fit how a step grows with resolution or length, and step time only."""
    big, small = get_task(full), get_task(reduced)
    assert (big.family, big.step_time_only) == (small.family, True)
    assert big.data(0).x_train.shape[1:] == sample_shape
    sizes = [sum(p.numel() for n, p in task.build(0).named_parameters() if n != "position") for task in (big, small)]
    assert sizes[0] == sizes[1]


@needs_torch
def test_torch_nhwc_runs_channels_last_and_takes_torchs_steps():
    """``torch-nhwc`` (PyTorch's NHWC route): the module and its 4-D batches channels-last, the same seeded steps."""
    import torch

    task = get_task("digits_cnn")
    data = task.data(0)
    shared = SharedModel(task.build(0), data.x_train[:2])
    losses = {}
    for name in ("torch", "torch-nhwc"):
        trainer = get_trainer(name)
        session = trainer.session(shared, task.lr, 1, 16, 0)
        losses[trainer.layout] = [session.step(data.x_train[i : i + 16], data.y_train[i : i + 16]) for i in (0, 16)]
        weights = [p for p in session.module.parameters() if p.dim() == 4]
        assert all(w.is_contiguous(memory_format=torch.channels_last) for w in weights) == (trainer.layout == "NHWC")
    assert losses["NHWC"] == pytest.approx(losses["NCHW"], rel=1e-4)
