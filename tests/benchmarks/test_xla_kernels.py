"""The XLA kernels benchmark: each layer's forward and step timed under TensorFlow eager and XLA, and their ratio."""

from __future__ import annotations

import pytest

from benchmarks import xla_kernels


def test_a_layer_is_timed_eager_and_under_xla_with_the_steps_ratio(capsys: pytest.CaptureFixture[str]) -> None:
    tf = pytest.importorskip("tensorflow", reason="tensorflow: extra not installed")
    threads = tf.config.threading.get_intra_op_parallelism_threads() or 1  # (fixed once per process)
    case = "dense 2048->512, 32"
    assert xla_kernels.main(["--threads", str(threads), "--rounds", "1", "--case", case]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("cpu: ") and f"{threads} thread(s)" in lines[0]
    assert len(lines) == 3 and lines[2].startswith(case)
    eager_fwd, eager_step, xla_fwd, xla_step, ratio = (float(v) for v in lines[2][len(case) :].split())
    assert min(eager_fwd, eager_step, xla_fwd, xla_step) > 0
    assert ratio == pytest.approx(xla_step / eager_step, abs=0.01)


@pytest.mark.parametrize(
    ("argv", "message"),
    [(["--rounds", "0"], "--threads and --rounds must be at least 1"), (["--case", "conv 9x9"], "invalid choice")],
)
def test_a_bad_flag_is_one_line(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        xla_kernels.main(argv)
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err
