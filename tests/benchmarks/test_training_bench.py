"""The training driver: runs, medians, database rows and the CLI (tiny settings; no timing assertions)."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from benchmarks.training_bench import TrainingRun, batches, summarise
from cli.main import app
from perfmodels.results_db import read_results

needs_torch = pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="extra not installed")


def test_batch_order_is_seeded_per_epoch_and_drops_the_partial_batch():
    first = [b.tolist() for b in batches(10, 3, seed=0, epoch=0)]
    assert len(first) == 3 and all(len(b) == 3 for b in first)
    assert first == [b.tolist() for b in batches(10, 3, seed=0, epoch=0)]
    assert first != [b.tolist() for b in batches(10, 3, seed=0, epoch=1)]
    assert len(set(np.concatenate(first).tolist())) == 9


def _run(seed: int, step_ms: list[float], to_target: float, other: float | None = 0.0) -> TrainingRun:
    return TrainingRun(
        "t", "f", "torch", 8, 1, seed, step_ms, [1.0], 0.5, to_target, 2 if math.isfinite(to_target) else 0, 0.9,
        100.0, 64, other,
    )  # fmt: skip


def test_summary_takes_medians_and_needs_half_the_runs_to_converge():
    summary = summarise([_run(0, [1, 2, 3], 5.0), _run(1, [10, 20, 30], 7.0), _run(2, [4, 4, 4], math.nan)], 0.9)
    assert summary.ms_per_step == 4 and summary.seeds == (0, 1, 2)
    assert summary.seconds_to_target == 6.0 and summary.epochs_to_target == 2
    assert summary.samples_per_s == pytest.approx(2000)
    failed = summarise([_run(0, [1], 5.0), _run(1, [1], math.nan), _run(2, [1], math.nan)], 0.9)
    assert math.isnan(failed.seconds_to_target) and "not reached" in failed.describe()
    assert summarise([_run(0, [1], 5.0, other=1.5)], 0.9).busy


def test_cli_refuses_unknown_names_and_record_without_db(tmp_path):
    runner = CliRunner()
    result = runner.invoke(app, ["bench", "train", "--task", "nope"])
    assert result.exit_code != 0 and "--task: unknown nope" in result.output
    result = runner.invoke(app, ["bench", "train", "--trainer", "tvm"])
    assert result.exit_code != 0 and "--trainer: unknown tvm" in result.output
    result = runner.invoke(app, ["bench", "train", "--task", "digits_mlp", "--record"])
    assert result.exit_code != 0 and "--db" in result.output
    # --db without --record used to measure the whole suite and write nothing
    db = tmp_path / "rows.csv"
    result = runner.invoke(app, ["bench", "train", "--task", "digits_mlp", "--db", str(db)])
    assert result.exit_code != 0 and "only with --record" in result.output and "# CPU" not in result.output
    assert len(result.output.strip().splitlines()) == 1 and not db.exists()


@needs_torch
def test_cli_records_training_rows_with_seeds_and_load(tmp_path):
    db = tmp_path / "train.csv"
    args = ["bench", "train", "--task", "digits_mlp", "--trainer", "appopt-runtime", "--trainer", "torch"]
    args += ["--batch", "32", "--repeats", "2", "--epochs", "2", "--max-steps", "4", "--record", "--db", str(db)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "# CPU" in result.output and "digits_mlp appopt-runtime b32 1t" in result.output
    frame = read_results(db)
    assert set(frame["mode"]) == {"training"} and set(frame["backend"]) == {"appopt-runtime", "torch"}
    assert set(frame["layout"]) == {"NCHW"}  # (both trainers' own memory layout)
    metrics = set(frame["metric"])
    assert {"ms_per_step", "samples_per_s", "seconds_per_epoch", "final_accuracy", "peak_rss_mib"} <= metrics
    assert "optimizer_state_bytes" in metrics
    state = frame[frame["metric"] == "optimizer_state_bytes"]["value"]
    assert set(state) == {float((64 * 128 + 128 + 128 * 128 + 128 + 128 * 10 + 10) * 4)}  # one momentum per weight
    step = frame[frame["metric"] == "ms_per_step"].iloc[0]
    assert '"seeds":[0,1]' in step["settings"].replace(" ", "") and step["flops_per_sample"] > 0
    assert step["notes"].startswith(("quiet", "busy", "load not measured"))
    assert step["cpu_model"]


@needs_torch
def test_side_by_side_prints_a_ratio():
    args = ["bench", "train", "--side-by-side", "--task", "digits_mlp", "--blocks", "1", "--batch", "16"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "ratio" in result.output and "appopt-runtime" in result.output
    cpu = CliRunner().invoke(app, [*args, "--cpu-time"])
    assert cpu.exit_code == 0, cpu.output
    assert "CPU ms/step" in cpu.output and "ratio" in cpu.output


def test_other_processes_cpu_is_read_from_the_end_of_the_first_step(monkeypatch):
    """Building the session and the first step's compilation (torch.compile's worker processes are other
    processes) are the run's own work: the load probe starts after them, so they cannot mark the rows busy."""
    import benchmarks.training_bench as training_bench
    from benchmarks.trainers.base import SharedModel
    from benchmarks.training_suite import TaskData, TrainingTask

    events: list[str] = []

    class Window:
        def __init__(self) -> None:
            events.append("probe starts")

        def read(self) -> float:
            return 0.125

    class Session:
        def step(self, x: np.ndarray, y: np.ndarray) -> float:
            events.append("step")
            return 0.0

        def optimizer_state_bytes(self) -> int:
            return 0

    class Trainer:
        name = "fake"

        def session(self, *args: object) -> Session:
            events.append("session")
            return Session()

    class Shared(SharedModel):
        def onnx_bytes(self) -> bytes:
            return b""

    monkeypatch.setattr(training_bench, "ProbeWindow", Window)
    x, y = np.zeros((40, 2), np.float32), np.zeros(40, np.int64)
    task = TrainingTask("t", "f", lambda seed: None, lambda seed: TaskData(x, y, x, y), None, 0.01, 1, (4,))
    run = training_bench.measure(task, Trainer(), batch=4, threads=1, shared=Shared(None, x[:2]))  # type: ignore[arg-type]
    assert events[:3] == ["session", "step", "probe starts"] and events.count("step") == training_bench.TIMED_STEPS
    assert run.other_cpu == 0.125


def test_a_worker_ends_when_the_process_that_started_it_is_killed(tmp_path):
    """A ``bench train`` killed mid-run leaves no worker behind: the worker sees it is orphaned and exits."""
    import os
    import signal
    import subprocess
    import sys
    import time

    script = (
        "import sys, time\n"
        "from benchmarks import training_bench\n"
        "pool = training_bench._worker(1, ('task', 'trainer'))\n"
        "print(pool.submit(__import__('os').getpid).result(), flush=True)\n"
        "time.sleep(60)\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, cwd=os.getcwd())
    assert parent.stdout is not None
    worker = int(parent.stdout.readline())
    os.kill(parent.pid, signal.SIGKILL)
    parent.wait()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:  # gone, or a zombie its new parent has not reaped yet: either way no longer running
            state = Path(f"/proc/{worker}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            return
        if state == "Z":
            return
        time.sleep(0.2)
    os.kill(worker, signal.SIGKILL)
    raise AssertionError(f"worker {worker} still running 30 s after its parent was killed")
