"""The per-node overhead benchmark's plumbing (no timing assertions)."""

from __future__ import annotations

import math

import numpy as np
import onnx
import pytest

from benchmarks import node_overhead


@pytest.mark.parametrize("kind", node_overhead.CHAINS)
def test_chains_are_valid_models_of_the_asked_length(kind: str) -> None:
    model = node_overhead.chain_model(kind, 7)
    onnx.checker.check_model(model, full_check=True)
    assert len(model.graph.node) == 7


def test_elementwise_chain_computes_what_its_ops_say() -> None:
    from runtime import compile_model

    x = np.linspace(-1, 1, node_overhead.WIDTH, dtype=np.float32)[None]
    exe = compile_model(node_overhead.chain_model("elementwise", 6))
    got = exe.run({"x": x})[exe.output_names[0]]
    want = x.astype(np.float64)
    for i in range(6):
        c = 1.0 + 0.001 * i
        want = -want if i % 5 == 0 else [want + c, want * c, want - c, want / c][i % 4]
    np.testing.assert_allclose(got, want, rtol=1e-5)


def test_measure_reports_both_engines_and_our_kept_nodes() -> None:
    pytest.importorskip("onnxruntime", reason="onnxruntime: extra not installed")
    res = node_overhead.measure("softmax", 5, threads=1, rounds=1, target_s=0.001)
    assert set(res) == {"ours", "ort"}
    assert all(math.isfinite(chain) and chain > 0 and one > 0 for chain, one, _ in res.values())
    assert res["ours"][2] == 5


def test_fewer_than_two_nodes_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        node_overhead.main(["--nodes", "1"])
    assert "--nodes" in capsys.readouterr().err
