"""benchmarks.pass_ab: before/after rows for passes turned off, against onnxruntime (times not judged)."""

from __future__ import annotations

import pytest

from benchmarks import pass_ab


def test_rows_compare_a_pass_turned_off(capsys: pytest.CaptureFixture[str]) -> None:
    rows = pass_ab.compare_passes("tiny_bert", ["attention_fusion", "shape_values"], [1], threads=1, rounds=1)
    assert len(rows) == 1
    row = rows[0]
    before, after = row["nodes"]  # type: ignore[misc]
    assert after < before  # tiny_bert's attention fuses
    assert row["error"] < 1e-4  # type: ignore[operator]
    argv = ["--models", "tiny_bert", "--disable", "attention_fusion", "--batch", "1", "--rounds", "1"]
    assert pass_ab.main(argv) == 0
    assert "ours/ORT" in capsys.readouterr().out


def test_an_unknown_pass_is_refused() -> None:
    from runtime.errors import RuntimeModelError

    with pytest.raises(RuntimeModelError, match="unknown pass"):
        pass_ab.compare_passes("tiny_bert", ["no_such_pass"], [1], threads=1, rounds=1)
