"""Per-shape algorithm choice: measured once, remembered per machine, never broken by a bad cache file."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pytest

from runtime import compile_model, tuning
from tests.runtime.graphs import const, model, vi


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "tuning.json"
    monkeypatch.setenv("APPOPT_TUNING_CACHE", str(path))
    monkeypatch.setenv("APPOPT_TUNING", "on")
    monkeypatch.setattr(tuning, "_TUNER", None)
    return path


def _sleep(seconds: float):
    return lambda: time.sleep(seconds)


def test_the_clearly_faster_candidate_is_chosen_and_recorded(cache: Path) -> None:
    t = tuning.Tuner(cache)
    choice = t.choose("op|shape", {"slow": _sleep(0.004), "fast": _sleep(0.0005)}, default="slow")
    assert choice == "fast"
    data = json.loads(cache.read_text())
    assert data["format"] == tuning.FORMAT
    assert data["machines"][tuning.machine_key()]["op|shape"] == "fast"
    # a new tuner reads the choice back without measuring
    again = tuning.Tuner(cache)

    def boom() -> None:
        raise AssertionError("must not be measured")

    assert again.choose("op|shape", {"slow": boom, "fast": boom}, default="slow") == "fast"
    assert again.measured == 0


def test_the_default_stays_unless_another_wins_by_the_margin(cache: Path) -> None:
    t = tuning.Tuner(cache)
    equal = t.choose("k", {"a": _sleep(0.001), "b": _sleep(0.001)}, default="a", margin=1.5)
    assert equal == "a"


def test_a_failing_candidate_is_never_chosen(cache: Path) -> None:
    def broken() -> None:
        raise ValueError("unsupported")

    assert tuning.Tuner(cache).choose("k", {"broken": broken, "ok": _sleep(0.001)}, default="broken") == "ok"


@pytest.mark.parametrize("content", ["{not json", "[]", '{"format": 999, "machines": {}}', '{"format": 1}'])
def test_a_corrupt_cache_is_ignored_and_replaced(cache: Path, content: str) -> None:
    cache.write_text(content)
    t = tuning.Tuner(cache)
    assert t.lookup("k") is None
    assert t.choose("k", {"a": _sleep(0.003), "b": _sleep(0.0003)}, default="a") == "b"
    assert json.loads(cache.read_text())["machines"][tuning.machine_key()]["k"] == "b"


def test_choices_of_other_machines_are_kept_but_not_used(cache: Path) -> None:
    cache.write_text(json.dumps({"format": tuning.FORMAT, "machines": {"other-cpu": {"k": "a"}}}))
    t = tuning.Tuner(cache)
    assert t.lookup("k") is None
    t.choose("k", {"a": _sleep(0.003), "b": _sleep(0.0003)}, default="a")
    machines = json.loads(cache.read_text())["machines"]
    assert machines["other-cpu"] == {"k": "a"}
    assert machines[tuning.machine_key()]["k"] == "b"


def test_modes_off_and_cache_never_measure(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def boom() -> None:
        raise AssertionError("must not be measured")

    for mode in ("off", "cache"):
        monkeypatch.setenv("APPOPT_TUNING", mode)
        assert tuning.Tuner(cache).choose("k", {"a": boom, "b": boom}, default="a") == "a"


def test_an_unwritable_cache_costs_nothing_but_the_record(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    monkeypatch.setenv("APPOPT_TUNING", "on")
    t = tuning.Tuner(blocker / "sub" / "tuning.json")  # parent is a file: cannot be created
    assert t.choose("k", {"a": _sleep(0.003), "b": _sleep(0.0003)}, default="a") == "b"


def test_compiling_a_heavy_convolution_records_its_decisions(cache: Path) -> None:
    from onnx import helper

    rng = np.random.default_rng(0)
    w = rng.standard_normal((64, 64, 3, 3)).astype(np.float32)
    m = model(
        [helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])],
        [vi("x", shape=[1, 64, 28, 28])],
        [vi("y", shape=[1, 64, 28, 28])],
        [const("w", w)],
    )
    x = rng.standard_normal((1, 64, 28, 28)).astype(np.float32)
    y = compile_model(m, threads=1).run({"x": x})["y"]
    plain = compile_model(m, threads=1, passes=[]).run({"x": x})["y"]
    np.testing.assert_allclose(y, plain, rtol=1e-4, atol=1e-4)
    from runtime import native

    if native.lib() is not None:
        recorded = json.loads(cache.read_text())["machines"][tuning.machine_key()]
        assert any(k.startswith("Conv.layout|x(1, 64, 28, 28)") for k in recorded)
