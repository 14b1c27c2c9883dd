"""Real data: the digits CNN trained by the runtime, exported, and run in inference unchanged (also by onnxruntime).

Figures from these runs (fp32 vs AMP accuracy, time per epoch) are what benchmarks/train_vs_torch.py reports.
"""

from __future__ import annotations

from functools import cache

import numpy as np
import onnx
import pytest

from runtime import compile_model
from runtime.training import TrainConfig, Trainer
from runtime.training.models import digits_cnn
from tests.runtime.training.helpers import digits

EPOCHS = 10


@cache
def _trained(precision: str, opset: int = 17) -> tuple[Trainer, float]:
    data = digits()
    config = TrainConfig(epochs=EPOCHS, batch_size=32, lr=0.05, precision=precision, threads=1)
    trainer = Trainer(digits_cnn(0, opset=opset), config)
    trainer.fit(data.x_train, data.y_train)
    return trainer, trainer.evaluate(data.x_test, data.y_test)["accuracy"]


@pytest.mark.slow
def test_cnn_reaches_97_percent_on_digits() -> None:
    trainer, acc = _trained("fp32")
    assert acc >= 0.97, f"test accuracy {acc:.4f}"
    assert trainer.history[-1].loss < 0.1 * trainer.history[0].loss


@pytest.mark.slow
def test_export_round_trip_runs_unchanged_here_and_in_onnxruntime() -> None:
    ort = pytest.importorskip("onnxruntime", reason="onnxruntime is the peer these tests compare with (a test extra)")
    trainer, _ = _trained("fp32")
    exported = trainer.export()
    onnx.checker.check_model(exported)
    original = digits_cnn(0)
    assert [n.op_type for n in exported.graph.node] == [n.op_type for n in original.graph.node]
    assert [i.name for i in exported.graph.initializer] == [i.name for i in original.graph.initializer]
    x = digits().x_test.reshape(-1, 1, 8, 8)
    ours = compile_model(onnx.load_from_string(exported.SerializeToString())).run({"image": x})["logits"]
    theirs = ort.InferenceSession(exported.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, {"image": x}
    )[0]
    np.testing.assert_allclose(ours, theirs, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(ours, trainer.predict(digits().x_test), rtol=1e-6)
    assert (ours.argmax(1) == digits().y_test).mean() >= 0.97


@pytest.mark.slow
@pytest.mark.parametrize(("precision", "opset"), [("fp16", 17), ("bf16", 22)])
def test_mixed_precision_matches_fp32_accuracy(precision: str, opset: int) -> None:
    _, fp32 = _trained("fp32")
    trainer, acc = _trained(precision, opset)
    assert trainer.graph.amp is not None and len(trainer.graph.amp.low_nodes) == 4  # both convs and both FCs
    assert acc >= 0.96 and abs(acc - fp32) <= 0.015, f"{precision} {acc:.4f} vs fp32 {fp32:.4f}"
