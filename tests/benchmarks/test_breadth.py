"""The breadth suite (PyTorch exports of families outside the core suite) and its per-family summary."""

from __future__ import annotations

import math

import numpy as np
import pytest

from benchmarks import vs_peers
from benchmarks.models import breadth, suite

ISSUE_FAMILIES = {
    "lstm",
    "gru",
    "seq2seq",
    "vit",
    "bert-masked",
    "unet",
    "yolo",
    "autoencoder",
    "efficientnet",
    "convnext",
    "audio-conv1d",
    "recsys",
}


def test_breadth_is_kept_out_of_the_all_suite() -> None:
    names = {m.name for m in suite("all")}
    assert not names & {m.name for m in suite("breadth")}


def test_breadth_covers_every_family_the_issue_names() -> None:
    pytest.importorskip("torch", reason="extra not installed (torch builds the breadth suite)")
    models = suite("breadth")
    assert len(models) >= 12
    assert {m.family for m in models} == ISSUE_FAMILIES
    assert suite("lstm_tagger,recsys_embbag")[1].family == "recsys"


@pytest.mark.parametrize("name", ["lstm_tagger", "recsys_embbag", "conv_autoencoder", "distilbert_masked"])
def test_breadth_models_run_and_agree_with_onnxruntime(name: str) -> None:
    pytest.importorskip("torch", reason="extra not installed (torch builds the breadth suite)")
    assert_agrees_with_onnxruntime(name)


def assert_agrees_with_onnxruntime(name: str) -> None:
    """Suite model ``name`` at batch 3 through our runtime and onnxruntime: same shape, values within 1e-3."""
    ort = pytest.importorskip("onnxruntime", reason="onnxruntime: extra not installed")
    from runtime import compile_model

    model = suite(name)[0]
    proto = model.model()
    feeds = model.feeds(batch=3, seed=1)
    exe = compile_model(proto)
    ours = exe.run(dict(feeds))[exe.output_names[0]]
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    theirs = session.run(None, feeds)[0]
    assert ours.shape == theirs.shape and ours.shape[0] == 3
    np.testing.assert_allclose(ours, theirs, rtol=1e-3, atol=1e-4)


def test_families_are_summarised_by_geomean_with_their_worst_model() -> None:
    def result(name: str, family: str, ours: float, ort: float) -> vs_peers.ModelResult:
        times = {"ours": vs_peers.Timing([ours]), "ort": vs_peers.Timing([ort])}
        return vs_peers.ModelResult(name, family, 1, 2, 0.1, times, {}, {}, math.nan, {})

    text = vs_peers.format_families(
        [result("a", "lstm", 2.0, 1.0), result("b", "lstm", 0.5, 1.0), result("c", "vit", 3.0, 1.0)]
    )
    lines = text.splitlines()
    assert lines[1].split()[:2] == ["lstm", "1.00"] and "2 results; worst a 2.00" in lines[1]
    assert lines[2].split()[:2] == ["vit", "3.00"]


def test_without_torch_the_breadth_suite_is_empty(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(breadth, "available", lambda: False)
    assert suite("breadth") == []
