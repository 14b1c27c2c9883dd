"""Submit a rendered job script to a batch scheduler and follow the job to its exit code.

A small interface (:class:`Scheduler`: ``submit``, ``status``, ``wait``) with two implementations: Slurm (``sbatch``,
``scontrol``, ``sacct`` as a fallback once the controller has forgotten the job) and PBS Pro / Torque (``qsub``,
``qstat -f``). Where the client commands are missing the error says so in one line: submission happens on the
cluster's login node.

>>> parse_slurm_exit("3:0")
(3, 0)
>>> SlurmScheduler.parse_show_job("JobId=7 JobState=COMPLETED Reason=None ExitCode=0:0 StdOut=/tmp/slurm-7.out").state
'COMPLETED'
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

#: Job files the renderers write, per scheduler (``torque`` shares PBS's).
JOB_FILES = {"slurm": "job.slurm", "pbs": "job.pbs", "torque": "job.pbs", "kubernetes": "job.k8s.yaml",
             "none": "run.sh"}
_SLURM_ID = re.compile(r"^\d+(?:_\d+)?(?:\.\w+)?$")
_PBS_ID = re.compile(r"^\d+(?:\[\d*\])?(?:\.[A-Za-z0-9_.-]+)?$")
SLURM_DONE = frozenset({"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "OUT_OF_MEMORY",
                        "BOOT_FAIL", "DEADLINE", "REVOKED", "SPECIAL_EXIT"})


class SchedulerError(Exception):
    """Submission or status failed (client missing, script rejected, unknown job); one line per problem."""

    def __init__(self, *lines: str) -> None:
        self.lines: tuple[str, ...] = lines or ("scheduler error",)
        super().__init__("\n".join(self.lines))


@dataclass(frozen=True)
class JobStatus:
    """Where a job stands; ``exit_code``/``signal`` are known once it has finished."""

    job_id: str
    state: str
    finished: bool
    exit_code: int | None = None
    signal: int | None = None
    stdout_path: str | None = None
    reason: str | None = None

    @property
    def succeeded(self) -> bool:
        return self.finished and self.state in ("COMPLETED", "F", "C") and self.exit_code == 0

    @property
    def shell_exit_code(self) -> int:
        """What a shell would report: the exit code, 128+signal when killed, 1 when it ended without either."""
        if self.signal:
            return 128 + self.signal
        if self.exit_code:
            return self.exit_code
        return 0 if self.succeeded else 1

    def summary(self) -> str:
        text = f"job {self.job_id}: {self.state}"
        if self.finished:
            text += f" exit code {self.exit_code if self.exit_code is not None else '?'}"
            if self.signal:
                text += f" (signal {self.signal})"
        if self.reason and self.reason not in ("None", ""):
            text += f" reason {self.reason}"
        return text


def _run(argv: list[str], env: Mapping[str, str], cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(argv, capture_output=True, text=True, env=dict(env), cwd=cwd, timeout=60, check=False)
    except subprocess.TimeoutExpired:
        raise SchedulerError(f"{argv[0]}: no answer within 60 s (is the controller up?)") from None


def _last_line(proc: subprocess.CompletedProcess[str]) -> str:
    """The line that says what went wrong: the last one naming an error, else the last one (quotes trimmed).

    The Torque wrappers over Slurm print several lines ending in a lone quote, the sbatch error inside them.
    """
    lines = [line.strip().strip("'\"").strip() for line in (proc.stderr.strip() or proc.stdout.strip()).splitlines()]
    lines = [line for line in lines if line]
    errors = [line for line in lines if "error" in line.lower()]
    return (errors or lines or [f"exit {proc.returncode}"])[-1]


class Scheduler(ABC):
    """Submit a script, ask about a job, wait for it."""

    name: ClassVar[str]
    #: The client command that must exist on PATH.
    client: ClassVar[str]

    def __init__(self, env: Mapping[str, str] | None = None) -> None:
        self.env = dict(os.environ if env is None else env)
        if shutil.which(self.client, path=self.env.get("PATH")) is None:
            raise SchedulerError(self.missing_client_message())

    @classmethod
    def missing_client_message(cls) -> str:
        return (f"{cls.name}: `{cls.client}` not found on this machine; submit from the cluster's login node "
                f"(where the {cls.name} client commands are installed)")

    @abstractmethod
    def submit(self, script: Path) -> str:
        """Submit ``script`` from its own directory; returns the job id."""

    @abstractmethod
    def status(self, job_id: str) -> JobStatus:
        """The job's current state (and exit code once finished)."""

    def wait(
        self, job_id: str, *, poll_seconds: float = 2.0, timeout_seconds: float | None = None,
        on_change: Callable[[JobStatus], None] | None = None,
    ) -> JobStatus:
        """Poll until the job finishes; ``on_change`` hears each new state. Raises SchedulerError on timeout."""
        deadline = None if timeout_seconds is None else time.monotonic() + timeout_seconds
        last_state = ""
        while True:
            current = self.status(job_id)
            if current.state != last_state and on_change:
                on_change(current)
            last_state = current.state
            if current.finished:
                return current
            if deadline is not None and time.monotonic() > deadline:
                raise SchedulerError(f"job {job_id}: still {current.state} after {timeout_seconds:g} s")
            time.sleep(poll_seconds)


def parse_slurm_exit(text: str) -> tuple[int | None, int | None]:
    """Slurm's ``ExitCode=code:signal``."""
    match = re.match(r"^(\d+):(\d+)$", text or "")
    return (int(match.group(1)), int(match.group(2))) if match else (None, None)


class SlurmScheduler(Scheduler):
    name = "slurm"
    client = "sbatch"

    def submit(self, script: Path) -> str:
        proc = _run(["sbatch", "--parsable", script.name], self.env, cwd=script.parent)
        if proc.returncode != 0:
            raise SchedulerError(f"sbatch {script}: {_last_line(proc)}")
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
        proc = _run(["scontrol", "show", "job", "-o", job_id], self.env)
        if proc.returncode == 0 and proc.stdout.strip():
            return self.parse_show_job(proc.stdout.strip().splitlines()[0])
        # The controller forgets finished jobs after MinJobAge; accounting (when configured) still knows them.
        acct = _run(["sacct", "-X", "-n", "-P", "-j", job_id, "-o", "JobID,State,ExitCode"], self.env) \
            if shutil.which("sacct", path=self.env.get("PATH")) else None
        if acct is not None and acct.returncode == 0 and acct.stdout.strip():
            _jid, state, exit_text = acct.stdout.strip().splitlines()[0].split("|")[:3]
            state = state.split()[0]
            code, sig = parse_slurm_exit(exit_text)
            finished = state in SLURM_DONE
            return JobStatus(job_id, state, finished, code if finished else None, sig if finished else None)
        raise SchedulerError(f"job {job_id}: unknown to Slurm ({_last_line(proc)})")


class PBSScheduler(Scheduler):
    """PBS Pro and Torque: the same ``qsub``; finished jobs are ``F`` (PBS Pro, ``qstat -x``) or ``C`` (Torque)."""

    name = "pbs"
    client = "qsub"
    _STATES: ClassVar[dict[str, str]] = {"Q": "QUEUED", "R": "RUNNING", "E": "EXITING", "H": "HELD",
                                         "W": "WAITING", "T": "MOVING", "S": "SUSPENDED", "B": "ARRAY_RUNNING"}

    def submit(self, script: Path) -> str:
        proc = _run(["qsub", script.name], self.env, cwd=script.parent)
        if proc.returncode != 0:
            raise SchedulerError(f"qsub {script}: {_last_line(proc)}")
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
        proc = _run(["qstat", "-f", "-x", job_id], self.env)  # PBS Pro: -x includes finished jobs
        if proc.returncode != 0:
            proc = _run(["qstat", "-f", job_id], self.env)  # Torque
        if proc.returncode != 0:
            raise SchedulerError(f"job {job_id}: unknown to PBS ({_last_line(proc)})")
        current = self.parse_qstat(job_id, proc.stdout)
        if current.finished and current.exit_code is None and current.signal is None:
            return self._exit_from_slurm(current)
        return current

    def _exit_from_slurm(self, current: JobStatus) -> JobStatus:
        """Torque's commands as Slurm wrappers (Debian's slurm-wlm-torque) print no ``exit_status``; the Slurm
        underneath knows it. Without Slurm the job stays finished with an unknown exit code."""
        if shutil.which("scontrol", path=self.env.get("PATH")) is None:
            return current
        proc = _run(["scontrol", "show", "job", "-o", current.job_id], self.env)
        if proc.returncode != 0 or not proc.stdout.strip():
            return current
        slurm = SlurmScheduler.parse_show_job(proc.stdout.strip().splitlines()[0])
        return slurm if slurm.finished else current


SCHEDULERS: dict[str, type[Scheduler]] = {"slurm": SlurmScheduler, "pbs": PBSScheduler, "torque": PBSScheduler}


def get_scheduler(name: str = "auto", env: Mapping[str, str] | None = None) -> Scheduler:
    """``slurm``, ``pbs``/``torque``, or ``auto``: Slurm when ``sbatch`` is on PATH, else PBS when ``qsub`` is."""
    env = dict(os.environ if env is None else env)
    if name == "auto":
        for candidate in ("slurm", "pbs"):
            if shutil.which(SCHEDULERS[candidate].client, path=env.get("PATH")):
                return SCHEDULERS[candidate](env)
        raise SchedulerError("no batch scheduler client found (neither sbatch nor qsub on PATH); "
                             "run this on the cluster's login node")
    if name in ("kubernetes", "none"):
        raise SchedulerError(f"scheduler {name}: nothing to submit with sbatch/qsub")
    if name not in SCHEDULERS:
        raise SchedulerError(f"--scheduler {name!r}: expected auto, slurm, pbs or torque")
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
        found = [name for name in ("slurm", "pbs", "kubernetes", "none") if (out_dir / JOB_FILES[name]).is_file()]
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
