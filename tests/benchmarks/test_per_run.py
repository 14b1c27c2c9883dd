"""The per-run benchmark times every run of each engine in alternating blocks and tabulates one model end to end."""

from __future__ import annotations

import pytest

from benchmarks import per_run


def test_runs_alternate_in_blocks_and_every_run_is_timed() -> None:
    order: list[str] = []
    times = per_run.measure({"a": lambda: order.append("a"), "b": lambda: order.append("b")}, blocks=2)
    assert [len(t) for t in times.values()] == [2 * per_run.RUNS_PER_BLOCK] * 2
    timed = order[6:]  # three warm-up runs each come first
    assert timed == (["a"] * 10 + ["b"] * 10) * 2
    assert all(t >= 0 for t in times["a"] + times["b"])


def test_one_model_is_measured_and_tabulated(capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("onnxruntime", reason="onnxruntime: extra not installed")
    assert per_run.main(["--models", "tiny_dscnn", "--batch", "1", "--threads", "1", "--blocks", "1"]) == 0
    line = next(row for row in capsys.readouterr().out.splitlines() if row.startswith("tiny_dscnn"))
    fields = line.split()
    assert fields[1] == "1" and float(fields[4]) > 0 and float(fields[-1]) < 1e-3  # a ratio, outputs agree
