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
#: Batch orders the accuracy is judged over (the median): at lr 0.05 with momentum one order's trajectory can hit
#: a loss spike that float32 rounding alone decides (seed 0 ends at 94.7% with the compiled convolutions, 98.3% with
#: NumPy's, their outputs equal to 6e-7; docs/decisions.md), so a single order judges the rounding, not the training.
SEEDS = (0, 1, 2)


@cache
def _trained(precision: str, opset: int = 17, seed: int = 0) -> tuple[Trainer, float]:
    data = digits()
    config = TrainConfig(epochs=EPOCHS, batch_size=32, lr=0.05, precision=precision, threads=1, seed=seed)
    trainer = Trainer(digits_cnn(0, opset=opset), config)
    trainer.fit(data.x_train, data.y_train)
    return trainer, trainer.evaluate(data.x_test, data.y_test)["accuracy"]


def _median_accuracy(precision: str, opset: int = 17) -> float:
    return float(np.median([_trained(precision, opset, seed)[1] for seed in SEEDS]))


@pytest.mark.slow
def test_cnn_reaches_97_percent_on_digits() -> None:
    acc = _median_accuracy("fp32")
    assert acc >= 0.97, f"median test accuracy {acc:.4f}"
    for seed in SEEDS:
        trainer = _trained("fp32", 17, seed)[0]
        assert trainer.history[-1].loss < 0.1 * trainer.history[0].loss


@pytest.mark.slow
def test_export_round_trip_runs_unchanged_here_and_in_onnxruntime() -> None:
    ort = pytest.importorskip("onnxruntime", reason="onnxruntime: extra not installed (the peer compared with)")
    trainer, accuracy = _trained("fp32")
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
    assert (ours.argmax(1) == digits().y_test).mean() == pytest.approx(accuracy)


@pytest.mark.slow
@pytest.mark.parametrize(("precision", "opset"), [("fp16", 17), ("bf16", 22)])
def test_mixed_precision_matches_fp32_accuracy(precision: str, opset: int) -> None:
    fp32 = _median_accuracy("fp32")
    trainer, _ = _trained(precision, opset)
    assert trainer.graph.amp is not None and len(trainer.graph.amp.low_nodes) == 4  # both convs and both FCs
    acc = _median_accuracy(precision, opset)
    assert acc >= 0.96 and abs(acc - fp32) <= 0.015, f"{precision} median {acc:.4f} vs fp32 {fp32:.4f}"
