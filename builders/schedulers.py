"""Submit a plan's job script with its scheduler and follow the job to its exit code.

The schedulers themselves live one per module (:mod:`builders.slurm`, :mod:`builders.pbs`, :mod:`builders.kubernetes`)
on the shared interface of :mod:`builders.batch`; this module picks one by name or by the plan's ``target.scheduler``.
Where the client commands are missing the error says so in one line: submission happens on the cluster's login node.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from builders.batch import JobStatus, Scheduler
from builders.errors import SchedulerError
from builders.jobs import BATCH, JOB_FILES
from builders.pbs import PBSScheduler
from builders.slurm import SlurmScheduler, parse_slurm_exit

__all__ = ["JOB_FILES", "SCHEDULERS", "JobScript", "JobStatus", "PBSScheduler", "Scheduler", "SchedulerError",
           "SlurmScheduler", "find_job_script", "get_scheduler", "parse_slurm_exit", "submit_plan_job"]

#: The batch schedulers' clients, from their modules (:data:`builders.jobs.BATCH`).
SCHEDULERS: dict[str, type[Scheduler]] = {name: module.SCHEDULER for name, module in BATCH.items()}


def get_scheduler(name: str = "auto", env: Mapping[str, str] | None = None) -> Scheduler:
    """``slurm``, ``pbs``/``torque``, or ``auto``: Slurm when ``sbatch`` is on PATH, else PBS when ``qsub`` is."""
    env = dict(os.environ if env is None else env)
    if name == "auto":
        for candidate in ("slurm", "pbs"):
            if shutil.which(SCHEDULERS[candidate].client, path=env.get("PATH")):
                return SCHEDULERS[candidate](env)
        raise SchedulerError("no batch scheduler client found (neither sbatch nor qsub on PATH); "
                             "run this on the cluster's login node")
    if name in JOB_FILES and name not in SCHEDULERS:  # kubernetes, none
        raise SchedulerError(f"scheduler {name}: nothing to submit with sbatch/qsub")
    if name not in SCHEDULERS:
        raise SchedulerError(f"--scheduler {name!r}: expected auto, {', '.join(SCHEDULERS)}")
    return SCHEDULERS[name](env)


@dataclass(frozen=True)
class JobScript:
    scheduler: str
    path: Path


def find_job_script(out_dir: Path) -> JobScript:
    """The job script ``appopt plan`` rendered in ``out_dir`` and the scheduler it is for (from ``plan.json``)."""
    plan_file = out_dir / "plan.json"
    scheduler = None
    if plan_file.is_file():
        try:
            scheduler = json.loads(plan_file.read_text(encoding="utf-8"))["target"]["scheduler"]
        except (ValueError, KeyError, TypeError):
            scheduler = None
    if scheduler is None:
        found = [name for name, job_file in JOB_FILES.items() if (out_dir / job_file).is_file()]
        if not found:
            raise SchedulerError(f"{out_dir}: no plan output here (no plan.json or job script); run `appopt plan`")
        scheduler = found[0]
    if scheduler == "kubernetes":
        raise SchedulerError(f"{out_dir}: the plan targets Kubernetes; submit with "
                             f"`kubectl apply -f {out_dir / JOB_FILES['kubernetes']}`")
    if scheduler == "none":
        raise SchedulerError(f"{out_dir}: the plan has no scheduler (target.scheduler: none); run "
                             f"{out_dir / JOB_FILES['none']} directly")
    path = out_dir / JOB_FILES.get(scheduler, "")
    if not path.is_file():
        raise SchedulerError(f"{path}: job script missing; run `appopt plan` again")
    return JobScript(scheduler, path)


def submit_plan_job(out_dir: Path, env: Mapping[str, str] | None = None) -> tuple[Scheduler, str]:
    """Submit the plan's job script with its scheduler; returns (scheduler, job id) and records it in jobs.json."""
    job = find_job_script(out_dir)
    scheduler = get_scheduler(job.scheduler, env)
    job_id = scheduler.submit(job.path)
    record = out_dir / "jobs.json"
    try:
        history = json.loads(record.read_text(encoding="utf-8")) if record.is_file() else []
    except ValueError:
        history = []
    history.append({"job_id": job_id, "scheduler": scheduler.name, "script": job.path.name,
                    "submitted_at": time.strftime("%Y-%m-%dT%H:%M:%S%z")})
    record.write_text(json.dumps(history, indent=2) + "\n", encoding="utf-8")
    return scheduler, job_id
