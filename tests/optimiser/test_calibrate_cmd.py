"""``appopt calibrate``: the covering set, the host store, and bad input (one line, non-zero exit, nothing lost)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from analysis.units import KINDS, encode_units
from benchmarks.calibrate import SKIPPED_SAMPLERS, covering_units, units_left
from benchmarks.unit_sweep import SWEEP_ROUNDS
from cli.main import app
from perfmodels.hoststore import host_store_path, read_store
from perfmodels.results_db import HEADER_LINE, format_row, write_rows
from tests.rows import measured_row

runner = CliRunner()


def _invoke(*args: str) -> tuple[int, str]:
    result = runner.invoke(app, list(args))
    return result.exit_code, result.stdout + result.stderr


def test_covering_units_are_deterministic_cover_every_kind_and_put_overheads_first() -> None:
    units = covering_units()
    assert [encode_units([u]) for u in units] == [encode_units([u]) for u in covering_units()]
    assert {u.kind for u in units} == set(KINDS)  # every kind a model is cut into
    assert units[0].kind == "noop"
    samplers = [name for sizes in SWEEP_ROUNDS for name in sizes if name not in ("noop", *SKIPPED_SAMPLERS)]
    first_pass = units[len([u for u in units if u.kind == "noop"]) :][: len(samplers)]
    assert {u.kind for u in first_pass} == set(KINDS) - {"noop"}  # a budget cut keeps one unit of every kind
    assert len([u for u in units if u.kind == "conv"]) > len([u for u in units if u.kind == "lrn"])  # sizes too


def test_host_store_lives_in_the_xdg_data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    assert host_store_path("some-cpu-2c") == tmp_path / "appopt" / "hosts" / "some-cpu-2c.csv"


def test_a_budget_too_small_is_one_line_and_writes_nothing(tmp_path: Path) -> None:
    store = tmp_path / "store.csv"
    code, out = _invoke("calibrate", "--budget", "1", "--db", str(store))
    assert code != 0
    assert out.strip().splitlines() == ["error: --budget: 1 s is too short to measure anything (at least 10 s)"]
    assert not store.exists()


def test_a_corrupt_store_is_refused_and_kept(tmp_path: Path) -> None:
    store = tmp_path / "store.csv"
    store.write_bytes(b"\x00\x01 not a csv at all\n")
    code, out = _invoke("calibrate", "--budget", "30", "--db", str(store))
    assert code != 0 and "Traceback" not in out
    assert len(out.strip().splitlines()) == 1 and "move it aside" in out
    assert store.read_bytes() == b"\x00\x01 not a csv at all\n"


def test_a_store_of_another_schema_version_is_refused_and_kept(tmp_path: Path) -> None:
    store = tmp_path / "store.csv"
    old = HEADER_LINE.replace(",driver,verdict,verdict_reason,log_dir,flags", "")  # schema v3's header
    store.write_text(old, encoding="utf-8")
    code, out = _invoke("calibrate", "--budget", "30", "--db", str(store))
    assert code != 0 and len(out.strip().splitlines()) == 1
    assert str(store) in out
    assert store.read_text(encoding="utf-8") == old


def test_an_unwritable_store_is_refused(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("x", encoding="utf-8")
    code, out = _invoke("calibrate", "--budget", "30", "--db", str(blocker / "store.csv"))
    assert code != 0 and len(out.strip().splitlines()) == 1
    assert out.startswith("error: --db:") and "directory" in out
    assert blocker.read_text(encoding="utf-8") == "x"
    (tmp_path / "dir.csv").mkdir()  # a store path that cannot be opened for appending
    code, out = _invoke("calibrate", "--budget", "30", "--db", str(tmp_path / "dir.csv"))
    assert code != 0 and len(out.strip().splitlines()) == 1 and "not writable" in out


def test_an_unknown_backend_is_named(tmp_path: Path) -> None:
    code, out = _invoke("calibrate", "--backends", "nope", "--db", str(tmp_path / "s.csv"))
    assert code != 0 and "'nope'" in out and len(out.strip().splitlines()) == 1


def test_read_store_keeps_rows_and_drops_only_damaged_lines(tmp_path: Path) -> None:
    store = tmp_path / "store.csv"
    row = measured_row(model="m", scenario="kernel", metric="gflops")
    write_rows(store, [row])
    with open(store, "a", encoding="utf-8") as handle:
        handle.write("torn,row\n")
    frame = read_store(store)
    assert frame is not None and list(frame["row_id"]) == [row["row_id"]]
    assert "torn,row" in store.read_text(encoding="utf-8")  # reading never rewrites


@pytest.mark.slow
def test_calibrate_for_real_appends_and_a_second_run_resumes(tmp_path: Path) -> None:
    store = tmp_path / "store.csv"
    code, out = _invoke("calibrate", "--budget", "12", "--backends", "onnxruntime", "--db", str(store))
    assert code == 0, out
    assert "GEMM peak GFLOP/s: 1t" in out
    first = read_store(store)
    assert first is not None and len(first) >= 4
    assert set(first["scenario"]) == {"kernel"} and set(first["backend"]) == {"onnxruntime"}
    assert first["cpu_model"].notna().all() and first["peak_gflops"].notna().all()
    gemm = re.search(r"GEMM peak GFLOP/s: 1t (\d+)", out)
    assert gemm is not None and 1 <= int(gemm.group(1)) <= 100_000  # GFLOP/s of a real CPU, not a unit slip
    complete = units_left(("onnxruntime",), {("onnxruntime", u) for u in first["units"]}) == 0
    code, out = _invoke("calibrate", "--budget", "12", "--backends", "onnxruntime", "--db", str(store))
    assert code == 0, out
    second = read_store(store)
    assert second is not None and set(first["row_id"]) <= set(second["row_id"])  # nothing lost
    assert not second["units"].duplicated().any()  # resumed: no unit measured twice
    if complete:  # a quiet machine measures the whole covering set in one 12 s run
        assert "nothing left to measure" in out and len(second) == len(first)
    else:
        assert len(second) > len(first)


def test_plan_with_a_corrupt_host_store_says_so_in_one_line_and_keeps_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    store = host_store_path()
    store.parent.mkdir(parents=True)
    store.write_text("garbage\n", encoding="utf-8")
    spec = Path(__file__).parents[2] / "examples" / "onnx-mlp-local.yaml"
    code, out = _invoke("plan", str(spec))
    assert code != 0 and "Traceback" not in out
    errors = [line for line in out.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith(f"error: host store: {store}")
    assert store.read_text(encoding="utf-8") == "garbage\n"


def test_a_unit_kind_from_a_newer_appopt_skips_its_rows_with_one_note_and_the_plan_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A store that a newer appopt extended with a kind this one does not know (as ``recurrent`` was new on
    2026-11-28) crashed every plan with a traceback from the unit decoder."""
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    store = host_store_path()
    known = measured_row(model="unit_noop_1", scenario="kernel", metric="gflops", units='[["noop",[1],1]]')
    newer = measured_row(model="unit_x", scenario="kernel", metric="gflops")
    newer = {**newer, "units": '[["tensorcore9",[1,2],1]]'}
    write_rows(store, [known])  # (this appopt refuses to write the newer row: a newer one wrote it)
    with open(store, "a", encoding="utf-8") as handle:
        handle.write(format_row(newer))
    before = store.read_text(encoding="utf-8")
    frame = read_store(store)
    assert frame is not None and list(frame["row_id"]) == [known["row_id"]]
    assert "unknown unit kind 'tensorcore9'" in frame.attrs["dropped_rows"][0]
    spec = Path(__file__).parents[2] / "examples" / "onnx-mlp-local.yaml"
    code, out = _invoke("plan", str(spec))
    assert code == 0 and "Traceback" not in out, out
    notes = [line for line in out.splitlines() if "host store skipped" in line]
    assert len(notes) == 1 and "1 row(s)" in notes[0] and "tensorcore9" in notes[0], out
    assert store.read_text(encoding="utf-8") == before  # nothing rewritten


def test_plan_on_an_uncalibrated_local_host_suggests_calibrating_once(tmp_path: Path) -> None:
    spec = Path(__file__).parents[2] / "examples" / "onnx-mlp-local.yaml"
    code, out = _invoke("plan", str(spec))
    assert code == 0, out
    assert [line for line in out.splitlines() if "appopt calibrate" in line] == [
        "note: this host is not calibrated: `appopt calibrate` (5 minutes) measures it, so plans use its figures"
    ]
    host_store_path().parent.mkdir(parents=True)
    host_store_path().write_text(HEADER_LINE, encoding="utf-8")  # calibrated (nothing comparable yet): no note
    code, out = _invoke("plan", str(spec))
    assert code == 0 and "appopt calibrate" not in out
