"""The calibration's and the quick probe's budgets hold by the wall clock: a unit starts only when it is expected to
end in time, what was measured is kept, and running out is reported."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

import benchmarks.calibrate as calibrate
from analysis.units import unit_flops
from benchmarks.calibrate import ProbeCount, UnitClock
from benchmarks.kernels import HardwareFigures
from perfmodels.results_db import read_results


def test_the_clock_refuses_a_unit_that_would_end_after_the_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [100.0]
    monkeypatch.setattr(calibrate.time, "monotonic", lambda: now[0])
    clock = UnitClock(deadline=103.0)
    assert clock.next_fits()  # 100 + the first unit's guess (0.8 s) <= 103
    now[0] = 101.5  # that unit took 1.5 s: the next is expected to take as long
    assert clock.next_fits() and not clock.spent  # 101.5 + 1.5 <= 103
    now[0] = 102.0
    assert not clock.next_fits() and clock.spent  # 102 + 1.5 > 103
    clock.restart()
    now[0] = 102.1
    assert not clock.next_fits(deadline=102.5)  # a backend's own share ends sooner


def test_a_budget_cut_is_said_and_keeps_what_was_measured() -> None:
    assert ProbeCount(3, 0, budget_spent=True).cut_note(10.0) == " (budget of 10 s spent: what was measured is kept)"
    assert ProbeCount(3, 0).cut_note(10.0) == ""


def test_a_tiny_quick_probe_budget_is_kept_by_the_wall_clock(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A real probe on onnxruntime with a 2 s budget and more units than fit: it stops when the budget is spent, and
    every unit it measured is in its store (the hardware figures, seconds of copying on a loaded machine, are
    given)."""
    figures = HardwareFigures(10.0, 50.0, {1: 50.0, 2: 100.0})
    small = sorted(calibrate.covering_units(), key=unit_flops)[:40]  # quick to build: the budget is the limit
    monkeypatch.setattr(calibrate, "quick_hardware", lambda threads: figures)
    monkeypatch.setattr(calibrate, "installed_backends", lambda backends=(): ("onnxruntime",))
    monkeypatch.setattr(calibrate, "quick_units", lambda: small)
    db = tmp_path / "quick.csv"
    started = time.monotonic()
    count = calibrate.quick_probe(db, threads=1, budget_s=2.0)
    took = time.monotonic() - started
    assert count.budget_spent and 1 <= count.measured < len(small)
    assert took < 2.0 + 1.0, f"the probe took {took:.1f} s of a 2 s budget"  # (a unit runs 0.3 s at most)
    assert len(read_results(db, warn=False)) == count.measured  # every measured unit kept


def test_calibrate_that_measures_nothing_in_its_budget_says_so_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The probes took the whole budget: one line, non-zero exit, no store left behind."""
    from cli.main import app

    def slow_probes(threads: int) -> calibrate.Probes:
        time.sleep(0.3)
        return calibrate.Probes({1: 50.0}, 10.0)

    monkeypatch.setattr(calibrate, "MIN_BUDGET_S", 0.1)
    monkeypatch.setattr(calibrate, "measure_probes", slow_probes)
    store = tmp_path / "store.csv"
    result = CliRunner().invoke(app, ["calibrate", "--budget", "0.2", "--db", str(store)])
    assert result.exit_code != 0
    errors = [line for line in (result.stdout + result.stderr).splitlines() if line.startswith("error:")]
    assert errors == ["error: --budget: nothing was measured in 0.2 s (0 unit(s) skipped or failed); "
                      "give it more time or other --backends"]
    assert not store.exists() or read_results(store, warn=False).empty


def test_the_backends_take_turns_so_a_drifting_machine_shifts_every_route_alike(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Anchors a model at a time and units ``CHUNK`` at a time, backend after backend in each round; a backend with
    less left (a resumed run) drops out of the rounds when it is done."""
    from types import SimpleNamespace

    from analysis.units import encode_units

    calls: list[tuple[str, str, int]] = []

    def anchors(db, backend, threads, models, clock, deadline, step):  # type: ignore[no-untyped-def]
        calls.append(("anchor", backend, len(models)))
        return iter(())

    def suite(kernels, backends, threads, settings, db, **_):  # type: ignore[no-untyped-def]
        calls.append(("units", backends[0], len(kernels)))
        return iter([SimpleNamespace(kernel=k) for k in kernels])

    monkeypatch.setattr(calibrate, "measure_anchors", anchors)
    monkeypatch.setattr(calibrate, "run_kernel_suite", suite)
    monkeypatch.setattr(calibrate, "_kernels", lambda units, built: [SimpleNamespace(name=str(u)) for u in units])
    units = calibrate.covering_units()[:14]
    already = {("b", encode_units([u])) for u in units[:8]}  # b resumes with 6 units left
    figures = HardwareFigures(10.0, 50.0, {1: 50.0})
    run = calibrate.calibrate(
        tmp_path / "s.csv", 600.0, ("a", "b"), units=units, already=already, hardware_probe=lambda t: figures,
        anchors=("m1", "m2"),
    )
    assert len(list(run)) == 14 + 6
    c = calibrate.CHUNK
    assert calls == [
        ("anchor", "a", 1), ("anchor", "b", 1), ("anchor", "a", 1), ("anchor", "b", 1),
        ("units", "a", c), ("units", "b", 6), ("units", "a", c), ("units", "a", 14 - 2 * c),
        ("anchor", "b", 1), ("anchor", "a", 1), ("anchor", "b", 1), ("anchor", "a", 1),
    ]  # fmt: skip


def test_the_anchors_are_measured_again_after_the_units_in_the_reverse_order_unless_the_budget_ran_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A second pass over the anchors this run measured (not those a resumed run skipped), backends reversed; a
    run whose units the budget cut measures no second pass."""
    from types import SimpleNamespace

    calls: list[tuple[str, tuple[str, ...]]] = []

    def anchors(db, backend, threads, models, clock, deadline, step):  # type: ignore[no-untyped-def]
        calls.append((backend, tuple(models)))
        return iter(())

    monkeypatch.setattr(calibrate, "measure_anchors", anchors)
    monkeypatch.setattr(
        calibrate, "run_kernel_suite", lambda kernels, *a, **k: iter([SimpleNamespace(kernel=x) for x in kernels])
    )
    monkeypatch.setattr(calibrate, "_kernels", lambda units, built: [SimpleNamespace(name=str(u)) for u in units])
    units = calibrate.covering_units()[:3]
    figures = HardwareFigures(10.0, 50.0, {1: 50.0})
    list(calibrate.calibrate(
        tmp_path / "s.csv", 600.0, ("a", "b"), units=units, already={("a", "m1")}, hardware_probe=lambda t: figures,
        anchors=("m1", "m2"),
    ))  # fmt: skip
    assert calls == [("a", ("m2",)), ("b", ("m1",)), ("b", ("m2",)), ("b", ("m1",)), ("a", ("m2",)), ("b", ("m2",))]

    calls.clear()
    clock = UnitClock(time.monotonic() + 600.0)
    monkeypatch.setattr(clock, "next_fits", lambda deadline=None: False)  # the units' budget is spent
    list(calibrate.calibrate(
        tmp_path / "t.csv", 600.0, ("a", "b"), units=units, hardware_probe=lambda t: figures, anchors=("m1",),
        clock=clock,
    ))  # fmt: skip
    assert calls == [("a", ("m1",)), ("b", ("m1",))]


def test_calibrate_measures_the_installed_onnx_engines_then_the_training_frameworks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Without ``--backends``: the ONNX engines, then PyTorch (the routes of training plans, which no ONNX model's
    plan ranks), those installed; the quick probe keeps to the ONNX engines."""
    import benchmarks.backends as backends

    missing = {"openvino", "torch"}

    class _Backend:
        def __init__(self, name: str) -> None:
            self.name = name

        def unavailable_reason(self) -> str | None:
            return "extra not installed" if self.name in missing else None

    monkeypatch.setattr(backends, "get_backend", _Backend)
    assert calibrate.default_backends() == ("onnxruntime", "onnxruntime-extended", "appopt-runtime")
    missing.clear()
    assert calibrate.default_backends()[-1] == "torch"
    assert "torch" not in calibrate.installed_backends()
