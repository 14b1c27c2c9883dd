"""Measured compiler rows: a route through a graph compiler is predicted from that compiler's own group."""

from __future__ import annotations

import pandas as pd
import pytest

from perfmodels.fitted import fit_model
from tests.perfmodels.test_fit import DEVICE, TARGET, route, synthetic_frame, workload


def _variant(frame: pd.DataFrame, layout: str, compiler: str, scale: float) -> pd.DataFrame:
    rows = frame[frame["framework"] == "fast"].copy()
    rows["layout"], rows["compiler"], rows["backend"] = layout, compiler, f"fast-{compiler}-{layout}"
    rows["value"] *= scale
    rows["median_ms"] *= scale
    rows["row_id"] = [f"{i:032x}" for i in range(len(rows))]
    return rows


def test_a_measured_compiler_is_ranked_from_its_rows_not_tied_with_no_compiler():
    base = synthetic_frame()
    frame = pd.concat([base, _variant(base, "NCHW", "none", 1.2), _variant(base, "NCHWc", "openvino", 0.5)])
    model = fit_model(frame)
    work = workload("cnn_a")
    # the compiler was measured in NCHWc only: asked for NCHW, its own group still answers (scaled by the layout
    # prior), not the uncompiled NCHW group scaled by a compiler prior of 1
    group = model.anchor(work, route("fast", "NCHW", compiler="openvino"), DEVICE)
    assert group is not None and group.route.compiler == "openvino"
    for layout in ("NCHW", "NCHWc"):
        compiled = model.predict(work, route("fast", layout, compiler="openvino"), DEVICE)
        plain = model.predict(work, route("fast", layout), DEVICE)
        assert compiled.step_seconds < 0.7 * plain.step_seconds, layout
    measured = model.predict(work, route("fast", "NCHWc", compiler="openvino"), DEVICE)
    # (measured as whole models only: its own fit joined with the framework's times the fitted ratio, 0.5 here)
    assert measured.basis == f"fitted:{TARGET} and fast x the openvino ratio (28 pairs)"
    assert measured.step_seconds == pytest.approx(
        0.5 * model.predict(work, route("fast", "NCHWc"), DEVICE).step_seconds, rel=0.05
    )
