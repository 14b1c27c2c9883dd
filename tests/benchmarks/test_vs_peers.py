"""The side-by-side benchmark's plumbing (no timing assertions: this machine's speed is not under test)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from benchmarks import vs_peers


def test_geomean_ignores_missing_values() -> None:
    assert vs_peers.geomean([1.0, 4.0]) == pytest.approx(2.0)
    assert vs_peers.geomean([2.0, math.nan, math.inf]) == pytest.approx(2.0)
    assert math.isnan(vs_peers.geomean([]))


def test_relative_error_flags_shape_mismatches() -> None:
    a, b = np.ones((2, 3)), np.ones((2, 3)) * 2
    assert vs_peers._rel_error([a], [b]) == pytest.approx(0.5)
    assert vs_peers._rel_error([a], [np.ones(6)]) == math.inf


def test_one_model_measured_end_to_end_and_tabulated() -> None:
    from benchmarks.models import get_model

    result = vs_peers.bench_model(get_model("mlp"), batch=2, threads=1, rounds=1, use_torch=False, target_s=0.001)
    assert set(result.times) == {"ours", "ort"}
    assert result.rel_error["ours"] < vs_peers.TOLERANCE
    assert result.gflop > 0 and result.ours_peak_mb > 0
    table = vs_peers.format_table([result], with_torch=False)
    assert "mlp" in table and "ours/ORT" in table
    assert math.isfinite(result.ratio("ort"))
