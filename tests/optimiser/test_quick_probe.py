"""``appopt plan`` on an uncalibrated ``local`` host: a quick probe, kept per host beside the calibration store,
carries the shipped models over (``transferred:<from> via quick probe (N units)``); it can be turned off, and a
damaged or unwritable store falls back with one note, never a traceback."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

import benchmarks.calibrate as calibrate
from analysis.units import encode_units
from cli.main import app
from perfmodels.hoststore import host_store_path, quick_store_path, read_store
from perfmodels.results_db import DEFAULT_DB, frame_rows, read_results, write_rows

SPEC = Path(__file__).parents[2] / "examples" / "onnx-mlp-local.yaml"
#: Measured on the probed host: this many times the shipped host's times.
SLOWER = 3.0


def _plan(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, ["plan", str(SPEC), *args])
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture(scope="module")
def shipped_unit_rows() -> pd.DataFrame:
    """The shipped database's rows of the quick probe's units (the probe measures these same units)."""
    frame = read_results(DEFAULT_DB, warn=False)
    wanted = {encode_units([u]) for u in calibrate.quick_units()}
    rows = frame[(frame["scenario"] == "kernel") & frame["units"].isin(wanted) & (frame["backend"] == "onnxruntime")]
    assert len(rows), "the shipped database has no rows of the quick probe's units"
    return rows


@pytest.fixture
def fake_probe(monkeypatch: pytest.MonkeyPatch, shipped_unit_rows: pd.DataFrame) -> list[Path]:
    """``quick_probe`` writing the shipped rows as this host's, SLOWER times slower (no measuring); the calls."""
    from perfmodels.targets import local_target_key

    monkeypatch.delenv("APPOPT_NO_PROBE", raising=False)
    calls: list[Path] = []

    def probe(db: Path, threads: int, budget_s: float = 0.0, step: object = None) -> calibrate.ProbeCount:
        calls.append(db)
        rows = shipped_unit_rows.assign(
            target=local_target_key(),
            median_ms=shipped_unit_rows["median_ms"] * SLOWER,
            cpu_ms=shipped_unit_rows["cpu_ms"] * SLOWER,
        )
        write_rows(db, frame_rows(rows))
        return calibrate.ProbeCount(len(rows), 0)

    monkeypatch.setattr(calibrate, "quick_probe", probe)
    return calls


def test_an_uncalibrated_host_is_probed_once_and_plans_say_transferred_via_quick_probe(
    fake_probe: list[Path],
) -> None:
    from optimiser.planner import make_plan
    from optimiser.spec import load_spec

    code, out, err = _plan()
    assert code == 0, err
    assert len(fake_probe) == 1 and quick_store_path().exists() and not host_store_path().exists()
    bases = {c.prediction.basis for c in make_plan(load_spec(SPEC)).candidates}
    assert any(re.fullmatch(r"transferred:\S+ via quick probe \(\d+ units\)", b) for b in bases), bases
    notes = [line for line in err.splitlines() if "appopt calibrate" in line]
    assert len(notes) == 1 and "quick probe" in notes[0] and str(quick_store_path()) in notes[0]
    assert not list(quick_store_path().parent.glob("*.partial"))
    kept = quick_store_path().read_bytes()
    code, out_again, err = _plan()
    assert code == 0, err
    assert len(fake_probe) == 1  # kept per host: the second plan reads the store
    assert out_again == out and quick_store_path().read_bytes() == kept
    assert len([line for line in err.splitlines() if "appopt calibrate" in line]) == 1


def test_the_runtime_kernels_are_built_before_the_probe_clock_starts(
    fake_probe: list[Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A first plan on a fresh machine compiles appopt-runtime's kernels (about 20 s): done inside the probe, it
    spent the whole budget and left the runtime all but unmeasured, so it runs before, with a line of its own."""
    from runtime import native

    events: list[str] = []
    monkeypatch.setattr(calibrate, "installed_backends", lambda *a: ("onnxruntime", "appopt-runtime"))
    monkeypatch.setattr(native, "needs_build", lambda: not events)
    monkeypatch.setattr(native, "lib", lambda: events.append("build"))
    probe = calibrate.quick_probe
    monkeypatch.setattr(calibrate, "quick_probe", lambda *a, **k: (events.append("probe"), probe(*a, **k))[1])
    code, _, err = _plan()
    assert code == 0, err
    assert events == ["build", "probe"]
    assert "building appopt-runtime's kernels for this CPU (once)" in err


def test_the_probe_moves_predictions_by_what_it_measured(
    fake_probe: list[Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a machine of the recording host's key (the one whose shipped times the fake probe slows down): measured 3x
    slower, predicted well over 1.5x slower. On another CPU the plan before the probe is a transfer already, so the
    key is the recording host's here wherever the test runs."""
    import perfmodels.fitted as fitted
    import perfmodels.hoststore as hoststore
    import perfmodels.targets as targets
    from optimiser.planner import make_plan
    from optimiser.spec import load_spec
    from perfmodels.fitted import load_default_model

    recording = str(read_results(DEFAULT_DB, warn=False)["target"].value_counts().index[0])
    for module in (targets, hoststore, fitted):
        monkeypatch.setattr(module, "local_target_key", lambda: recording)
    spec = load_spec(SPEC)
    before = make_plan(spec, model=load_default_model(host_store=False))
    code, _, err = _plan()
    assert code == 0, err
    after = make_plan(spec)
    ort = [
        (b.prediction.step_seconds, a.prediction)
        for b in before.candidates
        for a in after.candidates
        if a.route.key == b.route.key and a.route.framework == "onnxruntime" and a.route.compiler == "none"
    ]
    assert ort and all("via quick probe" in p.basis for _, p in ort)
    assert all(p.step_seconds > 1.5 * step for step, p in ort)  # measured 3x slower than the shipped host


@pytest.mark.parametrize("how", ["env", "flag"])
def test_the_probe_can_be_skipped(fake_probe: list[Path], monkeypatch: pytest.MonkeyPatch, how: str) -> None:
    if how == "env":
        monkeypatch.setenv("APPOPT_NO_PROBE", "1")
    code, _, err = _plan(*(["--no-probe"] if how == "flag" else []))
    assert code == 0, err
    assert fake_probe == [] and not quick_store_path().exists()
    assert [line for line in err.splitlines() if "appopt calibrate" in line] == [
        "note: this host is not calibrated: `appopt calibrate` (5 minutes) measures it, so plans use its figures"
    ]


def test_a_calibrated_host_is_not_probed(fake_probe: list[Path]) -> None:
    from perfmodels.results_db import HEADER_LINE

    host_store_path().parent.mkdir(parents=True)
    host_store_path().write_text(HEADER_LINE, encoding="utf-8")
    code, _, err = _plan()
    assert code == 0, err
    assert fake_probe == [] and not quick_store_path().exists()


def test_a_damaged_quick_store_falls_back_with_one_note_and_is_kept(fake_probe: list[Path], tmp_path: Path) -> None:
    quick_store_path().parent.mkdir(parents=True)
    quick_store_path().write_text("garbage\n", encoding="utf-8")
    code, out, err = _plan("-o", str(tmp_path / "out"))
    assert code == 0 and "Traceback" not in out + err
    assert fake_probe == [] and "via quick probe" not in (tmp_path / "out" / "plan.json").read_text(encoding="utf-8")
    notes = [line for line in err.splitlines() if line.startswith("note:") and "quick probe" in line]
    assert len(notes) == 1 and notes[0].startswith(f"note: quick probe: {quick_store_path()}")
    assert quick_store_path().read_text(encoding="utf-8") == "garbage\n"


def test_an_unwritable_store_directory_skips_the_probe_with_one_note(
    fake_probe: list[Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("x", encoding="utf-8")
    monkeypatch.setenv("XDG_DATA_HOME", str(blocker))
    code, out, err = _plan()
    assert code == 0 and "Traceback" not in out + err
    assert fake_probe == []
    notes = [line for line in err.splitlines() if line.startswith("note:") and "quick probe" in line]
    assert len(notes) == 1 and notes[0].startswith("note: quick probe skipped (") and "appopt calibrate" in notes[0]
    assert blocker.read_text(encoding="utf-8") == "x"


def test_a_probe_that_measures_nothing_leaves_no_store(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("APPOPT_NO_PROBE", raising=False)
    calls: list[Path] = []

    def probe(db: Path, threads: int, budget_s: float = 0.0, step: object = None) -> calibrate.ProbeCount:
        calls.append(db)
        return calibrate.ProbeCount(0, 13, budget_spent=True)

    monkeypatch.setattr(calibrate, "quick_probe", probe)
    for expected_calls in (1, 2):  # nothing kept, so the next plan probes again
        code, _, err = _plan()
        assert code == 0, err
        assert len(calls) == expected_calls and not quick_store_path().exists()
        assert not list(quick_store_path().parent.glob("*"))
        assert [line for line in err.splitlines() if line.startswith("note:") and "quick probe" in line] == [
            "note: quick probe measured nothing (13 unit(s) skipped or failed) (budget of 10 s spent); "
            "`appopt calibrate` (5 minutes) measures it, so plans use its figures"
        ]


@pytest.mark.slow
def test_a_real_quick_probe_takes_at_most_15_s_and_plans_read_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("APPOPT_NO_PROBE", raising=False)
    started = time.monotonic()
    code, _, err = _plan()
    took = time.monotonic() - started
    assert code == 0, err
    frame = read_store(quick_store_path())
    assert frame is not None and len(frame) >= 2 and set(frame["scenario"]) == {"kernel"}
    assert frame["peak_gflops"].notna().all() and frame["cpu_model"].notna().all()
    assert "this host was measured by a quick probe" in err
    # the probe's budget plus its setup and the plan itself, with slack for a loaded CI machine
    assert took < 15 + 15, f"plan with a quick probe took {took:.0f} s"
