"""Scheduler output parsing, job-script discovery and the missing-client errors (no scheduler needed)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from builders.schedulers import (
    JobStatus,
    PBSScheduler,
    SchedulerError,
    SlurmScheduler,
    find_job_script,
    get_scheduler,
)
from cli import build_cmds


def _app() -> typer.Typer:
    app = typer.Typer()
    app.callback()(lambda: None)
    build_cmds.register(app)
    return app


def test_slurm_show_job_line_is_parsed() -> None:
    line = ("JobId=42 JobName=x JobState=FAILED Reason=NonZeroExitCode Dependency=(null) ExitCode=3:0 "
            "StdOut=/work/out/x-42.out")
    status = SlurmScheduler.parse_show_job(line)
    assert (status.state, status.finished, status.exit_code) == ("FAILED", True, 3)
    assert status.stdout_path == "/work/out/x-42.out"
    assert status.summary() == "job 42: FAILED exit code 3 reason NonZeroExitCode"
    assert status.shell_exit_code == 3


def test_running_slurm_job_has_no_exit_code_yet() -> None:
    status = SlurmScheduler.parse_show_job("JobId=7 JobState=RUNNING Reason=None ExitCode=0:0")
    assert not status.finished and status.exit_code is None
    assert status.summary() == "job 7: RUNNING"


def test_killed_job_exits_like_a_shell() -> None:
    status = SlurmScheduler.parse_show_job("JobId=8 JobState=CANCELLED Reason=None ExitCode=0:15")
    assert status.shell_exit_code == 128 + 15


@pytest.mark.parametrize(
    ("qstat", "state", "code"),
    [
        ("job_state = F\n    Exit_status = 0\n", "COMPLETED", 0),
        ("job_state = C\n    exit_status = 2\n", "FAILED", 2),
        ("job_state = R\n", "RUNNING", None),
    ],
)
def test_pbs_qstat_is_parsed(qstat: str, state: str, code: int | None) -> None:
    status = PBSScheduler.parse_qstat("12.server", "Job Id: 12.server\n    " + qstat)
    assert (status.state, status.exit_code) == (state, code)


def test_pbs_output_path_loses_its_host_prefix() -> None:
    status = PBSScheduler.parse_qstat("12", "Job Id: 12\n    job_state = R\n    Output_Path = login1:/home/u/x.o12\n")
    assert status.stdout_path == "/home/u/x.o12"


def test_job_script_comes_from_the_plan(tmp_path: Path) -> None:
    (tmp_path / "plan.json").write_text(json.dumps({"target": {"scheduler": "torque"}}))
    (tmp_path / "job.pbs").write_text("#!/bin/bash\n")
    job = find_job_script(tmp_path)
    assert (job.scheduler, job.path.name) == ("torque", "job.pbs")


@pytest.mark.parametrize(("scheduler", "message"), [
    ("kubernetes", "kubectl apply -f"),
    ("none", "run.sh directly"),
])
def test_plans_without_a_batch_scheduler_say_what_to_do(tmp_path: Path, scheduler: str, message: str) -> None:
    (tmp_path / "plan.json").write_text(json.dumps({"target": {"scheduler": scheduler}}))
    with pytest.raises(SchedulerError, match=message):
        find_job_script(tmp_path)


def test_submit_pbs_without_qsub_is_one_clear_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "plan.json").write_text(json.dumps({"target": {"scheduler": "pbs"}}))
    (tmp_path / "job.pbs").write_text("#!/bin/bash\n#PBS -N x\necho hi\n")
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))  # no qsub here, whatever the host has
    result = CliRunner().invoke(_app(), ["submit", str(tmp_path)])
    assert result.exit_code == 6
    assert result.output.strip().splitlines() == [
        "error: pbs: `qsub` not found on this machine; submit from the cluster's login node "
        "(where the pbs client commands are installed)"
    ]


def test_status_auto_without_any_client(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(SchedulerError, match="neither sbatch nor qsub"):
        get_scheduler("auto")


def test_bad_job_ids_are_refused_before_any_command() -> None:
    scheduler = SlurmScheduler.__new__(SlurmScheduler)  # no client needed to refuse an id
    scheduler.env = {}
    with pytest.raises(SchedulerError, match="a Slurm job id is a number"):
        scheduler.status("--all")


def test_only_a_zero_exit_counts_as_success() -> None:
    assert JobStatus("3.s", "COMPLETED", True, 0).succeeded
    assert not JobStatus("3.s", "FAILED", True, 1).succeeded
    assert JobStatus("3.s", "TIMEOUT", True, 0).shell_exit_code == 1
