"""The pool backward benchmark: it times each pool's forward and step, and prints their ratio per thread count."""

from __future__ import annotations

import pytest

from benchmarks import pool_backward


def test_each_pool_is_timed_with_its_step_over_its_forward(capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("torch", reason="extra not installed (torch runs the pools)")
    assert pool_backward.main(["--threads", "1", "--rounds", "1"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("cpu: ")
    rows = [line.split() for line in lines[2:]]
    assert len(rows) == len(pool_backward.POOLS)
    for row in rows:
        forward, step, ratio = (float(v) for v in row[-3:])
        assert forward > 0 and step > 0 and ratio == pytest.approx(step / forward, abs=0.01)


def test_a_bad_flag_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        pool_backward.main(["--threads", "0"])
    assert exit_.value.code == 2
    assert "--threads and --rounds must be at least 1" in capsys.readouterr().err
