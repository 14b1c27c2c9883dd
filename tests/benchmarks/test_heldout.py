"""The held-out suite: PyTorch exports of the breadth families, written to differ from breadth's models."""

from __future__ import annotations

import pytest

from benchmarks.models import breadth, suite
from tests.benchmarks.test_breadth import ISSUE_FAMILIES, assert_agrees_with_onnxruntime

torch_needed = pytest.mark.skipif(not breadth.available(), reason="extra not installed (torch builds the suite)")


def test_heldout_is_kept_out_of_the_all_and_breadth_suites() -> None:
    names = {m.name for m in suite("heldout")}
    assert not names & {m.name for m in suite("all")}
    assert not names & {m.name for m in suite("breadth")}


@torch_needed
def test_heldout_has_new_models_of_the_issue_families() -> None:
    models = suite("heldout")
    assert len(models) >= 12
    # every family but the recurrent ones (another suite's), plus a plain transformer encoder
    assert {m.family for m in models} == (ISSUE_FAMILIES - {"lstm", "gru"}) | {"transformer"}
    assert suite("vae_decoder,dlrm_bags")[1].family == "recsys"


@torch_needed
@pytest.mark.parametrize("name", ["transformer_seq2seq", "distilbert_padmask", "dlrm_bags", "unet_bilinear"])
def test_heldout_models_run_and_agree_with_onnxruntime(name: str) -> None:
    assert_agrees_with_onnxruntime(name)


def test_without_torch_the_heldout_suite_is_empty(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(breadth, "available", lambda: False)
    assert suite("heldout") == []


@torch_needed
def test_cpu_time_peers_prints_a_ratio_per_batch_and_their_geomean(capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("onnxruntime", reason="onnxruntime: extra not installed")
    from benchmarks import cpu_time_peers

    assert cpu_time_peers.main(["--models", "dlrm_bags", "--batch", "1", "2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    row = lines[0].split()
    assert row[0] == "dlrm_bags" and row[1] == "b1"
    assert float(row[4]) == pytest.approx(float(row[2]) / float(row[3]), rel=0.05)  # ms printed to 3 decimals
    assert lines[-1].startswith("geomean ours/ORT (1 thread, CPU time, batch 2): ")
