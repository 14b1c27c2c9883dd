"""The ONNX backend node suite: what passes keeps passing; the judge really judges; function bodies run.

``conformance_expected.txt`` lists the cases that passed when it was generated
(``python -m benchmarks.conformance --json FILE``); a case dropping out of it fails here.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path

import numpy as np
import pytest

from benchmarks.conformance import CaseTimeout, case_ops, load_cases, main, per_op_table, run_conformance, time_limit
from runtime.kernels.base import REGISTRY

EXPECTED = Path(__file__).with_name("conformance_expected.txt")
LIGHT_MODEL_OPS = [
    "AveragePool", "BatchNormalization", "Concat", "ConstantOfShape", "Conv", "Dropout", "Gemm",
    "GlobalAveragePool", "LRN", "MaxPool", "Mul", "Add", "Relu", "Reshape", "Softmax", "Sum", "Transpose",
    "Unsqueeze",
]  # fmt: skip


def _expected_names() -> list[str]:
    return [line.strip() for line in EXPECTED.read_text().splitlines() if line.strip() and not line.startswith("#")]


@pytest.mark.slow
def test_every_expected_case_still_passes() -> None:
    names = _expected_names()
    assert len(names) >= 1500
    results = run_conformance(names=names)
    assert len(results) == len(names), "some expected cases no longer exist in this onnx version"
    failures = [f"{r.name}: {r.reason}" for r in results if not r.passed]
    assert failures == []


def test_ops_used_by_the_light_models_pass_all_their_cases() -> None:
    results = run_conformance(ops=LIGHT_MODEL_OPS)
    assert {r.op for r in results} == set(LIGHT_MODEL_OPS)
    assert [f"{r.name}: {r.reason}" for r in results if not r.passed] == []


def test_the_judge_catches_a_wrong_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    relu = REGISTRY[("", "Relu")]
    for cls in relu.values():
        monkeypatch.setattr(cls, "compute", lambda self, x: np.abs(x))
    results = [r for r in run_conformance(ops=["Relu"]) if "expanded" not in r.name]  # expanded: no Relu node
    assert results and all(not r.passed and r.reason.startswith("mismatch") for r in results)


def test_unsupported_ops_are_failures_with_the_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(REGISTRY, ("", "Erf"))  # Erf has no function body
    results = run_conformance(ops=["Erf"])
    assert results and all(r.reason.startswith("unsupported:") and "'Erf'" in r.reason for r in results)
    assert per_op_table(results)[0][:3] == ("Erf", 0, len(results))


#: Ops whose kernels are removed so that the runtime must expand their ONNX function bodies instead.
FUNCTION_OPS = [
    "Celu", "Elu", "Gelu", "HardSigmoid", "HardSwish", "LayerNormalization", "LeakyRelu", "LogSoftmax", "Mish",
    "NegativeLogLikelihoodLoss", "PRelu", "Selu", "Shrink", "Softmax", "SoftmaxCrossEntropyLoss", "Softplus",
    "Softsign", "ThresholdedRelu", "GroupNormalization", "MeanVarianceNormalization", "SequenceMap",
    "Attention", "RotaryEmbedding",
]  # fmt: skip


def test_ops_run_through_their_schema_function_bodies(monkeypatch: pytest.MonkeyPatch) -> None:
    for op in FUNCTION_OPS:
        if ("", op) in REGISTRY:
            monkeypatch.delitem(REGISTRY, ("", op))
    results = run_conformance(ops=FUNCTION_OPS)
    assert len({r.op for r in results}) >= len(FUNCTION_OPS) - 2
    assert [f"{r.name}: {r.reason}" for r in results if not r.passed] == []


def test_random_op_cases_are_judged_on_shape_only() -> None:
    results = run_conformance(ops=["Bernoulli"])
    assert results and all(r.shape_only and r.passed for r in results)


def test_expanded_cases_belong_to_their_op() -> None:
    ops = case_ops(load_cases())
    assert ops["test_softmax_axis_0_expanded"] == "Softmax"
    assert ops["test_relu"] == "Relu"


def test_cli_prints_the_closing_line_last(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["--ops", "Relu,Neg", "--json", str(tmp_path / "r.json")]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[-1] == "4 passed, 0 failed"
    assert any(line.startswith("Relu") for line in lines)
    assert (tmp_path / "r.json").read_text().count('"passed": true') == 4


def test_a_case_time_limit_stops_the_case_and_gives_back_an_alarm_already_set() -> None:
    """The case limit uses SIGALRM, as pytest-timeout does: the outer alarm must survive it, with its time left."""
    fired: list[int] = []
    previous = signal.signal(signal.SIGALRM, lambda signum, frame: fired.append(signum))
    try:
        signal.setitimer(signal.ITIMER_REAL, 30.0)
        with pytest.raises(CaseTimeout), time_limit(0.05):
            time.sleep(5)
        left, _ = signal.getitimer(signal.ITIMER_REAL)
        assert 29.0 < left <= 30.0
        assert signal.getsignal(signal.SIGALRM) is not None and not fired

        signal.setitimer(signal.ITIMER_REAL, 0.05)
        with time_limit(10):
            time.sleep(0.1)  # the outer alarm's time runs out inside the case's limit
        time.sleep(0.05)
        assert fired == [signal.SIGALRM]
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
