"""PBS Pro and Torque: the ``#PBS`` directives of ``job.pbs``, ``mpirun`` over ``$PBS_NODEFILE``, ``qsub``/``qstat``.

Both dialects share ``qsub``; they differ in the resource chunk (PBS Pro ``select=N:ncpus=C:mpiprocs=T:ngpus=G``,
Torque ``nodes=N:ppn=C:gpus=G``) and in how a finished job shows (``F`` with ``qstat -x``, ``C``).
"""

from __future__ import annotations

import re
import shutil
from functools import partial
from pathlib import Path
from typing import ClassVar

from builders.batch import JobStatus, Scheduler, SchedulerError, hms, problem_line, run_client
from builders.deployment import Deployment
from builders.job_script import batch_scheduler, mpirun
from builders.names import dns_label
from builders.slurm import SlurmScheduler
from builders.validate import uses_gpus, walltime_seconds

JOB_FILE = "job.pbs"
TEMPLATE = "job.pbs.j2"
#: Where the job runs: the directory it was submitted from.
WORKDIR = "${PBS_O_WORKDIR:-$PWD}"
#: mpirun's host list: PBS lists each node once per mpiprocs in $PBS_NODEFILE.
MPIRUN_HOSTFILE = '-hostfile "$PBS_NODEFILE" '
_PBS_ID = re.compile(r"^\d+(?:\[\d*\])?(?:\.[A-Za-z0-9_.-]+)?$")


def directives(dep: Deployment) -> list[str]:
    """The ``#PBS`` options, in PBS Pro's ``select`` or Torque's ``nodes:ppn`` dialect (``dep.scheduler``)."""
    cores = dep.tasks_per_node * dep.cpus_per_task
    gpus = dep.gpus_per_node if uses_gpus(dep) else 0
    if dep.scheduler == "pbs":  # PBS Pro: chunks of ncpus/mpiprocs/ngpus
        chunk = f"select={dep.nodes}:ncpus={cores}:mpiprocs={dep.tasks_per_node}" + (f":ngpus={gpus}" if gpus else "")
    else:  # Torque: nodes and processors per node
        chunk = f"nodes={dep.nodes}:ppn={cores}" + (f":gpus={gpus}" if gpus else "")
    directives = [f"-N {dns_label(dep.app_name)}", f"-l {chunk}", f"-l walltime={hms(walltime_seconds(dep.walltime))}"]
    if dep.partition:
        directives.append(f"-q {dep.partition}")
    if dep.account:
        directives.append(f"-A {dep.account}")
    directives.append("-j oe")
    return directives


class PBSScheduler(Scheduler):
    """PBS Pro and Torque: the same ``qsub``; finished jobs are ``F`` (PBS Pro, ``qstat -x``) or ``C`` (Torque)."""

    name = "pbs"
    client = "qsub"
    _STATES: ClassVar[dict[str, str]] = {"Q": "QUEUED", "R": "RUNNING", "E": "EXITING", "H": "HELD",
                                         "W": "WAITING", "T": "MOVING", "S": "SUSPENDED", "B": "ARRAY_RUNNING"}

    def submit(self, script: Path) -> str:
        proc = run_client(["qsub", script.name], self.env, cwd=script.parent)
        if proc.returncode != 0:
            raise SchedulerError(f"qsub {script}: {problem_line(proc)}")
        job_id = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else ""
        if not _PBS_ID.match(job_id):
            raise SchedulerError(f"qsub {script}: unexpected answer {proc.stdout.strip()!r}")
        return job_id

    @classmethod
    def parse_qstat(cls, job_id: str, text: str) -> JobStatus:
        """``qstat -f`` output (``key = value`` lines) as a status."""
        fields = {k.strip().lower(): v.strip() for k, _, v in
                  (line.partition(" = ") for line in text.splitlines() if " = " in line)}
        letter = fields.get("job_state", "?")
        finished = letter in ("F", "C")
        exit_text = fields.get("exit_status")
        code = int(exit_text) if exit_text and re.match(r"^-?\d+$", exit_text) else None
        sig = code - 256 if code is not None and code > 256 else None  # PBS: 256+signal when killed
        state = ("COMPLETED" if code == 0 else "FAILED") if finished else cls._STATES.get(letter, letter)
        output = fields.get("output_path")
        if output and not output.startswith("/") and ":" in output:
            output = output.split(":", 1)[1]  # PBS writes host:/path
        return JobStatus(job_id, state, finished, code if finished and sig is None else None, sig, output,
                         fields.get("comment"))

    def status(self, job_id: str) -> JobStatus:
        if not _PBS_ID.match(job_id):
            raise SchedulerError(f"job id {job_id!r}: a PBS job id looks like 1234 or 1234.server")
        proc = run_client(["qstat", "-f", "-x", job_id], self.env)  # PBS Pro: -x includes finished jobs
        if proc.returncode != 0:
            proc = run_client(["qstat", "-f", job_id], self.env)  # Torque
        if proc.returncode != 0:
            raise SchedulerError(f"job {job_id}: unknown to PBS ({problem_line(proc)})")
        current = self.parse_qstat(job_id, proc.stdout)
        if current.finished and current.exit_code is None and current.signal is None:
            return self._exit_from_slurm(current)
        return current

    def _exit_from_slurm(self, current: JobStatus) -> JobStatus:
        """Torque's commands as Slurm wrappers (Debian's slurm-wlm-torque) print no ``exit_status``; the Slurm
        underneath knows it. Without Slurm the job stays finished with an unknown exit code."""
        if shutil.which("scontrol", path=self.env.get("PATH")) is None:
            return current
        proc = run_client(["scontrol", "show", "job", "-o", current.job_id], self.env)
        if proc.returncode != 0 or not proc.stdout.strip():
            return current
        slurm = SlurmScheduler.parse_show_job(proc.stdout.strip().splitlines()[0])
        return slurm if slurm.finished else current


#: PBS Pro and Torque: one module, two dialects of the ``-l`` chunk; listed after Slurm.
PBS, TORQUE = (
    batch_scheduler(name, job_file=JOB_FILE, template=TEMPLATE, directives=directives, workdir=WORKDIR,
                    launchers={"mpirun": partial(mpirun, hostfile=MPIRUN_HOSTFILE)}, default_launcher="mpirun",
                    client=PBSScheduler, order=order)
    for name, order in (("pbs", 20), ("torque", 30))
)
SCHEDULERS = (PBS, TORQUE)
