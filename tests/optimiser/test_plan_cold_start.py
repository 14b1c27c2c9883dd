"""A plan's cold start: with the fitted model and the calibration cached on disk (keyed by the data's digests), a
new process neither parses the result database nor the host store, and imports neither scikit-learn nor SciPy
(about a second of a 2.5 s plan before). Timing lives in docs/decisions.md; this test checks the mechanism."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from perfmodels.results_db import DEFAULT_DB, frame_rows, read_results, write_rows

SPEC = Path(__file__).parents[2] / "examples" / "onnx-mlp-local.yaml"
#: Plans in a fresh process and prints what the cold start cares about; with an argument, reading the database or
#: the host store fails.
_PLAN = """
import json, sys
import perfmodels.hoststore, perfmodels.results_db
if len(sys.argv) > 2:
    def refuse(*args, **kwargs):
        raise AssertionError("parsed a CSV although the caches hold everything a plan needs")
    perfmodels.results_db.read_results = perfmodels.hoststore.read_results = refuse
from optimiser.planner import make_plan
from optimiser.spec import load_spec
plan = make_plan(load_spec(sys.argv[1]))
print(json.dumps({
    "predictions": [[c.route.key, c.prediction.step_seconds, c.prediction.basis] for c in plan.candidates],
    "imported": [m for m in ("sklearn", "scipy") if m in sys.modules],
}))
"""


def _plan(env: dict[str, str], forbid_reading: bool) -> dict[str, list[object]]:
    args = [sys.executable, "-c", _PLAN, str(SPEC), *(["no-reading"] if forbid_reading else [])]
    out = subprocess.run(args, env=env, capture_output=True, text=True, check=False, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


@pytest.mark.slow
def test_a_warm_plan_parses_no_csv_and_imports_neither_scikit_learn_nor_scipy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from perfmodels.hoststore import host_store_path
    from perfmodels.targets import local_target_key

    frame = read_results(DEFAULT_DB, warn=False)
    # a small database of the same kinds: the suite's whole-model rows and onnxruntime's matrix-product units
    units = frame[
        (frame["family"] == "kernel-unit")
        & (frame["backend"] == "onnxruntime")
        & frame["units"].astype(str).str.match(r'\[\["(gemm|eltwise|noop)"')
    ]
    db = tmp_path / "small.csv"
    write_rows(db, frame_rows(pd.concat([frame[frame["scenario"] == "SingleStream"], units])))
    monkeypatch.setenv("APPOPT_RESULTS_DB", str(db))
    monkeypatch.setenv("APPOPT_CACHE_DIR", str(tmp_path / "cache"))
    env = dict(os.environ)
    # this host calibrated: its store holds the same units, measured twice as slow
    store = host_store_path()
    store.parent.mkdir(parents=True)
    sample = units.groupby("units").head(1).head(20)
    write_rows(store, frame_rows(sample.assign(target=local_target_key(), median_ms=sample["median_ms"] * 2)))

    first = _plan(env, forbid_reading=False)  # reads, fits and fills the caches
    assert any("via calibration" in str(basis) for _, _, basis in first["predictions"]), first["predictions"]
    second = _plan(env, forbid_reading=True)
    assert second["predictions"] == first["predictions"]
    assert second["imported"] == []
    write_rows(db, frame_rows(pd.concat([frame[frame["scenario"] == "SingleStream"].head(200), units])))
    with pytest.raises(AssertionError, match="parsed a CSV"):  # other data: another digest, so read and refit
        _plan(env, forbid_reading=True)
