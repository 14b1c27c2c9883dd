"""Slurm: the ``#SBATCH`` directives of ``job.slurm``, the ``srun`` launcher, and ``sbatch``/``scontrol``/``sacct``;
also the job arrays of ``appopt bench campaign``.

>>> parse_slurm_exit("3:0")
(3, 0)
>>> SlurmScheduler.parse_show_job("JobId=7 JobState=COMPLETED Reason=None ExitCode=0:0 StdOut=/tmp/slurm-7.out").state
'COMPLETED'
>>> slurm_time(93630)
'1-02:00:30'
"""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from builders.batch import JobStatus, Scheduler, SchedulerError, hms, problem_line, run_client
from builders.deployment import Deployment
from builders.errors import RenderError
from builders.job_script import batch_scheduler, mpirun
from builders.names import dns_label
from builders.quoting import has_line_break, shell_quote
from builders.templating import render_template
from builders.validate import uses_gpus, walltime_seconds

JOB_FILE = "job.slurm"
TEMPLATE = "job.slurm.j2"
#: Where the job runs: the directory it was submitted from.
WORKDIR = "${SLURM_SUBMIT_DIR:-$PWD}"
_SLURM_ID = re.compile(r"^\d+(?:_\d+)?(?:\.\w+)?$")
SLURM_DONE = frozenset({"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "OUT_OF_MEMORY",
                        "BOOT_FAIL", "DEADLINE", "REVOKED", "SPECIAL_EXIT"})


def directives(dep: Deployment) -> list[str]:
    """The ``#SBATCH`` options: only checked numbers, tokens and the DNS-label job name (no shell quotes them)."""
    gpus = dep.gpus_per_node if uses_gpus(dep) else 0
    directives = [
        f"--job-name={dns_label(dep.app_name)}",
        f"--nodes={dep.nodes}",
        f"--ntasks-per-node={dep.tasks_per_node}",
        f"--cpus-per-task={dep.cpus_per_task}",
    ]
    if gpus:
        directives.append(f"--gres=gpu:{gpus}")
    directives.append(f"--time={slurm_time(walltime_seconds(dep.walltime))}")
    if dep.partition:
        directives.append(f"--partition={dep.partition}")
    if dep.account:
        directives.append(f"--account={dep.account}")
    directives.append(f"--output={dns_label(dep.app_name)}-%j.out")
    return directives


def srun(dep: Deployment) -> str:
    """``srun`` over the whole allocation; it does not inherit --cpus-per-task from the batch allocation
    (Slurm >= 22.05), so that is passed again."""
    return f"srun --nodes={dep.nodes} --ntasks-per-node={dep.tasks_per_node} --cpus-per-task={dep.cpus_per_task} "


#: A job array (``appopt bench campaign``): one command per task, told apart by ``$SLURM_ARRAY_TASK_ID``.
ARRAY_TEMPLATE = "job_array.slurm.j2"


@dataclass(frozen=True)
class ArrayJob:
    """A Slurm job array of ``tasks`` tasks, each running ``command`` once with ``srun``.

    ``command`` and ``setup`` are shell lines the caller has quoted (they may use ``$SLURM_ARRAY_TASK_ID`` and
    ``$SLURM_ARRAY_JOB_ID``); every other string is quoted here.
    """

    name: str
    tasks: int
    command: str
    setup: tuple[str, ...] = ()
    comments: tuple[str, ...] = ()
    cpus_per_task: int = 1
    time: str = "01:00:00"
    #: ``--output`` pattern (``%x`` job name, ``%A`` array job id, ``%a`` task index).
    output: str = "%x-%A_%a.out"
    partition: str | None = None
    account: str | None = None
    mem: str | None = None
    #: Extra ``#SBATCH`` options, e.g. ``("--exclusive",)``.
    extra: tuple[str, ...] = ()
    #: Run each task inside this Singularity/Apptainer image.
    image: str | None = None


def array_directives(job: ArrayJob) -> list[str]:
    """The ``#SBATCH`` options of a job array, each value one quoted word (sbatch reads the quotes)."""
    q = shell_quote
    directives = [
        f"--job-name={q(job.name)}",
        f"--array=0-{job.tasks - 1}",
        "--ntasks=1",
        f"--cpus-per-task={job.cpus_per_task}",
        f"--time={q(job.time)}",
        f"--output={q(job.output)}",
    ]
    for option, value in (("partition", job.partition), ("account", job.account), ("mem", job.mem)):
        if value:
            directives.append(f"--{option}={q(value)}")
    return directives + [q(option) for option in job.extra]


def render_array_job(job: ArrayJob) -> str:
    """The job array's script (``templates/job_array.slurm.j2``); comments are kept to one line each.

    RenderError names each ``#SBATCH`` value with a line break: sbatch reads directives up to the first other line,
    so no quoting keeps such a value on its directive.
    """
    values = {"name": job.name, "time": job.time, "output": job.output, "partition": job.partition,
              "account": job.account, "mem": job.mem, "image": job.image}
    values |= {f"extra[{i}]": option for i, option in enumerate(job.extra)}
    problems = [f"slurm.{key}: must be one line" for key, value in values.items() if value and has_line_break(value)]
    if problems:
        raise RenderError(*problems)
    return render_template(
        ARRAY_TEMPLATE,
        directives=array_directives(job),
        comments=[" ".join(comment.split()) for comment in job.comments],
        setup=job.setup,
        runner=f"singularity exec {shell_quote(job.image)} " if job.image else "",
        command=job.command,
    )


def slurm_time(seconds: int) -> str:
    """``[D-]HH:MM:SS`` for ``--time``."""
    days, rest = divmod(seconds, 86400)
    return f"{days}-{hms(rest)}" if days else hms(rest)


def parse_slurm_exit(text: str) -> tuple[int | None, int | None]:
    """Slurm's ``ExitCode=code:signal``."""
    match = re.match(r"^(\d+):(\d+)$", text or "")
    return (int(match.group(1)), int(match.group(2))) if match else (None, None)


class SlurmScheduler(Scheduler):
    name = "slurm"
    client = "sbatch"

    def submit(self, script: Path) -> str:
        proc = run_client(["sbatch", "--parsable", script.name], self.env, cwd=script.parent)
        if proc.returncode != 0:
            raise SchedulerError(f"sbatch {script}: {problem_line(proc)}")
        job_id = proc.stdout.strip().split(";")[0]
        if not _SLURM_ID.match(job_id):
            raise SchedulerError(f"sbatch {script}: unexpected answer {proc.stdout.strip()!r}")
        return job_id

    @staticmethod
    def parse_show_job(line: str) -> JobStatus:
        """One ``scontrol show job -o`` line as a status."""
        fields = dict(re.findall(r"(\w+)=(\S*)", line))
        state = fields.get("JobState", "UNKNOWN")
        code, sig = parse_slurm_exit(fields.get("ExitCode", ""))
        finished = state in SLURM_DONE
        return JobStatus(fields.get("JobId", "?"), state, finished, code if finished else None,
                         sig if finished else None, fields.get("StdOut") or None, fields.get("Reason"))

    def status(self, job_id: str) -> JobStatus:
        if not _SLURM_ID.match(job_id):
            raise SchedulerError(f"job id {job_id!r}: a Slurm job id is a number (e.g. 1234)")
        proc = run_client(["scontrol", "show", "job", "-o", job_id], self.env)
        if proc.returncode == 0 and proc.stdout.strip():
            return self.parse_show_job(proc.stdout.strip().splitlines()[0])
        # The controller forgets finished jobs after MinJobAge; accounting (when configured) still knows them.
        acct = run_client(["sacct", "-X", "-n", "-P", "-j", job_id, "-o", "JobID,State,ExitCode"], self.env) \
            if shutil.which("sacct", path=self.env.get("PATH")) else None
        if acct is not None and acct.returncode == 0 and acct.stdout.strip():
            _jid, state, exit_text = acct.stdout.strip().splitlines()[0].split("|")[:3]
            state = state.split()[0]
            code, sig = parse_slurm_exit(exit_text)
            finished = state in SLURM_DONE
            return JobStatus(job_id, state, finished, code if finished else None, sig if finished else None)
        raise SchedulerError(f"job {job_id}: unknown to Slurm ({problem_line(proc)})")


#: Slurm: ``job.slurm`` with ``#SBATCH`` lines, run with ``srun``; listed first (``auto`` tries ``sbatch`` first).
SLURM = batch_scheduler("slurm", job_file=JOB_FILE, template=TEMPLATE, directives=directives, workdir=WORKDIR,
                        launchers={"srun": srun, "mpirun": mpirun}, default_launcher="srun", client=SlurmScheduler,
                        order=10)
SCHEDULERS = (SLURM,)
