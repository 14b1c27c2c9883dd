"""The Trainer: optimisers against NumPy references, gradient accumulation, losses, frozen weights, errors."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from runtime import compile_model
from runtime.training import TrainConfig, Trainer, TrainingError, train
from runtime.training.models import digits_cnn
from tests.runtime.training.helpers import digits, mlp


def _regression(n: int = 16) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(1)
    x = rng.standard_normal((n, 4)).astype(np.float32)
    return x, (x @ rng.standard_normal((4, 3)) + 0.5).astype(np.float32)


def _reference(optimizer: str, steps: int, lr: float, wd: float) -> dict[str, np.ndarray]:
    """Full-batch MSE on ``x @ W + b`` with the optimiser written out in NumPy (float64)."""
    x, t = (a.astype(np.float64) for a in _regression())
    init = {i.name: onnx.numpy_helper.to_array(i).astype(np.float64) for i in mlp((4, 3)).graph.initializer}
    p = {"w0": init["w0"], "b0": init["b0"]}
    state = {k: [np.zeros_like(v), np.zeros_like(v)] for k, v in p.items()}
    for step in range(1, steps + 1):
        dpred = 2 * (x @ p["w0"] + p["b0"] - t) / t.size
        grads = {"w0": x.T @ dpred, "b0": dpred.sum(axis=0)}
        for k, g in grads.items():
            g = g + wd * p[k]
            m, v = state[k]
            if optimizer == "sgd":
                m[:] = 0.9 * m + g if step > 1 else g
                p[k] = p[k] - lr * m
            else:
                m[:] = 0.9 * m + 0.1 * g
                v[:] = 0.999 * v + 0.001 * g * g
                rate = lr * np.sqrt(1 - 0.999**step) / (1 - 0.9**step)
                p[k] = p[k] - rate * m / (np.sqrt(v) + 1e-8)
    return p


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_optimisers_match_numpy_reference(optimizer: str) -> None:
    x, t = _regression()
    trainer = train(
        mlp((4, 3)), x, t, epochs=3, batch_size=16, lr=0.05, optimizer=optimizer, loss="mse", weight_decay=0.01
    )
    expected = _reference(optimizer, 3, 0.05, 0.01)
    for name in ("w0", "b0"):
        np.testing.assert_allclose(trainer.params[name], expected[name], rtol=1e-5, atol=1e-6)
    assert trainer.optimizer.steps == 3 and [h.steps for h in trainer.history] == [1, 1, 1]


def test_mse_training_reduces_the_loss() -> None:
    x, t = _regression(64)
    trainer = train(mlp((4, 3)), x, t, epochs=20, batch_size=16, lr=0.05, loss="mse")
    assert trainer.history[-1].loss < 0.05 * trainer.history[0].loss
    assert trainer.evaluate(x, t)["loss"] == pytest.approx(np.mean((trainer.predict(x) - t) ** 2), rel=1e-6)


def test_gradient_accumulation_equals_the_larger_batch() -> None:
    data = digits()
    x, y = data.x_train[:64], data.y_train[:64]
    big = train(mlp(), x, y, epochs=1, batch_size=16, lr=0.1)
    accumulated = train(mlp(), x, y, epochs=1, batch_size=8, accumulation_steps=2, lr=0.1)
    assert big.optimizer.steps == accumulated.optimizer.steps == 4
    for name in big.params:
        np.testing.assert_allclose(accumulated.params[name], big.params[name], rtol=1e-5, atol=1e-6)
    single = train(mlp(), x, y, epochs=1, batch_size=8, lr=0.1)
    assert not np.allclose(single.params["w0"], big.params["w0"])


def test_softmax_model_trains_on_logits_and_exports_probabilities() -> None:
    data = digits()
    trainer = train(mlp(softmax=True), data.x_train, data.y_train, epochs=4, batch_size=32, lr=0.1)
    assert trainer.graph.loss.output_kind == "probabilities"
    loss_node = next(n for n in trainer.graph.program.model.graph.nodes if n.op_type == "SoftmaxCrossEntropyLoss")
    assert loss_node.inputs[0] == "h1"  # the Softmax's input, not the probabilities
    probs = trainer.predict(data.x_test)
    np.testing.assert_allclose(probs.sum(axis=1), 1.0, rtol=1e-5)
    assert trainer.evaluate(data.x_test, data.y_test)["accuracy"] > 0.9


def test_only_the_trainable_subset_changes() -> None:
    data = digits()
    trainer = Trainer(mlp(), TrainConfig(epochs=1, trainable=["w1", "b1"], lr=0.1))
    trainer.fit(data.x_train[:64], data.y_train[:64])
    assert set(trainer.params) == {"w1", "b1"}
    assert trainer.graph.frozen == ["b0", "w0"]
    exported = {i.name: onnx.numpy_helper.to_array(i) for i in trainer.export().graph.initializer}
    original = {i.name: onnx.numpy_helper.to_array(i) for i in mlp().graph.initializer}
    assert np.array_equal(exported["w0"], original["w0"]) and not np.array_equal(exported["w1"], original["w1"])


def test_dropout_is_seeded_and_reproducible() -> None:
    data = digits()
    x, y = data.x_train[:64], data.y_train[:64]
    a = train(mlp(dropout=0.5), x, y, epochs=1, batch_size=16, seed=3)
    b = train(mlp(dropout=0.5), x, y, epochs=1, batch_size=16, seed=3)
    c = train(mlp(dropout=0.5), x, y, epochs=1, batch_size=16, seed=4)
    assert a.graph.dropout_seed is not None
    np.testing.assert_array_equal(a.params["w0"], b.params["w0"])
    assert not np.array_equal(a.params["w0"], c.params["w0"])
    # exported: Dropout is back to the identity of inference
    exe = compile_model(a.export())
    np.testing.assert_array_equal(exe.run({"input": x})["output"], exe.run({"input": x})["output"])


def test_batchnorm_running_statistics_are_trained_and_exported() -> None:
    data = digits()
    trainer = train(digits_cnn(0), data.x_train[:128], data.y_train[:128], epochs=1, batch_size=32, lr=0.05)
    assert set(trainer.buffers) == {"bn1.mean", "bn1.var"}
    assert np.abs(trainer.buffers["bn1.mean"]).max() > 1e-3 and not np.allclose(trainer.buffers["bn1.var"], 1.0)
    exported = {i.name: onnx.numpy_helper.to_array(i) for i in trainer.export().graph.initializer}
    np.testing.assert_array_equal(exported["bn1.mean"], trainer.buffers["bn1.mean"])


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"epochs": -1}, "epochs"),
        ({"optimizer": "rmsprop"}, "optimizer must be one of sgd, adam"),
        ({"precision": "int8"}, "precision"),
        ({"accumulation_steps": 0}, "accumulation_steps"),
        ({"trainable": ["nope"]}, "'nope' is not a float initializer"),
        ({"output": "nope"}, "output 'nope' is not a model output"),
    ],
)
def test_bad_settings_name_the_field(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(TrainingError, match=message):
        Trainer(mlp(), TrainConfig(**kwargs))  # type: ignore[arg-type]


def test_bad_data_is_a_clear_error() -> None:
    trainer = Trainer(mlp(), TrainConfig(epochs=1))
    with pytest.raises(TrainingError, match="labels must be integer"):
        trainer.fit(np.zeros((4, 64), np.float32), np.zeros(4, np.float32))
    with pytest.raises(TrainingError, match=r"samples have shape \[65\]"):
        trainer.fit(np.zeros((4, 65), np.float32), np.zeros(4, np.int64))
    with pytest.raises(TrainingError, match="4 targets"):
        trainer.fit(np.zeros((5, 64), np.float32), np.zeros(4, np.int64))


def test_weights_kept_in_the_staged_buffers_train_as_copied_ones() -> None:
    """The trainer keeps its weights in the executable's staged input buffers (no copy per step); the trajectory
    is that of a trainer whose weights are copied in every step, also across a batch of another size."""
    data = digits()
    config = TrainConfig(epochs=1, batch_size=50, lr=0.1, optimizer="sgd", momentum=0.9, threads=1)
    kept, copied = Trainer(mlp(), config), Trainer(mlp(), config)
    copied.exe.input_buffers = lambda feeds: {}  # type: ignore[method-assign]  # never finds a buffer to keep
    for start in (0, 50, 100, 150, 200, 230):  # the last batch, of 20, runs another plan
        batch = slice(start, start + (20 if start == 230 else 50))
        for trainer in (kept, copied):
            trainer.train_step({"input": data.x_train[batch]}, data.y_train[batch])
    feeds = {"input": data.x_train[:50], kept.graph.loss.target: data.y_train[:50], **kept.params}
    feeds[kept.graph.program.seed] = np.asarray(1.0, dtype=np.float32)
    staged = kept.exe.input_buffers(feeds)
    assert all(kept.params[name] is staged[name] for name in kept.params)
    for name, value in kept.params.items():
        np.testing.assert_array_equal(value, copied.params[name])
