"""benchmarks.pass_ab: ours with and without named passes against onnxruntime, in one process."""

from __future__ import annotations

import pytest

from benchmarks import pass_ab


def test_prints_both_ratios_for_a_model(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--models", "tiny_lenet5", "--disable", "conv_fusion,layout", "--batch", "1", "--rounds", "1"]
    assert pass_ab.main(argv) == 0
    out = capsys.readouterr().out
    assert "without conv_fusion, layout" in out
    assert "tiny_lenet5" in out and "with/ORT" in out and "without/ORT" in out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["--models", "tiny_lenet5", "--disable", "fuse_everything"],
            "error: --disable: unknown pass 'fuse_everything'",
        ),
        (["--models", "no_such_net", "--disable", "layout"], "error: --models: unknown suite or model 'no_such_net'"),
    ],
)
def test_bad_names_are_one_line_errors(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert pass_ab.main(argv) == 2
    assert capsys.readouterr().err.startswith(message)
