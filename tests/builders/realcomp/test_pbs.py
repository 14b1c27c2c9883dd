"""`appopt submit` and `appopt status --wait` for PBS/Torque plans, through Debian's Torque wrappers over Slurm.

``slurm-wlm-torque`` installs ``qsub``/``qstat``/``qdel`` as perl wrappers over the one-node Slurm of the ``slurm``
fixture: ``qsub`` hands the script to ``sbatch``, which reads the ``#PBS`` lines itself. Each test checks what Slurm
made of every directive we render (``scontrol show job``), and says so where the wrapper differs from a real PBS.
"""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import Result

from builders.jobs import render_job
from tests.builders.cases import torque_gpu
from tests.builders.realcomp.conftest import Slurm, plan_for, require

pytestmark = pytest.mark.slow

SPEC = """\
name: digits-mlp
application:
  type: inference
  model:
    onnx: digits_mlp.onnx
  framework: appopt-runtime
target:
  platform: hpc
  cpu: {{arch: x86_64, model: local, cores: 2}}
  scheduler: {scheduler}
  partition: debug
  account: ml-team
  walltime: "00:07:00"
container:
  formats: [singularity]
"""


def _job_fields(job_id: str) -> dict[str, str]:
    line = subprocess.run(["scontrol", "show", "job", "-o", job_id], capture_output=True, text=True, check=True,
                          timeout=30).stdout
    return dict(re.findall(r"([\w/:]+)=(\S*)", line))


@pytest.mark.parametrize(
    ("scheduler", "chunk", "tasks"),
    [("torque", "nodes=1:ppn=2", "2"), ("pbs", "select=1:ncpus=2:mpiprocs=1", "1")],
)
def test_pbs_plan_runs_through_qsub_to_completion(slurm: Slurm, tmp_path: Path, appopt: Callable[..., Result],
                                                  monkeypatch: pytest.MonkeyPatch, scheduler: str, chunk: str,
                                                  tasks: str) -> None:
    require("qsub", "qstat")
    out = plan_for(SPEC.format(scheduler=scheduler), tmp_path)
    directives = [line for line in (out / "job.pbs").read_text().splitlines() if line.startswith("#PBS")]
    assert directives == ["#PBS -N digits-mlp", f"#PBS -l {chunk}", "#PBS -l walltime=00:07:00", "#PBS -q debug",
                          "#PBS -A ml-team", "#PBS -j oe"]
    # No container runtime on this node: the job compiles and runs the model with this Python. The wrapper's sbatch
    # exports the submitting environment; a real qsub would need -V for APPOPT_CONTAINER to reach the job.
    monkeypatch.setenv("APPOPT_CONTAINER", "none")
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}:{os.environ['PATH']}")

    submitted = appopt("submit", out)
    assert submitted.exit_code == 0, submitted.output
    assert "to pbs" in submitted.output  # qsub, not sbatch
    job_id = submitted.output.strip().splitlines()[-1]

    job = _job_fields(job_id)  # what the #PBS lines became
    assert job["JobName"] == "digits-mlp"  # -N
    assert (job["NumNodes"].split("-")[0], job["NumCPUs"]) == ("1", "2")  # nodes ("1-1" pending), ppn
    assert job["NumTasks"] == tasks  # Torque's ppn counts processes, so Slurm starts ppn tasks; mpiprocs is exact
    assert job["TimeLimit"] == "00:07:00"  # -l walltime
    assert job["Partition"] == "debug"  # -q
    assert job["Account"] == "ml-team"  # -A

    status = appopt("status", job_id, "--wait", "--scheduler", scheduler, "--poll", "0.5", "--timeout", "300")
    assert status.exit_code == 0, status.output
    assert f"job {job_id}: COMPLETED exit code 0" in status.output

    # -j oe and the -N-derived output name are NOT honoured by the wrapper: its qsub passes
    # `-o job.pbs.o%A -e job.pbs.e%A` to sbatch, which overrides the script's lines. A real PBS/Torque writes one
    # joined file named after the job, digits-mlp.o<ID>. We assert the wrapper's behaviour so a change shows.
    assert not (out / f"digits-mlp.o{job_id}").exists()
    assert f"output: {out / f'job.pbs.o{job_id}'}" in status.output
    text = (out / f"job.pbs.o{job_id}").read_text()
    assert f"model: {out}/compiled" in text
    assert re.search(r"output probabilities: float32\[1, 10\].*latency over 20 run", text, re.DOTALL), text
    assert (out / f"job.pbs.e{job_id}").is_file()  # stderr apart, where -j oe asks for it joined


def test_failed_pbs_job_reports_its_exit_code(slurm: Slurm, tmp_path: Path, appopt: Callable[..., Result]) -> None:
    """The wrapper's ``qstat -f`` prints no exit_status (a real Torque does): the code comes from Slurm beneath."""
    require("qsub", "qstat")
    (tmp_path / "job.pbs").write_text("#!/bin/bash\n#PBS -N failing\n#PBS -l walltime=00:01:00\necho about to fail\n"
                                      "exit 3\n")
    submitted = appopt("submit", tmp_path)
    assert submitted.exit_code == 0, submitted.output
    job_id = submitted.output.strip().splitlines()[-1]
    status = appopt("status", job_id, "--wait", "--scheduler", "pbs", "--poll", "0.5", "--timeout", "120")
    assert status.exit_code == 3, status.output
    assert f"job {job_id}: FAILED exit code 3" in status.output
    qstat = subprocess.run(["qstat", "-f", job_id], capture_output=True, text=True, timeout=30, check=True).stdout
    assert "job_state = C" in qstat and "exit_status" not in qstat.lower()


def test_unknown_pbs_job_is_one_line(slurm: Slurm, appopt: Callable[..., Result]) -> None:
    require("qstat")
    result = appopt("status", "987654", "--scheduler", "pbs")
    assert result.exit_code != 0
    assert [line for line in result.output.splitlines() if line.startswith("error:")] == [result.output.strip()]
    assert "job 987654: unknown to PBS" in result.output


@pytest.mark.parametrize("scheduler", ["torque", "pbs"])
def test_gpu_directives(slurm: Slurm, tmp_path: Path, appopt: Callable[..., Result], scheduler: str) -> None:
    """Torque's ``:gpus=N`` becomes a Slurm GPU request, which this GPU-less node refuses at submission (one line).
    PBS Pro's ``:ngpus=N`` is NOT understood: sbatch drops it and the job would run without GPUs, where a real PBS Pro
    would place it on GPU nodes. The test holds that gap so it cannot pass unnoticed."""
    require("qsub")
    dep = dataclasses.replace(torque_gpu(), scheduler=scheduler, nodes=1, tasks_per_node=1, cpus_per_task=2,
                              gpus_per_node=1, walltime="00:01:00", account=None, run_argv=("true",))
    name, text = render_job(dep)
    (tmp_path / name).write_text(text)
    gpu_chunk = {"torque": "#PBS -l nodes=1:ppn=2:gpus=1", "pbs": "#PBS -l select=1:ncpus=2:mpiprocs=1:ngpus=1"}
    assert gpu_chunk[scheduler] in text.splitlines()
    submitted = appopt("submit", tmp_path)
    if scheduler == "torque":
        assert submitted.exit_code != 0
        assert [line for line in submitted.output.splitlines() if line.startswith("error:")] == [
            f"error: qsub {tmp_path / name}: sbatch: error: Invalid generic resource (gres) specification"]
        return
    assert submitted.exit_code == 0, submitted.output
    job = _job_fields(submitted.output.strip().splitlines()[-1])
    assert "gpu" not in job["TRES"] and job.get("TresPerNode", "") == ""  # ngpus ignored by the wrapper
