"""`appopt submit` and `appopt status --wait` against a real one-node Slurm on localhost.

The rendered job.slurm runs its image with the container runtime named by ``APPOPT_CONTAINER``. No Apptainer binary
exists here, so the job uses the script's podman case: the job really starts the plan's container on the Slurm node.
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import Result

from tests.builders.realcomp.conftest import BuiltImage, Slurm

pytestmark = pytest.mark.slow

def _job_id(result: Result) -> str:
    assert result.exit_code == 0, result.output
    return result.output.strip().splitlines()[-1]


def test_submitted_job_runs_the_container_and_completes(slurm: Slurm, runtime_image: BuiltImage, tmp_path: Path,
                                                        appopt: Callable[..., Result],
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("APPOPT_CONTAINER", "podman")  # sbatch exports the environment to the job
    monkeypatch.setenv("APPOPT_IMAGE", runtime_image.ref)
    out = runtime_image.out

    job_id = _job_id(appopt("submit", out))
    assert re.fullmatch(r"\d+", job_id)
    status = appopt("status", job_id, "--wait", "--poll", "0.5", "--timeout", "300")

    assert status.exit_code == 0, status.output
    assert f"job {job_id}: COMPLETED exit code 0" in status.output
    output_file = out / f"digits-mlp-{job_id}.out"
    assert f"output: {output_file}" in status.output
    text = output_file.read_text()
    assert "model: /opt/app/compiled" in text
    assert re.search(r"output probabilities: float32\[1, 10\].*latency over 20 run", text, re.DOTALL), text
    assert job_id in [job["job_id"] for job in json.loads((out / "jobs.json").read_text())]


def test_a_job_without_a_container_runs_from_the_plan_directory(slurm: Slurm, plan_out: Path,
                                                                appopt: Callable[..., Result],
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """APPOPT_CONTAINER=none, for sites without a container runtime: the job compiles the model into the plan's
    directory (the image's build step) and runs it there with this Python (which has numpy and onnx)."""
    monkeypatch.setenv("APPOPT_CONTAINER", "none")
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}:{os.environ['PATH']}")
    job_id = _job_id(appopt("submit", plan_out))
    status = appopt("status", job_id, "--wait", "--poll", "0.5", "--timeout", "300")
    assert status.exit_code == 0, status.output
    text = (plan_out / f"digits-mlp-{job_id}.out").read_text()
    assert f"model: {plan_out}/compiled" in text and (plan_out / "compiled" / "manifest.json").exists()
    assert re.search(r"output probabilities: float32\[1, 10\].*latency over 20 run", text, re.DOTALL), text


def test_failed_job_reports_its_exit_code(slurm: Slurm, tmp_path: Path, appopt: Callable[..., Result]) -> None:
    (tmp_path / "job.slurm").write_text("#!/bin/bash\n#SBATCH --output=failing-%j.out\necho about to fail\nexit 3\n")
    job_id = _job_id(appopt("submit", tmp_path))
    status = appopt("status", job_id, "--wait", "--poll", "0.5", "--timeout", "120", "--scheduler", "slurm")
    assert status.exit_code == 3
    assert f"job {job_id}: FAILED exit code 3" in status.output
    assert (tmp_path / f"failing-{job_id}.out").read_text() == "about to fail\n"


def test_unknown_job_is_one_line(slurm: Slurm, appopt: Callable[..., Result]) -> None:
    result = appopt("status", "987654")
    assert result.exit_code == 6
    assert [line for line in result.output.splitlines() if line.startswith("error:")] == [
        result.output.strip()
    ]
    assert "job 987654: unknown to Slurm" in result.output
