"""The keras and keras-xla trainers: the same weights and batches as PyTorch eager give the same steps."""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks.trainers import SharedModel, get_trainer
from benchmarks.training_suite import TASK_NAMES, get_task

tf = pytest.importorskip("tensorflow", reason="tensorflow: extra not installed")
torch = pytest.importorskip("torch", reason="torch: extra not installed")

from benchmarks.trainers.keras import ThreadsFixed, pin_threads  # noqa: E402

STEPS = 4  # the last loss follows three updates


def _steps(trainer: str, shared: SharedModel, task_name: str, batch: int) -> tuple[list[float], object]:
    task = get_task(task_name)
    data = task.data(0)
    session = get_trainer(trainer).session(shared, task.lr, 1, batch, 0)
    losses = [
        session.step(data.x_train[i * batch : (i + 1) * batch], data.y_train[i * batch : (i + 1) * batch])
        for i in range(STEPS)
    ]
    return losses, session


@pytest.mark.parametrize("trainer", ["keras", "keras-xla"])
@pytest.mark.parametrize(
    ("name", "batch"), [("digits_mlp", 16), ("digits_cnn", 16), ("resnet8", 4), ("transformer_tiny", 8)]
)
def test_keras_takes_torchs_steps_from_the_same_weights(trainer: str, name: str, batch: int) -> None:
    task = get_task(name)
    shared = SharedModel(task.build(0), task.data(0).x_train[:2])
    expected, torch_session = _steps("torch", shared, name, batch)
    got, session = _steps(trainer, shared, name, batch)
    assert got == pytest.approx(expected, rel=1e-4)
    assert len(set(got)) == STEPS  # the weights moved
    # trained weights and BatchNorm's running statistics match torch's (ONNX initializers are named after them)
    state = {k: v.detach().numpy() for k, v in torch_session.module.state_dict().items()}  # type: ignore[attr-defined]
    values = session.graph.values()  # type: ignore[attr-defined]
    shared_names = set(state) & set(values)
    assert len(shared_names) >= len(values) // 2
    for key in shared_names:
        np.testing.assert_allclose(values[key], state[key], rtol=1e-3, atol=1e-5, err_msg=key)
    params = sum(p.numel() for p in torch_session.module.parameters())  # type: ignore[attr-defined]
    assert session.optimizer_state_bytes() == 4 * params  # type: ignore[attr-defined]


def test_every_suite_model_runs_in_tensorflow_as_in_torch() -> None:
    """Each task's export (ResNet-50, MobileNetV2's depthwise convs, BERT-like's embeddings...) builds and its
    inference output matches PyTorch's; accuracy reads that output."""
    pin_threads(1)
    from runtime.training.tf_module import OnnxTfGraph

    for name in TASK_NAMES:
        task = get_task(name)
        data = task.data(0)
        shared = SharedModel(task.build(0), data.x_train[:2])
        import onnx

        graph = OnnxTfGraph(onnx.load_from_string(shared.onnx_bytes()))
        x = data.x_test[:3]
        got = graph([tf.constant(x)])[graph.output_names[0]].numpy()
        module = shared.fresh_module().eval()
        with torch.no_grad():
            expected = module(torch.from_numpy(x)).numpy()
        np.testing.assert_allclose(got, expected, rtol=1e-3, atol=1e-4, err_msg=name)


def test_a_second_thread_count_in_one_process_is_refused_with_the_reason() -> None:
    task = get_task("digits_mlp")
    shared = SharedModel(task.build(0), task.data(0).x_train[:2])
    get_trainer("keras").session(shared, task.lr, 1, 16, 0)
    with pytest.raises(ThreadsFixed, match=r"2 thread\(s\) need a process of their own"):
        pin_threads(2)
    assert get_trainer("keras").versions()["tensorflow"] == tf.__version__


@pytest.mark.slow
def test_the_driver_runs_each_thread_count_in_a_process_of_its_own() -> None:
    from benchmarks import training_bench
    from benchmarks.training_bench import close_workers, measure

    task = get_task("digits_mlp")
    try:
        runs = [measure(task, get_trainer("keras-xla"), 32, n, 0, epochs=1, max_steps=6) for n in (2, 1)]
        assert set(training_bench._WORKERS) == {1, 2}
    finally:
        close_workers()
    assert not training_bench._WORKERS
    for run in runs:
        assert len(run.step_ms) == 4 and all(ms > 0 for ms in run.step_ms)
        assert 0.0 <= run.final_accuracy <= 1.0
        assert run.optimizer_state_bytes == 4 * (64 * 128 + 128 + 128 * 128 + 128 + 128 * 10 + 10)
